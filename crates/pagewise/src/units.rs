//! Byte sizes written by people: `4096`, `64KiB`, `2M`, `1 GiB`, `1.5G`.

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
/// whole bytes. Cost: a scan of the string.
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
        // Fraction of the unit, computed exactly on up to 9 digits.
        let digits = &frac[..frac.len().min(9)];
        let numerator: u64 = digits
            .parse()
            .map_err(|_| SizeError::Invalid(text.to_owned()))?;
        let denominator = 10u64.pow(digits.len() as u32);
        let extra = (u128::from(numerator) << shift) / u128::from(denominator);
        bytes = bytes
            .checked_add(extra as u64)
            .ok_or_else(|| SizeError::Overflow(text.to_owned()))?;
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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

    proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,30}") {
            let _ = parse_size(&text);
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
