//! The process copier's choice of how many pages its non-temporal copy
//! interleaves, made by timing them on this machine.
//!
//! The best count differs between machines of one vendor: at 1 GiB, 16 or
//! 32 streams were fastest on Emerald Rapids guests (32: 1.09-1.18 of
//! glibc), 4 on a Sapphire Rapids-class guest (family 6 model 167), where
//! 32 ran at 0.96 of glibc aligned and 0.91 misaligned while 4 reached
//! 1.03 (the `bench memcpy` limit row, three runs). A measured plan
//! (`pagewise tune`) fixes the count; without one, the process copier's
//! first large non-temporal copies are cut into segments of
//! [`SEGMENT`] bytes, each copied with the next candidate in turn and
//! timed, and once every candidate has [`SAMPLES`] segments the count
//! with the lowest median time serves every later copy. Interleaving the
//! candidates segment by segment puts them through the same noise, and
//! each copy starts the rotation one candidate further on, so that no
//! candidate always gets the same place in a copy (its first segment, say)
//! when copies of one size repeat. One copy is timed at a time: a copy that
//! finds another thread's copy being timed (`copy_parallel`, or callers on
//! several threads) runs untimed, so contention within the process does
//! not decide.
//!
//! Costs: a clock read and two uncontended locks per segment (tens of
//! nanoseconds against the hundreds of microseconds a segment takes),
//! while timing; afterwards one relaxed load per large copy.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Bytes per timed segment: 32 chunks of the widest candidate (32 pages).
pub const SEGMENT: usize = 4 << 20;
/// Timed segments per candidate before the choice is made.
pub const SAMPLES: usize = 32;
/// Most candidates a trial holds.
pub const MAX_CANDIDATES: usize = 4;
/// Copies shorter than this are not cut up (they take the table's count or
/// the chosen one): a timed segment per candidate and the last segment,
/// which is never timed.
pub const TIMED_MIN: usize = (MAX_CANDIDATES + 1) * SEGMENT;

/// The candidates and the times of the segments copied so far with each.
#[derive(Debug)]
struct Samples {
    /// The candidates (the first `len` entries).
    candidates: [u8; MAX_CANDIDATES],
    len: usize,
    nanos: [[u64; SAMPLES]; MAX_CANDIDATES],
    counts: [usize; MAX_CANDIDATES],
}

/// One process's trial of stream counts (see the module).
#[derive(Debug)]
pub struct StreamTrial {
    /// Whether copies are being timed.
    timing: AtomicBool,
    /// The count chosen, 0 until then.
    chosen: AtomicU8,
    /// Timed copies so far: where the next one starts the rotation.
    turn: AtomicUsize,
    /// A copy is being timed.
    busy: AtomicBool,
    samples: Mutex<Samples>,
}

impl StreamTrial {
    const fn new() -> StreamTrial {
        StreamTrial {
            timing: AtomicBool::new(false),
            chosen: AtomicU8::new(0),
            turn: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            samples: Mutex::new(Samples {
                candidates: [0; MAX_CANDIDATES],
                len: 0,
                nanos: [[0; SAMPLES]; MAX_CANDIDATES],
                counts: [0; MAX_CANDIDATES],
            }),
        }
    }

    /// Starts timing `candidates` (at most four are kept; none or one: no
    /// trial). Forgets an earlier choice.
    fn start(&self, candidates: &[u8]) {
        let candidates = &candidates[..candidates.len().min(MAX_CANDIDATES)];
        self.timing.store(false, Ordering::Release);
        self.chosen.store(0, Ordering::Relaxed);
        let mut samples = self.lock();
        samples.counts = [0; MAX_CANDIDATES];
        samples.candidates[..candidates.len()].copy_from_slice(candidates);
        samples.len = candidates.len();
        drop(samples);
        self.timing.store(candidates.len() > 1, Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Samples> {
        // A copy that panicked mid-record left valid numbers behind.
        self.samples.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The count chosen so far, if any.
    fn chosen(&self) -> Option<u8> {
        match self.chosen.load(Ordering::Relaxed) {
            0 => None,
            k => Some(k),
        }
    }

    /// Where a new timed copy starts the rotation.
    fn first_turn(&self) -> usize {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    /// The candidate for turn `turn`, with its index.
    fn candidate(&self, turn: usize) -> (usize, u8) {
        let s = self.lock();
        let i = turn % s.len.max(1);
        (i, s.candidates[i])
    }

    /// Records one segment's time; chooses once every candidate has
    /// [`SAMPLES`].
    fn record(&self, index: usize, nanos: u64) {
        let mut s = self.lock();
        if !self.timing.load(Ordering::Relaxed) {
            return;
        }
        let n = s.counts[index];
        if n < SAMPLES {
            s.nanos[index][n] = nanos;
            s.counts[index] = n + 1;
        }
        if s.counts[..s.len].iter().all(|&c| c == SAMPLES) {
            let best = (0..s.len)
                .min_by_key(|&i| median(s.nanos[i]))
                .expect("a trial has candidates");
            self.chosen.store(s.candidates[best], Ordering::Relaxed);
            self.timing.store(false, Ordering::Release);
        }
    }
}

fn median(mut v: [u64; SAMPLES]) -> u64 {
    v.sort_unstable();
    v[SAMPLES / 2]
}

/// The process copier's trial.
static PROCESS_TRIAL: StreamTrial = StreamTrial::new();

/// Starts timing `candidates` for the process copier's non-temporal copies
/// (see the module); the copy layer calls it when the plan is not measured.
pub fn time_process_streams(candidates: &[u8]) {
    PROCESS_TRIAL.start(candidates);
}

/// The stream count the process copier chose by timing, `None` while it
/// times (or when it does not).
pub fn process_streams_chosen() -> Option<u8> {
    PROCESS_TRIAL.chosen()
}

/// Copies `n` bytes with `copy(dst, src, len, streams)`, the non-temporal
/// kernel, choosing `streams`: the table's `streams` unless `is_process`
/// and the process trial has chosen one (then that) or is timing (then
/// segment by segment, see the module).
///
/// `copy` is called only with `dst`/`src` advanced together by the same
/// offset and `len` reaching at most to `n`.
pub(super) fn copy_nontemporal_chosen(
    dst: *mut u8,
    src: *const u8,
    n: usize,
    streams: usize,
    is_process: bool,
    copy: impl Fn(*mut u8, *const u8, usize, usize),
) {
    if !is_process {
        return copy(dst, src, n, streams);
    }
    copy_in_trial(&PROCESS_TRIAL, dst, src, n, streams, copy)
}

/// [`copy_nontemporal_chosen`] for a copy that belongs to `trial`.
fn copy_in_trial(
    trial: &StreamTrial,
    dst: *mut u8,
    src: *const u8,
    n: usize,
    streams: usize,
    copy: impl Fn(*mut u8, *const u8, usize, usize),
) {
    if let Some(k) = trial.chosen() {
        return copy(dst, src, n, usize::from(k));
    }
    if n < TIMED_MIN
        || !trial.timing.load(Ordering::Acquire)
        || trial
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return copy(dst, src, n, streams);
    }
    let mut done = 0;
    let mut turn = trial.first_turn();
    // The last segment and the rest untimed, with the table's count.
    while n - done >= 2 * SEGMENT && trial.timing.load(Ordering::Relaxed) {
        let (index, k) = trial.candidate(turn);
        turn += 1;
        let start = Instant::now();
        copy(
            dst.wrapping_add(done),
            src.wrapping_add(done),
            SEGMENT,
            usize::from(k),
        );
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        trial.record(index, nanos);
        done += SEGMENT;
    }
    trial.busy.store(false, Ordering::Release);
    let k = trial.chosen().map_or(streams, usize::from);
    copy(dst.wrapping_add(done), src.wrapping_add(done), n - done, k);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_candidate_with_the_lowest_median_is_chosen_once_all_have_their_samples() {
        let trial = StreamTrial::new();
        trial.start(&[4, 8, 16, 32]);
        // 8 streams: fastest median, though its slowest segment is the
        // slowest of all (an outlier must not decide).
        for round in 0..SAMPLES {
            for (i, base) in [(0, 110), (1, 100), (2, 105), (3, 120)] {
                assert_eq!(trial.chosen(), None);
                let outlier = if i == 1 && round == 0 { 10_000 } else { 0 };
                trial.record(i, base + outlier);
            }
        }
        assert_eq!(trial.chosen(), Some(8));
        assert!(!trial.timing.load(Ordering::Relaxed));
        // Restarting forgets the choice.
        trial.start(&[4, 32]);
        assert_eq!(trial.chosen(), None);
        assert!(trial.timing.load(Ordering::Relaxed));
    }

    #[test]
    fn one_candidate_is_no_trial() {
        let trial = StreamTrial::new();
        trial.start(&[32]);
        assert!(!trial.timing.load(Ordering::Relaxed));
        trial.start(&[]);
        assert!(!trial.timing.load(Ordering::Relaxed));
    }

    #[test]
    fn segments_rotate_over_the_candidates_and_each_copy_starts_one_further() {
        let trial = StreamTrial::new();
        trial.start(&[4, 8, 16, 32]);
        // Two copies of four timed segments each: without the shift each
        // candidate would get the same place in both.
        let mut places = Vec::new();
        for _ in 0..2 {
            let first = trial.first_turn();
            places.push(
                (0..4)
                    .map(|j| trial.candidate(first + j).1)
                    .collect::<Vec<u8>>(),
            );
        }
        assert_eq!(places, [vec![4, 8, 16, 32], vec![8, 16, 32, 4]]);
    }

    #[test]
    fn a_copy_while_another_is_timed_runs_untimed_with_the_table_count() {
        // Busy means another thread's copy holds the timing.
        let trial = StreamTrial::new();
        trial.start(&[4, 8]);
        trial.busy.store(true, Ordering::Relaxed);
        let calls = std::cell::RefCell::new(Vec::new());
        copy_in_trial(
            &trial,
            std::ptr::null_mut(),
            std::ptr::null(),
            8 * SEGMENT,
            32,
            |_, _, len, k| calls.borrow_mut().push((len, k)),
        );
        assert_eq!(*calls.borrow(), [(8 * SEGMENT, 32)]);
        trial.busy.store(false, Ordering::Relaxed);
        calls.borrow_mut().clear();
        copy_in_trial(
            &trial,
            std::ptr::null_mut(),
            std::ptr::null(),
            8 * SEGMENT + 100,
            32,
            |_, _, len, k| calls.borrow_mut().push((len, k)),
        );
        // Seven timed segments alternating 4 and 8, then the rest with 32.
        let calls = calls.into_inner();
        assert_eq!(calls.len(), 8, "{calls:?}");
        assert!(calls[..7]
            .iter()
            .all(|&(len, k)| len == SEGMENT && (k == 4 || k == 8)));
        assert_eq!(calls[7], (SEGMENT + 100, 32));
        assert!(!trial.busy.load(Ordering::Relaxed));
    }
}
