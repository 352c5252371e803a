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
//! was in no file-backed object. Also read ([`read_profile`], which tells
//! them apart by their first bytes): `perf script` output (with or without
//! call chains; frames kept as `symbol+offset` in their DSO), `perf.data`
//! files (through `perf script`), and pprof profiles ([`super::pprof`]).
//! Profiles from many hosts merge with weights ([`merge_sources`]).

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
    /// A binary profile (pprof, perf.data) could not be decoded.
    #[error("{path}: {reason}")]
    Decode {
        /// The file.
        path: String,
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
    /// Weighted or merged, the sample counts would add up to more than
    /// 2^64 − 1, which no profile holds (pagewise's format refuses it).
    #[error("{path}: {reason}")]
    TooManySamples {
        /// The file (and its weight) whose samples passed the limit.
        path: String,
        /// How.
        reason: String,
    },
}

/// Sample counts that would add up to more than 2^64 − 1: a profile holds at
/// most that many in all, so every sum over it (pages, arcs, totals) is exact
/// and what is written can be read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sample counts add up to more than 2^64 - 1")]
pub struct CountOverflow;

const HEADER: &str = "# pagewise-profile 1";

impl Profile {
    /// Total sample weight (at most `u64::MAX`: sums saturate, never wrap;
    /// only stacks set by hand can pass it, since reading, [`Profile::merge`]
    /// and [`Profile::scale`] refuse to).
    pub fn total(&self) -> u64 {
        self.checked_total().unwrap_or(u64::MAX)
    }

    /// The exact total, or `None` above `u64::MAX`. One pass over the stacks.
    fn checked_total(&self) -> Option<u64> {
        self.stacks
            .iter()
            .try_fold(0u64, |sum, (w, _)| sum.checked_add(*w))
    }

    /// Adds another profile's stacks (merging by weight), unless the counts
    /// of both would add up to more than 2^64 − 1: then nothing changes.
    /// Costs a hash of every stack of both.
    pub fn merge(&mut self, other: Profile) -> Result<(), CountOverflow> {
        self.checked_total()
            .zip(other.checked_total())
            .and_then(|(a, b)| a.checked_add(b))
            .ok_or(CountOverflow)?;
        if self.event.is_empty() {
            self.event = other.event;
        }
        self.stacks.extend(other.stacks);
        self.normalize();
        Ok(())
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
            let _ = writeln!(out, "object {i} {}", escape(o));
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

    /// Reads a profile file in any format pagewise knows: its own,
    /// `perf script` output, a `perf.data` file (through `perf script`) or a
    /// pprof profile (whose files are looked for where it names them). Only a
    /// regular file is read: a FIFO, a directory or a device is refused at
    /// once, never waited on. See [`read_profile`] for the notes on what was
    /// read by name.
    pub fn read(path: &Path) -> Result<Profile, ProfileError> {
        read_profile(path, &locate_as_named).map(|l| l.profile)
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

/// Symbol names and paths may hold spaces (`perf script` demangles C++),
/// tabs, newlines or `%` (pprof names are any string): keep each frame one
/// word and each record one line by writing `%`, whitespace and control
/// characters as `%XX` per UTF-8 byte (a space is `%20`).
fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c == '%' || c.is_whitespace() || c.is_control() {
            let mut utf8 = [0u8; 4];
            for b in c.encode_utf8(&mut utf8).bytes() {
                let _ = write!(out, "%{b:02X}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Undoes [`escape`]: every `%XX` (two hex digits) is that byte; any other
/// `%` stays as it is (a hand-written profile).
fn unescape(name: &str) -> String {
    if !name.contains('%') {
        return name.to_owned();
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|_| bytes[i] == b'%')
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
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
                objects.insert(id, unescape(&rest.join(" ")));
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

/// Parses `perf script` output one line at a time: a header line per
/// sample, then (with call chains) tab-indented frames `ADDR SYMBOL+OFF (DSO)`
/// and a blank line; without call chains the one frame ends the header line.
/// Frames without a symbol or in kernel DSOs are dropped.
#[derive(Default)]
struct PerfScriptParser {
    profile: Profile,
    current: Vec<Location>,
    in_sample: bool,
}

impl PerfScriptParser {
    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.profile
                .stacks
                .push((1, std::mem::take(&mut self.current)));
        }
    }

    /// The sample's frame `ADDR SYMBOL+OFF (DSO)`, if it is a user frame with a symbol.
    fn frame(text: &str) -> Option<Location> {
        let (_addr, rest) = text.trim().split_once(char::is_whitespace)?;
        let open = rest.rfind(" (")?;
        let dso = rest[open + 2..].trim_end().trim_end_matches(')');
        let sym = rest[..open].trim();
        if dso.starts_with('[') || sym == "[unknown]" || sym.is_empty() {
            return None;
        }
        let (name, offset) = match sym.rsplit_once("+0x") {
            Some((n, o)) => (n, u64::from_str_radix(o, 16).unwrap_or(0)),
            None => (sym, 0),
        };
        Some(Location::Symbol {
            object: dso.to_owned(),
            name: name.to_owned(),
            offset,
        })
    }

    fn line(&mut self, line: &str) {
        if line.trim().is_empty() {
            self.flush();
            self.in_sample = false;
            return;
        }
        // Call-chain frames start with a tab; a header line starts with the
        // command name, right-aligned with spaces when there are no chains.
        if !line.starts_with('\t') {
            self.flush();
            self.in_sample = true;
            // The event is the first word ending in ':' that is not the time.
            let mut words = line.split_whitespace();
            let event = words.find(|w| {
                w.ends_with(':') && w.len() > 1 && !w.starts_with(|c: char| c.is_ascii_digit())
            });
            if let Some(event) = event {
                if self.profile.event.is_empty() {
                    self.profile.event = event
                        .trim_end_matches(':')
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                }
                // Without call chains the sample's frame follows the event.
                let rest: Vec<&str> = words.collect();
                if let Some(frame) = Self::frame(&rest.join(" ")) {
                    self.current.push(frame);
                }
            }
            return;
        }
        if self.in_sample {
            if let Some(frame) = Self::frame(line) {
                self.current.push(frame);
            }
        }
    }

    fn finish(mut self) -> Profile {
        self.flush();
        self.profile.normalize();
        self.profile
    }
}

fn parse_perf_script(text: &str) -> Profile {
    let mut parser = PerfScriptParser::default();
    for line in text.lines() {
        parser.line(line);
    }
    parser.finish()
}

/// The first bytes of a `perf.data` file.
const PERF_DATA_MAGIC: &[u8] = b"PERFILE2";

/// Reads a `perf.data` file through `perf script` (symbol names not
/// demangled, so they match the symbol tables), streaming its output.
fn read_perf_data(path: &Path) -> Result<Profile, ProfileError> {
    use std::io::BufRead;
    let failed = |reason: String| ProfileError::Decode {
        path: path.display().to_string(),
        reason,
    };
    let mut child = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(path)
        .args([
            "--no-demangle",
            "--no-inline",
            "-F",
            "comm,tid,time,event,ip,sym,symoff,dso",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            failed(format!(
                "a perf.data file is read with `perf script`, which cannot run here ({e}): install perf (Debian: linux-perf), or run `perf script --no-demangle` where it works and give its output"
            ))
        })?;
    // stderr is drained by a thread, so a chatty perf never blocks on a full pipe.
    let stderr = child.stderr.take();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
        }
        text
    });
    let mut parser = PerfScriptParser::default();
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).split(b'\n') {
            let line = line.map_err(|e| failed(format!("reading `perf script` output: {e}")))?;
            parser.line(&String::from_utf8_lossy(&line));
        }
    }
    let status = child
        .wait()
        .map_err(|e| failed(format!("waiting for `perf script`: {e}")))?;
    let errors = errors.join().unwrap_or_default();
    let profile = parser.finish();
    if !status.success() || (profile.stacks.is_empty() && !errors.trim().is_empty()) {
        let last = errors.lines().rev().find(|l| !l.trim().is_empty());
        return Err(failed(format!(
            "`perf script` failed ({status}): {}",
            last.unwrap_or("no message").trim()
        )));
    }
    Ok(profile)
}

/// What kind of file a profile is, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFormat {
    /// pagewise's own text format.
    Pagewise,
    /// `perf script` text.
    PerfScript,
    /// A `perf.data` file (read through `perf script`).
    PerfData,
    /// A pprof protobuf, gzip-compressed or not.
    Pprof,
}

impl ProfileFormat {
    /// Recognises a profile from its bytes: gzip or other binary → pprof,
    /// `PERFILE2` → perf.data, pagewise's header → its format, other text →
    /// `perf script` output.
    pub fn detect(bytes: &[u8]) -> ProfileFormat {
        if bytes.starts_with(PERF_DATA_MAGIC) {
            ProfileFormat::PerfData
        } else if super::pprof::is_gzip(bytes) || std::str::from_utf8(bytes).is_err() {
            ProfileFormat::Pprof
        } else if bytes.starts_with(HEADER.as_bytes()) {
            ProfileFormat::Pagewise
        } else {
            ProfileFormat::PerfScript
        }
    }
}

/// A profile read from a file, with what is worth telling the user.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The stacks.
    pub profile: Profile,
    /// The file's format.
    pub format: ProfileFormat,
    /// Sentences about what was read differently than asked (e.g. pprof
    /// frames read by name because the file is not here).
    pub notes: Vec<String>,
}

/// Where the files a profile names are found here: the path itself when it
/// exists (a pprof profile's addresses need the file's program headers).
pub fn locate_as_named(object: &str) -> Option<std::path::PathBuf> {
    let path = Path::new(object);
    path.is_file().then(|| path.to_owned())
}

/// Reads a profile in any format pagewise knows ([`ProfileFormat`]);
/// `locate` finds the files a pprof profile names (see
/// [`super::pprof::Locate`]). Cost: the whole file in memory (a perf.data
/// is streamed through `perf script`).
pub fn read_profile(path: &Path, locate: super::pprof::Locate<'_>) -> Result<Loaded, ProfileError> {
    let shown = path.display().to_string();
    let bytes = user_files::read_input(path).map_err(|error| ProfileError::Read {
        path: shown.clone(),
        error,
    })?;
    let format = ProfileFormat::detect(&bytes);
    let (profile, notes) = match format {
        ProfileFormat::PerfData => (read_perf_data(path)?, Vec::new()),
        ProfileFormat::Pprof => {
            let decoded =
                super::pprof::decode(&bytes, locate).map_err(|reason| ProfileError::Decode {
                    path: shown.clone(),
                    reason,
                })?;
            (decoded.profile, decoded.notes)
        }
        ProfileFormat::Pagewise | ProfileFormat::PerfScript => {
            let text = String::from_utf8_lossy(&bytes);
            (Profile::parse(&text, &shown)?, Vec::new())
        }
    };
    if profile.stacks.is_empty() {
        return Err(ProfileError::Empty {
            path: shown,
            reason: "no samples in user code".into(),
        });
    }
    Ok(Loaded {
        profile,
        format,
        notes,
    })
}

/// A profile file and its weight in a merge: `FILE` or `FILE:WEIGHT`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileSource {
    /// The file.
    pub path: std::path::PathBuf,
    /// Its samples count this many times (1 by default).
    pub weight: f64,
}

impl ProfileSource {
    /// Parses `FILE` or `FILE:WEIGHT` (a positive number). An argument that
    /// names an existing file is that file, even with a colon in its name.
    pub fn parse(arg: &str) -> Result<ProfileSource, String> {
        let whole = ProfileSource {
            path: arg.into(),
            weight: 1.0,
        };
        if Path::new(arg).exists() {
            return Ok(whole);
        }
        match arg.rsplit_once(':') {
            Some((path, weight)) if !path.is_empty() => match weight.parse::<f64>() {
                Ok(w) if w.is_finite() && w > 0.0 => Ok(ProfileSource {
                    path: path.into(),
                    weight: w,
                }),
                _ => Err(format!(
                    "{arg}: the weight after ':' must be a positive number"
                )),
            },
            _ => Ok(whole),
        }
    }
}

impl Profile {
    /// Multiplies every stack's weight by `factor`, rounding; stacks that
    /// round to 0 are dropped. When a weight or the total would pass
    /// 2^64 − 1 (or `factor` is NaN) nothing changes. One pass over the stacks.
    pub fn scale(&mut self, factor: f64) -> Result<(), CountOverflow> {
        // 2^64, exactly representable: a product at or above it does not fit.
        const LIMIT: f64 = 18_446_744_073_709_551_616.0;
        if factor == 1.0 {
            // Exact, also for counts above 2^53 that a product would round.
            return Ok(());
        }
        let mut total = 0u64;
        let mut scaled = Vec::with_capacity(self.stacks.len());
        for (w, _) in &self.stacks {
            let x = (*w as f64 * factor).round();
            if x.is_nan() || x >= LIMIT {
                return Err(CountOverflow);
            }
            let x = x.max(0.0) as u64;
            total = total.checked_add(x).ok_or(CountOverflow)?;
            scaled.push(x);
        }
        for ((w, _), x) in self.stacks.iter_mut().zip(scaled) {
            *w = x;
        }
        self.stacks.retain(|(w, _)| *w > 0);
        Ok(())
    }
}

/// Reads and merges profiles, each weighted: with `normalize`, each is first
/// scaled to the same total (the largest one's), so a host that sampled
/// longer does not count more than its weight says. Notes name the file
/// they are about. Weights that would make the counts add up to more than
/// 2^64 − 1 are an error ([`ProfileError::TooManySamples`]), never a
/// clamped count.
pub fn merge_sources(
    sources: &[ProfileSource],
    normalize: bool,
    locate: super::pprof::Locate<'_>,
) -> Result<(Profile, Vec<String>), ProfileError> {
    let mut loaded = Vec::new();
    let mut notes = Vec::new();
    for source in sources {
        let l = read_profile(&source.path, locate)?;
        notes.extend(
            l.notes
                .iter()
                .map(|n| format!("{}: {n}", source.path.display())),
        );
        loaded.push((l.profile, source));
    }
    let largest = loaded.iter().map(|(p, _)| p.total()).max().unwrap_or(0);
    let mut merged = Profile::default();
    for (mut profile, source) in loaded {
        let total = profile.total();
        let factor = if normalize {
            source.weight * largest as f64 / total.max(1) as f64
        } else {
            source.weight
        };
        let too_many = |how: &str| ProfileError::TooManySamples {
            path: format!(
                "{} (weight {})",
                source.path.display(),
                short(source.weight)
            ),
            reason: format!("{how} make more than 2^64 - 1; use smaller weights"),
        };
        profile.scale(factor).map_err(|_| {
            too_many(&match normalize {
                true => format!("its {total} samples, normalized to {largest} and weighted,"),
                false => format!("its {total} samples, weighted,"),
            })
        })?;
        merged
            .merge(profile)
            .map_err(|_| too_many("with the profiles before it, the weighted samples"))?;
    }
    Ok((merged, notes))
}

/// A weight as a user would type it: `3`, `0.5`, `4e18`.
fn short(weight: f64) -> String {
    let plain = weight.to_string();
    if plain.len() > 12 {
        format!("{weight:e}")
    } else {
        plain
    }
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

    #[test]
    fn perf_script_without_call_chains() {
        let text = "             big 12643  9133.969603: cpu-clock:            40113a main+0x3a (/tmp/bw/big)\n\
                    \x20            big 12643  9133.969804: cpu-clock:  ffffffff821e5ac9 xas_load+0x39 ([kernel.kallsyms])\n\
                    \x20            big 12643  9133.970003: cpu-clock:            7014c0 hot_function+0x0 (/tmp/bw/big)\n";
        let p = Profile::parse(text, "n.txt").unwrap();
        assert_eq!(p.event, "cpu-clock");
        assert_eq!(p.total(), 2);
        let names: Vec<&str> = p
            .stacks
            .iter()
            .map(|(_, s)| match &s[0] {
                Location::Symbol { name, .. } => name.as_str(),
                _ => "",
            })
            .collect();
        assert!(names.contains(&"hot_function") && names.contains(&"main"));
    }

    #[test]
    fn formats_are_told_apart_by_their_first_bytes() {
        assert_eq!(
            ProfileFormat::detect(b"PERFILE2\x00\x01"),
            ProfileFormat::PerfData
        );
        assert_eq!(
            ProfileFormat::detect(&[0x1f, 0x8b, 8, 0]),
            ProfileFormat::Pprof
        );
        assert_eq!(
            ProfileFormat::detect(&[0x0a, 0xff, 0xfe]),
            ProfileFormat::Pprof
        );
        assert_eq!(
            ProfileFormat::detect(OWN.as_bytes()),
            ProfileFormat::Pagewise
        );
        assert_eq!(
            ProfileFormat::detect(b"app 1 [000] 1.0: x"),
            ProfileFormat::PerfScript
        );
    }

    #[test]
    fn sources_take_an_optional_weight() {
        assert_eq!(
            ProfileSource::parse("a.pb.gz:2").unwrap(),
            ProfileSource {
                path: "a.pb.gz".into(),
                weight: 2.0
            }
        );
        assert_eq!(ProfileSource::parse("b.data").unwrap().weight, 1.0);
        assert_eq!(ProfileSource::parse("c:0.5").unwrap().weight, 0.5);
        assert!(ProfileSource::parse("a:0").is_err());
        assert!(ProfileSource::parse("a:-1").is_err());
        assert!(ProfileSource::parse("a:x").is_err());
        // An existing file with a colon in its name is that file.
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("host:2");
        std::fs::write(&odd, OWN).unwrap();
        let s = ProfileSource::parse(odd.to_str().unwrap()).unwrap();
        assert_eq!((s.path, s.weight), (odd, 1.0));
    }

    #[test]
    fn weighted_and_normalized_merges() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.profile");
        let b = dir.path().join("b.profile");
        // a: 6 samples of one stack; b: 60 samples of another.
        std::fs::write(
            &a,
            "# pagewise-profile 1\nobject 0 /bin/app\nstack 6 0:10\n",
        )
        .unwrap();
        std::fs::write(
            &b,
            "# pagewise-profile 1\nobject 0 /bin/app\nstack 60 0:20\n",
        )
        .unwrap();
        let src = |p: &Path, weight| ProfileSource {
            path: p.to_owned(),
            weight,
        };
        let weight_of = |p: &Profile, vaddr| {
            p.stacks
                .iter()
                .find(|(_, s)| {
                    s[0] == Location::Address {
                        object: "/bin/app".into(),
                        vaddr,
                    }
                })
                .map_or(0, |(w, _)| *w)
        };
        let (p, notes) = merge_sources(&[src(&a, 2.0), src(&b, 1.0)], false, &|_| None).unwrap();
        assert!(notes.is_empty());
        assert_eq!((weight_of(&p, 0x10), weight_of(&p, 0x20)), (12, 60));
        // Normalized: both count as 60 before their weights.
        let (p, _) = merge_sources(&[src(&a, 2.0), src(&b, 1.0)], true, &|_| None).unwrap();
        assert_eq!((weight_of(&p, 0x10), weight_of(&p, 0x20)), (120, 60));
        let missing = merge_sources(&[src(&dir.path().join("none"), 1.0)], false, &|_| None);
        assert!(matches!(missing, Err(ProfileError::Read { .. })));
    }

    /// Weights whose products pass 2^64 − 1, with or without normalizing:
    /// a one-line error naming the file and its weight, not a clamped count
    /// (which pagewise's own reader would then refuse).
    #[test]
    fn weights_that_pass_two_to_the_64_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p");
        std::fs::write(
            &p,
            "# pagewise-profile 1\nobject 0 /bin/app\nstack 3 0:10\nstack 2 0:20\n",
        )
        .unwrap();
        let src = |weight| ProfileSource {
            path: p.clone(),
            weight,
        };
        for normalize in [false, true] {
            // One fits: 5 samples × 3e18 = 1.5e19 < 2^64 ≈ 1.8e19; two do not.
            let (one, _) = merge_sources(&[src(3e18)], normalize, &|_| None).unwrap();
            assert_eq!(one.total(), 15_000_000_000_000_000_000);
            let two = merge_sources(&[src(3e18), src(3e18)], normalize, &|_| None);
            let Err(e @ ProfileError::TooManySamples { .. }) = two else {
                panic!("{two:?}");
            };
            let e = e.to_string();
            assert!(
                e.contains("p (weight 3e18): with the profiles before it"),
                "{e}"
            );
            assert!(!e.contains('\n'), "{e}");
            let huge = merge_sources(&[src(1e308)], normalize, &|_| None).unwrap_err();
            assert!(huge.to_string().contains("its 5 samples"), "{huge}");
        }
    }

    #[test]
    fn binary_garbage_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.pb");
        std::fs::write(&path, [0xffu8, 0x00, 0x13, 0x99]).unwrap();
        assert!(matches!(
            read_profile(&path, &|_| None),
            Err(ProfileError::Decode { .. })
        ));
    }

    /// Files that start like a perf.data file and are not one go to
    /// `perf script`, which fails (or is missing): an error, not a panic or
    /// an empty profile. Few cases: each starts a process.
    #[test]
    fn damaged_perf_data_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf.data");
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 12,
            ..ProptestConfig::default()
        });
        runner
            .run(&proptest::collection::vec(any::<u8>(), 0..200), |tail| {
                let mut bytes = PERF_DATA_MAGIC.to_vec();
                bytes.extend(tail);
                std::fs::write(&path, &bytes).unwrap();
                match read_profile(&path, &|_| None) {
                    Err(ProfileError::Decode { reason, .. }) => {
                        prop_assert!(reason.contains("perf script"), "{reason}")
                    }
                    other => prop_assert!(false, "{other:?}"),
                }
                Ok(())
            })
            .unwrap();
    }

    proptest! {
        #[test]
        fn format_detection_and_reading_garbage_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("p");
            std::fs::write(&path, &bytes).unwrap();
            // perf.data garbage goes to `perf script`, which must fail cleanly too.
            let _ = read_profile(&path, &|_| None);
        }

        /// `FILE:WEIGHT` arguments of any text: a source with a positive,
        /// finite weight or a one-line error, never a panic.
        #[test]
        fn source_arguments_of_any_text(arg in "\\PC{0,30}|[a-z/]{1,8}:[-+0-9.eE]{0,8}|x:(inf|NaN|1e999|-0|0)") {
            match ProfileSource::parse(&arg) {
                Ok(source) => prop_assert!(source.weight.is_finite() && source.weight > 0.0, "{source:?}"),
                Err(e) => prop_assert!(!e.contains('\n') && e.contains("weight"), "{e}"),
            }
        }

        /// Weighting scales sample counts exactly (as rounded products) and
        /// drops those that round to 0, or refuses and changes nothing when a
        /// count or the total would pass 2^64 − 1; merging adds exactly or
        /// refuses the same way. Whatever is kept writes out and reads back
        /// unchanged: no profile pagewise makes is one it cannot read.
        #[test]
        fn weights_and_merges_are_exact_or_refused(
            counts in proptest::collection::vec(prop_oneof![1u64..1000, 1u64 << 60..1 << 62, u64::MAX - 3..=u64::MAX], 1..6),
            factor in prop_oneof![1e-30f64..1.0, 1.0f64..1e30, Just(f64::MAX), Just(1.0), Just(4e18)],
        ) {
            // As read, a profile holds at most 2^64 − 1 samples.
            let mut sum = 0u64;
            let counts: Vec<u64> = counts.into_iter().map_while(|w| {
                sum = sum.checked_add(w)?;
                Some(w)
            }).collect();
            let mut p = Profile {
                event: "cpu-clock".into(),
                stacks: counts.iter().enumerate().map(|(i, &w)| (w, vec![Location::Unknown(i as u64)])).collect(),
            };
            let before = p.clone();
            let products: Vec<f64> = counts.iter().map(|&w| (w as f64 * factor).round()).collect();
            match p.scale(factor) {
                // Exact: nothing is rounded.
                Ok(()) if factor == 1.0 => prop_assert_eq!(&p, &before),
                Ok(()) => {
                    prop_assert!(products.iter().all(|&x| x < 18_446_744_073_709_551_616.0));
                    let kept: Vec<u64> = products.iter().map(|&x| x as u64).filter(|&x| x > 0).collect();
                    let got: Vec<u64> = p.stacks.iter().map(|(w, _)| *w).collect();
                    prop_assert_eq!(got, kept);
                    prop_assert!(p.checked_total().is_some());
                }
                Err(CountOverflow) => {
                    let exact: f64 = products.iter().sum();
                    prop_assert!(factor != 1.0 && exact >= 18_446_744_073_709_551_615.0, "{exact}");
                    prop_assert_eq!(&p, &before);
                }
            }
            let sum = u128::from(p.total()) * 2;
            let mut merged = p.clone();
            match merged.merge(p.clone()) {
                Ok(()) => prop_assert_eq!(u128::from(merged.total()), sum),
                Err(CountOverflow) => {
                    prop_assert!(sum > u128::from(u64::MAX));
                    prop_assert_eq!(&merged, &p);
                }
            }
            for kept in [p, merged] {
                if !kept.stacks.is_empty() {
                    let back = Profile::parse(&kept.to_text(), "back")
                        .map_err(|e| TestCaseError::fail(format!("written, then refused: {e}")))?;
                    let mut kept = kept;
                    kept.normalize();
                    prop_assert_eq!(back, kept);
                }
            }
        }

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
