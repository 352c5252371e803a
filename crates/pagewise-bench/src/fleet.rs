//! Real-world size distributions of `memcpy` and `memset` calls, and sampling
//! from them.
//!
//! The file format (`memcpy-fleet-distribution.csv`,
//! `memset-fleet-distribution.csv`) has three lines, each a comma-separated
//! list of `value:probability` entries:
//!
//! 1. sizes in bytes;
//! 2. overlap (1: source and destination overlap, as in `memmove`);
//! 3. alignments in bytes (powers of two; 64 means "at least 64").
//!
//! Probabilities need not sum to exactly 1; each line is normalised. Blank
//! entries (a trailing comma) and `\r\n` line ends are accepted; anything else
//! unexpected is a [`FleetError`] naming the line and entry.
//!
//! The fleet's own distributions are compiled in ([`MEMCPY`], [`MEMSET`]):
//! they are Fleetbench's (Apache License 2.0; source and licence in this
//! crate's `data/NOTICE.md`), so a benchmark run reads nothing outside the
//! binary unless it is given another file.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// A distribution compiled into this crate from its `data/` folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    /// The file name in `data/`.
    pub name: &'static str,
    /// Where it comes from and under which licence, for reports.
    pub source: &'static str,
    /// The file's text.
    pub text: &'static str,
}

impl Builtin {
    /// How reports name it: `built in: NAME (SOURCE)`.
    pub fn label(&self) -> String {
        format!("built in: {} ({})", self.name, self.source)
    }
}

const FLEETBENCH: &str = "google/fleetbench, Apache-2.0";

/// Sizes, overlap and alignments of `memcpy` calls across Google's fleet,
/// from Fleetbench.
pub const MEMCPY: Builtin = Builtin {
    name: "memcpy-fleet-distribution.csv",
    source: FLEETBENCH,
    text: include_str!("../data/memcpy-fleet-distribution.csv"),
};

/// Sizes and alignments of `memset` calls across Google's fleet, from
/// Fleetbench.
pub const MEMSET: Builtin = Builtin {
    name: "memset-fleet-distribution.csv",
    source: FLEETBENCH,
    text: include_str!("../data/memset-fleet-distribution.csv"),
};

/// Largest size accepted in a distribution (the benchmark allocates buffers
/// for the largest one).
pub const MAX_FLEET_SIZE: u64 = 64 << 20;
/// Largest alignment accepted.
pub const MAX_FLEET_ALIGNMENT: u64 = 4096;

/// What went wrong reading a distribution file.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The file could not be read.
    #[error(
        "cannot read fleet distribution {path}: {error} (pass another file with --fleet-file)"
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// A required line is missing or empty.
    #[error("fleet distribution line {line} ({what}) is missing or empty")]
    MissingLine {
        /// 1-based line number.
        line: usize,
        /// What the line should hold.
        what: &'static str,
    },
    /// An entry is not `value:probability`.
    #[error("fleet distribution line {line}, entry {entry}: {text:?} is not value:probability ({reason})")]
    BadEntry {
        /// 1-based line number.
        line: usize,
        /// 1-based entry number within the line.
        entry: usize,
        /// The entry as written.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A value is out of the accepted range.
    #[error("fleet distribution line {line}, entry {entry}: {value} {reason}")]
    BadValue {
        /// 1-based line number.
        line: usize,
        /// 1-based entry number.
        entry: usize,
        /// The value.
        value: u64,
        /// Why it is refused.
        reason: String,
    },
    /// All probabilities on a line are zero.
    #[error("fleet distribution line {line} ({what}) has no positive probability")]
    ZeroTotal {
        /// 1-based line number.
        line: usize,
        /// What the line holds.
        what: &'static str,
    },
    /// More than three non-blank lines.
    #[error("fleet distribution has an unexpected line {line}: the format has three lines (sizes, overlap, alignments)")]
    ExtraLine {
        /// 1-based line number.
        line: usize,
    },
}

/// One discrete distribution: values with probabilities that sum to 1.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distribution {
    /// `(value, probability)`, in file order, normalised.
    pub entries: Vec<(u64, f64)>,
}

impl Distribution {
    /// The expected value.
    pub fn mean(&self) -> f64 {
        self.entries.iter().map(|&(v, p)| v as f64 * p).sum()
    }

    /// The largest value with a positive probability.
    pub fn max(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.1 > 0.0)
            .map(|e| e.0)
            .max()
            .unwrap_or(0)
    }

    /// The probability of `value`.
    pub fn probability(&self, value: u64) -> f64 {
        self.entries
            .iter()
            .filter(|e| e.0 == value)
            .map(|e| e.1)
            .sum()
    }

    /// A sampler (cumulative table; each draw is a binary search).
    pub fn sampler(&self) -> Sampler<'_> {
        let mut total = 0.0;
        let cumulative = self
            .entries
            .iter()
            .map(|&(_, p)| {
                total += p;
                total
            })
            .collect();
        Sampler {
            dist: self,
            cumulative,
        }
    }
}

/// Draws values from a [`Distribution`].
#[derive(Debug, Clone)]
pub struct Sampler<'a> {
    dist: &'a Distribution,
    cumulative: Vec<f64>,
}

impl Sampler<'_> {
    /// The value whose cumulative interval holds `u` (in `[0, 1)`).
    pub fn at(&self, u: f64) -> u64 {
        let total = self.cumulative.last().copied().unwrap_or(1.0);
        let target = u * total;
        let i = self.cumulative.partition_point(|&c| c <= target);
        let i = i.min(self.dist.entries.len() - 1);
        self.dist.entries[i].0
    }

    /// A random value.
    pub fn draw(&self, rng: &mut SplitMix64) -> u64 {
        self.at(rng.next_f64())
    }
}

/// A small deterministic generator (SplitMix64). Written out here rather than
/// taken from `rand` so that a seed gives the same call sequence on every
/// version and machine: benchmark inputs must be reproducible.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An integer in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// A fleet distribution file: sizes, overlap and alignments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetDistribution {
    /// Call sizes in bytes.
    pub sizes: Distribution,
    /// 0: no overlap; 1: source and destination overlap (`memmove`).
    pub overlap: Distribution,
    /// Pointer alignments in bytes.
    pub alignments: Distribution,
}

const LINES: [&str; 3] = ["sizes", "overlap", "alignments"];

impl FleetDistribution {
    /// Reads and parses a file (a regular file: anything else is refused
    /// without blocking).
    pub fn load(path: &Path) -> Result<FleetDistribution, FleetError> {
        let text = pagewise::host::user_files::read_input_to_string(path).map_err(|error| {
            FleetError::Io {
                path: path.to_owned(),
                error,
            }
        })?;
        FleetDistribution::parse(&text)
    }

    /// Parses a compiled-in distribution (a test checks that each parses).
    pub fn builtin(which: &Builtin) -> Result<FleetDistribution, FleetError> {
        FleetDistribution::parse(which.text)
    }

    /// Parses the three-line text format (see the module documentation).
    pub fn parse(text: &str) -> Result<FleetDistribution, FleetError> {
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        if let Some(extra) = lines.iter().skip(3).position(|l| !l.is_empty()) {
            return Err(FleetError::ExtraLine { line: extra + 4 });
        }
        let mut parsed = Vec::with_capacity(3);
        for (i, what) in LINES.iter().enumerate() {
            let line = lines.get(i).copied().unwrap_or("");
            parsed.push(parse_line(line, i + 1, what)?);
        }
        let alignments = parsed.pop().expect("three lines");
        let overlap = parsed.pop().expect("three lines");
        let sizes = parsed.pop().expect("three lines");
        for (k, &(v, _)) in sizes.entries.iter().enumerate() {
            if v > MAX_FLEET_SIZE {
                return Err(FleetError::BadValue {
                    line: 1,
                    entry: k + 1,
                    value: v,
                    reason: format!(
                        "bytes is larger than the {} MiB this benchmark accepts",
                        MAX_FLEET_SIZE >> 20
                    ),
                });
            }
        }
        for (k, &(v, _)) in overlap.entries.iter().enumerate() {
            if v > 1 {
                return Err(FleetError::BadValue {
                    line: 2,
                    entry: k + 1,
                    value: v,
                    reason: "is not 0 or 1".into(),
                });
            }
        }
        for (k, &(v, _)) in alignments.entries.iter().enumerate() {
            if !v.is_power_of_two() || v > MAX_FLEET_ALIGNMENT {
                return Err(FleetError::BadValue {
                    line: 3,
                    entry: k + 1,
                    value: v,
                    reason: format!(
                        "is not a power of two up to {MAX_FLEET_ALIGNMENT} (an alignment)"
                    ),
                });
            }
        }
        Ok(FleetDistribution {
            sizes,
            overlap,
            alignments,
        })
    }
}

fn parse_line(line: &str, number: usize, what: &'static str) -> Result<Distribution, FleetError> {
    if line.is_empty() {
        return Err(FleetError::MissingLine { line: number, what });
    }
    let mut entries = Vec::new();
    for (k, raw) in line.split(',').enumerate() {
        let text = raw.trim();
        if text.is_empty() {
            continue;
        }
        let bad = |reason| FleetError::BadEntry {
            line: number,
            entry: k + 1,
            text: text.to_owned(),
            reason,
        };
        let (value, probability) = text.split_once(':').ok_or_else(|| bad("no ':'"))?;
        let value: u64 = value
            .trim()
            .parse()
            .map_err(|_| bad("the value is not a non-negative integer"))?;
        let probability: f64 = probability
            .trim()
            .parse()
            .map_err(|_| bad("the probability is not a number"))?;
        if !probability.is_finite() || probability < 0.0 {
            return Err(bad("the probability is negative or not finite"));
        }
        entries.push((value, probability));
    }
    if entries.is_empty() {
        return Err(FleetError::MissingLine { line: number, what });
    }
    let total: f64 = entries.iter().map(|e| e.1).sum();
    if !(total > 0.0 && total.is_finite()) {
        return Err(FleetError::ZeroTotal { line: number, what });
    }
    for e in &mut entries {
        e.1 /= total;
    }
    Ok(Distribution { entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLE: &str = "0:0.5,8:0.25,100:0.25\n0:1\n1:0.5,64:0.5\n";

    #[test]
    fn parses_the_three_lines() {
        let d = FleetDistribution::parse(SAMPLE).unwrap();
        assert_eq!(d.sizes.entries, vec![(0, 0.5), (8, 0.25), (100, 0.25)]);
        assert_eq!(d.sizes.mean(), 27.0);
        assert_eq!(d.sizes.max(), 100);
        assert_eq!(d.overlap.probability(1), 0.0);
        assert_eq!(d.alignments.probability(64), 0.5);
    }

    #[test]
    fn normalises_and_tolerates_crlf_and_trailing_commas() {
        let d = FleetDistribution::parse("4:2,8:2,\r\n0:3\r\n8:1,\r\n\r\n").unwrap();
        assert_eq!(d.sizes.entries, vec![(4, 0.5), (8, 0.5)]);
        assert_eq!(d.overlap.entries, vec![(0, 1.0)]);
    }

    #[test]
    fn reports_what_is_wrong_and_where() {
        let err = |t: &str| FleetDistribution::parse(t).unwrap_err().to_string();
        assert!(err("").contains("line 1 (sizes) is missing"));
        assert!(err("1:1\n").contains("line 2 (overlap)"));
        assert!(err("1:1,x:2\n0:1\n1:1").contains("line 1, entry 2"));
        assert!(err("1:1,2\n0:1\n1:1").contains("no ':'"));
        assert!(err("1:-1\n0:1\n1:1").contains("negative"));
        assert!(err("1:nan\n0:1\n1:1").contains("not finite"));
        assert!(err("1:0\n0:1\n1:1").contains("no positive probability"));
        assert!(err("1:1\n2:1\n1:1").contains("not 0 or 1"));
        assert!(err("1:1\n0:1\n3:1").contains("power of two"));
        assert!(err("1:1\n0:1\n8192:1").contains("power of two"));
        assert!(err("99999999999:1\n0:1\n1:1").contains("larger than"));
        assert!(err("1:1\n0:1\n1:1\n1:1").contains("unexpected line 4"));
    }

    #[test]
    fn the_builtin_distributions_parse() {
        for which in [MEMCPY, MEMSET] {
            let d = FleetDistribution::builtin(&which).unwrap();
            assert!(d.sizes.entries.len() > 100, "{}", which.name);
            assert!(d.sizes.mean() > 1.0, "{}", which.name);
            assert!(d.alignments.max().is_power_of_two(), "{}", which.name);
            assert!(which.label().contains("Apache-2.0"));
        }
    }

    #[test]
    fn missing_file_says_which() {
        let e = FleetDistribution::load(Path::new("/nonexistent/fleet.csv")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/fleet.csv"));
    }

    #[test]
    fn sampler_follows_the_probabilities() {
        let d = FleetDistribution::parse(SAMPLE).unwrap();
        let s = d.sizes.sampler();
        assert_eq!(s.at(0.0), 0);
        assert_eq!(s.at(0.49), 0);
        assert_eq!(s.at(0.5), 8);
        assert_eq!(s.at(0.8), 100);
        assert_eq!(s.at(0.999_999), 100);
        let mut rng = SplitMix64::new(1);
        let n = 100_000;
        let zeros = (0..n).filter(|_| s.draw(&mut rng) == 0).count();
        assert!((zeros as f64 / n as f64 - 0.5).abs() < 0.01, "{zeros}");
    }

    #[test]
    fn generator_is_reproducible_and_bounded() {
        let a: Vec<u64> = {
            let mut r = SplitMix64::new(7);
            (0..5).map(|_| r.next_u64()).collect()
        };
        let mut r = SplitMix64::new(7);
        assert_eq!(a, (0..5).map(|_| r.next_u64()).collect::<Vec<_>>());
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.next_f64())));
    }

    fn entries(max_value: u64) -> impl Strategy<Value = Vec<(u64, u32)>> {
        prop::collection::vec((0..=max_value, 1u32..1_000_000), 1..40)
    }

    proptest! {
        /// Whatever is written in the format parses back to the same values
        /// with normalised probabilities.
        #[test]
        fn round_trips(
            sizes in entries(MAX_FLEET_SIZE),
            overlap in entries(1),
            aligns in prop::collection::vec((0u32..=12, 1u32..1000), 1..8),
        ) {
            let line = |e: &[(u64, u32)]| e.iter().map(|(v, p)| format!("{v}:{p}")).collect::<Vec<_>>().join(",");
            let aligns: Vec<(u64, u32)> = aligns.iter().map(|&(s, p)| (1u64 << s, p)).collect();
            let text = format!("{}\n{}\n{}\n", line(&sizes), line(&overlap), line(&aligns));
            let d = FleetDistribution::parse(&text).unwrap();
            prop_assert_eq!(d.sizes.entries.len(), sizes.len());
            let total: f64 = d.sizes.entries.iter().map(|e| e.1).sum();
            prop_assert!((total - 1.0).abs() < 1e-9);
            for (got, want) in d.sizes.entries.iter().zip(&sizes) {
                prop_assert_eq!(got.0, want.0);
            }
            let s = d.alignments.sampler();
            for u in [0.0, 0.25, 0.5, 0.75, 0.999] {
                prop_assert!(s.at(u).is_power_of_two());
            }
        }

        /// Arbitrary text never panics the parser: it parses or says why not.
        #[test]
        fn never_panics(text in "[0-9:,.\\-eE\\n a-z]{0,200}") {
            let _ = FleetDistribution::parse(&text);
        }
    }
}
