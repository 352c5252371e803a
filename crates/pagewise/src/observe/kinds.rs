//! The split of user-mode faults by kind: the counters that count each kind
//! (`exceptions:page_fault_user` filtered on its `error_code`), when they are
//! on, and how what they counted becomes an estimate of each kind with a 95%
//! range.
//!
//! The total of user-mode faults is exact (all faults minus those taken in
//! kernel mode). A tracepoint costs its record on every fault while it is on
//! (130 ns a fault on the AMD VM for one event, 220 ns for the four filtered
//! counters: 9–17% of a fault-bound run), so the counters are on for the
//! first [`KIND_CENSUS`] of the run (all of a short command), then for a
//! short [`Schedule::window`] at a random place in every [`Schedule::cycle`].
//! The four counters of a task are one perf group, switched by its leader
//! alone. Each time they go off, the switching thread records a
//! [`KindWindow`]: the faults of each kind while they were on, exactly.
//!
//! [`estimate`] adds up what the windows counted and splits the faults no
//! window saw as the windows after the first split theirs (a ratio
//! estimate); the range comes from how much those windows disagree. Short
//! windows at random places follow the phases of a program, which one fixed
//! 20 ms window of every 100 ms did not: a Python start-up through a pyenv
//! shim (bash, then python writing 80 MiB in a burst) was split 8,580 to
//! 19,372 writes against perf's 22,219 in four runs. Sampling the event
//! instead of counting each kind also erred within a window: in frequency
//! mode the kernel retunes the period at every tick and carries it over the
//! pauses and into children, so a short window of a thousand faults often
//! held one sample or none, and the recorded periods summed to 1.7 times the
//! faults counted. Counting costs no more: stat's overhead on a 1 GiB fill
//! stayed at 1.06 times the bare run's CPU time.

use super::report::FaultKinds;
use std::time::Duration;

/// `error_code` bits of an x86 page fault.
const PF_PROT: u64 = 1;
const PF_WRITE: u64 = 2;
const PF_INSTR: u64 = 16;

/// Each kind as the `error_code` bits it must have and must not have, in
/// the order of [`FaultKinds`]: write to an absent page, read of an absent
/// page, instruction fetch from an absent page, protection (a present page).
const KIND_BITS: [(u64, u64); 4] = [
    (PF_WRITE, PF_PROT | PF_INSTR),
    (0, PF_PROT | PF_INSTR | PF_WRITE),
    (PF_INSTR, PF_PROT),
    (PF_PROT, 0),
];

/// The tracepoint filter (kernel filter syntax) that counts kind `k` of
/// [`KIND_BITS`], for instance `(error_code & 2) && !(error_code & 17)`.
pub fn kind_filter(k: usize) -> String {
    match KIND_BITS[k] {
        (must, 0) => format!("error_code & {must}"),
        (0, never) => format!("!(error_code & {never})"),
        (must, never) => format!("(error_code & {must}) && !(error_code & {never})"),
    }
}

/// The counters are on for this long from the start of the run: a command
/// this short is counted whole.
pub const KIND_CENSUS: Duration = Duration::from_millis(20);
/// After [`KIND_CENSUS`], the counters are on for [`Schedule::window`] of
/// every [`Schedule::cycle`]: 0.5 ms of every 5 ms for a command, longer
/// cycles for a process with many threads, so that switching and reading
/// them costs at most about [`KIND_SWITCHES_PER_S`] system calls a second.
pub const KIND_CYCLE: Duration = Duration::from_millis(5);
/// A cycle is this many windows long: the counters are on a tenth of the
/// time after the first [`KIND_CENSUS`].
pub const KIND_DUTY: u32 = 10;
/// System calls a second the switching thread may spend on the fault-kind
/// counters (per task and cycle: an enable and a disable of the group, a
/// read of each counter).
pub const KIND_SWITCHES_PER_S: u64 = 2_000;
/// The confidence of the ranges.
pub const KIND_CONFIDENCE: f64 = 0.95;

/// What the fault-kind counters counted while they were on once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindWindow {
    /// Faults of each kind (the order of [`FaultKinds`]), exact.
    pub faults: [u64; 4],
    /// How long the counters were on (a window is longer than planned when
    /// the switching thread wakes late on a busy machine).
    pub on_for: Duration,
    /// The window at the start of the run ([`KIND_CENSUS`]).
    pub census: bool,
}

impl KindWindow {
    /// Faults of every kind.
    pub fn total(&self) -> u64 {
        self.faults.iter().sum()
    }

    /// Faults of kind `k` (all kinds: `None`) a second while on: a window
    /// that stayed on twice as long stands for the same time as the others.
    fn rate(&self, k: Option<usize>) -> f64 {
        let n = k.map_or_else(|| self.total(), |k| self.faults[k]);
        n as f64 / self.on_for.as_secs_f64().max(1e-6)
    }
}

/// When the fault-kind counters are on: [`KIND_CENSUS`] from the start, then
/// a window at a random offset in every cycle.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Length of a cycle.
    pub cycle: Duration,
    /// Length of the window in each cycle.
    pub window: Duration,
    rng: u64,
    /// The cycle whose offset was drawn last, and that offset.
    drawn: Option<(u64, Duration)>,
}

impl Schedule {
    /// A schedule for `groups` groups of fault-kind counters (one per task),
    /// with a random seed. No system call.
    pub fn new(groups: usize, seed: u64) -> Schedule {
        // Six system calls per group per cycle: enable and disable its
        // leader, read its four counters.
        let per_cycle = 6 * groups.max(1) as u64;
        let least = Duration::from_nanos(per_cycle * 1_000_000_000 / KIND_SWITCHES_PER_S);
        let cycle = KIND_CYCLE.max(least);
        Schedule {
            cycle,
            window: cycle / KIND_DUTY,
            // xorshift needs a state that is not zero.
            rng: seed | 1,
            drawn: None,
        }
    }

    /// Whether the counters should be on at `t` after the start, and how long
    /// until that changes (or the next cycle begins).
    pub fn at(&mut self, t: Duration) -> (bool, Duration) {
        if t < KIND_CENSUS {
            return (true, KIND_CENSUS - t);
        }
        let since = t - KIND_CENSUS;
        let cycle_ns = self.cycle.as_nanos().max(1);
        let index = (since.as_nanos() / cycle_ns) as u64;
        let start = Duration::from_nanos((index as u128 * cycle_ns) as u64);
        let offset = self.offset(index);
        let (on_from, on_until) = (start + offset, start + offset + self.window);
        if since < on_from {
            (false, on_from - since)
        } else if since < on_until {
            (true, on_until - since)
        } else {
            (false, start + self.cycle - since)
        }
    }

    /// Where the window of cycle `index` starts in it: uniform over the
    /// places a whole window fits.
    fn offset(&mut self, index: u64) -> Duration {
        if let Some((i, offset)) = self.drawn {
            if i == index {
                return offset;
            }
        }
        // xorshift64*: a few instructions; the windows need no better.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let room = (self.cycle - self.window).as_nanos() as u64;
        let offset = Duration::from_nanos(if room == 0 { 0 } else { r % room });
        self.drawn = Some((index, offset));
        offset
    }
}

/// A seed for [`Schedule::new`] that differs between runs (the clock and the pid).
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now ^ (u64::from(std::process::id()) << 32)
}

/// The two-sided 97.5% quantile of Student's t with `df` degrees of freedom
/// (for a 95% range from `df + 1` windows); the normal 1.96 in the limit.
fn t_975(df: u64) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df as usize - 1],
        // Cornish-Fisher: 1.96 + (z^3 + z) / (4 df), within 0.001 here.
        _ => 1.96 + 2.373 / df as f64,
    }
}

/// The Wilson score interval of a share `p` seen in `n` samples, at the
/// quantile `z`: unlike p ± z·sd it stays inside [0, 1] and is not empty
/// for a share of 0 or 1 (0 in 100 samples: up to 3.7%).
fn wilson(p: f64, n: f64, z: f64) -> (f64, f64) {
    if n <= 0.0 || !z.is_finite() {
        return (0.0, 1.0);
    }
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// The share of each kind in the faults no window saw, with its range.
#[derive(Debug, Clone, Copy)]
struct Shares {
    share: [f64; 4],
    low: [f64; 4],
    high: [f64; 4],
}

/// The shares of the faults outside the windows, from the windows after the
/// first (`later`, those that counted faults): the ratio over them of each
/// kind's fault rate to the rate of all faults, and its range from how much
/// they disagree (the ratio's variance over windows, Student's t with one
/// degree of freedom less than windows). Rates, not counts: each window
/// stands for the same stretch of its cycle however long it stayed on. A
/// kind whose share is the same in every window (none of it, or all) gets
/// the range that many windows allow for a share never seen to vary
/// (Wilson: 0 in 20 windows is up to 17%). With fewer than two such
/// windows, anything is possible: `guess` with ranges from 0 to 1.
fn outside_shares(later: &[&KindWindow], guess: [f64; 4]) -> Shares {
    let n = later.len();
    let x: f64 = later.iter().map(|w| w.rate(None)).sum();
    if n < 2 || x == 0.0 {
        return Shares {
            share: if x > 0.0 {
                std::array::from_fn(|k| later[0].faults[k] as f64 / later[0].total() as f64)
            } else {
                guess
            },
            low: [0.0; 4],
            high: [1.0; 4],
        };
    }
    let z = t_975(n as u64 - 1);
    let mut out = Shares {
        share: [0.0; 4],
        low: [0.0; 4],
        high: [0.0; 4],
    };
    for k in 0..4 {
        let r = later.iter().map(|w| w.rate(Some(k))).sum::<f64>() / x;
        let squares: f64 = later
            .iter()
            .map(|w| (w.rate(Some(k)) - r * w.rate(None)).powi(2))
            .sum();
        let variance = squares * n as f64 / (n - 1) as f64 / (x * x);
        let binomial = r * (1.0 - r);
        // The number of independent faults that would give this variance.
        let n_eff = if binomial > 0.0 && variance > 0.0 {
            binomial / variance
        } else {
            n as f64
        };
        let (low, high) = wilson(r, n_eff, z);
        out.share[k] = r;
        out.low[k] = low.min(r);
        out.high[k] = high.max(r);
    }
    out
}

/// Whole numbers that add up to `total`, each at least its `floor`, in
/// proportion to `estimates` above the floors: largest remainders, so no
/// part is floored to 0 while another takes the remainder.
pub fn apportion(estimates: [f64; 4], floors: [u64; 4], total: u64) -> [u64; 4] {
    let floor_sum: u64 = floors.iter().sum();
    if floor_sum > total {
        // Cannot happen with exact totals; keep the sum right regardless.
        return apportion(estimates, [0; 4], total);
    }
    let rest = (total - floor_sum) as f64;
    let above: [f64; 4] = std::array::from_fn(|k| (estimates[k] - floors[k] as f64).max(0.0));
    let above_sum: f64 = above.iter().sum();
    let quota: [f64; 4] = std::array::from_fn(|k| {
        if above_sum > 0.0 {
            above[k] / above_sum * rest
        } else {
            rest / 4.0
        }
    });
    let mut out: [u64; 4] = std::array::from_fn(|k| floors[k] + quota[k].floor() as u64);
    let mut left = total - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..4).collect();
    // Largest remainder first; on a tie, the larger estimate.
    order.sort_by(|&a, &b| {
        let (ra, rb) = (quota[a] - quota[a].floor(), quota[b] - quota[b].floor());
        rb.total_cmp(&ra)
            .then(estimates[b].total_cmp(&estimates[a]))
    });
    for &k in order.iter().cycle() {
        if left == 0 {
            break;
        }
        out[k] += 1;
        left -= 1;
    }
    out
}

/// The split of `total` user-mode faults by kind from the windows of the
/// fault-kind counters, with 95% ranges; `None` when the windows counted
/// nothing of a run with faults (nothing to split them by).
///
/// What the windows counted is exact, so each kind is at least that; the
/// faults no window saw (the rest of the run, and the few a command takes
/// between `fork` and `exec`) are split as the windows after the first
/// split theirs ([`outside_shares`]), and the parts add up to `total`
/// exactly ([`apportion`]). Cost: a pass over the windows.
pub fn estimate(windows: &[KindWindow], total: u64) -> Option<FaultKinds> {
    let seen: [u64; 4] = std::array::from_fn(|k| windows.iter().map(|w| w.faults[k]).sum());
    let seen_all: u64 = seen.iter().sum();
    if seen_all == 0 {
        return (total == 0).then(|| FaultKinds {
            exact: true,
            confidence: KIND_CONFIDENCE,
            ..FaultKinds::default()
        });
    }
    let counted = |w: &&KindWindow| w.total() > 0;
    let later: Vec<&KindWindow> = windows
        .iter()
        .filter(|w| !w.census)
        .filter(counted)
        .collect();
    let guess = std::array::from_fn(|k| seen[k] as f64 / seen_all as f64);
    let shares = outside_shares(&later, guess);
    let unseen = total.saturating_sub(seen_all) as f64;
    let point: [f64; 4] = std::array::from_fn(|k| seen[k] as f64 + shares.share[k] * unseen);
    let kinds = apportion(point, seen, total);
    let mut low = [0u64; 4];
    let mut high = [0u64; 4];
    for k in 0..4 {
        let others = seen_all - seen[k];
        let lo = seen[k] + (shares.low[k] * unseen).floor() as u64;
        let hi = seen[k] + (shares.high[k] * unseen).ceil() as u64;
        low[k] = lo.min(kinds[k]);
        high[k] = hi.min(total.saturating_sub(others)).max(kinds[k]);
    }
    Some(FaultKinds {
        write_absent: kinds[0],
        read_absent: kinds[1],
        fetch_absent: kinds[2],
        protection: kinds[3],
        samples: seen_all,
        samples_by_kind: seen,
        low_by_kind: low,
        high_by_kind: high,
        windows: windows.iter().filter(counted).count() as u64,
        confidence: KIND_CONFIDENCE,
        exact: seen_all >= total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(faults: [u64; 4]) -> KindWindow {
        KindWindow {
            faults,
            on_for: Duration::from_millis(1),
            census: false,
        }
    }

    /// The kind of a user-mode fault from its error code, as the kernel
    /// sets the bits: the reference the filters must agree with.
    fn fault_kind(error_code: u64) -> usize {
        if error_code & PF_PROT != 0 {
            3
        } else if error_code & PF_INSTR != 0 {
            2
        } else if error_code & PF_WRITE != 0 {
            0
        } else {
            1
        }
    }

    #[test]
    fn each_error_code_is_in_exactly_the_kind_its_bits_say() {
        assert_eq!(fault_kind(0x6), 0, "user write, not present");
        assert_eq!(fault_kind(0x4), 1, "user read, not present");
        assert_eq!(fault_kind(0x14), 2, "user instruction fetch");
        assert_eq!(
            fault_kind(0x7),
            3,
            "user write to a present page: copy-on-write"
        );
        assert_eq!(fault_kind(0x15), 3, "fetch from a present page: protection");
        // Every combination of the low five bits (present, write, user,
        // reserved, fetch) passes exactly one filter: its kind's.
        for code in 0..32u64 {
            let passes: Vec<usize> = (0..4)
                .filter(|&k| {
                    let (must, never) = KIND_BITS[k];
                    code & must == must && code & never == 0
                })
                .collect();
            assert_eq!(passes, vec![fault_kind(code)], "error_code {code:#x}");
        }
        assert_eq!(kind_filter(0), "(error_code & 2) && !(error_code & 17)");
        assert_eq!(kind_filter(1), "!(error_code & 19)");
        assert_eq!(kind_filter(2), "(error_code & 16) && !(error_code & 1)");
        assert_eq!(kind_filter(3), "error_code & 1");
    }

    #[test]
    fn largest_remainders_add_up_and_never_floor_a_seen_kind_to_zero() {
        let third = 10.0 / 3.0;
        assert_eq!(
            apportion([third, third, third, 0.0], [0; 4], 10),
            [4, 3, 3, 0]
        );
        // A kind keeps at least what was counted of it.
        let parts = apportion([99.6, 0.3, 0.1, 0.0], [50, 1, 1, 0], 100);
        assert_eq!(parts, [98, 1, 1, 0]);
        // Flooring each share would give 99 + 0 + 0 + 0 and leave the 1 to
        // whichever kind takes the remainder.
        assert_eq!(
            apportion([99.6, 0.3, 0.1, 0.0], [0; 4], 100),
            [100, 0, 0, 0]
        );
    }

    /// The first window of a short run: 70 faults of every kind.
    const CENSUS: KindWindow = KindWindow {
        faults: [10, 20, 30, 10],
        on_for: KIND_CENSUS,
        census: true,
    };

    #[test]
    fn a_run_counted_whole_is_exact() {
        let k = estimate(&[CENSUS], 70).unwrap();
        assert!(k.exact, "{k:?}");
        assert_eq!(
            [k.write_absent, k.read_absent, k.fetch_absent, k.protection],
            [10, 20, 30, 10]
        );
        assert_eq!(k.low_by_kind, k.high_by_kind);
    }

    #[test]
    fn faults_outside_every_window_widen_the_range_never_below_what_was_counted() {
        // The census saw 70; 3 faults (before exec) were not seen.
        let k = estimate(&[CENSUS], 73).unwrap();
        assert!(!k.exact);
        assert_eq!(k.total(), 73);
        for i in 0..4 {
            assert_eq!(k.low_by_kind[i], CENSUS.faults[i], "{k:?}");
            assert_eq!(k.high_by_kind[i], CENSUS.faults[i] + 3, "{k:?}");
        }
    }

    #[test]
    fn a_kind_in_few_windows_gets_a_wide_range_and_one_in_none_a_top_above_zero() {
        // 20 windows of 1,000 faults, all writes, except a burst of reads in two.
        let mut ws: Vec<KindWindow> = (0..20).map(|_| window([1000, 0, 0, 0])).collect();
        ws[3] = window([0, 1000, 0, 0]);
        ws[11] = window([250, 750, 0, 0]);
        let k = estimate(&ws, 200_000).unwrap();
        assert_eq!(k.total(), 200_000);
        // Reads: 1.75 of 20 windows, about 17,500 of 200,000.
        assert!((17_000..18_000).contains(&k.read_absent), "{k:?}");
        let (lo, hi) = (k.low_by_kind[1], k.high_by_kind[1]);
        assert!(
            lo < 8_000 && hi > 35_000,
            "two windows decide it: {lo}–{hi}"
        );
        // Never counted: 0 here, but not surely 0 outside the windows.
        assert_eq!(k.fetch_absent, 0);
        assert!(k.high_by_kind[2] > 10_000, "{k:?}");
    }

    #[test]
    fn many_agreeing_windows_give_a_narrow_range() {
        let ws: Vec<KindWindow> = (0..100)
            .map(|i| window([1800 + i % 7, 200 - i % 7, 0, 0]))
            .collect();
        let k = estimate(&ws, 2_000_000).unwrap();
        let (n, lo, hi) = k.write_absent_range();
        assert!((1_795_000..1_805_000).contains(&n), "{k:?}");
        assert!(lo < n && hi > n, "{lo}–{hi}");
        assert!(hi - lo < 10_000, "100 windows that agree: {lo}–{hi}");
    }

    #[test]
    fn a_window_left_on_longer_stands_for_no_more_of_the_run() {
        // Ten windows of a run that faults as much in writes as in reads; the
        // switching thread woke late in the five that saw only writes.
        let mut ws: Vec<KindWindow> = (0..5).map(|_| window([0, 100, 0, 0])).collect();
        ws.extend((0..5).map(|_| KindWindow {
            on_for: Duration::from_millis(4),
            ..window([400, 0, 0, 0])
        }));
        let k = estimate(&ws, 100_000).unwrap();
        assert!(k.write_absent.abs_diff(50_000) < 2_000, "{k:?}");
    }

    #[test]
    fn without_counts_there_is_no_split_unless_there_were_no_faults() {
        assert_eq!(estimate(&[window([0; 4])], 10), None);
        assert!(estimate(&[], 0).unwrap().exact);
    }

    #[test]
    fn the_schedule_is_on_for_the_census_then_one_window_per_cycle() {
        let mut s = Schedule::new(1, 7);
        assert_eq!(s.cycle, KIND_CYCLE);
        assert_eq!(s.at(Duration::ZERO), (true, KIND_CENSUS));
        let step = Duration::from_micros(50);
        let mut on = Duration::ZERO;
        let mut t = KIND_CENSUS;
        let end = KIND_CENSUS + s.cycle * 100;
        let mut starts = std::collections::BTreeSet::new();
        while t < end {
            let (now_on, _) = s.at(t);
            if now_on {
                on += step;
                if !s.at(t - step).0 {
                    starts.insert(((t - KIND_CENSUS).as_nanos() % s.cycle.as_nanos()) / 1_000_000);
                }
            }
            t += step;
        }
        let expected = s.window * 100;
        assert!(
            on.abs_diff(expected) <= step * 200,
            "{on:?} vs {expected:?}"
        );
        // The windows start at different places in their cycles.
        assert!(starts.len() >= 5, "{starts:?}");
        // Many threads: longer cycles, the same share on.
        let many = Schedule::new(100, 7);
        assert!(many.cycle > KIND_CYCLE);
        assert_eq!(many.window * KIND_DUTY, many.cycle);
    }
}
