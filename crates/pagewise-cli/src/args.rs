//! Value parsers for the numeric options, each with its bounds: clap calls
//! them, and a value out of range is a one-line usage error (exit status 2)
//! before anything runs. Integers without units use clap's ranged parsers
//! (`clap::value_parser!(u64).range(…)`) beside the option; sizes and
//! non-integer numbers come through here.

use pagewise::units::format_bytes;

/// A byte size as every size option reads it (`1.5M`, `4K`, `100`), from
/// `min` to `max` bytes inclusive.
pub fn size_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let n = pagewise::units::parse_size(text).map_err(|e| e.to_string())?;
        if n < min {
            return Err(format!("must be at least {}", format_bytes(min)));
        }
        if n > max {
            return Err(format!("must be at most {}", format_bytes(max)));
        }
        Ok(n)
    }
}

/// `text` as a decimal number that `accept` takes, else `refusal`.
fn number(text: &str, accept: impl Fn(f64) -> bool, refusal: String) -> Result<f64, String> {
    let n: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    // NaN is in no range.
    if accept(n) {
        Ok(n)
    } else {
        Err(refusal)
    }
}

/// A decimal number from `min` to `max` inclusive (not NaN, not infinite).
pub fn number_in(
    min: f64,
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        number(
            text,
            |n| (min..=max).contains(&n),
            format!("must be a number from {min} to {max}"),
        )
    }
}

/// A length of time in seconds: above 0 and at most `max`.
pub fn seconds_up_to(
    max: f64,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        number(
            text,
            |n| n > 0.0 && n <= max,
            format!("must be above 0 and at most {max} seconds"),
        )
    }
}

/// The longest observation window of `stat --pid` and `text profile --pid`:
/// a day. The samples of the window are kept in memory until it ends.
pub const MAX_WINDOW_SECONDS: f64 = 86_400.0;

/// The observation window of `stat --pid` and `text profile --pid` when
/// `--seconds` is not given.
pub const DEFAULT_WINDOW_SECONDS: f64 = 10.0;

/// The window `--seconds` asked for, else [`DEFAULT_WINDOW_SECONDS`]. The
/// option has no clap default, so that clap refuses it without `--pid` (a
/// default value would count as given and hide that).
pub fn window_seconds(seconds: Option<f64>) -> f64 {
    seconds.unwrap_or(DEFAULT_WINDOW_SECONDS)
}

/// The largest buffer a benchmark maps for one row: 64 GiB (several rows map
/// two such buffers; beyond that the kernel refuses or the OOM killer ends
/// the run).
pub const MAX_BENCH_BYTES: u64 = 64 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_bounded_both_ways() {
        let p = size_in(4096, 1 << 30);
        assert_eq!(p("4K"), Ok(4096));
        assert_eq!(p("1GiB"), Ok(1 << 30));
        assert_eq!(p("1K").unwrap_err(), "must be at least 4 KiB");
        assert_eq!(p("16TiB").unwrap_err(), "must be at most 1 GiB");
        assert!(p("-1").is_err());
        assert!(p("99999999999999999999").unwrap_err().contains("too large"));
    }

    #[test]
    fn numbers_and_seconds_refuse_nan_infinity_and_out_of_range() {
        let s = seconds_up_to(MAX_WINDOW_SECONDS);
        assert_eq!(s("1.5"), Ok(1.5));
        for bad in ["0", "-1", "1e20", "NaN", "inf", "-inf", "", "x"] {
            assert!(s(bad).is_err(), "{bad}");
        }
        let z = number_in(0.0, 10.0);
        assert_eq!(z("0"), Ok(0.0));
        for bad in ["-0.1", "10.5", "NaN", "inf", "1e308"] {
            assert!(z(bad).is_err(), "{bad}");
        }
    }
}
