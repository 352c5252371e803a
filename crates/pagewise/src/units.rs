//! Byte sizes written by people and for people: [`parse_size`] reads
//! `4096`, `64KiB`, `2M`, `1 GiB`, `1.5G`; [`format_bytes`] writes `2 MiB`,
//! `1.5 GiB`. Every size pagewise reads (command-line options, environment
//! variables) and every size it prints goes through these two.

/// Why a size did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Nothing was given.
    #[error("empty size")]
    Empty,
    /// The number part is not a number.
    #[error("{0:?} is not a size: expected a number with an optional unit (B, KiB, MiB, GiB, TiB, or K, M, G, T)")]
    Invalid(String),
    /// The unit is unknown.
    #[error("unknown unit {0:?}: use B, KiB, MiB, GiB, TiB (or K, M, G, T; KB, MB, GB also mean powers of 1024)")]
    Unit(String),
    /// The size does not fit in 64 bits.
    #[error("{0:?} is too large")]
    Overflow(String),
}

/// Parses a byte size. Units are powers of 1024 (`K`, `KB`, `KiB` all mean
/// 1024); a fractional number is allowed with a unit and is rounded down to
/// whole bytes, exactly whatever the number of decimals. Cost: a scan of the
/// string (and 40 more per decimal at most).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: String = number.chars().filter(|&c| c != '_').collect();
    if number.is_empty() {
        return Err(SizeError::Invalid(text.to_owned()));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(SizeError::Unit(unit.trim().to_owned())),
    };
    if number.matches('.').count() > 1 || number == "." {
        return Err(SizeError::Invalid(text.to_owned()));
    }
    let (whole, frac) = number.split_once('.').unwrap_or((&number, ""));
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| SizeError::Overflow(text.to_owned()))?
    };
    let mut bytes = whole
        .checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::Overflow(text.to_owned()))?;
    if !frac.is_empty() {
        if shift == 0 {
            return Err(SizeError::Invalid(text.to_owned()));
        }
        // floor(0.FRAC × 2^shift), exact for any number of decimals: double
        // the decimal fraction `shift` times, keeping what carries out of it.
        // (Taking only the first 9 decimals made ".0000000001T" 0 bytes, not 109.)
        let mut digits: Vec<u8> = frac.bytes().map(|d| d - b'0').collect();
        let mut extra = 0u64;
        for _ in 0..shift {
            let mut carry = 0;
            for d in digits.iter_mut().rev() {
                let doubled = *d * 2 + carry;
                *d = doubled % 10;
                carry = doubled / 10;
            }
            extra = extra * 2 + u64::from(carry);
        }
        bytes = bytes
            .checked_add(extra)
            .ok_or_else(|| SizeError::Overflow(text.to_owned()))?;
    }
    Ok(bytes)
}

/// Binary units of [`format_bytes`], smallest first.
const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// Formats a byte count in the largest binary unit it reaches: `0 B`,
/// `48 KiB`, `2 MiB`, `1.5 GiB`; whole values without decimals, others with
/// one (rounded: `976.6 KiB` is 1,000,000 bytes). Cost: a few float
/// divisions and one allocation.
pub fn format_bytes(n: u64) -> String {
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        return format!("{value:.0} {}", UNITS[unit]);
    }
    // 1023.96 MiB rounds to one decimal as 1024.0: say 1.0 GiB instead.
    if (value * 10.0).round() >= 10240.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Several sizes with [`format_bytes`], joined by `, ` (`64 MiB, 1.5 GiB`).
pub fn format_byte_list(sizes: &[u64]) -> String {
    sizes
        .iter()
        .map(|&b| format_bytes(b))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`format_bytes`] when that reads back through [`parse_size`] as exactly
/// `n` (`4 KiB`, `1.5 MiB`, `1000 B`), else the exact count (`1000000 B`):
/// for names that must say the exact size, such as benchmark rows.
pub fn format_bytes_exact(n: u64) -> String {
    let text = format_bytes(n);
    if parse_size(&text) == Ok(n) {
        text
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn byte_lists() {
        assert_eq!(format_byte_list(&[]), "");
        assert_eq!(format_byte_list(&[64 << 20, 3 << 29]), "64 MiB, 1.5 GiB");
    }

    #[test]
    fn examples() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1_024"), Ok(1024));
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("12parsecs"), Err(SizeError::Unit(_))));
        assert!(matches!(parse_size("GiB"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("1.2.3K"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("1.5"), Err(SizeError::Invalid(_))));
        assert!(matches!(
            parse_size("99999999999T"),
            Err(SizeError::Overflow(_))
        ));
    }

    /// The forms the command line and the environment use, in one place:
    /// `--size`, `--sizes`, `PAGEWISE_NT_THRESHOLD` all read them alike.
    #[test]
    fn common_forms_and_bad_inputs() {
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size(" 4k "), Ok(4096));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("  "), Err(SizeError::Empty));
        assert!(matches!(parse_size("M"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("-4K"), Err(SizeError::Invalid(_))));
        assert!(matches!(parse_size("12Q"), Err(SizeError::Unit(_))));
        assert!(matches!(parse_size("4K4"), Err(SizeError::Unit(_))));
        assert!(matches!(parse_size("lots"), Err(SizeError::Invalid(_))));
        assert!(matches!(
            parse_size("99999999999999999999G"),
            Err(SizeError::Overflow(_))
        ));
        assert!(parse_size("lots")
            .unwrap_err()
            .to_string()
            .contains("not a size"));
    }

    #[test]
    fn formats_in_the_largest_unit() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1000), "1000 B");
        assert_eq!(format_bytes(4096), "4 KiB");
        assert_eq!(format_bytes(2 << 20), "2 MiB");
        assert_eq!(format_bytes(1 << 30), "1 GiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(1_000_000), "976.6 KiB");
        assert_eq!(format_bytes((1 << 30) - 4096), "1.0 GiB");
        assert_eq!(format_bytes(u64::MAX), "16777216 TiB");
    }

    #[test]
    fn exact_names() {
        assert_eq!(format_bytes_exact(8), "8 B");
        assert_eq!(format_bytes_exact(4096), "4 KiB");
        assert_eq!(format_bytes_exact(1 << 30), "1 GiB");
        assert_eq!(format_bytes_exact(3 << 20), "3 MiB");
        assert_eq!(format_bytes_exact(3 << 19), "1.5 MiB");
        assert_eq!(format_bytes_exact(1000), "1000 B");
        assert_eq!(format_bytes_exact(3000), "3000 B");
        assert_eq!(format_bytes_exact(1_000_000), "1000000 B");
    }

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,30}") {
            let _ = parse_size(&text);
        }

        /// An exact name always reads back as its size.
        #[test]
        fn exact_names_read_back(n in proptest::num::u64::ANY) {
            prop_assert_eq!(parse_size(&format_bytes_exact(n)), Ok(n));
        }

        #[test]
        fn round_trips_whole_units(n in 0u64..1 << 20, unit in 0usize..5) {
            let names = ["B", "KiB", "MiB", "GiB", "TiB"];
            let expected = n.checked_mul(1u64 << (10 * unit as u32));
            let parsed = parse_size(&format!("{n}{}", names[unit])).ok();
            prop_assert_eq!(parsed, expected);
        }
    }
}
