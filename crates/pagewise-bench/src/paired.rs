//! Statistics of paired runs: the median of per-pair values (ratios or
//! differences of "with" against "without") and a distribution-free
//! confidence interval for it, and the verdict a user reads.
//!
//! **Why this interval.** Each pair gives one value (say the wall-time ratio
//! with the fix over without it). The interval is the one from the sign test
//! (order statistics of the per-pair values, with binomial coverage): for `n`
//! pairs it is `[x(k), x(n+1-k)]`, with the largest `k` whose exact coverage
//! `1 − 2·P(Binomial(n, ½) ≤ k−1)` is at least the level asked for. It
//! assumes only that pairs are independent, and is exact for any
//! distribution: on a shared machine the per-pair noise is skewed (a
//! neighbour's build slows some runs a lot, none run faster than the
//! machine), which breaks the symmetry the Wilcoxon signed-rank interval
//! needs, and at the 10–20 pairs a user runs a percentile bootstrap of a
//! median covers less than it claims and gives a different answer for the
//! same data on each call. The price is width (about one more pair on each
//! side than Wilcoxon): an interval that says "within noise" a little more
//! often, never one that claims an effect that is not there more often than
//! the level allows. With a randomised order inside each pair, a change that
//! does nothing gives per-pair ratios whose median is 1 exactly, so a no-op
//! lands outside the interval with probability at most `1 − coverage`.

use serde::Serialize;

/// The median of some per-pair values and a confidence interval for it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The median of the per-pair values.
    pub estimate: f64,
    /// Lower end: the `k`-th smallest value.
    pub low: f64,
    /// Upper end: the `k`-th largest value.
    pub high: f64,
    /// The interval's exact coverage for the median (at least the level asked
    /// for, unless there were too few pairs to reach it: then the most there is).
    pub confidence: f64,
}

/// `P(X ≤ j)` for `X ~ Binomial(n, ½)`, summed in log space (any `n`).
/// Costs `O(j)`.
pub fn binomial_half_cdf(n: usize, j: usize) -> f64 {
    if j >= n {
        return 1.0;
    }
    let mut log_pmf = -(n as f64) * std::f64::consts::LN_2;
    let mut total = log_pmf.exp();
    for i in 0..j {
        log_pmf += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
        total += log_pmf.exp();
    }
    total.min(1.0)
}

/// The exact coverage of `[x(k), x(n+1-k)]` (1-based order statistics) for the
/// median of `n` values: `1 − 2·P(Binomial(n, ½) ≤ k−1)`.
pub fn order_statistic_coverage(n: usize, k: usize) -> f64 {
    if k == 0 || 2 * k > n + 1 {
        return 0.0;
    }
    (1.0 - 2.0 * binomial_half_cdf(n, k - 1)).max(0.0)
}

/// The median of `values` with its sign-test confidence interval at
/// `confidence` (e.g. 0.95). `None` when there are no values, any is NaN, or
/// `confidence` is not in (0, 1). With too few values to reach `confidence`
/// the interval is their whole range and [`Interval::confidence`] says what
/// it covers (5 pairs: 93.75%). Costs a sort of a copy of the values.
pub fn median_interval(values: &[f64], confidence: f64) -> Option<Interval> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    if !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let estimate = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    // The largest k that still covers `confidence`; coverage falls as k grows.
    let mut k = 1;
    while order_statistic_coverage(n, k + 1) >= confidence {
        k += 1;
    }
    Some(Interval {
        estimate,
        low: sorted[k - 1],
        high: sorted[n - k],
        confidence: order_statistic_coverage(n, k),
    })
}

/// Per-pair ratios `with[i] / without[i]`. A pair where both are 0 counts as
/// 1 (no change) among pairs that are not; `None` when some pair has 0
/// "without" and more "with" (no finite ratio: compare differences
/// instead), when every pair is 0 on both sides (nothing was measured to
/// compare: a ratio of 1 would claim a result), or the lengths differ.
pub fn ratios(with: &[f64], without: &[f64]) -> Option<Vec<f64>> {
    if with.len() != without.len() || with.iter().chain(without).all(|&v| v == 0.0) {
        return None;
    }
    with.iter()
        .zip(without)
        .map(|(&a, &b)| match (a, b) {
            (a, b) if a == 0.0 && b == 0.0 => Some(1.0),
            (_, b) if b <= 0.0 => None,
            (a, b) => Some(a / b),
        })
        .collect()
}

/// Per-pair differences `with[i] − without[i]`; `None` when the lengths differ.
pub fn differences(with: &[f64], without: &[f64]) -> Option<Vec<f64>> {
    (with.len() == without.len()).then(|| with.iter().zip(without).map(|(a, b)| a - b).collect())
}

/// `fraction` (from 0 to 1) as a percentage, without the `%`: with
/// `decimals` decimals, or more (up to 12) where that many would round a
/// fraction below 1 up to `100` or one above 0 down to `0`
/// (`percent(0.9999990, 1)` is `99.9999`, not `100.0`). Free.
pub fn percent(fraction: f64, decimals: usize) -> String {
    let p = fraction * 100.0;
    let mut d = decimals;
    loop {
        let text = format!("{p:.d$}");
        let shown: f64 = text.parse().unwrap_or(p);
        let misleading = (shown >= 100.0 && fraction < 1.0) || (shown <= 0.0 && fraction > 0.0);
        if !misleading || d >= 12 {
            return text;
        }
        d += 1;
    }
}

/// A confidence level (e.g. 0.95) as a percentage without the `%`, with
/// the decimals it was given with: `95`, `97.5`, `99.9999` (never `100` for
/// a level below 1). Free.
pub fn level_percent(level: f64) -> String {
    let p = level * 100.0;
    let exact = (0..=9)
        .find(|&d| {
            format!("{p:.d$}")
                .parse::<f64>()
                .is_ok_and(|shown| (shown - p).abs() < 1e-9)
        })
        .unwrap_or(9);
    percent(level, exact)
}

/// What a ratio interval (of a lower-is-better quantity, "with" over
/// "without") says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The whole interval is below 1: the change made it smaller (faster).
    Helped,
    /// The whole interval is above 1: the change made it larger (slower).
    Hurt,
    /// The interval holds 1: no difference this run could tell from noise.
    WithinNoise,
    /// Too few pairs for an interval at the level asked for (the sign test
    /// needs 6 pairs for 95%): no verdict, whatever the interval says.
    TooFewPairs,
}

impl Verdict {
    /// The verdict of a ratio interval made at `level` (e.g. 0.95): none
    /// ([`Verdict::TooFewPairs`]) when the interval covers less than that.
    pub fn of_ratio(interval: &Interval, level: f64) -> Verdict {
        if interval.confidence < level {
            Verdict::TooFewPairs
        } else if interval.high < 1.0 {
            Verdict::Helped
        } else if interval.low > 1.0 {
            Verdict::Hurt
        } else {
            Verdict::WithinNoise
        }
    }

    /// `helped`, `hurt`, `within noise` or `too few pairs`.
    pub fn words(self) -> &'static str {
        match self {
            Verdict::Helped => "helped",
            Verdict::Hurt => "hurt",
            Verdict::WithinNoise => "within noise",
            Verdict::TooFewPairs => "too few pairs",
        }
    }
}

/// The fewest values whose sign-test interval of the median covers `level`
/// (6 for 95%, 8 for 99%); `None` for a level outside (0, 1). Costs
/// `O(n²)` in the answer.
pub fn pairs_needed(level: f64) -> Option<usize> {
    if !(level > 0.0 && level < 1.0) {
        return None;
    }
    (1..).find(|&n| order_statistic_coverage(n, 1) >= level)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn binomial_cdf_matches_exact_counts() {
        // n = 10: C(10,0) + C(10,1) = 11 of 1024.
        assert!((binomial_half_cdf(10, 1) - 11.0 / 1024.0).abs() < 1e-12);
        assert!((binomial_half_cdf(4, 2) - 11.0 / 16.0).abs() < 1e-12);
        assert_eq!(binomial_half_cdf(3, 3), 1.0);
        // Large n stays finite and sane (no underflow of 2^-n to 0 before the sum).
        let p = binomial_half_cdf(2000, 1000);
        assert!(p > 0.5 && p < 0.52, "{p}");
    }

    /// The order statistics the published sign-test tables give for 95%.
    #[test]
    fn interval_ranks_match_the_tables() {
        let ranks = |n: usize| {
            let values: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            let i = median_interval(&values, 0.95).unwrap();
            (i.low as usize, i.high as usize, i.confidence)
        };
        // n = 6: [x1, x6], 96.875%; n = 10: [x2, x9], 97.85%; n = 20: [x6, x15], 95.86%.
        let (l, h, c) = ranks(6);
        assert_eq!((l, h), (1, 6));
        assert!((c - 0.96875).abs() < 1e-9);
        let (l, h, c) = ranks(10);
        assert_eq!((l, h), (2, 9));
        assert!((c - (1.0 - 22.0 / 1024.0)).abs() < 1e-9);
        let (l, h, c) = ranks(20);
        assert_eq!((l, h), (6, 15));
        assert!((c - 0.958611).abs() < 1e-5, "{c}");
    }

    #[test]
    fn too_few_pairs_say_what_they_cover() {
        let i = median_interval(&[1.0, 3.0, 2.0, 5.0, 4.0], 0.95).unwrap();
        assert_eq!((i.low, i.estimate, i.high), (1.0, 3.0, 5.0));
        assert!((i.confidence - 0.9375).abs() < 1e-12);
        let one = median_interval(&[2.0], 0.95).unwrap();
        assert_eq!(
            (one.low, one.estimate, one.high, one.confidence),
            (2.0, 2.0, 2.0, 0.0)
        );
        assert_eq!(median_interval(&[], 0.95), None);
        assert_eq!(median_interval(&[1.0, f64::NAN], 0.95), None);
        assert_eq!(median_interval(&[1.0], 1.0), None);
    }

    #[test]
    fn ratios_and_differences_pair_by_index() {
        assert_eq!(ratios(&[2.0, 0.0], &[4.0, 0.0]), Some(vec![0.5, 1.0]));
        assert_eq!(ratios(&[1.0], &[0.0]), None);
        // 0 on both sides in every pair: nothing to take a ratio of.
        assert_eq!(ratios(&[0.0, 0.0], &[0.0, 0.0]), None);
        assert_eq!(ratios(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(differences(&[3.0, 1.0], &[1.0, 1.0]), Some(vec![2.0, 0.0]));
    }

    #[test]
    fn verdicts() {
        let at = |low, high| Interval {
            estimate: (low + high) / 2.0,
            low,
            high,
            confidence: 0.95,
        };
        assert_eq!(Verdict::of_ratio(&at(0.9, 0.99), 0.95), Verdict::Helped);
        assert_eq!(Verdict::of_ratio(&at(1.01, 1.3), 0.95), Verdict::Hurt);
        assert_eq!(
            Verdict::of_ratio(&at(0.97, 1.02), 0.95),
            Verdict::WithinNoise
        );
        assert_eq!(
            Verdict::of_ratio(&at(1.0, 1.02), 0.95),
            Verdict::WithinNoise
        );
        // A 95% interval cannot back a 99% verdict.
        assert_eq!(
            Verdict::of_ratio(&at(0.9, 0.99), 0.99),
            Verdict::TooFewPairs
        );
        assert_eq!(pairs_needed(0.95), Some(6));
        assert_eq!(pairs_needed(0.99), Some(8));
        assert_eq!(pairs_needed(1.0), None);
    }

    #[test]
    fn percentages_never_round_to_100_or_0_and_levels_keep_their_digits() {
        assert_eq!(level_percent(0.95), "95");
        assert_eq!(level_percent(0.975), "97.5");
        assert_eq!(level_percent(0.99), "99");
        assert_eq!(level_percent(0.999999), "99.9999");
        assert_eq!(level_percent(0.9999999999), "99.99999999");
        assert_eq!(percent(0.978515625, 1), "97.9");
        assert_eq!(percent(0.75, 1), "75.0");
        // 21 pairs at the widest interval: 1 − 2/2^21.
        assert_eq!(percent(1.0 - 2.0 / 2f64.powi(21), 1), "99.9999");
        assert_eq!(percent(0.0001, 0), "0.01");
        assert_eq!(percent(0.0, 1), "0.0");
        assert_eq!(percent(1.0, 1), "100.0");
    }

    /// A small deterministic generator for the coverage check.
    fn xorshift(state: &mut u64) -> f64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Simulated no-op comparisons on skewed noise (log-normal run times with
    /// rare large outliers, as on a shared machine): the interval holds the
    /// true median ratio 1 at least as often as it claims.
    #[test]
    fn a_no_op_is_within_noise_as_often_as_claimed() {
        let mut state = 0x1234_5678_9abc_def1u64;
        let run_time = |state: &mut u64| {
            let normal: f64 = (0..12).map(|_| xorshift(state)).sum::<f64>() - 6.0;
            let outlier = if xorshift(state) < 0.1 { 1.5 } else { 1.0 };
            (0.1 * normal).exp() * outlier
        };
        for n in [6usize, 10, 15] {
            let trials = 4000;
            let mut within = 0;
            let mut claimed = 0.0;
            for _ in 0..trials {
                let r: Vec<f64> = (0..n)
                    .map(|_| run_time(&mut state) / run_time(&mut state))
                    .collect();
                let i = median_interval(&r, 0.95).unwrap();
                claimed = i.confidence;
                if Verdict::of_ratio(&i, 0.95) == Verdict::WithinNoise {
                    within += 1;
                }
            }
            let rate = within as f64 / trials as f64;
            // Three standard errors of slack for the simulation itself.
            let slack = 3.0 * (claimed * (1.0 - claimed) / trials as f64).sqrt();
            assert!(rate >= claimed - slack, "n={n}: {rate} < {claimed}");
        }
    }

    /// A real effect far larger than the noise is found with 10 pairs.
    #[test]
    fn a_clear_slowdown_is_found() {
        let mut state = 99u64;
        let r: Vec<f64> = (0..10)
            .map(|_| 1.3 * (1.0 + 0.05 * (xorshift(&mut state) - 0.5)))
            .collect();
        let i = median_interval(&r, 0.95).unwrap();
        assert_eq!(Verdict::of_ratio(&i, 0.95), Verdict::Hurt);
        assert!(i.low > 1.25 && i.high < 1.35, "{i:?}");
    }

    proptest! {
        #[test]
        fn the_interval_brackets_the_median(values in proptest::collection::vec(-1e6f64..1e6, 1..60), level in 0.5f64..0.999) {
            let i = median_interval(&values, level).unwrap();
            prop_assert!(i.low <= i.estimate && i.estimate <= i.high);
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(i.low >= min && i.high <= max);
            prop_assert!((0.0..=1.0).contains(&i.confidence));
            // Enough values reach the level asked for.
            if order_statistic_coverage(values.len(), 1) >= level {
                prop_assert!(i.confidence >= level);
            }
        }
    }
}
