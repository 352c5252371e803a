//! Profiles: weighted call stacks of user instruction pointers.
//!
//! pagewise's own format (written by `pagewise text profile`), line based:
//!
//! ```text
//! # pagewise-profile 1
//! # event cpu-clock
//! object 0 /usr/bin/app
//! object 1 /usr/lib/x86_64-linux-gnu/libc.so.6
//! stack 12 0:4011a6 0:401230 1:29d90
//! ```
//!
//! `stack COUNT FRAMES…` lists frames leaf first; a frame is `OBJECT:VADDR`
//! (hex link-time address inside that object) or `?:ADDR` when the address
//! was in no file-backed object. `perf script` output (with call chains) is
//! accepted too; its frames are kept as `symbol+offset` in their DSO.

use crate::host::user_files;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// Where a frame points.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// A link-time address inside an object file.
    Address {
        /// The object file path.
        object: String,
        /// Link-time virtual address.
        vaddr: u64,
    },
    /// A symbol and offset inside an object file (from `perf script`).
    Symbol {
        /// The object file path.
        object: String,
        /// Symbol name.
        name: String,
        /// Offset into the symbol.
        offset: u64,
    },
    /// An address in no known object (JIT code, the vDSO).
    Unknown(u64),
}

impl Location {
    /// The object path, if known.
    pub fn object(&self) -> Option<&str> {
        match self {
            Location::Address { object, .. } | Location::Symbol { object, .. } => Some(object),
            Location::Unknown(_) => None,
        }
    }
}

/// A profile: stacks (leaf first) with weights.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    /// The sampling event, e.g. `cpu-clock`.
    pub event: String,
    /// Each distinct stack and its sample count.
    pub stacks: Vec<(u64, Vec<Location>)>,
}

/// A profile that could not be read: which line and why.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// A line is malformed.
    #[error("{path}:{line}: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Neither format recognised, or no samples.
    #[error("{path}: {reason}")]
    Empty {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

const HEADER: &str = "# pagewise-profile 1";

impl Profile {
    /// Total sample weight (at most `u64::MAX`: sums saturate, never wrap).
    pub fn total(&self) -> u64 {
        self.stacks
            .iter()
            .fold(0u64, |sum, (w, _)| sum.saturating_add(*w))
    }

    /// Adds another profile's stacks (merging by weight; a weight that would
    /// pass `u64::MAX` stays there).
    pub fn merge(&mut self, other: Profile) {
        if self.event.is_empty() {
            self.event = other.event;
        }
        self.stacks.extend(other.stacks);
        self.normalize();
    }

    /// Combines identical stacks and sorts by weight (heaviest first).
    pub fn normalize(&mut self) {
        let mut combined: HashMap<Vec<Location>, u64> = HashMap::new();
        for (w, stack) in self.stacks.drain(..) {
            let sum = combined.entry(stack).or_default();
            *sum = sum.saturating_add(w);
        }
        self.stacks = combined.into_iter().map(|(s, w)| (w, s)).collect();
        self.stacks
            .sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    }

    /// Writes pagewise's format.
    pub fn to_text(&self) -> String {
        let mut objects: Vec<&str> = self
            .stacks
            .iter()
            .flat_map(|(_, s)| s.iter().filter_map(Location::object))
            .collect();
        objects.sort_unstable();
        objects.dedup();
        let ids: HashMap<&str, usize> = objects.iter().enumerate().map(|(i, o)| (*o, i)).collect();
        let mut out = format!("{HEADER}\n");
        // No event line for no event: reading it back gives the same profile.
        if !self.event.is_empty() {
            let _ = writeln!(out, "# event {}", self.event);
        }
        for (i, o) in objects.iter().enumerate() {
            let _ = writeln!(out, "object {i} {o}");
        }
        for (w, stack) in &self.stacks {
            let _ = write!(out, "stack {w}");
            for frame in stack {
                let _ = match frame {
                    Location::Address { object, vaddr } => {
                        write!(out, " {}:{vaddr:x}", ids[object.as_str()])
                    }
                    Location::Symbol {
                        object,
                        name,
                        offset,
                    } => write!(out, " {}:{}+{offset:x}", ids[object.as_str()], escape(name)),
                    Location::Unknown(a) => write!(out, " ?:{a:x}"),
                };
            }
            out.push('\n');
        }
        out
    }

    /// Reads a profile file in either format. Only a regular file is read:
    /// a FIFO, a directory or a device is refused at once, never waited on.
    pub fn read(path: &Path) -> Result<Profile, ProfileError> {
        let text = user_files::read_input_to_string(path).map_err(|error| ProfileError::Read {
            path: path.display().to_string(),
            error,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses profile text in either format; `path` is only used in errors.
    pub fn parse(text: &str, path: &str) -> Result<Profile, ProfileError> {
        let profile = if text.starts_with(HEADER) {
            parse_own(text, path)?
        } else {
            parse_perf_script(text)
        };
        if profile.stacks.is_empty() {
            return Err(ProfileError::Empty {
                path: path.to_owned(),
                reason: "no samples (expected a pagewise profile or `perf script` output with call chains)".into(),
            });
        }
        Ok(profile)
    }
}

/// Symbol names may hold spaces (`perf script` demangles C++): keep each
/// frame one word by writing `%` and space as `%25` and `%20`.
fn escape(name: &str) -> String {
    name.replace('%', "%25").replace(' ', "%20")
}

fn unescape(name: &str) -> String {
    name.replace("%20", " ").replace("%25", "%")
}

fn parse_own(text: &str, path: &str) -> Result<Profile, ProfileError> {
    let mut profile = Profile::default();
    let mut objects: HashMap<usize, String> = HashMap::new();
    // Checked, so that no later sum of weights (pages, arcs, totals) can wrap.
    let mut total = 0u64;
    for (n, line) in text.lines().enumerate() {
        let err = |reason: String| ProfileError::Syntax {
            path: path.to_owned(),
            line: n + 1,
            reason,
        };
        let line = line.trim();
        if let Some(event) = line.strip_prefix("# event ") {
            profile.event = event.trim().to_owned();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("object") => {
                let id = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| err("object needs a numeric id".into()))?;
                let rest: Vec<&str> = words.collect();
                if rest.is_empty() {
                    return Err(err("object needs a path".into()));
                }
                objects.insert(id, rest.join(" "));
            }
            Some("stack") => {
                let weight: u64 = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| err("stack needs a count".into()))?;
                total = total.checked_add(weight).ok_or_else(|| {
                    err("the stack counts add up to more than 2^64 - 1 (a damaged profile?)".into())
                })?;
                let mut frames = Vec::new();
                for word in words {
                    let (id, rest) = word
                        .split_once(':')
                        .ok_or_else(|| err(format!("bad frame {word:?}")))?;
                    let frame = if id == "?" {
                        Location::Unknown(
                            u64::from_str_radix(rest, 16)
                                .map_err(|_| err(format!("bad address {rest:?}")))?,
                        )
                    } else {
                        let id: usize = id
                            .parse()
                            .map_err(|_| err(format!("bad object id {id:?}")))?;
                        let object = objects
                            .get(&id)
                            .ok_or_else(|| err(format!("object {id} is not declared")))?
                            .clone();
                        match rest.rsplit_once('+') {
                            Some((name, off))
                                if !name.is_empty() && u64::from_str_radix(rest, 16).is_err() =>
                            {
                                Location::Symbol {
                                    object,
                                    name: unescape(name),
                                    offset: u64::from_str_radix(off, 16)
                                        .map_err(|_| err(format!("bad offset {off:?}")))?,
                                }
                            }
                            _ => Location::Address {
                                object,
                                vaddr: u64::from_str_radix(rest, 16)
                                    .map_err(|_| err(format!("bad address {rest:?}")))?,
                            },
                        }
                    };
                    frames.push(frame);
                }
                if frames.is_empty() {
                    return Err(err("stack has no frames".into()));
                }
                profile.stacks.push((weight, frames));
            }
            Some(other) => return Err(err(format!("unknown record {other:?}"))),
            None => {}
        }
    }
    profile.normalize();
    Ok(profile)
}

/// Parses `perf script` output: a header line per sample, then indented
/// frames `ADDR SYMBOL+OFF (DSO)`, then a blank line. Frames without a
/// symbol or in kernel DSOs are dropped.
fn parse_perf_script(text: &str) -> Profile {
    let mut profile = Profile::default();
    let mut current: Vec<Location> = Vec::new();
    let mut in_sample = false;
    let flush = |current: &mut Vec<Location>, profile: &mut Profile| {
        if !current.is_empty() {
            profile.stacks.push((1, std::mem::take(current)));
        }
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut current, &mut profile);
            in_sample = false;
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            flush(&mut current, &mut profile);
            in_sample = true;
            if profile.event.is_empty() {
                if let Some(event) = line.split_whitespace().find(|w| {
                    w.ends_with(':') && w.len() > 1 && !w.starts_with(|c: char| c.is_ascii_digit())
                }) {
                    profile.event = event
                        .trim_end_matches(':')
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                }
            }
            continue;
        }
        if !in_sample {
            continue;
        }
        let line = line.trim();
        let Some((_addr, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let Some(open) = rest.rfind(" (") else {
            continue;
        };
        let dso = rest[open + 2..].trim_end_matches(')').to_owned();
        let sym = rest[..open].trim();
        if dso.starts_with('[') || sym == "[unknown]" {
            continue;
        }
        let (name, offset) = match sym.rsplit_once("+0x") {
            Some((n, o)) => (n, u64::from_str_radix(o, 16).unwrap_or(0)),
            None => (sym, 0),
        };
        current.push(Location::Symbol {
            object: dso,
            name: name.to_owned(),
            offset,
        });
    }
    flush(&mut current, &mut profile);
    profile.normalize();
    profile
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OWN: &str = "# pagewise-profile 1\n# event cpu-clock\nobject 0 /bin/app\nobject 1 /lib/libc.so.6\nstack 3 0:1010 0:2020\nstack 2 1:30 ?:7fff0000\nstack 1 0:1010 0:2020\n";

    #[test]
    fn own_format_round_trips_and_merges_duplicates() {
        let p = Profile::parse(OWN, "t").unwrap();
        assert_eq!(p.event, "cpu-clock");
        assert_eq!(p.total(), 6);
        assert_eq!(p.stacks.len(), 2);
        assert_eq!(p.stacks[0].0, 4);
        assert_eq!(
            p.stacks[0].1[0],
            Location::Address {
                object: "/bin/app".into(),
                vaddr: 0x1010
            }
        );
        let again = Profile::parse(&p.to_text(), "t2").unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let bad = "# pagewise-profile 1\nobject 0 /bin/app\nstack x 0:10\n";
        let err = Profile::parse(bad, "p").unwrap_err();
        assert_eq!(err.to_string(), "p:3: stack needs a count");
        let undeclared = "# pagewise-profile 1\nstack 1 4:10\n";
        assert!(Profile::parse(undeclared, "p")
            .unwrap_err()
            .to_string()
            .contains("object 4 is not declared"));
        assert!(matches!(
            Profile::parse("", "p"),
            Err(ProfileError::Empty { .. })
        ));
    }

    #[test]
    fn perf_script_output() {
        let text = "app 123 [000] 1.000000:     250000 cpu-clock:u: \n\
                    \t    401136 leaf+0x6 (/tmp/app)\n\
                    \t    401150 main+0x10 (/tmp/app)\n\
                    \tffffffff81000000 kfunc+0x0 ([kernel.kallsyms])\n\
                    \n\
                    app 123 [000] 1.000250:     250000 cpu-clock:u: \n\
                    \t    401136 leaf+0x6 (/tmp/app)\n\
                    \t    401150 main+0x10 (/tmp/app)\n\n";
        let p = Profile::parse(text, "perf.txt").unwrap();
        assert_eq!(p.event, "cpu-clock");
        assert_eq!(p.stacks.len(), 1);
        assert_eq!(p.stacks[0].0, 2);
        assert_eq!(p.stacks[0].1.len(), 2);
        assert_eq!(
            p.stacks[0].1[0],
            Location::Symbol {
                object: "/tmp/app".into(),
                name: "leaf".into(),
                offset: 6
            }
        );
    }

    #[test]
    fn symbol_names_with_spaces_round_trip() {
        let mut p = Profile {
            event: "cpu-clock".into(),
            stacks: vec![(
                2,
                vec![Location::Symbol {
                    object: "/bin/a".into(),
                    name: "ns::f(int, char) 100%".into(),
                    offset: 4,
                }],
            )],
        };
        p.normalize();
        assert_eq!(Profile::parse(&p.to_text(), "s").unwrap(), p);
    }

    proptest! {
        #[test]
        fn parsing_garbage_never_panics(text in "\\PC{0,300}") {
            let _ = Profile::parse(&text, "g");
            let _ = Profile::parse(&format!("{HEADER}\n{text}"), "g");
        }

        #[test]
        fn generated_profiles_round_trip(stacks in proptest::collection::vec((1u64..1000, proptest::collection::vec((0usize..3, 0u64..1 << 40), 1..6)), 1..20)) {
            let objects = ["/a", "/b c", "/lib/x.so"];
            let mut p = Profile { event: "cpu-clock".into(), stacks: stacks.into_iter().map(|(w, frames)| {
                (w, frames.into_iter().map(|(o, a)| Location::Address { object: objects[o].into(), vaddr: a }).collect())
            }).collect() };
            p.normalize();
            let back = Profile::parse(&p.to_text(), "r").unwrap();
            prop_assert_eq!(back, p);
        }
    }
}
