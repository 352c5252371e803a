//! `pagewise bench memcpy` and `pagewise bench memset`: [`pagewise::copy`]
//! against glibc's `memcpy` and `memset`, measured in the same run and
//! interleaved trial by trial (the order of the two flips every trial).
//!
//! Rows:
//!
//! - **hot**: one buffer copied (or filled) again and again, sized to stay in
//!   L1, L2 or the last-level cache (its footprint, source plus destination,
//!   is at most 3/4 of L1 or L2, or 1/3 of the LLC); aligned (both pointers
//!   64-byte aligned) and misaligned ([`MISALIGNED_COPY`], [`MISALIGNED_FILL`]).
//!   Each trial of each side keeps the fastest of [`RUNS_PER_TRIAL`] short
//!   runs, interleaved with the other side's;
//! - **cold**: calls rotate through buffers several times larger than the
//!   LLC, each call 64 KiB or more past the previous one, so that every call
//!   starts from memory;
//! - **fleet**: sizes and alignments drawn from a real distribution of calls
//!   (see [`crate::fleet`]) at random offsets in a region that fits in L2; the
//!   result is in ns per call (each trial the fastest of [`RUNS_PER_TRIAL`]
//!   runs as well).
//!
//! Both sides are called through `#[inline(never)]` wrappers on slices (and a
//! fill byte) hidden from the optimiser with `std::hint::black_box`, so the
//! compiler can neither inline glibc's routine, nor specialise pagewise's for
//! the benchmark, nor drop or hoist calls. Every row is checked for correct
//! output once, outside the timing.
//!
//! With [`Options::c_library`], every single-threaded row and the fleet row
//! get a third side: `pw_copy` (`pw_fill`) of that `libpagewise.so`, loaded
//! with `dlopen` and called in the same timed loop through a wrapper that
//! calls the `dlsym` pointer (as glibc's side is a wrapper that calls
//! through the GOT), interleaved with the other two. That is the in-process
//! A/B of pagewise's C entry point against `copy` (`fill`) on the same
//! buffers.

use crate::fleet::{FleetDistribution, SplitMix64};
use crate::{paired, Machine, Progress, Summary};
use pagewise::copy::tune::{cold_block_starts, TimingBuffers};
use pagewise::copy::Plan;
use pagewise::copy::Routine;
use pagewise::os::copy::{glibc_memcpy, glibc_memset};
use pagewise::os::dl::{CCopy, CFill, DlError, Library};
use pagewise::os::SysError;
use pagewise::units::format_bytes_exact;
use serde::Serialize;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// JSON schema of a `pagewise bench memcpy` report.
pub const MEMCPY_SCHEMA: &str = "pagewise.bench.memcpy/1";
/// JSON schema of a `pagewise bench memset` report.
pub const MEMSET_SCHEMA: &str = "pagewise.bench.memset/1";

/// `(source, destination)` offsets from 4 KiB-aligned bases of the
/// misaligned memcpy rows: the destination just behind the source, then just
/// ahead of it (which `rep movsb` handles badly; see `docs/copy.md`). Cold rows
/// use the first only.
pub const MISALIGNED_COPY: [(usize, usize); 2] = [(7, 1), (1, 7)];
/// Destination offset of the misaligned memset rows.
pub const MISALIGNED_FILL: usize = 1;

/// Bytes each hot run moves (so that small sizes make many calls).
const HOT_TRIAL_BYTES: usize = 96 << 20;
/// Hot trials make at least this many calls' worth of bytes per call size
/// (sizes below it are counted as this, which keeps tiny sizes to ~1 ms).
const HOT_MIN_CALL_BYTES: usize = 1 << 10;
/// A hot or fleet trial of each side is the fastest of this many back-to-back
/// runs, interleaved with the other side's: a run that the scheduler
/// interrupted (other processes on a shared machine) does not count.
pub const RUNS_PER_TRIAL: usize = 3;
/// Bytes each cold trial moves at most (sizes above it make one call).
const COLD_TRIAL_BYTES: usize = 256 << 20;
/// Room around every block for offsets.
const SLACK: usize = 4096;
/// The byte `memset` writes.
const FILL_BYTE: u8 = 0x5a;

/// Which routine is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// `copy` against `memcpy`.
    Memcpy,
    /// `fill` against `memset`.
    Memset,
}

impl Op {
    /// `memcpy` or `memset`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Memcpy => "memcpy",
            Op::Memset => "memset",
        }
    }

    /// The fleet distribution compiled in for this routine.
    pub fn builtin_fleet(self) -> crate::fleet::Builtin {
        match self {
            Op::Memcpy => crate::fleet::MEMCPY,
            Op::Memset => crate::fleet::MEMSET,
        }
    }

    /// The JSON schema of this experiment's report.
    pub fn schema(self) -> &'static str {
        match self {
            Op::Memcpy => MEMCPY_SCHEMA,
            Op::Memset => MEMSET_SCHEMA,
        }
    }

    /// Bytes of cache one call of `n` bytes occupies (source and destination).
    fn footprint(self, n: usize) -> usize {
        match self {
            Op::Memcpy => 2 * n,
            Op::Memset => n,
        }
    }
}

/// Where a row's buffers live while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Residency {
    /// Fits in the L1 data cache, reused every call.
    L1,
    /// Fits in L2, reused every call.
    L2,
    /// Fits in the last-level cache, reused every call.
    Llc,
    /// Rotates through memory much larger than the LLC.
    Cold,
}

impl Residency {
    /// `L1`, `L2`, `LLC` or `cold`.
    pub fn label(self) -> &'static str {
        match self {
            Residency::L1 => "L1",
            Residency::L2 => "L2",
            Residency::Llc => "LLC",
            Residency::Cold => "cold",
        }
    }

    /// Whether the buffers are reused (hot) rather than rotated.
    pub fn is_hot(self) -> bool {
        self != Residency::Cold
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Trials per row (at least 1).
    pub trials: u32,
    /// Fixed sizes in bytes (0 is ignored).
    pub sizes: Vec<usize>,
    /// Hot rows (buffers that stay in a cache).
    pub hot: bool,
    /// Cold rows (buffers rotated through memory).
    pub cold: bool,
    /// Misaligned rows next to the aligned ones.
    pub misaligned: bool,
    /// The fleet distribution, if the fleet row is wanted.
    pub fleet: Option<FleetDistribution>,
    /// Where the distribution came from (reported as is): a file name, or
    /// [`crate::fleet::Builtin::label`].
    pub fleet_file: Option<String>,
    /// Calls per fleet trial.
    pub fleet_calls: usize,
    /// Ask for transparent huge pages on the buffers (both sides use the same
    /// buffers either way).
    pub huge_pages: bool,
    /// Seed of the fleet call sequence.
    pub seed: u64,
    /// When above 1: every cold size from [`pagewise::copy::PARALLEL_MIN`] also
    /// gets a row where pagewise's side is `copy_parallel` / `fill_parallel`
    /// on this many threads (glibc's side stays single-threaded).
    pub parallel: usize,
    /// A `libpagewise.so` whose `pw_copy` (`pw_fill`) runs as a third side
    /// of every single-threaded row and of the fleet row.
    pub c_library: Option<std::path::PathBuf>,
}

impl Options {
    /// Powers of two from 8 B to 1 GiB, and some sizes that are not.
    pub fn default_sizes() -> Vec<usize> {
        let mut sizes: Vec<usize> = (3..=30).map(|s| 1usize << s).collect();
        sizes.extend([
            13, 33, 100, 255, 1000, 3000, 10_000, 100_000, 1_000_000, 10_000_000,
        ]);
        sizes.sort_unstable();
        sizes
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            trials: 5,
            sizes: Options::default_sizes(),
            hot: true,
            cold: true,
            misaligned: true,
            fleet: None,
            fleet_file: None,
            fleet_calls: 100_000,
            huge_pages: true,
            seed: 0x5eed,
            parallel: 1,
            c_library: None,
        }
    }
}

/// One fixed-size row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// For example `4 KiB L1 aligned`.
    pub name: String,
    /// Bytes per call.
    pub bytes: usize,
    /// Where the buffers live.
    pub residency: Residency,
    /// Source offset from a 4 KiB boundary (0 for memset).
    pub src_offset: usize,
    /// Destination offset from a 4 KiB boundary.
    pub dst_offset: usize,
    /// Threads on pagewise's side (1: `copy`/`fill`; more: `copy_parallel`
    /// / `fill_parallel`); glibc's side is always one thread.
    pub threads: usize,
    /// Calls per trial.
    pub calls: u64,
    /// pagewise, median GB/s (10^9 bytes per second).
    pub gbps: f64,
    /// glibc, median GB/s.
    pub glibc_gbps: f64,
    /// pagewise over glibc, the median over the trials of each trial's own
    /// ratio (its two sides' runs alternate, so a slow spell of a shared
    /// machine slows both): above 1, pagewise is faster.
    pub ratio: f64,
    /// Each trial's ratio, pagewise GB/s over glibc's: median (as `ratio`),
    /// min and max.
    pub ratios: Summary,
    /// pagewise GB/s over the trials.
    pub pagewise: Summary,
    /// glibc GB/s over the trials.
    pub glibc: Summary,
    /// With a C library: `pw_copy` (`pw_fill`) through it, median GB/s
    /// (`null` without one, and on the rows of `--parallel`).
    pub c_entry_gbps: Option<f64>,
    /// The C entry point's GB/s over pagewise's, the median of each trial's
    /// ratio (as `ratio`): below 1, the C entry point is slower than calling
    /// `copy` (`fill`) from Rust.
    pub c_entry_ratio_to_pagewise: Option<f64>,
    /// The C entry point's GB/s over the trials.
    pub c_entry: Option<Summary>,
}

/// The fleet row: a real distribution of calls.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRow {
    /// `fleet`.
    pub name: String,
    /// Where the distribution came from: the file, or `built in: NAME (SOURCE)`.
    pub file: Option<String>,
    /// Calls per trial.
    pub calls: usize,
    /// Mean bytes per call in the drawn sequence.
    pub mean_bytes: f64,
    /// pagewise, median ns per call.
    pub ns_per_call: f64,
    /// glibc, median ns per call.
    pub glibc_ns_per_call: f64,
    /// glibc's ns per call over pagewise's, the median over the trials of
    /// each trial's own ratio (as [`Row::ratio`]): above 1, pagewise is
    /// faster.
    pub ratio: f64,
    /// Each trial's ratio, glibc ns per call over pagewise's: median (as
    /// `ratio`), min and max.
    pub ratios: Summary,
    /// pagewise GB/s at the median.
    pub gbps: f64,
    /// glibc GB/s at the median.
    pub glibc_gbps: f64,
    /// pagewise ns per call over the trials.
    pub pagewise: Summary,
    /// glibc ns per call over the trials.
    pub glibc: Summary,
    /// With a C library: `pw_copy` (`pw_fill`) through it, median ns per call.
    pub c_entry_ns_per_call: Option<f64>,
    /// pagewise's ns per call over the C entry point's, the median of each
    /// trial's ratio (as `ratio`): below 1, the C entry point is slower than
    /// calling `copy` (`fill`) from Rust.
    pub c_entry_ratio_to_pagewise: Option<f64>,
    /// The C entry point's ns per call over the trials.
    pub c_entry: Option<Summary>,
    /// Probability of overlapping calls in the file; they are run without
    /// overlap (safe slices cannot overlap, and memcpy forbids it).
    pub overlap_probability_ignored: f64,
}

/// End to end: `pagewise bench queue`'s throughput phase on tmpfs with
/// pre-touch, 4 KiB records, the writer copying each payload in and the
/// reader copying it out with one routine, then the other (trials
/// interleaved).
#[derive(Debug, Clone, Serialize)]
pub struct EndToEndRow {
    /// `queue 4 KiB records`.
    pub name: String,
    /// Payload bytes per record.
    pub bytes: usize,
    /// Records per trial.
    pub records: u64,
    /// Payload GB/s moved from writer to reader with pagewise's copy (median).
    pub gbps: f64,
    /// The same with glibc's memcpy.
    pub glibc_gbps: f64,
    /// `gbps / glibc_gbps`.
    pub ratio: f64,
    /// Records per second with pagewise's copy: median, min, max.
    pub records_per_s: [f64; 3],
    /// The same with glibc's memcpy.
    pub glibc_records_per_s: [f64; 3],
}

/// Runs the end-to-end row: the queue experiment's throughput phase with
/// 4 KiB records under each copy routine, `trials` times each, interleaved.
/// `spawn` starts the writer and reader processes (see
/// [`crate::queue::run`]).
pub fn end_to_end(
    trials: usize,
    records: u64,
    tmpfs: &std::path::Path,
    progress: &dyn Progress,
    spawn: crate::queue::Spawn<'_>,
) -> Result<EndToEndRow, String> {
    use crate::queue::{Config, Pretouch, RowSpec, Transport};
    const BYTES: usize = 4096;
    let rows = Routine::ALL
        .iter()
        .map(|&copy| RowSpec {
            name: copy.name().to_owned(),
            dir: tmpfs.to_owned(),
            pretouch: Pretouch::Background,
            transport: Transport::Queue,
            copy,
        })
        .collect();
    let config = Config {
        record_bytes: BYTES,
        records,
        latency_records: 0,
        trials,
        rows,
        ..Config::default()
    };
    let report = crate::queue::run(&config, progress, spawn);
    if let Some(n) = report.not_run.first() {
        return Err(format!("the {} run failed: {}", n.name, n.reason));
    }
    if let Some(r) = report.rows.iter().find(|r| r.failed.is_some()) {
        return Err(format!(
            "the {} run failed after {} trials: {}",
            r.name,
            r.trials,
            r.failed.as_deref().unwrap_or_default()
        ));
    }
    let of = |copy: Routine| {
        report
            .rows
            .iter()
            .find(|r| r.copy == copy)
            .map(|r| {
                [
                    r.records_per_s,
                    r.records_per_s_range[0],
                    r.records_per_s_range[1],
                ]
            })
            .ok_or_else(|| format!("no result with {}", copy.name()))
    };
    let ours = of(Routine::Pagewise)?;
    let theirs = of(Routine::Glibc)?;
    let gbps = |r: [f64; 3]| r[0] * BYTES as f64 / 1e9;
    Ok(EndToEndRow {
        name: "queue 4 KiB records".into(),
        bytes: BYTES,
        records,
        gbps: gbps(ours),
        glibc_gbps: gbps(theirs),
        ratio: ours[0] / theirs[0],
        records_per_s: ours,
        glibc_records_per_s: theirs,
    })
}

/// A whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`MEMCPY_SCHEMA`] or [`MEMSET_SCHEMA`].
    pub schema: &'static str,
    /// The machine.
    pub machine: Machine,
    /// What pagewise's copy chose on this machine.
    pub plan: Plan,
    /// Trials per row.
    pub trials: u32,
    /// Whether transparent huge pages were asked for on the buffers.
    pub huge_pages: bool,
    /// The C library of the third side, when one was given.
    pub c_library: Option<CLibrary>,
    /// Fixed-size rows, by size, then residency, aligned first.
    pub rows: Vec<Row>,
    /// The fleet row, when a distribution was given.
    pub fleet: Option<FleetRow>,
    /// `bench memcpy` only: the queue end to end with each routine.
    pub end_to_end: Option<EndToEndRow>,
    /// The limit row: the best one core reaches here on the 1 GiB cold case,
    /// the fastest of every candidate strategy and glibc (run when the sizes
    /// include 1 GiB and cold rows are on).
    pub limit: Option<LimitRow>,
    /// Fallbacks and skipped parts, one sentence each.
    pub notes: Vec<String>,
}

/// The `libpagewise.so` whose C entry points were measured.
#[derive(Debug, Clone, Serialize)]
pub struct CLibrary {
    /// Its path, as given.
    pub path: String,
    /// What its `pw_version()` returned.
    pub version: String,
}

/// The limit row: the fastest of all candidates on one size from memory.
#[derive(Debug, Clone, Serialize)]
pub struct LimitRow {
    /// `1 GiB cold limit`.
    pub name: String,
    /// Bytes per call.
    pub bytes: usize,
    /// The fastest candidate.
    pub best: String,
    /// Its GB/s (median over the trials): the limit.
    pub gbps: f64,
    /// Every candidate, fastest first.
    pub candidates: Vec<pagewise::copy::tune::LimitTiming>,
}

/// Size of the limit row.
pub const LIMIT_BYTES: usize = 1 << 30;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Buffers could not be mapped.
    #[error("cannot map {bytes} bytes of benchmark buffers: {error} (use smaller --sizes or free memory)")]
    Map {
        /// How much was asked for.
        bytes: usize,
        /// The failed call.
        error: SysError,
    },
    /// pagewise produced wrong bytes (a bug: please report it).
    #[error("pagewise {op} produced wrong bytes in row {row:?}")]
    WrongResult {
        /// memcpy or memset.
        op: &'static str,
        /// The row.
        row: String,
    },
    /// Nothing to run.
    #[error("nothing to run: give at least one size, or the fleet row")]
    Empty,
    /// Only hot rows were asked for, and no size given fits in the caches.
    #[error("nothing to run: {0}")]
    NoHotRow(String),
    /// The C library of `c_library` cannot be used.
    #[error(transparent)]
    CLibrary(#[from] DlError),
    /// A process measures one C library: a later run asked for another.
    #[error(
        "{loaded} is loaded for the C entry point already; measure {asked} in a process of its own"
    )]
    SecondCLibrary {
        /// The library loaded first.
        loaded: String,
        /// The one asked for now.
        asked: String,
    },
    /// The C entry point returned an error code or wrong bytes.
    #[error("{entry} of {library} failed in row {row:?}: {reason}")]
    CEntryFailed {
        /// `pw_copy` or `pw_fill`.
        entry: &'static str,
        /// The library.
        library: String,
        /// The row.
        row: String,
        /// The code it returned, or "wrong bytes".
        reason: String,
    },
    /// A row's trials timed nothing (a time was not a number, or a trial
    /// had no finite ratio): no ratio
    /// is made up from the other side.
    #[error("row {row:?} measured nothing: a trial's time was not a number, or not one a ratio can be taken of")]
    NotMeasured {
        /// The row.
        row: String,
    },
}

/// Cache sizes the rows are placed by.
#[derive(Debug, Clone, Copy)]
struct Caches {
    l1d: usize,
    l2: usize,
    llc: usize,
}

impl Caches {
    fn of(machine: &Machine, notes: &mut Vec<String>) -> Caches {
        let find = |level: u32| {
            machine
                .caches
                .iter()
                .filter(|c| c.level == level && c.kind != "Instruction")
                .map(|c| c.size_bytes as usize)
                .max()
        };
        let llc = machine.caches.iter().map(|c| c.size_bytes as usize).max();
        let (l1d, l2, llc) = (find(1), find(2), llc);
        if l1d.is_none() || l2.is_none() || llc.is_none() {
            notes.push(
                "cache sizes not readable: placed rows assuming L1d 32 KiB, L2 1 MiB, LLC 32 MiB"
                    .into(),
            );
        }
        Caches {
            l1d: l1d.unwrap_or(32 << 10),
            l2: l2.unwrap_or(1 << 20),
            llc: llc.unwrap_or(32 << 20),
        }
    }

    /// Where a hot row of `footprint` bytes fits, if anywhere.
    fn hot_level(&self, footprint: usize) -> Option<Residency> {
        let footprint = footprint + 2 * 64;
        if footprint <= self.l1d * 3 / 4 {
            Some(Residency::L1)
        } else if footprint <= self.l2 * 3 / 4 {
            Some(Residency::L2)
        } else if footprint <= self.llc / 3 {
            Some(Residency::Llc)
        } else {
            None
        }
    }

    /// The sizes of `op` that are too large for a hot row here, and what the
    /// largest hot row may be, in words: for a run without cold rows, which
    /// would otherwise leave them out without a word.
    fn too_large_for_hot(&self, op: Op, sizes: &[usize]) -> Option<String> {
        let dropped: Vec<String> = sizes
            .iter()
            .filter(|&&n| n > 0 && self.hot_level(op.footprint(n)).is_none())
            .map(|&n| format_bytes_exact(n as u64))
            .collect();
        if dropped.is_empty() {
            return None;
        }
        let limit = (self.llc / 3).saturating_sub(2 * 64);
        let largest = match op {
            Op::Memcpy => limit / 2,
            Op::Memset => limit,
        };
        Some(format!(
            "{} too large to stay in the caches for a hot row (at most about {} here: its \
             buffers within a third of the last-level cache), and --no-cold leaves out the \
             cold rows",
            dropped.join(", "),
            pagewise::units::format_bytes(largest as u64),
        ))
    }

    /// Bytes the cold rows rotate through: several times the LLC.
    fn cold_pool(&self) -> usize {
        (4 * self.llc).next_power_of_two()
    }
}

struct Spec {
    bytes: usize,
    residency: Residency,
    src_offset: usize,
    dst_offset: usize,
    /// Threads of pagewise's side (1: `copy`/`fill`; more: the parallel ones).
    threads: usize,
}

impl Spec {
    fn name(&self, op: Op) -> String {
        let placement = match (op, self.src_offset, self.dst_offset) {
            (_, 0, 0) => "aligned".to_owned(),
            (Op::Memset, _, d) => format!("dst+{d}"),
            (Op::Memcpy, s, d) => format!("src+{s} dst+{d}"),
        };
        let threads = if self.threads > 1 {
            format!(", {} threads", self.threads)
        } else {
            String::new()
        };
        format!(
            "{} {} {placement}{threads}",
            format_bytes_exact(self.bytes as u64),
            self.residency.label()
        )
    }
}

fn specs(op: Op, options: &Options, caches: &Caches) -> Vec<Spec> {
    let mut sizes: Vec<usize> = options.sizes.iter().copied().filter(|&n| n > 0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = Vec::new();
    let hot_offsets: Vec<(usize, usize)> = match (op, options.misaligned) {
        (_, false) => vec![(0, 0)],
        (Op::Memcpy, true) => [(0, 0)].into_iter().chain(MISALIGNED_COPY).collect(),
        (Op::Memset, true) => vec![(0, 0), (0, MISALIGNED_FILL)],
    };
    let cold_offsets = &hot_offsets[..hot_offsets.len().min(2)];
    for &bytes in &sizes {
        let mut residencies = Vec::new();
        if options.hot {
            residencies.extend(caches.hot_level(op.footprint(bytes)));
        }
        if options.cold {
            residencies.push(Residency::Cold);
        }
        for residency in residencies {
            let offsets = if residency.is_hot() {
                &hot_offsets[..]
            } else {
                cold_offsets
            };
            for &(src_offset, dst_offset) in offsets {
                out.push(Spec {
                    bytes,
                    residency,
                    src_offset,
                    dst_offset,
                    threads: 1,
                });
                if !residency.is_hot()
                    && options.parallel > 1
                    && bytes >= pagewise::copy::PARALLEL_MIN
                {
                    out.push(Spec {
                        bytes,
                        residency,
                        src_offset,
                        dst_offset,
                        threads: options.parallel,
                    });
                }
            }
        }
    }
    out
}

/// The buffers of a row: `tune`'s [`TimingBuffers`] (the destination
/// `DST_SHIFT` past the source modulo `DST_ALIAS_SPAN`), with a source
/// for memcpy only, on THP when `huge_pages`.
fn buffers(
    op: Op,
    len: usize,
    huge_pages: bool,
    llc_bytes: usize,
) -> Result<TimingBuffers, BenchError> {
    TimingBuffers::new(len, op == Op::Memcpy, huge_pages)
        .map(|b| b.with_llc(llc_bytes))
        .map_err(|(bytes, error)| BenchError::Map { bytes, error })
}

/// pagewise's side of a copy row: `copy` itself (the benchmark's slices
/// always have equal lengths), never inlined like glibc's side.
#[inline(never)]
fn pagewise_copy(dst: &mut [u8], src: &[u8]) {
    let _ = pagewise::copy::copy(dst, src);
}

#[inline(never)]
fn pagewise_fill(dst: &mut [u8], byte: u8) {
    pagewise::copy::fill(dst, byte);
}

/// pagewise's C entry points in a loaded `libpagewise.so` (which stays
/// loaded until the process ends).
#[derive(Debug, Clone, Copy)]
struct CEntry {
    /// The path it was asked for with.
    path: &'static Path,
    library: &'static Library,
    copy: CCopy<'static>,
    fill: CFill<'static>,
}

/// The C library of this process's runs and its entry points, loaded by the
/// first [`run`] given one (a process measures one library). The C side's
/// wrappers read them here, so that the timed loop calls a plain Rust
/// function pointer for every side, as it did with two. (A thread-local cost
/// the wrapper four register saves around the access; this is two loads.)
static C_ENTRY: OnceLock<CEntry> = OnceLock::new();

/// `pw_copy` of the process's C library on the slices; its return code, or
/// `None` when no library is loaded.
#[inline(always)]
fn c_copy_code(dst: &mut [u8], src: &[u8]) -> Option<i32> {
    C_ENTRY.get().map(|c| c.copy.call(dst, src))
}

/// `pw_fill` of the process's C library; as [`c_copy_code`].
#[inline(always)]
fn c_fill_code(dst: &mut [u8], byte: u8) -> Option<i32> {
    C_ENTRY.get().map(|c| c.fill.call(dst, byte))
}

/// Loads the library at `path` for the C side (once per process; later runs
/// with the same path reuse it), and its entry points.
fn load_c_entry(path: &Path) -> Result<&'static Library, BenchError> {
    let loaded = match C_ENTRY.get() {
        Some(loaded) => loaded,
        None => {
            // Never unloaded: the entry points in `C_ENTRY` must stay callable.
            let library: &'static Library = Box::leak(Box::new(Library::open(path)?));
            let entry = CEntry {
                path: Box::leak(path.to_path_buf().into_boxed_path()),
                library,
                copy: library.pw_copy()?,
                fill: library.pw_fill()?,
            };
            // Another thread's run may have loaded one first: that one counts.
            C_ENTRY.get_or_init(|| entry)
        }
    };
    if loaded.path == path {
        Ok(loaded.library)
    } else {
        Err(BenchError::SecondCLibrary {
            loaded: loaded.path.display().to_string(),
            asked: path.display().to_string(),
        })
    }
}

/// The C side of a copy row: a wrapper, never inlined like the other two,
/// that loads the `dlsym` pointer and calls it. The return code is looked at
/// once per row, outside the timing ([`verify`]).
#[inline(never)]
fn c_copy(dst: &mut [u8], src: &[u8]) {
    let _ = c_copy_code(dst, src);
}

/// The C side of a fill row; as [`c_copy`].
#[inline(never)]
fn c_fill(dst: &mut [u8], byte: u8) {
    let _ = c_fill_code(dst, byte);
}

/// Who a timed loop calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// glibc's `memcpy` / `memset`.
    Glibc,
    /// `pagewise::copy::copy` / `fill`, called from Rust.
    Pagewise,
    /// `pw_copy` / `pw_fill` of the loaded library ([`C_ENTRY`]).
    C,
}

impl Side {
    /// The slot of this side's results in a row (glibc, pagewise, C).
    fn index(self) -> usize {
        match self {
            Side::Glibc => 0,
            Side::Pagewise => 1,
            Side::C => 2,
        }
    }
}

/// The sides of a row in the order of trial `t`: glibc, pagewise, then the C
/// entry point when `with_c`, reversed on odd trials (so each pair of sides
/// swaps order every trial).
fn trial_order(t: u32, with_c: bool) -> Vec<Side> {
    let mut order = vec![Side::Glibc, Side::Pagewise];
    if with_c {
        order.push(Side::C);
    }
    if t % 2 == 1 {
        order.reverse();
    }
    order
}

/// The routine a timed loop calls: a copy, or a fill with its byte.
#[derive(Debug, Clone, Copy)]
enum Call {
    Copy(fn(&mut [u8], &[u8])),
    Fill(fn(&mut [u8], u8), u8),
}

impl Call {
    /// The routine of `side` for `op`.
    fn of(op: Op, side: Side) -> Call {
        match (op, side) {
            (Op::Memcpy, Side::Pagewise) => Call::Copy(pagewise_copy),
            (Op::Memcpy, Side::Glibc) => Call::Copy(glibc_memcpy),
            (Op::Memcpy, Side::C) => Call::Copy(c_copy),
            (Op::Memset, Side::Pagewise) => Call::Fill(pagewise_fill, fill_byte()),
            (Op::Memset, Side::Glibc) => Call::Fill(glibc_memset, fill_byte()),
            (Op::Memset, Side::C) => Call::Fill(c_fill, fill_byte()),
        }
    }

    #[inline(always)]
    fn run(self, dst: &mut [u8], src: &[u8]) {
        match self {
            Call::Copy(f) => f(dst, src),
            Call::Fill(f, byte) => f(dst, byte),
        }
    }
}

/// `reps` calls of one routine on the same buffers, or one call per block.
///
/// Both sides of a row run in this one loop, through a function pointer:
/// with a loop per routine (a generic over it), where each loop's code
/// landed decided small rows. Measured on the Zen 5 guest with glibc on
/// both sides: 0.71-1.19 "pagewise/glibc" on hot rows up to 256 B, against
/// 0.97-1.03 with one shared loop; a call of a few nanoseconds is mostly
/// branches, and how many of them the front end takes per cycle depends
/// on where they sit.
#[inline(never)]
fn timed_loop(
    call: Call,
    dst: &mut [u8],
    src: &[u8],
    n: usize,
    reps: usize,
    blocks: &[(usize, usize)],
    hot: bool,
) -> (usize, std::time::Duration) {
    // Never specialised for a constant routine: the call stays indirect.
    let call = black_box(call);
    if hot {
        let (s, d) = blocks[0];
        let (dst, src) = (
            &mut dst[d..d + n],
            &src[s.min(src.len())..][..n.min(src.len())],
        );
        // Hide the buffers from the optimiser once; the calls themselves are to
        // `#[inline(never)]` functions that write memory, which it cannot drop.
        let (dst, src) = black_box((dst, src));
        // Warm the caches (and the branch predictors) first.
        for _ in 0..reps.min(16) {
            call.run(dst, src);
        }
        let t = Instant::now();
        for _ in 0..reps {
            call.run(dst, src);
            compiler_fence(Ordering::SeqCst);
        }
        (reps, t.elapsed())
    } else {
        let (dst, src) = black_box((dst, src));
        let t = Instant::now();
        for &(s, d) in blocks {
            let src = &src[s.min(src.len())..][..n.min(src.len())];
            call.run(&mut dst[d..d + n], src);
            compiler_fence(Ordering::SeqCst);
        }
        (blocks.len(), t.elapsed())
    }
}

/// [`timed_loop`] for the rows of `--parallel`: cold calls of a closure
/// (copies from 16 MiB, where the loop's own cost does not show).
fn timed_parallel<F: Fn(&mut [u8], &[u8])>(
    f: F,
    dst: &mut [u8],
    src: &[u8],
    n: usize,
    blocks: &[(usize, usize)],
) -> (usize, std::time::Duration) {
    let (dst, src) = black_box((dst, src));
    let t = Instant::now();
    for &(s, d) in blocks {
        let src = &src[s.min(src.len())..][..n.min(src.len())];
        f(&mut dst[d..d + n], src);
        compiler_fence(Ordering::SeqCst);
    }
    (blocks.len(), t.elapsed())
}

/// The fill byte, hidden from the optimiser (a constant would let it
/// specialise pagewise's inlined entry but not glibc's).
fn fill_byte() -> u8 {
    black_box(FILL_BYTE)
}

/// The blocks a row's calls use: `(src_start, dst_start)` offsets.
fn blocks(spec: &Spec, pool: usize) -> Vec<(usize, usize)> {
    if spec.residency.is_hot() {
        return vec![(spec.src_offset, spec.dst_offset)];
    }
    let wanted = (COLD_TRIAL_BYTES / spec.bytes).max(1);
    cold_block_starts(spec.bytes, pool, wanted)
        .into_iter()
        .map(|b| (b + spec.src_offset, b + spec.dst_offset))
        .collect()
}

/// Times one trial: GB/s.
fn trial(
    op: Op,
    side: Side,
    bufs: &mut TimingBuffers,
    spec: &Spec,
    blocks: &[(usize, usize)],
) -> f64 {
    let n = spec.bytes;
    let hot = spec.residency.is_hot();
    let reps = (HOT_TRIAL_BYTES / n.max(HOT_MIN_CALL_BYTES)).max(1);
    let (dst, src) = bufs.slices();
    // memset gets an empty source; its loop ignores it.
    let src = match op {
        Op::Memcpy => src,
        Op::Memset => &src[..0],
    };
    let threads = spec.threads;
    let (calls, elapsed) = match (op, side) {
        (Op::Memcpy, Side::Pagewise) if threads > 1 => timed_parallel(
            |d, s| {
                let _ = pagewise::copy::copy_parallel(d, s, threads);
            },
            dst,
            src,
            n,
            blocks,
        ),
        (Op::Memset, Side::Pagewise) if threads > 1 => {
            let byte = fill_byte();
            timed_parallel(
                |d, _| pagewise::copy::fill_parallel(d, byte, threads),
                dst,
                src,
                n,
                blocks,
            )
        }
        _ => timed_loop(Call::of(op, side), dst, src, n, reps, blocks, hot),
    };
    (calls * n) as f64 / elapsed.as_secs_f64().max(1e-9) / 1e9
}

/// Runs `side` once on the row's first block (pagewise's side with the row's
/// threads) and checks the bytes and, for the C entry point, its return code:
/// why the result is wrong, if it is.
fn verify(
    op: Op,
    bufs: &mut TimingBuffers,
    spec: &Spec,
    block: (usize, usize),
    side: Side,
) -> Result<(), String> {
    let n = spec.bytes;
    let (s, d) = block;
    let (dst, src) = bufs.slices();
    let dst = &mut dst[d..d + n];
    let parallel = spec.threads > 1;
    let (code, right) = match op {
        Op::Memcpy => {
            let src = &src[s..s + n];
            dst.fill(0xee);
            let code = match side {
                Side::Pagewise if parallel => {
                    let _ = pagewise::copy::copy_parallel(dst, src, spec.threads);
                    Some(0)
                }
                Side::C => c_copy_code(dst, src),
                Side::Glibc | Side::Pagewise => {
                    Call::of(op, side).run(dst, src);
                    Some(0)
                }
            };
            (code, dst == src)
        }
        Op::Memset => {
            dst.fill(!FILL_BYTE);
            let code = match side {
                Side::Pagewise if parallel => {
                    pagewise::copy::fill_parallel(dst, FILL_BYTE, spec.threads);
                    Some(0)
                }
                Side::C => c_fill_code(dst, FILL_BYTE),
                Side::Glibc | Side::Pagewise => {
                    // Its fill byte is `fill_byte()`, FILL_BYTE hidden.
                    Call::of(op, side).run(dst, &[]);
                    Some(0)
                }
            };
            (code, dst.iter().all(|&b| b == FILL_BYTE))
        }
    };
    match (code, right) {
        (None, _) => Err("no C library is loaded".into()),
        (Some(0), true) => Ok(()),
        (Some(0), false) => Err("wrong bytes".into()),
        (Some(code), _) => Err(format!("returned {code}")),
    }
}

/// Checks pagewise's side and, when `c_library` is given, the C entry point
/// with [`verify`] on `block`, as the error of a run.
fn check_sides(
    op: Op,
    bufs: &mut TimingBuffers,
    spec: &Spec,
    block: (usize, usize),
    c_library: Option<&Library>,
    row: impl Fn() -> String,
) -> Result<(), BenchError> {
    verify(op, bufs, spec, block, Side::Pagewise).map_err(|_| BenchError::WrongResult {
        op: op.name(),
        row: row(),
    })?;
    let Some(library) = c_library else {
        return Ok(());
    };
    verify(op, bufs, spec, block, Side::C).map_err(|reason| BenchError::CEntryFailed {
        entry: match op {
            Op::Memcpy => "pw_copy",
            Op::Memset => "pw_fill",
        },
        library: library.path().display().to_string(),
        row: row(),
        reason,
    })
}

/// The trials' own ratios `with[t] / without[t]` summarised (a trial's
/// sides ran alternately, so a slow spell of the machine slows both);
/// `None` when there is no finite ratio.
fn paired_summary(with: &[f64], without: &[f64]) -> Option<Summary> {
    Summary::of(&paired::ratios(with, without)?)
}

/// Whether a larger sample is faster (GB/s) or slower (ns per call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// pagewise's and glibc's samples summarised, and each trial's ratio
/// oriented so that above 1 means pagewise is faster; `None` when a side
/// has no sample, a sample is NaN or a ratio is not finite.
fn summarise(ours: &[f64], theirs: &[f64], better: Better) -> Option<(Summary, Summary, Summary)> {
    let ratios = match better {
        Better::Higher => paired_summary(ours, theirs),
        Better::Lower => paired_summary(theirs, ours),
    }?;
    Some((Summary::of(ours)?, Summary::of(theirs)?, ratios))
}

/// Runs the experiment. Progress goes to `progress`, one step per row.
pub fn run(op: Op, options: &Options, progress: &dyn Progress) -> Result<Report, BenchError> {
    let machine = Machine::describe();
    let mut notes = Vec::new();
    let caches = Caches::of(&machine, &mut notes);
    let specs = specs(op, options, &caches);
    let unplaced = if options.hot && !options.cold {
        caches.too_large_for_hot(op, &options.sizes)
    } else {
        None
    };
    if specs.is_empty() && options.fleet.is_none() {
        return Err(unplaced.map_or(BenchError::Empty, BenchError::NoHotRow));
    }
    if let Some(why) = unplaced {
        notes.push(format!("not measured: {why}"));
    }
    let trials = options.trials.max(1);
    let total = specs.len() + usize::from(options.fleet.is_some());
    let plan = Plan::current();
    let library = options.c_library.as_deref().map(load_c_entry).transpose()?;
    let c_library = match library {
        Some(l) => Some(CLibrary {
            path: l.path().display().to_string(),
            version: l.pw_version()?,
        }),
        None => None,
    };

    let mut rows = Vec::new();
    let hot_len = specs
        .iter()
        .filter(|s| s.residency.is_hot())
        .map(|s| s.bytes + SLACK)
        .max();
    let cold_len = specs
        .iter()
        .filter(|s| !s.residency.is_hot())
        .map(|s| (s.bytes + SLACK).max(caches.cold_pool()))
        .max();
    for (residency_hot, len) in [(true, hot_len), (false, cold_len)] {
        let Some(len) = len else { continue };
        let len = len.div_ceil(2 << 20) * (2 << 20);
        let mut bufs = buffers(op, len, options.huge_pages, caches.llc)?;
        for spec in specs
            .iter()
            .filter(|s| s.residency.is_hot() == residency_hot)
        {
            let name = spec.name(op);
            progress.update(rows.len(), total, &format!("{} {name}", op.name()));
            let blocks = blocks(spec, len);
            // The C entry point has no parallel copy: it sits out those rows.
            let c_library = library.filter(|_| spec.threads == 1);
            check_sides(op, &mut bufs, spec, blocks[0], c_library, || name.clone())?;
            // Per side (glibc, pagewise, C): the GB/s of each trial.
            let mut samples: [Vec<f64>; 3] = Default::default();
            // Hot trials keep the fastest of several short runs; cold ones are
            // one long run (a second run would find the caches warm).
            let runs = if spec.residency.is_hot() {
                RUNS_PER_TRIAL
            } else {
                1
            };
            for t in 0..trials {
                let order = trial_order(t, c_library.is_some());
                let mut best = [0.0f64; 3];
                for _ in 0..runs {
                    for &side in &order {
                        if !spec.residency.is_hot() {
                            // From flushed lines where the LLC could hold the walk.
                            let starts = blocks.iter().copied();
                            bufs.start_cold_walk(starts, spec.bytes, op == Op::Memcpy);
                        }
                        let gbps = trial(op, side, &mut bufs, spec, &blocks);
                        best[side.index()] = best[side.index()].max(gbps);
                    }
                }
                for side in &order {
                    samples[side.index()].push(best[side.index()]);
                }
            }
            let [theirs, ours, c_samples] = &samples;
            // GB/s: pagewise's over glibc's is above 1 when pagewise is faster.
            let Some((pagewise, glibc, ratios)) = summarise(ours, theirs, Better::Higher) else {
                return Err(BenchError::NotMeasured { row: name });
            };
            let c = match c_library {
                Some(_) => Some(
                    Summary::of(c_samples)
                        .ok_or_else(|| BenchError::NotMeasured { row: name.clone() })?,
                ),
                None => None,
            };
            rows.push(Row {
                name,
                bytes: spec.bytes,
                residency: spec.residency,
                src_offset: if op == Op::Memcpy { spec.src_offset } else { 0 },
                dst_offset: spec.dst_offset,
                threads: spec.threads,
                calls: blocks.len().max(if spec.residency.is_hot() {
                    (HOT_TRIAL_BYTES / spec.bytes.max(HOT_MIN_CALL_BYTES)).max(1)
                } else {
                    0
                }) as u64,
                gbps: pagewise.median,
                glibc_gbps: glibc.median,
                ratio: ratios.median,
                ratios,
                c_entry_gbps: c.map(|c| c.median),
                c_entry_ratio_to_pagewise: c.and(paired_summary(c_samples, ours)).map(|r| r.median),
                c_entry: c,
                pagewise,
                glibc,
            });
        }
    }
    rows.sort_by(|a, b| {
        (a.bytes, a.residency, a.dst_offset, a.src_offset, a.threads).cmp(&(
            b.bytes,
            b.residency,
            b.dst_offset,
            b.src_offset,
            b.threads,
        ))
    });

    let fleet = match &options.fleet {
        Some(dist) => {
            progress.update(rows.len(), total, &format!("{} fleet", op.name()));
            Some(run_fleet(op, options, dist, trials, library)?)
        }
        None => None,
    };
    let limit = if options.cold && options.sizes.contains(&LIMIT_BYTES) {
        progress.update(total, total, &format!("{} 1 GiB limit", op.name()));
        match pagewise::copy::tune::limit(op == Op::Memcpy, LIMIT_BYTES, trials as usize) {
            Ok(c) => c.first().map(|best| LimitRow {
                name: "1 GiB cold limit".into(),
                bytes: LIMIT_BYTES,
                best: best.candidate.clone(),
                gbps: best.gbps.median,
                candidates: c.clone(),
            }),
            Err(e) => {
                notes.push(format!("limit row not run: {e}"));
                None
            }
        }
    } else {
        None
    };
    progress.update(total, total, "done");
    if op == Op::Memcpy {
        let timed = plan.timed_streams();
        if !timed.is_empty() {
            notes.push(match pagewise::copy::nontemporal_streams_chosen() {
                Some(k) => format!(
                    "non-temporal copies interleave {k} pages, chosen in this run by timing {timed:?} \
                     (the first {} MiB of large copies were timed over them all)",
                    pagewise::copy::STREAM_TRIAL_BYTES >> 20
                ),
                None => format!(
                    "non-temporal copies still timing {timed:?} pages (too few large copies to choose)"
                ),
            });
        }
    }
    Ok(Report {
        limit,
        schema: op.schema(),
        machine,
        plan,
        trials,
        huge_pages: options.huge_pages,
        c_library,
        rows,
        fleet,
        end_to_end: None,
        notes,
    })
}

/// One drawn call: size and offsets into the fleet region.
#[derive(Debug, Clone, Copy)]
struct FleetCall {
    bytes: u32,
    src: u32,
    dst: u32,
}

/// An offset in `0..=max` whose alignment (from a 4 KiB-aligned base) is
/// exactly `align`, or at least 64 when `align >= 64`.
fn aligned_offset(rng: &mut SplitMix64, max: usize, align: usize) -> usize {
    if align >= 64 {
        return 64 * rng.below((max / 64 + 1) as u64) as usize;
    }
    if max < align {
        return 0;
    }
    let slots = (max - align) / (2 * align) + 1;
    align + 2 * align * rng.below(slots as u64) as usize
}

/// Runs the drawn calls once; memset passes an empty source. One loop for
/// both sides, as [`timed_loop`].
#[inline(never)]
fn fleet_loop(call: Call, dst: &mut [u8], src: &[u8], calls: &[FleetCall]) -> std::time::Duration {
    let call = black_box(call);
    let (dst, src) = black_box((dst, src));
    let t = Instant::now();
    for c in calls {
        let n = c.bytes as usize;
        let s = if src.is_empty() {
            src
        } else {
            &src[c.src as usize..][..n]
        };
        call.run(&mut dst[c.dst as usize..][..n], s);
        compiler_fence(Ordering::SeqCst);
    }
    t.elapsed()
}

fn run_fleet(
    op: Op,
    options: &Options,
    dist: &FleetDistribution,
    trials: u32,
    c_library: Option<&Library>,
) -> Result<FleetRow, BenchError> {
    let with_c = c_library.is_some();
    let max = dist.sizes.max() as usize;
    // Random offsets spread over twice the largest size (at least 256 KiB).
    let region = (2 * max + SLACK).max(256 << 10).div_ceil(4096) * 4096;
    let mut bufs = buffers(op, region, options.huge_pages, 0)?;
    let mut rng = SplitMix64::new(options.seed);
    let sizes = dist.sizes.sampler();
    let aligns = dist.alignments.sampler();
    let n_calls = options.fleet_calls.max(1);
    let calls: Vec<FleetCall> = (0..n_calls)
        .map(|_| {
            let bytes = sizes.draw(&mut rng) as usize;
            let room = region - bytes;
            let src_align = aligns.draw(&mut rng) as usize;
            let src = aligned_offset(&mut rng, room, src_align);
            let dst_align = aligns.draw(&mut rng) as usize;
            let dst = aligned_offset(&mut rng, room, dst_align);
            FleetCall {
                bytes: bytes as u32,
                src: src as u32,
                dst: dst as u32,
            }
        })
        .collect();
    let total_bytes: u64 = calls.iter().map(|c| u64::from(c.bytes)).sum();

    // Check pagewise (and the C entry point) on the first calls.
    for c in calls.iter().take(1000).filter(|c| c.bytes > 0) {
        let spec = Spec {
            bytes: c.bytes as usize,
            residency: Residency::L2,
            src_offset: c.src as usize,
            dst_offset: c.dst as usize,
            threads: 1,
        };
        check_sides(
            op,
            &mut bufs,
            &spec,
            (spec.src_offset, spec.dst_offset),
            c_library,
            || format!("fleet call of {} bytes", c.bytes),
        )?;
    }

    let run = |side: Side, bufs: &mut TimingBuffers| -> f64 {
        let (dst, src) = bufs.slices();
        let src = if op == Op::Memcpy { src } else { &[][..] };
        let elapsed = fleet_loop(Call::of(op, side), dst, src, &calls);
        elapsed.as_secs_f64() * 1e9 / calls.len() as f64
    };
    // Warm up every side once.
    for side in trial_order(0, with_c) {
        run(side, &mut bufs);
    }
    // Per side (glibc, pagewise, C): ns per call of each trial.
    let mut samples: [Vec<f64>; 3] = Default::default();
    for t in 0..trials {
        let order = trial_order(t, with_c);
        let mut best = [f64::INFINITY; 3];
        for _ in 0..RUNS_PER_TRIAL {
            for &side in &order {
                best[side.index()] = best[side.index()].min(run(side, &mut bufs));
            }
        }
        for side in &order {
            samples[side.index()].push(best[side.index()]);
        }
    }
    let not_measured = || BenchError::NotMeasured {
        row: "fleet".into(),
    };
    let [theirs, ours, c_samples] = &samples;
    let Some((pagewise, glibc, ratios)) = summarise(ours, theirs, Better::Lower) else {
        return Err(not_measured());
    };
    let c = if with_c {
        Some(Summary::of(c_samples).ok_or_else(not_measured)?)
    } else {
        None
    };
    let mean_bytes = total_bytes as f64 / calls.len() as f64;
    Ok(FleetRow {
        name: "fleet".into(),
        file: options.fleet_file.clone(),
        calls: calls.len(),
        mean_bytes,
        ns_per_call: pagewise.median,
        glibc_ns_per_call: glibc.median,
        ratio: ratios.median,
        ratios,
        gbps: mean_bytes / pagewise.median,
        glibc_gbps: mean_bytes / glibc.median,
        c_entry_ns_per_call: c.map(|c| c.median),
        c_entry_ratio_to_pagewise: c.and(paired_summary(ours, c_samples)).map(|r| r.median),
        c_entry: c,
        pagewise,
        glibc,
        overlap_probability_ignored: dist.overlap.probability(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagewise::copy::tune::{DST_ALIAS_SPAN, DST_SHIFT};

    #[test]
    fn the_paired_median_is_of_each_trials_ratio_not_of_the_medians() {
        let median = |a: &[f64], b: &[f64]| paired_summary(a, b).map(|s| s.median);
        // Per trial 1, 2 and 0.5: median 1, where the medians' ratio is 10/5.
        assert_eq!(median(&[1.0, 10.0, 100.0], &[1.0, 5.0, 200.0]), Some(1.0));
        assert_eq!(median(&[3.0, 6.0], &[1.0, 2.0]), Some(3.0));
        assert_eq!(median(&[1.0], &[0.0]), None);
        assert_eq!(median(&[], &[]), None);
    }

    #[test]
    fn offsets_have_the_asked_alignment() {
        let mut rng = SplitMix64::new(3);
        for align in [1usize, 2, 4, 8, 16, 32, 64] {
            for _ in 0..1000 {
                let o = aligned_offset(&mut rng, 10_000, align);
                assert!(o <= 10_000);
                assert_eq!(o % align, 0, "{o} {align}");
                if align < 64 {
                    assert_ne!(o % (2 * align), 0, "{o} is more aligned than {align}");
                }
            }
        }
        assert_eq!(aligned_offset(&mut rng, 0, 8), 0);
    }

    #[test]
    fn every_pair_of_sides_swaps_order_every_trial() {
        use Side::*;
        assert_eq!(trial_order(0, false), [Glibc, Pagewise]);
        assert_eq!(trial_order(1, false), [Pagewise, Glibc]);
        assert_eq!(trial_order(2, true), [Glibc, Pagewise, C]);
        assert_eq!(trial_order(3, true), [C, Pagewise, Glibc]);
        let slots: Vec<usize> = trial_order(0, true).iter().map(|s| s.index()).collect();
        assert_eq!(slots, [0, 1, 2]);
    }

    #[test]
    fn without_a_library_the_c_side_says_so() {
        // No run in this test binary loads one.
        assert_eq!(c_copy_code(&mut [0u8; 4], &[1, 2, 3, 4]), None);
        assert_eq!(c_fill_code(&mut [0u8; 4], 1), None);
        let mut bufs = buffers(Op::Memcpy, 2 << 20, false, 0).unwrap();
        let spec = Spec {
            bytes: 64,
            residency: Residency::L1,
            src_offset: 0,
            dst_offset: 0,
            threads: 1,
        };
        assert_eq!(
            verify(Op::Memcpy, &mut bufs, &spec, (0, 0), Side::C),
            Err("no C library is loaded".into())
        );
        assert_eq!(
            verify(Op::Memcpy, &mut bufs, &spec, (0, 0), Side::Pagewise),
            Ok(())
        );
    }

    #[test]
    fn rows_are_placed_by_cache_size() {
        let caches = Caches {
            l1d: 48 << 10,
            l2: 2 << 20,
            llc: 105 << 20,
        };
        assert_eq!(caches.hot_level(2 * (16 << 10)), Some(Residency::L1));
        assert_eq!(caches.hot_level(2 * (512 << 10)), Some(Residency::L2));
        assert_eq!(caches.hot_level(2 * (16 << 20)), Some(Residency::Llc));
        assert_eq!(caches.hot_level(2 * (32 << 20)), None);
        let options = Options {
            sizes: vec![64, 1 << 30],
            ..Options::default()
        };
        let names: Vec<String> = specs(Op::Memcpy, &options, &caches)
            .iter()
            .map(|s| s.name(Op::Memcpy))
            .collect();
        assert_eq!(
            names,
            [
                "64 B L1 aligned",
                "64 B L1 src+7 dst+1",
                "64 B L1 src+1 dst+7",
                "64 B cold aligned",
                "64 B cold src+7 dst+1",
                "1 GiB cold aligned",
                "1 GiB cold src+7 dst+1"
            ]
        );
        let names: Vec<String> = specs(Op::Memset, &options, &caches)
            .iter()
            .map(|s| s.name(Op::Memset))
            .collect();
        assert_eq!(names[..2], ["64 B L1 aligned", "64 B L1 dst+1"]);
    }

    #[test]
    fn cold_blocks_are_far_apart_and_inside_the_pool() {
        let spec = Spec {
            bytes: 4096,
            residency: Residency::Cold,
            src_offset: 1,
            dst_offset: 7,
            threads: 1,
        };
        let pool = 512 << 20;
        let b = blocks(&spec, pool);
        assert!(b.len() > 1000);
        assert!(b.windows(2).all(|w| w[1].0 - w[0].0 >= 64 << 10));
        // Not all in the same L2 sets: block starts differ modulo 128 KiB.
        assert!(
            b.iter()
                .take(32)
                .map(|&(s, _)| s % (128 << 10))
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 16
        );
        assert!(b.iter().all(|&(s, d)| s + 4096 <= pool && d + 4096 <= pool));
        let big = Spec {
            bytes: 1 << 30,
            ..spec
        };
        assert_eq!(blocks(&big, (1 << 30) + (2 << 20)).len(), 1);
    }

    #[test]
    fn the_destination_sits_a_fixed_distance_past_the_source() {
        for len in [4 << 20, (4 << 20) + 4096] {
            let mut bufs = buffers(Op::Memcpy, len, true, 0).unwrap();
            let (dst, src) = bufs.slices();
            assert_eq!((dst.len(), src.len()), (len, len));
            let distance = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize);
            assert_eq!(distance % DST_ALIAS_SPAN, DST_SHIFT, "len {len}");
            assert!(dst.iter().all(|&b| b == 0));
        }
    }
}
