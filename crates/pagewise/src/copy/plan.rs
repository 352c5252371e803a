//! Which kernel runs at which size, and why: the copy plan.
//!
//! A plan is four strategy tables (copy, copy with temporal stores only,
//! fill, fill with temporal stores only), each a list of size classes with a
//! [`Strategy`] per [`Placement`], plus the instruction set, how the AVX-512
//! kernels do the smallest sizes, and the `rep movsb` guards. The tables come
//! from a measurement on this machine (`pagewise tune`, cached per machine
//! key: see [`super::cache`]) or, without one, from vendor-aware defaults
//! ([`default_tables`]). [`Plan::decide`] is a pure function of its
//! [`Inputs`], so every rule is tested; [`Plan::detect`] gathers them.

use super::cache::{MachineKey, Tuned};
use super::Isa;
use crate::sys::copy::{Class, LoopBlock, Placement, RepGuard, Small, Strategy};
use serde::{Deserialize, Serialize};

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

/// Environment variable that chooses where the plan comes from: `default`
/// sets aside any measured plan in the cache (the vendor defaults run, and
/// the plan says a measured one was set aside); unset, a cached plan for this
/// machine is used when there is one. Any other value is ignored, with a note.
pub const ENV_PLAN: &str = "PAGEWISE_PLAN";

/// On Intel (and unknown vendors), copies use non-temporal stores from the
/// last-level cache size divided by this: source and destination together
/// then fill half of it.
pub const COPY_LLC_DIVISOR: u64 = 4;
/// On Intel, fills use non-temporal stores from the last-level cache size
/// divided by this (the same footprint as a copy: a fill has no source).
pub const FILL_LLC_DIVISOR: u64 = 2;

/// Threshold used when the cache size cannot be read.
const FALLBACK_NT_THRESHOLD: usize = 16 << 20;

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Derived from what the CPU and caches offer.
    Detected,
    /// Set by an environment variable.
    Environment,
    /// Set by [`super::set_nontemporal_threshold`].
    Api,
    /// Built-in vendor defaults: nothing was measured on this machine.
    Default,
    /// Measured in this process (`pagewise tune`).
    Measured,
    /// Measured earlier on this machine and read from the per-user cache.
    Cached,
}

impl Source {
    /// A few words for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Detected => "detected",
            Source::Environment => "from the environment",
            Source::Api => "set by the program",
            Source::Default => "default (not measured here)",
            Source::Measured => "measured",
            Source::Cached => "measured, from the cache",
        }
    }
}

/// The CPU's maker, which decides the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// `GenuineIntel`.
    Intel,
    /// `AuthenticAMD` or `HygonGenuine`.
    Amd,
    /// Anything else: Intel's defaults.
    Other,
}

impl Vendor {
    /// From a `cpuid` vendor string.
    pub fn from_cpuid(vendor: &str) -> Vendor {
        match vendor {
            "GenuineIntel" => Vendor::Intel,
            "AuthenticAMD" | "HygonGenuine" => Vendor::Amd,
            _ => Vendor::Other,
        }
    }
}

/// Which defaults a machine gets without a measured plan: the facts behind
/// them differ by microarchitecture, not only by vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuKind {
    /// Intel, and vendors nothing was measured on: the shape measured on
    /// the Intel VM (Emerald Rapids).
    Intel,
    /// AMD (or Hygon) before Zen 5, families 0x17-0x19 (Zen 1-4): glibc's
    /// and AOCL-LibMem's Zen 3 rules, confirmed on the Zen 3 guest.
    AmdZen1To4,
    /// AMD from Zen 5 on, family 0x1A and later: `rep movsb` up to the L3
    /// (AOCL-LibMem's Zen 5 rule), confirmed on the Zen 5 guest.
    AmdZen5,
}

impl CpuKind {
    /// The kind of a CPU by its `cpuid` vendor string and family.
    pub fn of(vendor: &str, family: u32) -> CpuKind {
        match Vendor::from_cpuid(vendor) {
            Vendor::Amd if family >= 0x1a => CpuKind::AmdZen5,
            Vendor::Amd => CpuKind::AmdZen1To4,
            Vendor::Intel | Vendor::Other => CpuKind::Intel,
        }
    }

    /// A few words for reports.
    pub fn describe(self) -> &'static str {
        match self {
            CpuKind::Intel => "Intel (and unknown vendors)",
            CpuKind::AmdZen1To4 => "AMD Zen 1-4 (family 0x17-0x19)",
            CpuKind::AmdZen5 => "AMD Zen 5 (family 0x1A on)",
        }
    }
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
    /// Not a plan choice.
    #[error("{var}={value:?} ignored: its one value is `default` (set the measured plan aside)")]
    BadPlan {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

/// The strategy tables of a plan: what `pagewise tune` measures and caches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tables {
    /// How the AVX-512 kernels copy up to 32 bytes and fill up to 63.
    pub small: Small,
    /// How many vectors the copy loop moves per iteration (plans cached
    /// before this choice existed have eight).
    #[serde(default)]
    pub loop_block: LoopBlock,
    /// Copies (non-temporal stores allowed).
    pub copy: Vec<Class>,
    /// Copies with temporal stores only.
    pub copy_temporal: Vec<Class>,
    /// Fills (non-temporal stores allowed).
    pub fill: Vec<Class>,
    /// Fills with temporal stores only.
    pub fill_temporal: Vec<Class>,
    /// When `rep movsb` is avoided although a table chose it.
    pub rep_guards: Vec<RepGuard>,
}

/// Where `pagewise tune` would save a measured plan for this user, as far
/// as it was looked for: what the note that suggests `tune` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TuneCache {
    /// Not looked for (or the cache could not be read).
    #[default]
    Unknown,
    /// In this directory (which may not exist yet).
    At(String),
    /// Nowhere: no cache directory is usable for this user, so a plan
    /// `tune` measured could not be saved for later processes.
    Nowhere,
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
    /// Size of the largest cache, in bytes (on AMD, the L3 of one CCX).
    pub llc_bytes: Option<u64>,
    /// This machine's key (vendor, model, microcode, kernel, glibc).
    pub key: MachineKey,
    /// A measured plan read from the cache; used only when its key is `key`.
    pub cached: Option<Tuned>,
    /// Where the cached plan was read from (for reports).
    pub cache_file: Option<String>,
    /// Where `pagewise tune` would save a plan (for the note suggesting it).
    pub tune_cache: TuneCache,
    /// Value of [`ENV_PLAN`].
    pub env_plan: Option<String>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The instruction set of the vector kernels.
    pub isa: Isa,
    /// Whether it was detected or pinned by [`ENV_ISA`].
    pub isa_source: Source,
    /// The strategy tables.
    pub tables: Tables,
    /// Where the tables came from: [`Source::Measured`], [`Source::Cached`]
    /// or [`Source::Default`].
    pub tables_source: Source,
    /// Whether [`ENV_REP_MOVSB`] / [`ENV_REP_STOSB`] changed the tables.
    pub rep_source: Source,
    /// Whether [`ENV_NT_THRESHOLD`] or the API changed the non-temporal sizes.
    pub nontemporal_source: Source,
    /// When the tables were measured (Unix seconds), if they were.
    pub measured_at: Option<u64>,
    /// The cache file the tables were read from or written to, if any.
    pub cache_file: Option<String>,
    /// The cache file of the measured plan for this machine that
    /// [`ENV_PLAN`]`=default` set aside (the vendor defaults run instead).
    pub set_aside: Option<String>,
    /// The CPU's maker.
    pub vendor: Vendor,
    /// Which defaults apply here (they are in force unless a measured plan is).
    pub cpu_kind: CpuKind,
    /// This machine's key.
    pub key: MachineKey,
    /// The last-level cache size the defaults are derived from.
    pub llc_bytes: Option<u64>,
    /// Enhanced `rep movsb` on this CPU.
    pub erms: bool,
    /// Fast short `rep movsb` on this CPU.
    pub fsrm: bool,
    /// Fallbacks, hints and ignored settings, one sentence each.
    pub notes: Vec<String>,
}

impl Serialize for Plan {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct View<'a> {
            isa: Isa,
            isa_source: Source,
            tables_source: Source,
            measured_at: Option<u64>,
            cache_file: &'a Option<String>,
            set_aside: &'a Option<String>,
            vendor: Vendor,
            cpu_kind: CpuKind,
            key: &'a MachineKey,
            rep_source: Source,
            #[serde(serialize_with = "serialize_range")]
            copy_rep: Option<(usize, usize)>,
            #[serde(serialize_with = "serialize_range")]
            fill_rep: Option<(usize, usize)>,
            copy_nontemporal: Option<usize>,
            fill_nontemporal: Option<usize>,
            nontemporal_source: Source,
            tables: &'a Tables,
            llc_bytes: Option<u64>,
            erms: bool,
            fsrm: bool,
            notes: &'a [String],
        }
        View {
            isa: self.isa,
            isa_source: self.isa_source,
            tables_source: self.tables_source,
            measured_at: self.measured_at,
            cache_file: &self.cache_file,
            set_aside: &self.set_aside,
            vendor: self.vendor,
            cpu_kind: self.cpu_kind,
            key: &self.key,
            rep_source: self.rep_source,
            copy_rep: self.copy_rep(),
            fill_rep: self.fill_rep(),
            copy_nontemporal: self.copy_nontemporal(),
            fill_nontemporal: self.fill_nontemporal(),
            nontemporal_source: self.nontemporal_source,
            tables: &self.tables,
            llc_bytes: self.llc_bytes,
            erms: self.erms,
            fsrm: self.fsrm,
            notes: &self.notes,
        }
        .serialize(s)
    }
}

/// Which table of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Table {
    /// [`Tables::copy`].
    Copy,
    /// [`Tables::copy_temporal`].
    CopyTemporal,
    /// [`Tables::fill`].
    Fill,
    /// [`Tables::fill_temporal`].
    FillTemporal,
}

impl Table {
    /// All four.
    pub const ALL: [Table; 4] = [
        Table::Copy,
        Table::CopyTemporal,
        Table::Fill,
        Table::FillTemporal,
    ];

    /// Whether it is a copy table.
    pub fn is_copy(self) -> bool {
        matches!(self, Table::Copy | Table::CopyTemporal)
    }

    /// Whether non-temporal stores are allowed in it.
    pub fn allows_nontemporal(self) -> bool {
        matches!(self, Table::Copy | Table::Fill)
    }
}

impl Tables {
    /// One table.
    pub fn get(&self, t: Table) -> &Vec<Class> {
        match t {
            Table::Copy => &self.copy,
            Table::CopyTemporal => &self.copy_temporal,
            Table::Fill => &self.fill,
            Table::FillTemporal => &self.fill_temporal,
        }
    }

    /// One table, to change.
    pub fn get_mut(&mut self, t: Table) -> &mut Vec<Class> {
        match t {
            Table::Copy => &mut self.copy,
            Table::CopyTemporal => &mut self.copy_temporal,
            Table::Fill => &mut self.fill,
            Table::FillTemporal => &mut self.fill_temporal,
        }
    }

    /// Tables where every size above the loop-free ones uses `strategy`
    /// (the temporal tables keep the loop where `strategy` is non-temporal),
    /// with no `rep` guards: for tests and for measuring one strategy.
    pub fn only(isa: Isa, small: Small, strategy: Strategy) -> Tables {
        let inline = Strategy::Loop { isa };
        let table = |s: Strategy| {
            let mut t = vec![Class {
                from: 0,
                by_placement: [inline; 3],
            }];
            if s != inline {
                t.push(Class {
                    from: isa.small_max() + 1,
                    by_placement: [s; 3],
                });
            }
            t
        };
        let temporal = if strategy.is_nontemporal() {
            inline
        } else {
            strategy
        };
        Tables {
            small,
            loop_block: LoopBlock::default(),
            copy: table(strategy),
            copy_temporal: table(temporal),
            fill: table(strategy),
            fill_temporal: table(temporal),
            rep_guards: Vec::new(),
        }
    }
}

/// Sets `f(old)` as the strategy of every placement for sizes in `[from, to)`
/// of `table`, splitting classes at the ends, and merges equal neighbours.
pub fn overlay(table: &mut Vec<Class>, from: usize, to: usize, f: impl Fn(Strategy) -> Strategy) {
    if from >= to {
        return;
    }
    split_at(table, from);
    if to != usize::MAX {
        split_at(table, to);
    }
    for c in table.iter_mut() {
        if c.from >= from && c.from < to {
            c.by_placement = c.by_placement.map(&f);
        }
    }
    merge(table);
}

/// Sets `strategy` for placement `p` on sizes `[from, to)` of `table`
/// (`to == usize::MAX`: no end), splitting classes at the ends, and merges
/// equal neighbours.
pub fn overlay_placement(
    table: &mut Vec<Class>,
    from: usize,
    to: usize,
    p: Placement,
    strategy: Strategy,
) {
    if from >= to {
        return;
    }
    split_at(table, from);
    if to != usize::MAX {
        split_at(table, to);
    }
    for c in table.iter_mut() {
        if c.from >= from && c.from < to {
            c.by_placement[p as usize] = strategy;
        }
    }
    merge(table);
}

/// The strategy `table` gives `n` bytes at placement `p` (`None` for an
/// empty table).
pub fn strategy_at(table: &[Class], n: usize, p: Placement) -> Option<Strategy> {
    table
        .iter()
        .rev()
        .find(|c| c.from <= n)
        .map(|c| c.by_placement[p as usize])
}

/// Splits the class holding `at` so that a class starts there.
fn split_at(table: &mut Vec<Class>, at: usize) {
    if table.iter().any(|c| c.from == at) {
        return;
    }
    if let Some(i) = table.iter().rposition(|c| c.from < at) {
        let c = Class {
            from: at,
            by_placement: table[i].by_placement,
        };
        table.insert(i + 1, c);
    }
}

/// Merges neighbouring classes with the same strategies.
pub fn merge(table: &mut Vec<Class>) {
    table.dedup_by(|later, earlier| later.by_placement == earlier.by_placement);
}

/// Sizes `[from, to)` of the first run of classes whose aligned placement is
/// `rep` (`to == usize::MAX`: no end).
fn rep_range(table: &[Class]) -> Option<(usize, usize)> {
    let i = table
        .iter()
        .position(|c| c.by_placement[Placement::Aligned as usize] == Strategy::Rep)?;
    let to = table[i + 1..]
        .iter()
        .find(|c| c.by_placement[Placement::Aligned as usize] != Strategy::Rep)
        .map_or(usize::MAX, |c| c.from);
    Some((table[i].from, to))
}

/// The first size whose aligned placement uses non-temporal stores.
fn nontemporal_from(table: &[Class]) -> Option<usize> {
    table
        .iter()
        .find(|c| c.by_placement[Placement::Aligned as usize].is_nontemporal())
        .map(|c| c.from)
}

/// The stream count of the first non-temporal class, if any.
fn streams_of(table: &[Class]) -> Option<u8> {
    table.iter().find_map(|c| {
        c.by_placement.iter().find_map(|s| match s {
            Strategy::NonTemporal { streams } => Some(*streams),
            _ => None,
        })
    })
}

/// Defaults for a machine nothing was measured on, by [`CpuKind`].
///
/// - **Intel** (and unknown vendors), measured on the Intel VM (Emerald
///   Rapids): the vector loop below 12 KiB, `rep movsb` from there (ERMS;
///   without AVX-512, from 6 KiB for copies (4 KiB between differently
///   aligned buffers) and 8 KiB for fills, see [`INTEL_NARROW_COPY_REP_MIN`]),
///   avoided when the destination is 1–1023 B ahead of the source modulo
///   1 MiB (its slow mode) or, with AVX-512, modulo 4 KiB below 512 KiB;
///   non-temporal stores
///   from a quarter of the LLC, 32 pages side by side. Fills: the loop, `rep
///   stosb` from 9 KiB ([`FILL_REP_MIN`]), non-temporal from half the LLC.
///   The smallest copies inline with masked moves ([`Small::Masked`]): on an
///   Emerald Rapids guest (2026-12-01) the
///   guarded leaf ran hot 8-128 B copies at 0.71-1.09 of glibc and inline
///   masked moves at 0.94-2.00 (`pagewise tune`: worst ratios 0.67 against
///   1.14).
/// - **AMD Zen 1–4** (glibc's and AOCL-LibMem's choices for Zen 3, confirmed
///   on the Zen 3 guest): no `rep movsb` (it collapses to 2 GB/s at
///   distances 1–31 mod 4 KiB there, glibc BZ #30994; the guard avoids 1–63 B
///   ahead modulo 4 KiB if a user turns it on), the vector loop up to 3/4 of
///   the L3 of one CCX, then non-temporal stores in one stream (interleaving
///   pages lost up to 4× on the Zen 3 guest). `rep stosb` only on Zen 4 (the
///   one with AVX-512) with ERMS, for misaligned destinations of 4–128 KiB
///   (measured on the Zen 4 guest, see [`ZEN4_FILL_REP_MISALIGNED_END`]).
///   Zen 4 copies from 2.5 KiB with the AVX2 loop, which is faster than the
///   AVX-512 one from memory (see [`ZEN4_COPY_AVX2_LOOP_MIN`]), except
///   co-aligned copies of 16 KiB–1 MiB, which call glibc's `memcpy` (its
///   `rep movsb`, not slow co-aligned; see [`ZEN4_COPY_GLIBC_ALIGNED_MIN`]).
/// - **AMD Zen 5** (AOCL-LibMem's Zen 5 rule, `rep movsb` up to the L3,
///   confirmed on the Zen 5 guest): Intel's sizes for the loop, `rep
///   movsb` and the non-temporal thresholds, `rep stosb` from 8 KiB (the
///   loop's cold fills of 9–14 KiB ran at 0.5–0.7 of it), without the `rep
///   movsb` guards (no slow mode at any distance measured there: the loop
///   the guards chose ran at 0.70 of glibc on 64 KiB copies 6 B ahead), one
///   non-temporal stream (2–32 streams lost 10–40% at 1 GiB), and one
///   unguarded masked move for copies up to 64 bytes.
pub fn default_tables(kind: CpuKind, isa: Isa, erms: bool, llc: Option<u64>) -> Tables {
    let inline = Strategy::Loop { isa };
    let base = || {
        vec![Class {
            from: 0,
            by_placement: [inline; 3],
        }]
    };
    let llc = llc.map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    let (mut copy, mut fill) = (base(), base());
    let mut rep_guards = Vec::new();
    // Intel's thresholds: a quarter of the LLC for copies, half for fills.
    let (copy_nt, fill_nt) = match llc {
        Some(l) => (l / COPY_LLC_DIVISOR as usize, l / FILL_LLC_DIVISOR as usize),
        None => (FALLBACK_NT_THRESHOLD, FALLBACK_NT_THRESHOLD),
    };
    let rep_tables = |copy: &mut Vec<Class>,
                      fill: &mut Vec<Class>,
                      copy_rep_min: usize,
                      fill_rep_min: usize,
                      misaligned_min: usize| {
        overlay(copy, copy_rep_min, usize::MAX, |_| Strategy::Rep);
        overlay(fill, fill_rep_min, usize::MAX, |_| Strategy::Rep);
        // With a misaligned destination, `rep stosb` beats the loop
        // from a few KiB (see the constants).
        split_at(fill, misaligned_min);
        for c in fill.iter_mut().filter(|c| c.from >= misaligned_min) {
            c.by_placement[Placement::Other as usize] = Strategy::Rep;
        }
        merge(fill);
    };
    let (small, copy_nt, fill_nt, streams) = match kind {
        CpuKind::AmdZen1To4 => {
            let nt = llc.map_or(FALLBACK_NT_THRESHOLD, |l| l / 4 * 3);
            rep_guards.push(RepGuard {
                span: 4096,
                below: 64,
                up_to: usize::MAX,
            });
            // Only Zen 4 of these has AVX-512, where the small shape applies:
            // masked moves inline (measured on a Zen 4 guest: worst ratio to
            // glibc over the small cases 0.99, against 0.71 in the leaf).
            // Zen 4: the AVX2 loop from a few KiB, but glibc for co-aligned
            // copies of 16 KiB-1 MiB (see the constants).
            if isa == Isa::Avx512 {
                overlay(
                    &mut copy,
                    ZEN4_COPY_AVX2_LOOP_MIN,
                    usize::MAX,
                    |s| match s {
                        Strategy::Loop { .. } => Strategy::Loop { isa: Isa::Avx2 },
                        other => other,
                    },
                );
                overlay_placement(
                    &mut copy,
                    ZEN4_COPY_GLIBC_ALIGNED_MIN,
                    ZEN4_COPY_GLIBC_ALIGNED_END.min(nt),
                    Placement::Aligned,
                    Strategy::Glibc,
                );
            }
            if erms && isa == Isa::Avx512 {
                overlay_placement(
                    &mut fill,
                    FILL_REP_MISALIGNED_MIN,
                    ZEN4_FILL_REP_MISALIGNED_END,
                    Placement::Other,
                    Strategy::Rep,
                );
            }
            (Small::Masked, nt, nt, 1)
        }
        CpuKind::AmdZen5 => {
            if erms {
                rep_tables(
                    &mut copy,
                    &mut fill,
                    COPY_REP_MIN,
                    ZEN5_FILL_REP_MIN,
                    FILL_REP_MISALIGNED_MIN,
                );
            }
            (Small::Masked, copy_nt, fill_nt, 1)
        }
        CpuKind::Intel => {
            if erms {
                // The 32-byte loop keeps up with `rep` over fewer sizes.
                let (copy_rep, fill_rep, fill_rep_misaligned) = if isa == Isa::Avx512 {
                    (INTEL_COPY_REP_MIN, FILL_REP_MIN, FILL_REP_MIN)
                } else {
                    (
                        INTEL_NARROW_COPY_REP_MIN,
                        INTEL_NARROW_FILL_REP_MIN,
                        INTEL_NARROW_FILL_REP_MIN,
                    )
                };
                rep_tables(
                    &mut copy,
                    &mut fill,
                    copy_rep,
                    fill_rep,
                    fill_rep_misaligned,
                );
                rep_guards.push(RepGuard {
                    span: 1 << 20,
                    below: 1024,
                    up_to: usize::MAX,
                });
                // Only ahead of the 64-byte loop: with AVX2 pinned on an
                // Emerald Rapids guest (2026-12-04, `bench memcpy --sizes
                // 6144,8192,10000,16384,65536,262144 --trials 5`, four
                // alternating processes each) copies 6-16 KiB to a
                // destination 6 B ahead of the source modulo 4 KiB ran at
                // 0.78-0.87 of glibc through the 32-byte loop this guard
                // chose, 0.98-0.99 with `rep movsb` (64-256 KiB: 1.06 ->
                // 0.99-1.00; every other row level).
                if isa == Isa::Avx512 {
                    rep_guards.push(RepGuard {
                        span: 4096,
                        below: 1024,
                        up_to: 512 << 10,
                    });
                } else {
                    for p in [Placement::Near, Placement::Other] {
                        overlay_placement(
                            &mut copy,
                            INTEL_NARROW_COPY_REP_MISALIGNED_MIN,
                            INTEL_NARROW_COPY_REP_MIN,
                            p,
                            Strategy::Rep,
                        );
                    }
                }
            }
            (Small::Masked, copy_nt, fill_nt, 32)
        }
    };
    let (copy_temporal, fill_temporal) = (copy.clone(), fill.clone());
    let nt = Strategy::NonTemporal { streams };
    overlay(&mut copy, copy_nt, usize::MAX, |_| nt);
    overlay(&mut fill, fill_nt, usize::MAX, |_| nt);
    Tables {
        small,
        loop_block: LoopBlock::default(),
        copy,
        copy_temporal,
        fill,
        fill_temporal,
        rep_guards,
    }
}

/// The note of a machine without a measured plan: run `pagewise tune`, and
/// where its plan would go; or, where no cache directory is usable for this
/// user, that a plan could not be saved (not a suggestion that cannot work).
fn no_plan_note(tune_cache: &TuneCache) -> String {
    let head = "no measured plan for this machine: vendor defaults in force";
    match tune_cache {
        TuneCache::Unknown => {
            format!("{head}; run `pagewise tune` to measure one (about a minute)")
        }
        TuneCache::At(dir) => format!(
            "{head}; run `pagewise tune` to measure one (about a minute; it is saved in {dir})"
        ),
        TuneCache::Nowhere => format!(
            "{head}; `pagewise tune` could not save one for this user: no cache directory is \
             usable (the places passed over are noted; XDG_CACHE_HOME set to a directory of \
             this user's would do)"
        ),
    }
}

impl Plan {
    /// Reads the CPU features and identity, the cache sizes from sysfs, the
    /// cached measured plan for this machine (if any) and the environment,
    /// and decides. Costs a few `cpuid` instructions, a dozen small file reads
    /// and, with a cached plan, reading and parsing one small JSON file (tens
    /// of microseconds).
    pub fn detect() -> Plan {
        let f = crate::sys::cpu::cpu_features();
        let key = MachineKey::current();
        let env_plan = std::env::var(ENV_PLAN).ok();
        // Read even under PAGEWISE_PLAN=default, to say what it sets aside.
        let (cached, cache_file, cache_notes, tune_cache) = match super::cache::load(&key) {
            Ok(found) => {
                let notes = found
                    .passed_over
                    .iter()
                    .map(|why| format!("copy plan: passed over {why}"))
                    .collect();
                let tune_cache = match found.directory {
                    Some(dir) => TuneCache::At(dir.display().to_string()),
                    None => TuneCache::Nowhere,
                };
                match found.plan {
                    Some((tuned, path)) => (
                        Some(tuned),
                        Some(path.display().to_string()),
                        notes,
                        tune_cache,
                    ),
                    None => (None, None, notes, tune_cache),
                }
            }
            Err(e) => (None, None, vec![e.to_string()], TuneCache::Unknown),
        };
        let mut plan = Plan::decide(&Inputs {
            supported: Isa::ALL
                .iter()
                .copied()
                .filter(|i| i.is_supported())
                .collect(),
            erms: f.erms,
            fsrm: f.fsrm,
            llc_bytes: crate::host::cpu::largest_cache_bytes(),
            key,
            cached,
            cache_file,
            tune_cache,
            env_plan,
            env_isa: std::env::var(ENV_ISA).ok(),
            env_nt_threshold: std::env::var(ENV_NT_THRESHOLD).ok(),
            env_rep_movsb: std::env::var(ENV_REP_MOVSB).ok(),
            env_rep_stosb: std::env::var(ENV_REP_STOSB).ok(),
        });
        plan.notes.extend(cache_notes);
        plan
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
        let vendor = Vendor::from_cpuid(&inputs.key.vendor);
        let kind = CpuKind::of(&inputs.key.vendor, inputs.key.family);
        if inputs.llc_bytes.is_none() {
            notes.push(format!(
                "cache sizes not readable: non-temporal stores from the default {} MiB",
                FALLBACK_NT_THRESHOLD >> 20
            ));
        }
        let set_defaults = match inputs.env_plan.as_deref() {
            None => false,
            Some(text) if text.trim().eq_ignore_ascii_case("default") => true,
            Some(text) => {
                notes.push(
                    PlanError::BadPlan {
                        var: ENV_PLAN,
                        value: text.to_owned(),
                    }
                    .to_string(),
                );
                false
            }
        };
        let measured = inputs.cached.as_ref().filter(|t| t.key == inputs.key);
        let set_aside = measured.filter(|_| set_defaults).map(|t| {
            let file = inputs.cache_file.as_deref().unwrap_or("the cache");
            notes.push(format!(
                "{ENV_PLAN}=default: the measured plan for this machine ({file}, measured at \
                 Unix time {}) is set aside; the vendor defaults run",
                t.measured_at
            ));
            file.to_owned()
        });
        let cached = measured.filter(|_| !set_defaults);
        let (mut tables, tables_source, measured_at, cache_file) = match cached {
            Some(t) => (
                t.tables.clone(),
                Source::Cached,
                Some(t.measured_at),
                inputs.cache_file.clone(),
            ),
            None => {
                if !set_defaults {
                    notes.push(no_plan_note(&inputs.tune_cache));
                }
                (
                    default_tables(kind, isa, inputs.erms, inputs.llc_bytes),
                    Source::Default,
                    None,
                    None,
                )
            }
        };
        fit_to_isa(&mut tables, isa);

        let mut nontemporal_source = tables_source;
        if let Some(text) = inputs.env_nt_threshold.as_deref() {
            match parse_threshold(text) {
                Ok(t) => {
                    set_nontemporal(&mut tables, t);
                    nontemporal_source = Source::Environment;
                }
                Err(()) => notes.push(format!(
                    "{}; using the plan's thresholds",
                    PlanError::BadSize {
                        var: ENV_NT_THRESHOLD,
                        value: text.to_owned(),
                    }
                )),
            }
        }
        let mut rep_source = tables_source;
        for (var, value, tables_of) in [
            (
                ENV_REP_MOVSB,
                &inputs.env_rep_movsb,
                [Table::Copy, Table::CopyTemporal],
            ),
            (
                ENV_REP_STOSB,
                &inputs.env_rep_stosb,
                [Table::Fill, Table::FillTemporal],
            ),
        ] {
            let Some(text) = value else { continue };
            match parse_range(text) {
                Some(range) => {
                    for t in tables_of {
                        set_rep(tables.get_mut(t), range, isa);
                    }
                    rep_source = Source::Environment;
                }
                None => notes.push(format!(
                    "{var}={text:?} ignored: use never, FROM or FROM-TO (sizes with optional K, M, G)"
                )),
            }
        }
        if !inputs.erms
            && [Table::Copy, Table::Fill]
                .iter()
                .any(|t| rep_range(tables.get(*t)).is_some())
        {
            notes.push("this CPU has no ERMS: `rep movsb`/`rep stosb` may be slow".into());
        }

        Plan {
            isa,
            isa_source,
            tables,
            tables_source,
            rep_source,
            nontemporal_source,
            measured_at,
            cache_file,
            set_aside,
            vendor,
            cpu_kind: kind,
            key: inputs.key.clone(),
            llc_bytes: inputs.llc_bytes,
            erms: inputs.erms,
            fsrm: inputs.fsrm,
            notes,
        }
    }

    /// Where `source` (one of this plan's) came from, in a few words: as
    /// [`Source::describe`], except that defaults in force while a measured
    /// plan was [set aside](Plan::set_aside) say so instead of "not measured
    /// here".
    pub fn describe_source(&self, source: Source) -> String {
        match (source, &self.set_aside) {
            (Source::Default, Some(_)) => {
                format!("default (a measured plan exists: {ENV_PLAN}=default sets it aside)")
            }
            _ => source.describe().to_owned(),
        }
    }

    /// This plan with every size above the loop-free ones served by
    /// `strategy` (see [`Tables::only`]): for tests and measurements.
    pub fn with_only(&self, isa: Isa, strategy: Strategy) -> Plan {
        let mut tables = Tables::only(isa, self.tables.small, strategy);
        tables.loop_block = self.tables.loop_block;
        Plan {
            isa,
            tables,
            ..self.clone()
        }
    }

    /// Copy sizes `[from, to)` that use `rep movsb` with co-aligned pointers
    /// (the first such run; `to == usize::MAX`: no end).
    pub fn copy_rep(&self) -> Option<(usize, usize)> {
        rep_range(&self.tables.copy_temporal)
    }

    /// Fill sizes that use `rep stosb` with an aligned destination, as [`Plan::copy_rep`].
    pub fn fill_rep(&self) -> Option<(usize, usize)> {
        rep_range(&self.tables.fill_temporal)
    }

    /// Copies from this size up use non-temporal stores (co-aligned pointers);
    /// `None`: never.
    pub fn copy_nontemporal(&self) -> Option<usize> {
        nontemporal_from(&self.tables.copy)
    }

    /// Fills from this size up use non-temporal stores (aligned destination).
    pub fn fill_nontemporal(&self) -> Option<usize> {
        nontemporal_from(&self.tables.fill)
    }

    /// The stream counts the process copier times on its first large
    /// non-temporal copies and chooses from (see
    /// [`crate::sys::copy::streams`]): with vendor defaults whose copy
    /// interleaves more than four pages, the powers of two from 4 up to
    /// that count (the largest four of them); otherwise none (a measured
    /// plan has chosen, and one stream, the AMD default, is not traded for a
    /// trial that measured 10-40% slower there).
    pub fn timed_streams(&self) -> Vec<u8> {
        let table = streams_of(&self.tables.copy).unwrap_or(1);
        if self.tables_source != Source::Default || table <= 4 {
            return Vec::new();
        }
        let mut counts: Vec<u8> = Strategy::STREAMS
            .into_iter()
            .filter(|&k| (4..=table).contains(&k))
            .collect();
        let extra = counts
            .len()
            .saturating_sub(crate::sys::copy::streams::MAX_CANDIDATES);
        counts.drain(..extra);
        counts
    }

    /// The size classes of copy and fill and the kernel of each, smallest
    /// first (one line per class, placements that differ spelled out).
    pub fn size_classes(&self) -> Vec<SizeClass> {
        let mut out = Vec::new();
        let small = self.isa.small_max();
        for (op, table) in [("copy", &self.tables.copy), ("fill", &self.tables.fill)] {
            let w = self.isa.vector_bytes();
            let eight = format!("no loop (up to eight {w}-byte vectors)");
            let loop_free = match (self.isa, op, self.tables.small) {
                (Isa::Avx512, "fill", _) => format!(
                    "below 64 B one masked 64-byte store, no branch on the size; then \
                     overlapping stores from both ends, {eight}"
                ),
                (Isa::Avx512, _, Small::Masked) => format!(
                    "inline in the caller: up to 32 B one masked 32-byte move, 33-63 B two \
                     32-byte moves, 64-128 B two 64-byte moves; then overlapping head and tail \
                     moves, {eight}"
                ),
                (Isa::Avx512, _, Small::MaskedGuarded) => format!(
                    "up to 32 B one masked 64-byte move (scalar moves when the destination \
                     is within 64 B of the source modulo 4 KiB); then overlapping head and \
                     tail moves, {eight}"
                ),
                (_, "fill", _) => format!(
                    "inline in the caller: up to 128 B scalar and 16-byte stores from both \
                     ends; then overlapping {w}-byte stores from both ends, {eight}"
                ),
                (Isa::Avx2, _, _) => format!(
                    "inline in the caller: up to 32 B scalar and 16-byte moves from both \
                     ends; then a direct call: overlapping {w}-byte moves from both ends, \
                     {eight}"
                ),
                _ => format!(
                    "inline in the caller: up to 64 B scalar and 16-byte moves from both \
                     ends; then overlapping {w}-byte moves from both ends, {eight}"
                ),
            };
            out.push(SizeClass {
                op,
                sizes: SizeRange {
                    from: 0,
                    to: Some(small + 1),
                },
                kernel: loop_free,
            });
            for (i, c) in table.iter().enumerate() {
                let to = table.get(i + 1).map(|n| n.from);
                if to.is_some_and(|t| t <= small + 1) {
                    continue;
                }
                out.push(SizeClass {
                    op,
                    sizes: SizeRange {
                        from: c.from.max(small + 1),
                        to,
                    },
                    kernel: describe_class(
                        c,
                        (op == "copy").then_some(self.tables.loop_block),
                        !self.tables.rep_guards.is_empty(),
                    ),
                });
            }
        }
        let timed = self.timed_streams();
        if let (Some(first), Some(last)) = (timed.first(), timed.last()) {
            for class in out.iter_mut().filter(|c| c.op == "copy") {
                if class.kernel.starts_with("non-temporal") {
                    class.kernel.push_str(&format!(
                        " (the count: each process times {first}-{last} pages on its first \
                         copies from {} MiB and keeps the fastest)",
                        crate::sys::copy::streams::TIMED_MIN >> 20
                    ));
                }
            }
        }
        out
    }
}

/// One class in words: the aligned placement's strategy, and the others'
/// where they differ. `copy`: the copy loop's block, for a copy table.
fn describe_class(c: &Class, loop_block: Option<LoopBlock>, guarded: bool) -> String {
    let copy = loop_block.is_some();
    let word = |s: Strategy| match s {
        Strategy::Loop { isa } => format!(
            "{}-byte vector loop, aligned stores{}",
            isa.vector_bytes(),
            match loop_block {
                Some(block) => format!(
                    ", {} vectors per iteration (backwards when the destination is a little ahead)",
                    block.name()
                ),
                None => String::new(),
            }
        ),
        Strategy::Rep if copy && guarded => "rep movsb (guarded)".into(),
        Strategy::Rep if copy => "rep movsb".into(),
        Strategy::Rep => "rep stosb".into(),
        Strategy::NonTemporal { streams } => {
            format!("non-temporal stores, {streams} page(s) side by side, sfence")
        }
        Strategy::Glibc if copy => "glibc memcpy".into(),
        Strategy::Glibc => "glibc memset".into(),
    };
    let [a, near, other] = c.by_placement;
    let mut text = word(a);
    let names = if copy {
        ["", "destination 1-63 B ahead", "other distances"]
    } else {
        ["", "", "misaligned destination"]
    };
    for (p, s) in [(1, near), (2, other)] {
        if s != a && (copy || p == 2) {
            text.push_str(&format!("; {}: {}", names[p], word(s)));
        }
    }
    text
}

/// Loops wider than `isa` become `isa`'s, and the first class is its loop
/// (the inline path), so the tables fit a pinned instruction set.
fn fit_to_isa(tables: &mut Tables, isa: Isa) {
    for t in Table::ALL {
        let table = tables.get_mut(t);
        for c in table.iter_mut() {
            for s in c.by_placement.iter_mut() {
                if let Strategy::Loop { isa: w } = s {
                    *s = Strategy::Loop { isa: (*w).min(isa) };
                }
            }
        }
        if table.first().map(|c| c.from) != Some(0) {
            table.insert(
                0,
                Class {
                    from: 0,
                    by_placement: [Strategy::Loop { isa }; 3],
                },
            );
        }
        split_at(table, isa.small_max() + 1);
        table[0].by_placement = [Strategy::Loop { isa }; 3];
        merge(table);
    }
}

/// Non-temporal stores from `threshold` up in the copy and fill tables
/// (with the stream count they had, or one), the temporal tables' choices
/// below it; `None`: never.
pub fn set_nontemporal(tables: &mut Tables, threshold: Option<usize>) {
    for (nt_table, temporal) in [
        (Table::Copy, Table::CopyTemporal),
        (Table::Fill, Table::FillTemporal),
    ] {
        let streams = streams_of(tables.get(nt_table)).unwrap_or(1);
        let mut fresh = tables.get(temporal).clone();
        if let Some(t) = threshold {
            overlay(&mut fresh, t, usize::MAX, |_| Strategy::NonTemporal {
                streams,
            });
        }
        *tables.get_mut(nt_table) = fresh;
    }
}

/// `rep` for sizes in `range` (`None`: nowhere; the loop replaces it),
/// non-temporal classes left alone.
fn set_rep(table: &mut Vec<Class>, range: Option<(usize, usize)>, isa: Isa) {
    let inline = Strategy::Loop { isa };
    overlay(table, 0, usize::MAX, |s| {
        if s == Strategy::Rep {
            inline
        } else {
            s
        }
    });
    if let Some((from, to)) = range {
        overlay(table, from, to, |s| {
            if s.is_nontemporal() {
                s
            } else {
                Strategy::Rep
            }
        });
    }
}

/// Smallest copy that uses `rep movsb` on AMD Zen 5 with ERMS (Intel's was
/// the same until 2026-12-04; see [`INTEL_COPY_REP_MIN`]). Measured on the
/// Intel VM (hot rows of `bench memcpy`, three runs): the vector loop
/// ran at 1.02–1.04 of glibc's `rep movsb` at 16 KiB and 20,000 B, 0.93–0.95
/// at 32 KiB.
const COPY_REP_MIN: usize = 24 << 10;
/// Smallest copy that uses `rep movsb` on Intel with ERMS and AVX-512. Once
/// the cold rows started from flushed lines and `rep movsb` was reached
/// without the table walk (the direct window), an Emerald Rapids guest
/// (2026-12-04, `bench memcpy --sizes 9216,12000,16384,20000 --no-fleet
/// --no-end-to-end --trials 3`, `PAGEWISE_REP_MOVSB` 24K, 9K and 12K in turn,
/// four processes each, ratios to glibc) gave, with the loop to 24 KiB:
/// cold 16 KiB and 20,000 B 0.90-0.92 (a full run read 0.895), hot
/// 0.98-1.19; `rep movsb` from 12 KiB: those cold rows 1.01, hot 16 KiB
/// and 20,000 B 0.98-1.16 (aligned 1.00 against 1.01-1.02); from 9 KiB:
/// every cold row 0.98-1.02 but hot 9 KiB and 12,000 B `src+7 dst+1` 0.97
/// against 1.01-1.03 with the loop. A loop copy reads each destination line
/// before it stores to it; `rep movsb` writes whole lines. Copies 8-12 KiB
/// from memory keep the loop (0.91-0.95 of glibc cold) for the hot rows'
/// sake.
const INTEL_COPY_REP_MIN: usize = 12 << 10;
/// Smallest fill that uses `rep stosb` on Intel with ERMS, wherever the
/// destination starts. With a misaligned destination, measured on an
/// Emerald Rapids guest (2026-12-01, `bench memset` with the defaults, three
/// alternating runs against `rep stosb` from 4 KiB, ratios to glibc, one
/// byte past a line): the loop, which no longer stores across a page, ran
/// hot 4 KiB at 1.19-1.34 (against 0.92-0.98), 6000 B 1.13-1.25
/// (0.92-0.97), 8 KiB 1.06-1.12 (0.91-0.95), and cold 4-8 KiB as fast or
/// faster; from 10,000 B it lost cold (0.86-0.90 against 1.04-1.10) while
/// winning hot (1.04-1.17 against 0.92-0.98). With an aligned destination
/// (from 16 KiB until 2026-12-04): once the cold rows started from flushed
/// lines, the loop's cold fills of 9-12,000 B ran at 0.91-0.93 of glibc's
/// `rep stosb` (0.85 at worst) and `rep stosb` from 9 KiB at 0.98-1.01, hot
/// 0.99 against 1.00-1.03 (another Emerald Rapids guest, `bench memset
/// --sizes 9216,10000,12000,16384 --trials 5`, four alternating processes
/// of each build; 16 KiB level). A loop fill stores into lines it first
/// reads from memory; `rep stosb` writes whole lines without reading them.
const FILL_REP_MIN: usize = 9 << 10;
/// Smallest copy that uses `rep movsb` on Intel with ERMS but without
/// AVX-512 (the E-core Xeons, client parts, or `PAGEWISE_COPY_ISA=avx2`):
/// the 32-byte loop keeps up with `rep movsb` over fewer sizes than the
/// 64-byte one. Measured on the Sapphire Rapids-class guest (2026-12-03,
/// AVX2 pinned, glibc kept off its AVX-512 routines, four alternating
/// processes each, ratios to glibc): with `rep movsb` from 5 KiB against the
/// loop, hot 5–8 KiB `src+7 dst+1` 0.95–0.98 against 0.82–0.88, aligned 5
/// and 6 KiB 0.86–0.87 against 0.90–0.92, 7 and 8 KiB 0.90–0.91 against
/// 0.85, cold 5–8 KiB 0.98–1.03 against 0.90–0.99; from 4 KiB, 4 KiB hot
/// aligned fell to 0.84 (0.99 with the loop), and 10–16 KiB went from
/// 0.76–0.89 to 0.92–0.98 hot.
const INTEL_NARROW_COPY_REP_MIN: usize = 6 << 10;
/// Smallest copy between differently aligned buffers (the `near` and
/// `other` placements) that uses `rep movsb` on Intel without AVX-512.
/// Measured on an Emerald Rapids guest with AVX2 pinned on both sides
/// (2026-12-04, `bench memcpy --sizes 2560,3000,4096,5000 --no-fleet
/// --no-end-to-end --trials 3`, four alternating processes, `rep movsb` from
/// 2 KiB at every placement against the defaults, once `rep movsb` was
/// reached without the table walk): hot 4 KiB `src+7 dst+1` 0.82 -> 0.94 of
/// glibc, `src+1 dst+7` 0.93 -> 0.97, 5,000 B 0.83-0.86 -> 0.96-0.98, cold 4
/// KiB 0.86 -> 1.01; but co-aligned copies lost (4 KiB 1.01 -> 0.94, 3,000 B
/// 1.32 -> 0.92) and 2.5 KiB misaligned too (0.92-0.96 -> 0.82-0.84), 3,000
/// B misaligned level (0.87-0.89). From 2.75 KiB since 2026-12-05, once the
/// AVX2 process entry ran `rep movsb` itself (same guest and pinning,
/// `--sizes 2200,2600,3000,3500`, four alternating processes against `rep
/// movsb` from 2 KiB): misaligned 3,000 B 0.85-0.87 -> 0.96-0.97, 3,500 B
/// 0.83-0.85 -> 0.97-0.99, 2,600 B level (0.88-0.92 both), 2,200 B the
/// loop's (1.00-1.06 against 0.85-0.88); cold level.
const INTEL_NARROW_COPY_REP_MISALIGNED_MIN: usize = 2816;
/// Smallest fill that uses `rep stosb` on Intel with ERMS but without
/// AVX-512, whatever the alignment. Measured as
/// [`INTEL_NARROW_COPY_REP_MIN`]: with `rep stosb` from 6 KiB against the
/// loop, 6 KiB ran 0.97 hot and 0.99 cold against 1.03 and 1.11; 8 KiB
/// 0.99–1.01 hot and 1.00 cold against 0.91–0.94 and 0.89–0.97; 10,000 B
/// aligned 1.00 hot and 0.99 cold against 0.90 and 1.12.
const INTEL_NARROW_FILL_REP_MIN: usize = 8 << 10;
/// Smallest fill that uses `rep stosb` on AMD Zen 5 with ERMS. Measured on
/// the Zen 5 guest (`bench memset`, aligned rows, 2026-11-24, a busy
/// machine): with the loop up to 16 KiB, cold fills of 9000 B to 14 KiB ran at
/// 0.50–0.72 of glibc's `rep stosb` (hot ones at 1.6), 8 KiB at 0.98; with `rep
/// stosb` from 8 KiB, 1.00–1.07 cold and 0.99–1.01 hot from 8 KiB.
const ZEN5_FILL_REP_MIN: usize = 8 << 10;
/// Smallest copy that runs the AVX2 (32-byte) loop instead of the AVX-512 one
/// on Zen 4 (AMD family 0x19 with AVX-512). Measured on the Zen 4 guest
/// (2026-11-25, `bench memcpy` with the vendor defaults, ratios to glibc):
/// the 32-byte loop is as fast as the 64-byte one hot and faster from memory
/// (three full runs alternating with the AVX-512 loop from 513 B: cold aligned
/// 3000 B 0.86–0.87 → 0.97–0.99, 16 KiB 0.81–0.91 → 0.94, 512 KiB 0.80–0.90
/// → 0.94–0.96, 2 MiB 1.02–1.03 → 1.10–1.18; hot `src+7 dst+1` 10,000 B
/// 0.97–0.99 → 1.07–1.15). Below this size the loop it replaces is entered
/// inline by the AVX-512 leaf, and the table walk to reach another loop cost
/// more than it gained (two runs each: from 513 B, hot 513 B–1 KiB 0.52–0.92
/// against 0.95–1.02; from 2 KiB, 2 KiB hot aligned 0.94–0.97 and cold
/// 0.85–0.90 against 1.00 and 0.92–1.01, 3000 B hot 1.20–1.25 and cold
/// 0.92–1.04 against 0.98–1.19 and 0.65–0.80).
const ZEN4_COPY_AVX2_LOOP_MIN: usize = 2560;
/// Smallest co-aligned copy (source and destination at the same offset
/// modulo 64) that calls glibc's `memcpy` on Zen 4, up to
/// [`ZEN4_COPY_GLIBC_ALIGNED_END`]. glibc copies these with `rep movsb`,
/// which on Zen 4 is not slow co-aligned, and no pagewise kernel beat it
/// there from memory. Measured on a Zen 4 guest (2026-12-02, `bench memcpy`
/// with the vendor defaults, three full runs alternating with the AVX2 loop
/// there, ratios to glibc): co-aligned copies from memory of 32 KiB–1 MB
/// went from 0.81–1.01 to 0.95–1.05, hot ones from 0.94–1.02 to 0.99–1.02;
/// 16 KiB hot 0.94–0.97 to 0.95–1.02 (cold 0.95–0.97 against 0.90–1.02).
/// (`pagewise tune --no-save` the same morning: the AVX2 loop 0.73–0.95
/// from memory in the co-aligned cells of 16 KiB–1 MiB.)
const ZEN4_COPY_GLIBC_ALIGNED_MIN: usize = 16 << 10;
/// First co-aligned copy size on Zen 4 that is back on the AVX2 loop: from
/// 1 MiB the loop beat glibc from memory in the same runs (1 MiB 0.96–1.10
/// against 0.97–1.03, 2 MiB 1.04–1.16 against 0.97–0.99, 16 MiB 1.02–1.09
/// against 0.89–0.98) and was level hot (0.97–1.10 against 0.99–1.01).
const ZEN4_COPY_GLIBC_ALIGNED_END: usize = 1 << 20;
/// Smallest fill with a misaligned destination that uses `rep stosb` on Zen 5
/// and, up to [`ZEN4_FILL_REP_MISALIGNED_END`], on Zen 4. First chosen on the
/// Intel VM (2026-11-21: 0.86 vs 0.95 of glibc at 4 KiB, while the loop's last
/// store still crossed into the next page); Intel now has its own
/// [`FILL_REP_MIN`].
const FILL_REP_MISALIGNED_MIN: usize = 4096;
/// First fill size with a misaligned destination that goes back to the loop
/// on Zen 4 (AMD family 0x19 with AVX-512) with ERMS. Measured on the Zen 4
/// guest (2026-11-25, ratios to glibc, whose `memset` is `rep stosb` from
/// 2 KiB): first `bench memset` with `PAGEWISE_REP_STOSB=2K-128K` (every
/// placement) against the loop, two runs each, alternating: `rep stosb` lost
/// on aligned destinations from 2 to 8 KiB (0.86–0.97 against 0.96–1.24) and
/// on misaligned ones below 4 KiB (0.95 against 1.05–1.29 at 3000 B) and from
/// 128 KiB (0.96–0.98 against 0.99–1.00). Then this rule against the loop,
/// three full runs each, alternating, hot fills one byte past a line: 4 KiB
/// 0.78–0.92 → 0.92–0.94, 8 KiB 0.88–0.94 → 0.96–0.98, 64 KiB 0.96–1.02 →
/// 1.00, but 10,000 B 1.03–1.07 → 0.93–0.98; cold ones 4 KiB 0.90–0.94 →
/// 0.99–1.02, 10,000 B 0.96–0.98 → 0.99–1.10. The loop's slow sizes were
/// whole pages: its last unaligned store crossed into the next page. Once
/// the loop no longer makes such a store (`crosses_page` in the x86
/// kernels), three alternating runs of `bench memset --sizes
/// 4K,8K,10000,16K,64K,100000` with `PAGEWISE_REP_STOSB=never` against this
/// rule: hot fills one byte past a line ran the loop at 1.02–1.09 of glibc
/// against 0.94–0.99 for `rep stosb`, but cold 4 KiB ones at 0.89–0.91
/// against 0.94–1.05, so the rule stays: a page that is filled is usually
/// one that is not in the cache.
const ZEN4_FILL_REP_MISALIGNED_END: usize = 128 << 10;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(vendor: &str) -> MachineKey {
        MachineKey {
            vendor: vendor.into(),
            family: 6,
            model: 207,
            stepping: 2,
            microcode: Some("0x21000290".into()),
            kernel: Some("6.18.0".into()),
            glibc: Some("2.36".into()),
        }
    }

    fn inputs(vendor: &str) -> Inputs {
        Inputs {
            supported: vec![Isa::Sse2, Isa::Avx2, Isa::Avx512],
            erms: true,
            fsrm: true,
            llc_bytes: Some(100 << 20),
            key: key(vendor),
            ..Inputs::default()
        }
    }

    #[test]
    fn intel_defaults_keep_the_measured_intel_shape() {
        let p = Plan::decide(&inputs("GenuineIntel"));
        assert_eq!((p.isa, p.isa_source), (Isa::Avx512, Source::Detected));
        assert_eq!(p.tables_source, Source::Default);
        assert_eq!(p.copy_nontemporal(), Some(25 << 20));
        assert_eq!(p.fill_nontemporal(), Some(50 << 20));
        assert_eq!(p.copy_rep(), Some((INTEL_COPY_REP_MIN, usize::MAX)));
        assert_eq!(p.fill_rep(), Some((FILL_REP_MIN, usize::MAX)));
        assert_eq!(p.tables.small, Small::Masked);
        assert_eq!(p.cpu_kind, CpuKind::Intel);
        assert_eq!(streams_of(&p.tables.copy), Some(32));
        // Every fill uses rep stosb from 9 KiB; the loop below.
        let c = p.tables.fill.iter().find(|c| c.from == 9 << 10).unwrap();
        assert_eq!(c.by_placement, [Strategy::Rep; 3]);
        let below = p.tables.fill.iter().rfind(|c| c.from < 9 << 10).unwrap();
        assert!(matches!(
            below.by_placement[Placement::Other as usize],
            Strategy::Loop { .. }
        ));
        assert_eq!(p.tables.rep_guards.len(), 2);
        assert!(
            p.notes.iter().any(|n| n.contains("pagewise tune")),
            "{:?}",
            p.notes
        );
    }

    /// Without AVX-512 the 32-byte loop hands over to `rep` sooner: copies
    /// from 6 KiB (4 KiB between differently aligned buffers), fills from 8
    /// KiB at every placement; the non-temporal thresholds and the 1 MiB
    /// guard stay Intel's, the 4 KiB guard goes.
    #[test]
    fn intel_without_avx512_takes_rep_sooner() {
        let t = default_tables(CpuKind::Intel, Isa::Avx2, true, Some(100 << 20));
        let loop_avx2 = Strategy::Loop { isa: Isa::Avx2 };
        for p in Placement::ALL {
            let copy_at = |n| strategy_at(&t.copy, n, p);
            let fill_at = |n| strategy_at(&t.fill, n, p);
            let misaligned_from = if p == Placement::Aligned {
                INTEL_NARROW_COPY_REP_MIN
            } else {
                INTEL_NARROW_COPY_REP_MISALIGNED_MIN
            };
            assert_eq!(copy_at(misaligned_from - 1), Some(loop_avx2));
            assert_eq!(copy_at(misaligned_from), Some(Strategy::Rep));
            assert_eq!(copy_at(INTEL_NARROW_COPY_REP_MIN), Some(Strategy::Rep));
            assert_eq!(fill_at(INTEL_NARROW_FILL_REP_MIN - 1), Some(loop_avx2));
            assert_eq!(fill_at(INTEL_NARROW_FILL_REP_MIN), Some(Strategy::Rep));
            assert!(matches!(
                copy_at(25 << 20),
                Some(Strategy::NonTemporal { .. })
            ));
        }
        assert_eq!(t.rep_guards.len(), 1);
        assert_eq!(t.rep_guards[0].span, 1 << 20);
        // Without ERMS no rep at all.
        let plain = default_tables(CpuKind::Intel, Isa::Avx2, false, Some(100 << 20));
        assert_eq!(
            strategy_at(&plain.copy, 16 << 10, Placement::Other),
            Some(loop_avx2)
        );
    }

    /// The note without a measured plan suggests `tune` where its plan can
    /// be saved (and says where), and says it cannot be where no cache
    /// directory is usable.
    #[test]
    fn the_no_plan_note_suggests_tune_only_where_its_plan_can_be_saved() {
        let note = |tune_cache: TuneCache| {
            let p = Plan::decide(&Inputs {
                tune_cache,
                ..inputs("GenuineIntel")
            });
            p.notes
                .into_iter()
                .find(|n| n.starts_with("no measured plan"))
                .unwrap()
        };
        assert!(note(TuneCache::Unknown).contains("run `pagewise tune`"));
        let at = note(TuneCache::At("/home/u/.cache/pagewise".into()));
        assert!(
            at.contains("run `pagewise tune`") && at.contains("saved in /home/u/.cache/pagewise"),
            "{at}"
        );
        let nowhere = note(TuneCache::Nowhere);
        assert!(!nowhere.contains("run `pagewise tune`"), "{nowhere}");
        assert!(nowhere.contains("could not save"), "{nowhere}");
    }

    #[test]
    fn only_vendor_defaults_with_interleaved_pages_time_the_stream_count() {
        let intel = Plan::decide(&inputs("GenuineIntel"));
        assert_eq!(intel.timed_streams(), [4, 8, 16, 32]);
        // At most four, the table's own count among them.
        let mut wide = intel.clone();
        for s in wide
            .tables
            .copy
            .iter_mut()
            .flat_map(|c| c.by_placement.iter_mut())
        {
            if s.is_nontemporal() {
                *s = Strategy::NonTemporal { streams: 64 };
            }
        }
        assert_eq!(wide.timed_streams(), [8, 16, 32, 64]);
        let copy = intel
            .size_classes()
            .into_iter()
            .rfind(|c| c.op == "copy")
            .unwrap();
        assert!(copy.kernel.contains("times 4-32 pages"), "{}", copy.kernel);
        let measured = Plan {
            tables_source: Source::Measured,
            ..intel.clone()
        };
        assert!(measured.timed_streams().is_empty());
        let copy = measured
            .size_classes()
            .into_iter()
            .rfind(|c| c.op == "copy")
            .unwrap();
        assert!(!copy.kernel.contains("times"), "{}", copy.kernel);
        let amd = Plan::decide(&Inputs {
            key: MachineKey {
                family: 0x19,
                ..key("AuthenticAMD")
            },
            ..inputs("AuthenticAMD")
        });
        assert!(amd.timed_streams().is_empty());
    }

    #[test]
    fn amd_zen_1_to_4_defaults_avoid_rep_and_interleaved_streams() {
        let p = Plan::decide(&Inputs {
            llc_bytes: Some(32 << 20),
            key: MachineKey {
                family: 0x19,
                ..key("AuthenticAMD")
            },
            ..inputs("AuthenticAMD")
        });
        assert_eq!((p.vendor, p.cpu_kind), (Vendor::Amd, CpuKind::AmdZen1To4));
        assert_eq!((p.copy_rep(), p.fill_rep()), (None, None));
        assert_eq!(p.copy_nontemporal(), Some(24 << 20));
        assert_eq!(streams_of(&p.tables.copy), Some(1));
        // Zen 4 (the one with AVX-512) copies small sizes inline.
        assert_eq!(p.tables.small, Small::Masked);
        // No rep movsb of its own: loops, and glibc for co-aligned copies of
        // 16 KiB to 1 MiB.
        let glibc_sizes = ZEN4_COPY_GLIBC_ALIGNED_MIN..ZEN4_COPY_GLIBC_ALIGNED_END;
        for c in &p.tables.copy_temporal {
            for (i, s) in c.by_placement.iter().enumerate() {
                let co_aligned = i == Placement::Aligned as usize;
                match s {
                    Strategy::Loop { .. } => {}
                    Strategy::Glibc if co_aligned && glibc_sizes.contains(&c.from) => {}
                    other => panic!("{other:?} from {} at placement {i}", c.from),
                }
            }
        }
        for table in [&p.tables.copy, &p.tables.copy_temporal] {
            for n in [ZEN4_COPY_GLIBC_ALIGNED_MIN, ZEN4_COPY_GLIBC_ALIGNED_END - 1] {
                assert_eq!(
                    strategy_at(table, n, Placement::Aligned),
                    Some(Strategy::Glibc)
                );
                assert_ne!(
                    strategy_at(table, n, Placement::Other),
                    Some(Strategy::Glibc)
                );
                assert_ne!(
                    strategy_at(table, n, Placement::Near),
                    Some(Strategy::Glibc)
                );
            }
        }
        // ...runs the AVX2 loop for copies from a few KiB (in both copy
        // tables; the non-temporal class stays), the AVX-512 loop below...
        for table in [&p.tables.copy, &p.tables.copy_temporal] {
            let avx2 = Some(Strategy::Loop { isa: Isa::Avx2 });
            assert_eq!(
                strategy_at(table, ZEN4_COPY_AVX2_LOOP_MIN, Placement::Other),
                avx2
            );
            assert_eq!(strategy_at(table, 1 << 20, Placement::Aligned), avx2);
            let below = strategy_at(table, ZEN4_COPY_AVX2_LOOP_MIN - 1, Placement::Aligned);
            assert_eq!(below, Some(Strategy::Loop { isa: Isa::Avx512 }));
        }
        assert!(strategy_at(&p.tables.copy, 1 << 30, Placement::Aligned)
            .is_some_and(|s| s.is_nontemporal()));
        // ...and fills misaligned destinations of 4-128 KiB with rep stosb,
        // in both fill tables; aligned ones, and every size outside, loop.
        let other = Placement::Other as usize;
        for table in [&p.tables.fill, &p.tables.fill_temporal] {
            for n in [4096, 8 << 10, (128 << 10) - 1] {
                assert_eq!(strategy_at(table, n, Placement::Other), Some(Strategy::Rep));
            }
            for n in [4095, 128 << 10] {
                assert_ne!(strategy_at(table, n, Placement::Other), Some(Strategy::Rep));
            }
            assert!(table
                .iter()
                .all(|c| c.by_placement[Placement::Aligned as usize] != Strategy::Rep));
        }
        // Without AVX-512 (Zen 1-3) or without ERMS: no rep stosb at all;
        // without AVX-512, no call of glibc either (measured on Zen 4 only).
        for (supported, erms) in [
            (vec![Isa::Sse2, Isa::Avx2], true),
            (inputs("x").supported, false),
        ] {
            let zen_1_to_3 = !supported.contains(&Isa::Avx512);
            let p = Plan::decide(&Inputs {
                supported,
                erms,
                llc_bytes: Some(32 << 20),
                key: MachineKey {
                    family: 0x19,
                    ..key("AuthenticAMD")
                },
                ..inputs("AuthenticAMD")
            });
            assert!(p
                .tables
                .fill
                .iter()
                .all(|c| c.by_placement[other] != Strategy::Rep));
            if zen_1_to_3 {
                assert!(p
                    .tables
                    .copy
                    .iter()
                    .all(|c| !c.by_placement.contains(&Strategy::Glibc)));
            }
        }
    }

    #[test]
    fn amd_zen_5_defaults_use_rep_movsb_unguarded_and_one_stream() {
        let p = Plan::decide(&Inputs {
            llc_bytes: Some(32 << 20),
            key: MachineKey {
                family: 0x1a,
                ..key("AuthenticAMD")
            },
            ..inputs("AuthenticAMD")
        });
        assert_eq!(p.cpu_kind, CpuKind::AmdZen5);
        // (The temporal tables, which these summarise, keep rep to the end.)
        assert_eq!(p.copy_rep(), Some((COPY_REP_MIN, usize::MAX)));
        assert_eq!(p.fill_rep(), Some((ZEN5_FILL_REP_MIN, usize::MAX)));
        assert_eq!(p.copy_nontemporal(), Some(8 << 20));
        assert_eq!(p.fill_nontemporal(), Some(16 << 20));
        assert_eq!(streams_of(&p.tables.copy), Some(1));
        assert!(p.tables.rep_guards.is_empty());
        assert_eq!(p.tables.small, Small::Masked);
        // Misaligned fills take rep stosb from 4 KiB (Intel's 9 KiB is its own).
        let c = p.tables.fill.iter().rfind(|c| c.from <= 4096).unwrap();
        assert_eq!(c.from, FILL_REP_MISALIGNED_MIN);
        assert_eq!(c.by_placement[Placement::Other as usize], Strategy::Rep);
        // The same CPU without ERMS gets no rep at all.
        let p = Plan::decide(&Inputs {
            erms: false,
            llc_bytes: Some(32 << 20),
            key: MachineKey {
                family: 0x1a,
                ..key("AuthenticAMD")
            },
            ..inputs("AuthenticAMD")
        });
        assert_eq!((p.copy_rep(), p.fill_rep()), (None, None));
    }

    #[test]
    fn cpu_kinds_follow_vendor_and_family() {
        assert_eq!(CpuKind::of("GenuineIntel", 6), CpuKind::Intel);
        assert_eq!(CpuKind::of("AuthenticAMD", 0x17), CpuKind::AmdZen1To4);
        assert_eq!(CpuKind::of("HygonGenuine", 0x18), CpuKind::AmdZen1To4);
        assert_eq!(CpuKind::of("AuthenticAMD", 0x19), CpuKind::AmdZen1To4);
        assert_eq!(CpuKind::of("AuthenticAMD", 0x1a), CpuKind::AmdZen5);
        assert_eq!(CpuKind::of("AuthenticAMD", 0x1b), CpuKind::AmdZen5);
        assert_eq!(CpuKind::of("SomethingElse", 0x1a), CpuKind::Intel);
    }

    #[test]
    fn a_cached_plan_is_used_only_on_its_machine() {
        let mut tables = default_tables(CpuKind::AmdZen5, Isa::Avx512, true, Some(1 << 30));
        tables.copy.push(Class {
            from: 1 << 20,
            by_placement: [Strategy::Glibc; 3],
        });
        let tuned = Tuned {
            schema: super::super::cache::SCHEMA.into(),
            key: key("GenuineIntel"),
            measured_at: 42,
            isa: Isa::Avx512,
            tables: tables.clone(),
        };
        let p = Plan::decide(&Inputs {
            cached: Some(tuned.clone()),
            ..inputs("GenuineIntel")
        });
        assert_eq!((p.tables_source, p.measured_at), (Source::Cached, Some(42)));
        assert_eq!(p.tables, tables);
        let other = MachineKey {
            microcode: Some("0x21000291".into()),
            ..key("GenuineIntel")
        };
        let p = Plan::decide(&Inputs {
            cached: Some(tuned.clone()),
            key: other,
            ..inputs("GenuineIntel")
        });
        assert_eq!(p.tables_source, Source::Default);
        let p = Plan::decide(&Inputs {
            cached: Some(tuned.clone()),
            cache_file: Some("/c/copy-plan-1.json".into()),
            env_plan: Some("default".into()),
            ..inputs("GenuineIntel")
        });
        assert_eq!(p.tables_source, Source::Default);
        // Said to be set aside, not "not measured here".
        assert_eq!(p.set_aside.as_deref(), Some("/c/copy-plan-1.json"));
        assert!(
            p.notes.iter().any(|n| n.contains("is set aside")),
            "{:?}",
            p.notes
        );
        assert!(!p.notes.iter().any(|n| n.contains("no measured plan")));
        let shown = p.describe_source(p.tables_source);
        assert!(shown.contains("a measured plan exists"), "{shown}");
        // Without a measured plan there is nothing to set aside.
        let p = Plan::decide(&Inputs {
            env_plan: Some("default".into()),
            ..inputs("GenuineIntel")
        });
        assert_eq!(
            (p.set_aside.clone(), p.describe_source(Source::Default)),
            (None, "default (not measured here)".into())
        );
        // Any other value is ignored, and said to be.
        for bogus in ["bogus", "", "defaults"] {
            let p = Plan::decide(&Inputs {
                cached: Some(tuned.clone()),
                env_plan: Some(bogus.into()),
                ..inputs("GenuineIntel")
            });
            assert_eq!(p.tables_source, Source::Cached, "{bogus:?}");
            let note = format!("PAGEWISE_PLAN={bogus:?} ignored");
            assert!(
                p.notes.iter().any(|n| n.starts_with(&note)),
                "{:?}",
                p.notes
            );
        }
    }

    #[test]
    fn environment_overrides_and_bad_values_are_noted() {
        let p = Plan::decide(&Inputs {
            env_isa: Some("AVX2".into()),
            env_nt_threshold: Some("8M".into()),
            env_rep_movsb: Some("4K-1M".into()),
            env_rep_stosb: Some("never".into()),
            ..inputs("GenuineIntel")
        });
        assert_eq!((p.isa, p.isa_source), (Isa::Avx2, Source::Environment));
        assert_eq!(p.copy_nontemporal(), Some(8 << 20));
        assert_eq!(p.fill_nontemporal(), Some(8 << 20));
        assert_eq!(p.copy_rep(), Some((4096, 1 << 20)));
        assert_eq!(p.fill_rep(), None);
        assert_eq!(p.rep_source, Source::Environment);
        // A pinned narrower instruction set narrows every loop.
        assert!(p.tables.copy.iter().all(|c| c
            .by_placement
            .iter()
            .all(|s| *s != Strategy::Loop { isa: Isa::Avx512 })));

        let p = Plan::decide(&Inputs {
            env_nt_threshold: Some("never".into()),
            ..inputs("GenuineIntel")
        });
        assert_eq!((p.copy_nontemporal(), p.fill_nontemporal()), (None, None));

        let p = Plan::decide(&Inputs {
            supported: vec![Isa::Sse2, Isa::Avx2],
            env_isa: Some("avx512".into()),
            env_nt_threshold: Some("lots".into()),
            env_rep_movsb: Some("9-3".into()),
            ..inputs("GenuineIntel")
        });
        assert_eq!((p.isa, p.isa_source), (Isa::Avx2, Source::Detected));
        assert_eq!(p.copy_nontemporal(), Some(25 << 20));
        let text = p.notes.join("\n");
        assert!(text.contains("does not support"), "{text}");
        assert!(text.contains("PAGEWISE_NT_THRESHOLD"), "{text}");
        assert!(text.contains("PAGEWISE_REP_MOVSB"), "{text}");
    }

    #[test]
    fn tables_cached_before_the_loop_block_existed_read_as_eight() {
        let tables = Tables::only(Isa::Avx2, Small::Plain, Strategy::Rep);
        let mut json = serde_json::to_value(&tables).unwrap();
        json.as_object_mut().unwrap().remove("loop_block");
        let read: Tables = serde_json::from_value(json).unwrap();
        assert_eq!(read.loop_block, LoopBlock::Eight);
        let mut four = tables.clone();
        four.loop_block = LoopBlock::Four;
        let back: Tables = serde_json::from_str(&serde_json::to_string(&four).unwrap()).unwrap();
        assert_eq!(back.loop_block, LoopBlock::Four);
    }

    #[test]
    fn overlay_splits_and_merges_classes() {
        let l = Strategy::Loop { isa: Isa::Avx2 };
        let mut t = vec![Class {
            from: 0,
            by_placement: [l; 3],
        }];
        overlay(&mut t, 1000, 2000, |_| Strategy::Rep);
        assert_eq!(
            t.iter().map(|c| c.from).collect::<Vec<_>>(),
            [0, 1000, 2000]
        );
        overlay(&mut t, 0, usize::MAX, |_| l);
        assert_eq!(t.len(), 1);
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
    fn json_has_the_summary_fields_and_the_tables() {
        let p = Plan::decide(&inputs("GenuineIntel"));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["copy_rep"]["from"], INTEL_COPY_REP_MIN);
        assert!(json["copy_rep"]["to"].is_null());
        assert_eq!(json["copy_nontemporal"], 25 << 20);
        assert_eq!(json["tables_source"], "default");
        assert_eq!(json["tables"]["copy"][0]["by_placement"][0]["kind"], "loop");
    }

    #[test]
    fn size_classes_follow_the_tables() {
        let p = Plan::decide(&inputs("GenuineIntel"));
        let copy: Vec<_> = p
            .size_classes()
            .into_iter()
            .filter(|c| c.op == "copy")
            .collect();
        assert_eq!(copy.len(), 4, "{copy:?}");
        assert!(copy[0].kernel.contains("masked"));
        assert_eq!(copy[0].sizes.to, Some(513));
        assert!(copy[1].kernel.contains("vector loop"));
        assert!(copy[2].kernel.contains("rep movsb"));
        assert!(copy[3].kernel.contains("non-temporal"));
    }
}
