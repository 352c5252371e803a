//! pagewise-bench: every performance claim of [`pagewise`], rerun beside its
//! baseline on the machine at hand. This crate holds the experiments behind
//! `pagewise bench <experiment>` and the statistics they share; the
//! `pagewise` command (crate `pagewise-cli`) parses their options and prints
//! their reports as tables or JSON.
//!
//! | experiment | module | compares |
//! |---|---|---|
//! | `first-touch` | [`first_touch`] | what the first write costs per allocation strategy (malloc, mmap, THP, hugetlb, `pagewise::region`) |
//! | `mmap-prefault` | [`mmap_prefault`] | each way of prefaulting a shared file mapping, and the queue's pre-toucher |
//! | `queue` | [`queue`] | `pagewise::queue` between two processes against a shared-memory floor: throughput, latency, faults |
//! | `heap-churn` | [`heap_churn`] | threads that malloc, fill and free: glibc, `run --keep-heap`'s tunables, `pagewise::buffer::Buffer` |
//! | `itlb` | [`itlb`] | a generated large-text program: baseline, huge text, function order, both |
//! | `memcpy`, `memset` | [`memcpy`] (sizes from [`fleet`]) | `pagewise::copy` against glibc: fixed sizes hot and cold, misaligned, a real size distribution |
//! | `run` | [`program`] (statistics in [`paired`]) | a user's own command with and without a fix, in randomised pairs: wall, CPU, faults, peak RSS, paired ratios with confidence intervals |
//!
//! Rules every experiment follows (see docs/BENCHMARKS.md): the baseline is
//! measured in the same run, trials are interleaved where possible, results are
//! medians with min–max ([`Summary`]), and comparisons are ratios of medians.
//! Every report carries the [`Machine`] it ran on.
//!
//! The experiments that need another process do not know the `pagewise`
//! command line: the caller passes in how to start it ([`queue::Spawn`],
//! [`heap_churn::WorkerSpawner`], [`itlb::HugeTextRunner`],
//! [`program::FixRunner`]), so the flag names
//! live in the CLI alone. Long experiments report progress through
//! [`Progress`].
//!
//! **No number without a measurement.** A count or time that could not be
//! measured (a counter that did not open, a read that failed, a count that
//! went backwards) is `None` — `null` in JSON, `n/a (why)` in the CLI's
//! tables — never 0 and never a copy of the other side. Page-fault counts go
//! through [`FaultCounter`], which reads with checked arithmetic and keeps the
//! reason a count is missing.
//!
//! Everything an experiment reads is in this crate: the fleet size
//! distributions are compiled in ([`fleet::FleetDistribution::builtin`]; their
//! source and licence are in `data/NOTICE.md`).

#![deny(missing_docs)]
// Benchmarks are safe Rust on pagewise's API; `unsafe` stays in pagewise's private `sys` layer (reached through `pagewise::os`).
#![forbid(unsafe_code)]

use std::path::Path;

pub mod first_touch;
pub mod fleet;
pub mod heap_churn;
pub mod itlb;
mod machine;
pub mod memcpy;
pub mod mmap_prefault;
pub mod paired;
pub mod program;
pub mod queue;

use serde::Serialize;
use std::cell::RefCell;

pub use machine::{InstructionSets, Machine};

/// Median, minimum and maximum of a set of trials.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// The median (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest trial.
    pub min: f64,
    /// The largest trial.
    pub max: f64,
}

impl Summary {
    /// Summarises `samples`; `None` when there are none or any is NaN.
    /// Costs a sort of a copy of the samples.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|s| s.is_nan()) {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(|a, b| a.total_cmp(b));
        let n = sorted.len();
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }
}

/// Something that reads a running page-fault count: the calling thread's
/// `page-faults` perf counter in every experiment; a stand-in that fails in
/// the tests that check a failed read is reported as missing, not as 0.
pub(crate) trait FaultSource {
    /// The count so far, or why it could not be read.
    fn read(&self) -> Result<u64, String>;
}

impl FaultSource for pagewise::os::perf::Counter {
    fn read(&self) -> Result<u64, String> {
        pagewise::os::perf::Counter::read(self).map_err(|e| e.to_string())
    }
}

/// The calling thread's page-fault counter, opened for an experiment, or why
/// it could not be: what [`FaultCounter::new`] takes.
pub(crate) fn open_thread_fault_counter() -> Result<Box<dyn FaultSource>, String> {
    pagewise::observe::thread_page_fault_counter()
        .map(|c| Box::new(c) as Box<dyn FaultSource>)
        .map_err(|e| {
            format!(
                "the page-faults software event does not open here ({e}; see `pagewise doctor`)"
            )
        })
}

/// Page faults counted over spans of work, with checked arithmetic: a span
/// whose first or last reading failed, or whose count went backwards, is
/// `None`, and the first reason a count is missing is kept for the report.
/// Costs one `read` per reading.
pub(crate) struct FaultCounter {
    source: Result<Box<dyn FaultSource>, String>,
    missing: RefCell<Option<String>>,
}

impl FaultCounter {
    /// Counts with `source`, or records why nothing can be counted.
    pub(crate) fn new(source: Result<Box<dyn FaultSource>, String>) -> FaultCounter {
        let missing = RefCell::new(source.as_ref().err().cloned());
        FaultCounter { source, missing }
    }

    /// The count now; `None` (with the reason kept) when it cannot be read.
    pub(crate) fn reading(&self) -> Option<u64> {
        let source = self.source.as_ref().ok()?;
        match source.read() {
            Ok(n) => Some(n),
            Err(e) => {
                self.note(format!("a page-fault counter read failed: {e}"));
                None
            }
        }
    }

    /// Faults since `before` (a [`reading`](Self::reading)); `None` when
    /// either reading is missing or the count went backwards.
    pub(crate) fn since(&self, before: Option<u64>) -> Option<u64> {
        let after = self.reading()?;
        let before = before?;
        let faults = after.checked_sub(before);
        if faults.is_none() {
            self.note(format!(
                "the page-fault count went backwards ({before} then {after})"
            ));
        }
        faults
    }

    /// Why some count is missing, if one is.
    pub(crate) fn missing(&self) -> Option<String> {
        self.missing.borrow().clone()
    }

    fn note(&self, why: String) {
        self.missing.borrow_mut().get_or_insert(why);
    }
}

/// The median of per-trial counts, rounded; `None` when there are none or any
/// trial's count is missing (a median over the trials that happened to be
/// counted would hide the others).
pub(crate) fn median_count(counts: impl IntoIterator<Item = Option<u64>>) -> Option<u64> {
    let counts: Option<Vec<f64>> = counts.into_iter().map(|c| c.map(|n| n as f64)).collect();
    Summary::of(&counts?).map(|s| s.median.round() as u64)
}

/// Receives progress from long-running experiments.
pub trait Progress {
    /// `done` of `total` steps are finished; `what` names the step now running.
    fn update(&self, done: usize, total: usize, what: &str);
}

/// Progress that goes nowhere (tests, library callers that do not care).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&self, _done: usize, _total: usize, _what: &str) {}
}

/// Makes the folder an experiment works in (its runs' stderr, reports,
/// builds): an existing folder is used as it is; a missing one is created
/// only when its parent exists, so a mistyped path never creates a tree of
/// folders. Costs a `mkdir` and a `stat`.
pub fn work_folder(dir: &Path) -> Result<(), String> {
    let say = |what: String| format!("work folder {}: {what}", dir.display());
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => Err(say("not a folder".into())),
            Err(e) => Err(say(e.to_string())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(say(format!(
            "{} does not exist (only the last folder of the path is created)",
            dir.parent()
                .map_or("its parent".into(), |p| p.display().to_string())
        ))),
        Err(e) => Err(say(format!("cannot create it: {e}"))),
    }
}

/// Touches the next 256 KiB of this thread's stack, so that a measured loop
/// whose rare slow path (a system call, a lock) reaches deeper than before
/// does not take a page fault for the stack.
#[inline(never)]
pub(crate) fn grow_stack() {
    let deep = [0u8; 256 << 10];
    std::hint::black_box(&deep);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_work_folder_is_created_only_below_an_existing_parent() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("work");
        work_folder(&dir).unwrap();
        assert!(dir.is_dir());
        work_folder(&dir).unwrap();
        let deep = root.path().join("typo/work");
        let err = work_folder(&deep).unwrap_err();
        assert!(err.contains("typo does not exist"), "{err}");
        assert!(!root.path().join("typo").exists());
        let file = root.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(work_folder(&file).unwrap_err().contains("not a folder"));
    }

    #[test]
    fn summary_of_odd_and_even_counts() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
    }

    #[test]
    fn summary_of_nothing_or_nan() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
    }

    /// A fault source that replays readings: `Ok` counts or failures.
    pub(crate) struct Replay(pub(crate) RefCell<Vec<Result<u64, String>>>);

    impl Replay {
        pub(crate) fn boxed(readings: Vec<Result<u64, String>>) -> Box<dyn FaultSource> {
            Box::new(Replay(RefCell::new(readings.into_iter().rev().collect())))
        }
    }

    impl FaultSource for Replay {
        fn read(&self) -> Result<u64, String> {
            self.0
                .borrow_mut()
                .pop()
                .unwrap_or_else(|| Err("no more readings".into()))
        }
    }

    #[test]
    fn fault_spans_are_checked_and_say_why_they_are_missing() {
        let c = FaultCounter::new(Ok(Replay::boxed(vec![
            Ok(10),
            Ok(15),
            Err("EIO".into()),
            Ok(20),
            Ok(3),
        ])));
        let before = c.reading();
        assert_eq!(c.since(before), Some(5));
        assert_eq!(c.missing(), None);
        // The second reading fails: the span is missing, not 0 and not wrapped.
        assert_eq!(c.since(Some(15)), None);
        assert!(c.missing().unwrap().contains("EIO"));
        let before = c.reading();
        // 20 then 3: backwards is missing, not 2^64 - 17.
        assert_eq!(c.since(before), None);
        // The first reason is kept.
        assert!(c.missing().unwrap().contains("EIO"));

        let closed = FaultCounter::new(Err("perf is off".into()));
        assert_eq!(closed.since(closed.reading()), None);
        assert_eq!(closed.missing().as_deref(), Some("perf is off"));
    }

    #[test]
    fn a_median_count_needs_every_trial() {
        assert_eq!(median_count([Some(3), Some(1), Some(2)]), Some(2));
        assert_eq!(median_count([Some(3), None, Some(2)]), None);
        assert_eq!(median_count([]), None);
    }
}
