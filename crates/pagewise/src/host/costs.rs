//! What memory operations cost on this machine, measured on it rather than
//! assumed: the CPU time of a 4 KiB first-touch write fault (the kernel
//! allocates, zeroes and maps a page) and of rewriting 4 KiB that is already
//! resident (what writing a page costs without the fault). Their difference
//! is the fault's overhead beyond zeroing: what a huge page saves per 4 KiB.
//!
//! The fault cost differs by a factor of four or more between machines (about
//! 1.4 µs on an AMD Zen 5 VM, 2 µs on an Intel Emerald Rapids VM, 6.5 µs on an
//! AVX2 Zen 3 VM), so `pagewise stat` measures it instead of carrying a number.
//!
//! Cost: [`ROUNDS`] rounds of [`PAGES`] fresh pages, timed with the thread's
//! CPU clock (so time spent preempted on a loaded machine is not counted),
//! median of the rounds: 7 ms at 1.4 µs a fault, 35 ms at 6.5 µs. That is
//! below the ~50 ms a per-machine cache would be worth (and a cache would go
//! stale when the kernel, THP settings or the VM's host change), so it is
//! measured on every call and never cached.

use crate::sys::mem::{Advice, AnonMapping, MapOptions};
use crate::sys::{clock, time, SysError};
use std::time::{Duration, Instant};

/// Fresh 4 KiB pages faulted in each round (4 MiB).
pub const PAGES: usize = 1024;
/// Rounds; the median is kept.
pub const ROUNDS: usize = 5;
const PAGE: usize = 4096;

/// Measured costs of the memory path on this machine.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultCosts {
    /// CPU seconds of one first-touch write fault on a 4 KiB page (median of the rounds).
    pub fault_s: f64,
    /// The fastest and the slowest round's fault cost.
    pub fault_range_s: (f64, f64),
    /// CPU seconds to rewrite 4 KiB that is already resident (median of the rounds).
    pub rewrite_s: f64,
    /// Faults the kernel counted in the median round (should be [`PAGES`]).
    pub faults_per_round: u64,
    /// Rounds and pages per round.
    pub rounds: usize,
    /// Pages per round.
    pub pages: usize,
    /// Wall time of the whole calibration.
    pub took: Duration,
}

impl FaultCosts {
    /// What a fault costs beyond writing the page: the part a huge page saves
    /// per 4 KiB when one fault replaces 512 (never negative).
    pub fn overhead_s(&self) -> f64 {
        (self.fault_s - self.rewrite_s).max(0.0)
    }
}

/// Why the costs could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The scratch mapping could not be made.
    #[error("cannot map {bytes} bytes to time page faults: {error}")]
    Map {
        /// Bytes asked for.
        bytes: usize,
        /// The failed call.
        error: SysError,
    },
    /// The thread's fault counter did not move: the pages were not faulted one by one.
    #[error(
        "touching {pages} fresh pages took only {faults} page faults (transparent huge pages \
         despite MADV_NOHUGEPAGE?); the per-fault cost cannot be measured this way"
    )]
    NoFaults {
        /// Pages touched.
        pages: usize,
        /// Faults counted.
        faults: u64,
    },
}

/// One round: the CPU time of first-touch writes to `PAGES` fresh pages,
/// the faults they took, and the CPU time of rewriting them whole.
fn round() -> Result<(f64, u64, f64), CalibrationError> {
    let bytes = PAGES * PAGE;
    let mut map = AnonMapping::map(bytes, MapOptions::default())
        .map_err(|error| CalibrationError::Map { bytes, error })?;
    // Only 4 KiB faults are timed; a kernel built without THP refuses the advice,
    // and then there are no huge pages to avoid.
    let _ = map.advise(0, bytes, Advice::NoHugePage);
    let slice = map.as_mut_slice();
    let faults_before = time::thread_usage().map_or(0, |u| u.minor_faults);
    let t0 = clock::thread_cpu_ns();
    for page in slice.chunks_exact_mut(PAGE) {
        page[0] = 1;
    }
    std::hint::black_box(&mut *slice);
    let t1 = clock::thread_cpu_ns();
    let faults_after = time::thread_usage().map_or(0, |u| u.minor_faults);
    for (i, page) in slice.chunks_exact_mut(PAGE).enumerate() {
        page.fill(i as u8);
    }
    std::hint::black_box(&mut *slice);
    let t2 = clock::thread_cpu_ns();
    let faults = faults_after.saturating_sub(faults_before);
    let touch_s = (t1 - t0) as f64 * 1e-9;
    let rewrite_s = (t2 - t1) as f64 * 1e-9 / PAGES as f64;
    Ok((touch_s, faults, rewrite_s))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures [`FaultCosts`] on the calling thread: [`ROUNDS`] rounds of
/// [`PAGES`] fresh 4 KiB pages (`MADV_NOHUGEPAGE`), each touched once, then
/// rewritten whole. About 5–40 ms, depending on the machine.
pub fn measure() -> Result<FaultCosts, CalibrationError> {
    let start = Instant::now();
    let mut per_fault = Vec::with_capacity(ROUNDS);
    let mut rewrite = Vec::with_capacity(ROUNDS);
    let mut fault_counts = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (touch_s, faults, rewrite_s) = round()?;
        // Fewer faults than pages means larger pages were mapped: not a 4 KiB fault.
        if faults * 2 < PAGES as u64 {
            return Err(CalibrationError::NoFaults {
                pages: PAGES,
                faults,
            });
        }
        per_fault.push(touch_s / faults as f64);
        rewrite.push(rewrite_s);
        fault_counts.push(faults);
    }
    let lowest = per_fault.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = per_fault.iter().copied().fold(0.0, f64::max);
    fault_counts.sort_unstable();
    Ok(FaultCosts {
        fault_s: median(&mut per_fault),
        fault_range_s: (lowest, highest),
        rewrite_s: median(&mut rewrite),
        faults_per_round: fault_counts[fault_counts.len() / 2],
        rounds: ROUNDS,
        pages: PAGES,
        took: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [5.0, 1.0, 4.0, 2.0, 3.0]), 3.0);
    }

    #[test]
    fn a_fault_costs_more_than_rewriting_the_page_and_is_measured_quickly() {
        let c = measure().unwrap();
        assert_eq!(c.rounds, ROUNDS);
        assert!(
            c.faults_per_round >= PAGES as u64 / 2,
            "{} faults for {PAGES} pages",
            c.faults_per_round
        );
        // Wide bounds: any machine allocates, zeroes and maps a page in more
        // than 100 ns and less than 1 ms, and takes longer for it than for
        // writing a page that is already there.
        assert!(c.fault_s > 1e-7 && c.fault_s < 1e-3, "{c:?}");
        assert!(c.rewrite_s > 0.0 && c.rewrite_s < c.fault_s, "{c:?}");
        assert!(c.fault_range_s.0 <= c.fault_s && c.fault_s <= c.fault_range_s.1);
        assert!((c.overhead_s() - (c.fault_s - c.rewrite_s)).abs() < 1e-12);
    }
}
