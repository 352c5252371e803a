//! Which kernel runs at which size, and why: the copy plan.
//!
//! [`Plan::decide`] is a pure function of what the machine offers and of the
//! environment, so every rule is tested; [`Plan::detect`] gathers those inputs
//! from the CPU, sysfs and the environment.

use super::Isa;
use serde::Serialize;

/// Environment variable that sets the non-temporal threshold: a size in bytes
/// (`K`, `M`, `G` suffixes are powers of 1024) or `never`.
pub const ENV_NT_THRESHOLD: &str = "PAGEWISE_NT_THRESHOLD";

/// Environment variable that pins the instruction set: `sse2`, `avx2` or `avx512`
/// (ignored, with a note in the plan, when the CPU lacks it).
pub const ENV_ISA: &str = "PAGEWISE_COPY_ISA";

/// Environment variable that sets the sizes copied with `rep movsb`: `never`,
/// `FROM` or `FROM-TO` (sizes as in [`ENV_NT_THRESHOLD`]; `TO` excluded).
pub const ENV_REP_MOVSB: &str = "PAGEWISE_REP_MOVSB";

/// Environment variable that sets the sizes filled with `rep stosb` (as
/// [`ENV_REP_MOVSB`]).
pub const ENV_REP_STOSB: &str = "PAGEWISE_REP_STOSB";

/// Copies use non-temporal stores from the last-level cache size divided by
/// this: source and destination together then fill half of it.
pub const COPY_LLC_DIVISOR: u64 = 4;
/// Fills use non-temporal stores from the last-level cache size divided by
/// this (the same footprint as a copy: a fill has no source).
pub const FILL_LLC_DIVISOR: u64 = 2;

/// Threshold used when the cache size cannot be read.
const FALLBACK_NT_THRESHOLD: usize = 16 << 20;

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Derived from what the CPU and caches offer.
    Detected,
    /// Set by an environment variable.
    Environment,
    /// Set by [`super::set_nontemporal_threshold`].
    Api,
    /// A built-in default, because what it is derived from could not be read.
    Default,
}

/// A rejected setting: bad text in an environment variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Not a size.
    #[error(
        "{var}={value:?} is not a size: use bytes with an optional K, M or G suffix, or `never`"
    )]
    BadSize {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Not an instruction set name.
    #[error("{var}={value:?} is not an instruction set: use sse2, avx2 or avx512")]
    BadIsa {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

/// What the plan is decided from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs {
    /// Instruction sets this CPU supports.
    pub supported: Vec<Isa>,
    /// Enhanced `rep movsb`/`rep stosb`.
    pub erms: bool,
    /// Fast short `rep movsb`.
    pub fsrm: bool,
    /// Size of the largest cache, in bytes.
    pub llc_bytes: Option<u64>,
    /// Value of [`ENV_ISA`].
    pub env_isa: Option<String>,
    /// Value of [`ENV_NT_THRESHOLD`].
    pub env_nt_threshold: Option<String>,
    /// Value of [`ENV_REP_MOVSB`].
    pub env_rep_movsb: Option<String>,
    /// Value of [`ENV_REP_STOSB`].
    pub env_rep_stosb: Option<String>,
}

/// A half-open size range `[from, to)`; `to: None` means no upper end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeRange {
    /// First size in the range.
    pub from: usize,
    /// First size past it, if any.
    pub to: Option<usize>,
}

/// One size class of one operation and the kernel that serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SizeClass {
    /// `copy` or `fill`.
    pub op: &'static str,
    /// The sizes.
    pub sizes: SizeRange,
    /// What runs there, in words.
    pub kernel: String,
}

/// The choices [`super::copy`] and [`super::fill`] make on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The instruction set of the vector kernels.
    pub isa: Isa,
    /// Whether it was detected or pinned by [`ENV_ISA`].
    pub isa_source: Source,
    /// Whether the `rep` ranges were detected or set by [`ENV_REP_MOVSB`] /
    /// [`ENV_REP_STOSB`].
    pub rep_source: Source,
    /// Copy sizes `[from, to)` that use `rep movsb` (`to == usize::MAX`: no
    /// upper end); `None`: never. In JSON: `{"from": …, "to": … | null}`.
    #[serde(serialize_with = "serialize_range")]
    pub copy_rep: Option<(usize, usize)>,
    /// Fill sizes `[from, to)` that use `rep stosb`; as `copy_rep`.
    #[serde(serialize_with = "serialize_range")]
    pub fill_rep: Option<(usize, usize)>,
    /// Copies from this size up use non-temporal stores; `None`: never.
    pub copy_nontemporal: Option<usize>,
    /// Fills from this size up use non-temporal stores; `None`: never.
    pub fill_nontemporal: Option<usize>,
    /// Where the thresholds came from.
    pub nontemporal_source: Source,
    /// The last-level cache size the threshold is derived from.
    pub llc_bytes: Option<u64>,
    /// Enhanced `rep movsb` on this CPU.
    pub erms: bool,
    /// Fast short `rep movsb` on this CPU.
    pub fsrm: bool,
    /// Fallbacks and ignored settings, one sentence each.
    pub notes: Vec<String>,
}

impl Plan {
    /// Reads the CPU features, the cache sizes from sysfs and the environment,
    /// and decides. Costs a few `cpuid` instructions and a dozen small file reads.
    pub fn detect() -> Plan {
        let f = crate::sys::cpu::cpu_features();
        Plan::decide(&Inputs {
            supported: Isa::ALL
                .iter()
                .copied()
                .filter(|i| i.is_supported())
                .collect(),
            erms: f.erms,
            fsrm: f.fsrm,
            llc_bytes: crate::host::cpu::largest_cache_bytes(),
            env_isa: std::env::var(ENV_ISA).ok(),
            env_nt_threshold: std::env::var(ENV_NT_THRESHOLD).ok(),
            env_rep_movsb: std::env::var(ENV_REP_MOVSB).ok(),
            env_rep_stosb: std::env::var(ENV_REP_STOSB).ok(),
        })
    }

    /// The plan for `inputs`. Bad environment values are ignored and noted.
    pub fn decide(inputs: &Inputs) -> Plan {
        let mut notes = Vec::new();
        let widest = inputs.supported.iter().copied().max().unwrap_or(Isa::Sse2);
        let (isa, isa_source) = match inputs.env_isa.as_deref().map(parse_isa) {
            None => (widest, Source::Detected),
            Some(Ok(isa)) if inputs.supported.contains(&isa) => (isa, Source::Environment),
            Some(Ok(isa)) => {
                notes.push(format!(
                    "{ENV_ISA}={} ignored: this CPU does not support it; using {}",
                    isa.name(),
                    widest.name()
                ));
                (widest, Source::Detected)
            }
            Some(Err(e)) => {
                notes.push(format!("{e}; using {}", widest.name()));
                (widest, Source::Detected)
            }
        };

        let derived = inputs.llc_bytes.map(|llc| {
            let part = |divisor: u64| usize::try_from(llc / divisor).unwrap_or(usize::MAX);
            (part(COPY_LLC_DIVISOR), part(FILL_LLC_DIVISOR))
        });
        let (detected, detected_source) = match derived {
            Some((copy, fill)) => ((Some(copy), Some(fill)), Source::Detected),
            None => {
                notes.push(format!(
                    "cache sizes not readable: non-temporal stores from the default {} MiB",
                    FALLBACK_NT_THRESHOLD >> 20
                ));
                (
                    (Some(FALLBACK_NT_THRESHOLD), Some(FALLBACK_NT_THRESHOLD)),
                    Source::Default,
                )
            }
        };
        let ((copy_nontemporal, fill_nontemporal), nontemporal_source) =
            match inputs.env_nt_threshold.as_deref().map(parse_threshold) {
                None => (detected, detected_source),
                Some(Ok(t)) => ((t, t), Source::Environment),
                Some(Err(())) => {
                    notes.push(format!(
                        "{}; using the detected thresholds",
                        PlanError::BadSize {
                            var: ENV_NT_THRESHOLD,
                            value: inputs.env_nt_threshold.clone().unwrap_or_default(),
                        }
                    ));
                    (detected, detected_source)
                }
            };

        // `rep movsb` beats the vector loop only for larger copies, and only where
        // the CPU has enhanced (ERMS) string moves.
        let (mut copy_rep, mut fill_rep) = if inputs.erms {
            (
                Some((COPY_REP_MIN, usize::MAX)),
                Some((FILL_REP_MIN, usize::MAX)),
            )
        } else {
            (None, None)
        };
        let mut rep_source = Source::Detected;
        for (var, value, slot) in [
            (ENV_REP_MOVSB, &inputs.env_rep_movsb, &mut copy_rep),
            (ENV_REP_STOSB, &inputs.env_rep_stosb, &mut fill_rep),
        ] {
            let Some(text) = value else { continue };
            match parse_range(text) {
                Some(range) => {
                    *slot = range;
                    rep_source = Source::Environment;
                }
                None => notes.push(format!(
                    "{var}={text:?} ignored: use never, FROM or FROM-TO (sizes with optional K, M, G)"
                )),
            }
        }

        Plan {
            isa,
            isa_source,
            rep_source,
            copy_rep,
            fill_rep,
            copy_nontemporal,
            fill_nontemporal,
            nontemporal_source,
            llc_bytes: inputs.llc_bytes,
            erms: inputs.erms,
            fsrm: inputs.fsrm,
            notes,
        }
    }

    /// The size classes of copy and fill and the kernel of each, smallest first.
    pub fn size_classes(&self) -> Vec<SizeClass> {
        let mut out = Vec::new();
        for (op, rep, string_op, nt) in [
            ("copy", self.copy_rep, "rep movsb", self.copy_nontemporal),
            ("fill", self.fill_rep, "rep stosb", self.fill_nontemporal),
        ] {
            let w = self.isa.vector_bytes();
            let small = self.isa.small_max();
            let nt = nt.unwrap_or(usize::MAX);
            let loop_free =
                format!("overlapping head and tail moves, no loop (up to eight {w}-byte vectors)");
            if self.isa == Isa::Avx512 {
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from: 0,
                        to: Some(64),
                    },
                    kernel: if op == "copy" {
                        "up to 32 B one masked 64-byte load and store, no branch on the size \
                         (scalar or 16-byte moves when the destination is within 64 B of the \
                         source modulo 4 KiB); from 33 B two overlapping 32-byte moves"
                            .to_owned()
                    } else {
                        "one masked 64-byte store, no size-dependent branch".to_owned()
                    },
                });
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from: 64,
                        to: Some(small + 1),
                    },
                    kernel: loop_free,
                });
            } else {
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from: 0,
                        to: Some(small + 1),
                    },
                    kernel: format!(
                        "{loop_free}; scalar and 16-byte moves up to {} B",
                        if op == "copy" { 32 } else { 128 }
                    ),
                });
            }
            // Medium: between `small` and the non-temporal threshold, split by the
            // rep range.
            let mut edges = vec![small + 1];
            if let Some((lo, hi)) = rep {
                edges.push(lo.max(small + 1));
                edges.push(hi);
            }
            edges.push(nt);
            edges.retain(|&e| e > small);
            edges.sort_unstable();
            edges.dedup();
            for pair in edges.windows(2) {
                let (from, to) = (pair[0], pair[1]);
                if from >= nt || from >= to {
                    continue;
                }
                let in_rep = rep.is_some_and(|(lo, hi)| from >= lo && from < hi);
                let kernel = match (in_rep, op) {
                    (true, "copy") => format!(
                        "{string_op}, destination aligned to 64 B (the vector loop instead when \
                         the destination is less than 1 KiB ahead of the source modulo 1 MiB, or \
                         modulo 4 KiB below 512 KiB)"
                    ),
                    (true, _) => string_op.to_string(),
                    (false, "copy") => format!(
                        "{w}-byte vector loop, 4 vectors per iteration, aligned stores (backwards \
                         when the destination is 1-2047 B ahead of the source modulo 4 KiB, or \
                         at the same offset below 2 KiB)"
                    ),
                    (false, _) => format!(
                        "{w}-byte vector loop, 4 vectors per iteration, aligned stores \
                         (rep stosb from 4 KiB when the destination is not 64-byte aligned{})",
                        if w == 64 {
                            "; up to 2 KiB with an aligned destination, four vectors at each \
                             end and aligned blocks between"
                        } else {
                            ""
                        }
                    ),
                };
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from,
                        to: (to != usize::MAX).then_some(to),
                    },
                    kernel,
                });
            }
            if nt != usize::MAX {
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from: nt.max(small + 1),
                        to: None,
                    },
                    kernel: {
                        let (pages, visit) = crate::sys::copy::NONTEMPORAL_STREAMS;
                        let from_or_to = if op == "copy" { "from" } else { "to" };
                        format!(
                            "{w}-byte non-temporal stores, {pages} pages side by side \
                             ({visit} B {from_or_to} each in turn), destination aligned to 64 B, \
                             sfence"
                        )
                    },
                });
            }
        }
        out
    }
}

/// What `pagewise doctor` shows about copying: the plan in force and the
/// kernel of every size class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choices {
    /// The plan (with any threshold set through the API).
    pub plan: Plan,
    /// Copy and fill size classes, smallest first.
    pub size_classes: Vec<SizeClass>,
}

impl Choices {
    /// The choices of the process-wide copier.
    pub fn current() -> Choices {
        let plan = Plan::current();
        Choices {
            size_classes: plan.size_classes(),
            plan,
        }
    }
}

/// Smallest copy that uses `rep movsb` when the CPU has ERMS. Measured on the
/// development VM (hot rows of `bench memcpy`, three runs): the vector loop
/// ran at 1.02–1.04 of glibc's `rep movsb` at 16 KiB and 20,000 B, 0.93–0.95
/// at 32 KiB.
const COPY_REP_MIN: usize = 24 << 10;
/// Smallest fill that uses `rep stosb` when the CPU has ERMS.
const FILL_REP_MIN: usize = 16 << 10;

fn parse_isa(text: &str) -> Result<Isa, PlanError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "sse2" => Ok(Isa::Sse2),
        "avx2" => Ok(Isa::Avx2),
        "avx512" | "avx-512" => Ok(Isa::Avx512),
        _ => Err(PlanError::BadIsa {
            var: ENV_ISA,
            value: text.to_owned(),
        }),
    }
}

fn serialize_range<S: serde::Serializer>(
    range: &Option<(usize, usize)>,
    s: S,
) -> Result<S::Ok, S::Error> {
    range
        .map(|(from, to)| SizeRange {
            from,
            to: (to != usize::MAX).then_some(to),
        })
        .serialize(s)
}

/// `never` -> `None`; `FROM` -> `[FROM, ∞)`; `FROM-TO` -> `[FROM, TO)`.
fn parse_range(text: &str) -> Option<Option<(usize, usize)>> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("never") {
        return Some(None);
    }
    match text.split_once('-') {
        Some((from, to)) => {
            let (from, to) = (parse_size(from)?, parse_size(to)?);
            (from < to).then_some(Some((from, to)))
        }
        None => Some(Some((parse_size(text)?, usize::MAX))),
    }
}

/// `never` -> `None`; a size -> `Some(bytes)`.
fn parse_threshold(text: &str) -> Result<Option<usize>, ()> {
    if text.trim().eq_ignore_ascii_case("never") {
        return Ok(None);
    }
    parse_size(text).map(Some).ok_or(())
}

/// A size as [`crate::units::parse_size`] reads it, as `usize`; `None` on
/// anything else or when it does not fit.
fn parse_size(text: &str) -> Option<usize> {
    usize::try_from(crate::units::parse_size(text).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            supported: vec![Isa::Sse2, Isa::Avx2, Isa::Avx512],
            erms: true,
            fsrm: true,
            llc_bytes: Some(100 << 20),
            ..Inputs::default()
        }
    }

    #[test]
    fn detected_plan_uses_the_widest_isa_and_the_cache_size() {
        let p = Plan::decide(&inputs());
        assert_eq!((p.isa, p.isa_source), (Isa::Avx512, Source::Detected));
        assert_eq!(p.copy_nontemporal, Some(25 << 20));
        assert_eq!(p.fill_nontemporal, Some(50 << 20));
        assert_eq!(p.nontemporal_source, Source::Detected);
        assert_eq!(p.copy_rep, Some((COPY_REP_MIN, usize::MAX)));
        assert!(p.notes.is_empty(), "{:?}", p.notes);
    }

    #[test]
    fn no_erms_means_no_rep_and_no_cache_means_a_noted_default() {
        let p = Plan::decide(&Inputs {
            erms: false,
            llc_bytes: None,
            supported: vec![Isa::Sse2],
            ..inputs()
        });
        assert_eq!(p.isa, Isa::Sse2);
        assert_eq!((p.copy_rep, p.fill_rep), (None, None));
        assert_eq!(p.copy_nontemporal, Some(FALLBACK_NT_THRESHOLD));
        assert_eq!(p.nontemporal_source, Source::Default);
        assert_eq!(p.notes.len(), 1);
    }

    #[test]
    fn environment_overrides_and_bad_values_are_noted() {
        let p = Plan::decide(&Inputs {
            env_isa: Some("AVX2".into()),
            env_nt_threshold: Some("8M".into()),
            env_rep_movsb: Some("4K-1M".into()),
            env_rep_stosb: Some("never".into()),
            ..inputs()
        });
        assert_eq!((p.isa, p.isa_source), (Isa::Avx2, Source::Environment));
        assert_eq!(p.copy_nontemporal, Some(8 << 20));
        assert_eq!(p.fill_nontemporal, Some(8 << 20));
        assert_eq!(p.copy_rep, Some((4096, 1 << 20)));
        assert_eq!(p.fill_rep, None);
        assert_eq!(p.rep_source, Source::Environment);

        let p = Plan::decide(&Inputs {
            env_nt_threshold: Some("never".into()),
            ..inputs()
        });
        assert_eq!((p.copy_nontemporal, p.fill_nontemporal), (None, None));

        let p = Plan::decide(&Inputs {
            supported: vec![Isa::Sse2, Isa::Avx2],
            env_isa: Some("avx512".into()),
            env_nt_threshold: Some("lots".into()),
            env_rep_movsb: Some("9-3".into()),
            ..inputs()
        });
        assert_eq!((p.isa, p.isa_source), (Isa::Avx2, Source::Detected));
        assert_eq!(p.copy_nontemporal, Some(25 << 20));
        assert_eq!(p.copy_rep, Some((COPY_REP_MIN, usize::MAX)));
        assert_eq!(p.notes.len(), 3, "{:?}", p.notes);
        assert!(p.notes[0].contains("does not support"));
        assert!(p.notes[1].contains("PAGEWISE_NT_THRESHOLD"));
        assert!(p.notes[2].contains("PAGEWISE_REP_MOVSB"));

        let p = Plan::decide(&Inputs {
            env_isa: Some("mmx".into()),
            ..inputs()
        });
        assert!(p.notes[0].contains("not an instruction set"));
    }

    #[test]
    fn ranges_and_thresholds_read_sizes_as_the_command_line_does() {
        assert_eq!(parse_threshold("1.5M"), Ok(Some(3 << 19)));
        assert_eq!(parse_threshold(" Never "), Ok(None));
        assert_eq!(parse_threshold("lots"), Err(()));
        assert_eq!(parse_range("4K-1.5M"), Some(Some((4096, 3 << 19))));
        assert_eq!(parse_range("never"), Some(None));
        assert_eq!(parse_range("16K"), Some(Some((16 << 10, usize::MAX))));
        assert_eq!(parse_range("1M-1K"), None);
    }

    #[test]
    fn json_shows_rep_ranges_as_from_to() {
        let p = Plan::decide(&inputs());
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["copy_rep"]["from"], COPY_REP_MIN);
        assert!(json["copy_rep"]["to"].is_null());
        let p = Plan::decide(&Inputs {
            erms: false,
            ..inputs()
        });
        assert!(serde_json::to_value(&p).unwrap()["copy_rep"].is_null());
    }

    #[test]
    fn size_classes_follow_the_plan() {
        let p = Plan::decide(&inputs());
        let copy: Vec<_> = p
            .size_classes()
            .into_iter()
            .filter(|c| c.op == "copy")
            .collect();
        assert_eq!(copy.len(), 5, "{copy:?}");
        assert!(copy[0].kernel.contains("masked"));
        assert_eq!(copy[1].sizes.to, Some(513));
        assert!(copy[2].kernel.contains("vector loop"));
        assert!(copy[3].kernel.contains("rep movsb"));
        assert!(copy[4].kernel.contains("non-temporal"));
        let p = Plan {
            isa: Isa::Avx2,
            copy_rep: None,
            copy_nontemporal: None,
            ..p
        };
        let copy: Vec<_> = p
            .size_classes()
            .into_iter()
            .filter(|c| c.op == "copy")
            .collect();
        assert_eq!(copy.len(), 2, "{copy:?}");
        assert_eq!(copy[0].sizes.to, Some(257));
        assert_eq!(copy[1].sizes.to, None);
    }
}
