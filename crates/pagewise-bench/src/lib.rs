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
//!
//! Rules every experiment follows (see docs/BENCHMARKS.md): the baseline is
//! measured in the same run, trials are interleaved where possible, results are
//! medians with min–max ([`Summary`]), and comparisons are ratios of medians.
//! Every report carries the [`Machine`] it ran on.
//!
//! The experiments that need another process do not know the `pagewise`
//! command line: the caller passes in how to start it ([`queue::Spawn`],
//! [`heap_churn::WorkerSpawner`], [`itlb::HugeTextRunner`]), so the flag names
//! live in the CLI alone. Long experiments report progress through
//! [`Progress`].
//!
//! Everything an experiment reads is in this crate: the fleet size
//! distributions are compiled in ([`fleet::FleetDistribution::builtin`]; their
//! source and licence are in `data/NOTICE.md`).

#![warn(missing_docs)]
// Benchmarks are safe Rust on pagewise's API; `unsafe` stays in `pagewise::sys`.
#![forbid(unsafe_code)]

pub mod first_touch;
pub mod fleet;
pub mod heap_churn;
pub mod itlb;
mod machine;
pub mod memcpy;
pub mod mmap_prefault;
pub mod queue;

use serde::Serialize;

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
}
