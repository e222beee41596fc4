//! Numbers as the reports print them for people: counts with thousands separators (with their
//! noun, singular for one), times in seconds or in the unit that suits them, byte changes with
//! their sign, lists of devices.
//! Byte sizes are blockpool's own [`format_size`] (`1.50 GiB`, PyTorch's units), re-exported
//! here so that every command and analysis takes its formatters from one place; and the one
//! reader of byte sizes as people write them ([`parse_bytes`]: `80G`, `64MiB`), for the
//! command line and the files and rules that name sizes.

pub use blockpool::error::format_size;

/// `1234567` as `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(c);
    }
    text
}

/// `n` with its noun, in the singular for one: `1 block`, `0 blocks`, `2,048 blocks`. For
/// nouns made plural by an `s` (`block`, `live block`, `segment_free event`), which are every
/// noun the reports count.
pub fn counted(n: u64, noun: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {noun}{s}", count(n))
}

/// Microseconds as seconds with six decimals.
pub fn seconds(us: u64) -> String {
    format!("{}.{:06} s", us / 1_000_000, us % 1_000_000)
}

/// A device's span as `info` and `summary` print it, from the times of its own first and last
/// events (microseconds since the trace's origin, as [`crate::analysis::timeline::time_span`]
/// gives them): `over 0.500000 s`, and where it lies when it does not begin at the origin,
/// `over 0.500000 s (3.000000 s to 3.500000 s)`, on the clock of the times the reports give
/// events; `at 3.000000 s` when every event has the same time, `(no times recorded)` when that
/// time is the origin (PyTorch files from before `time_us` are read at 0); empty without
/// events.
pub fn span(times: Option<(u64, u64)>) -> String {
    match times {
        None => String::new(),
        Some((0, 0)) => "(no times recorded)".to_string(),
        Some((first, last)) if last <= first => format!("at {}", seconds(first)),
        Some((0, last)) => format!("over {}", seconds(last)),
        Some((first, last)) => format!(
            "over {} ({} to {})",
            seconds(last - first),
            seconds(first),
            seconds(last)
        ),
    }
}

/// Microseconds in the largest unit that keeps them at 1 or more: `s`, `ms` (three decimals)
/// or `µs` (whole).
pub fn duration(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}

/// A change in bytes with its sign: `+3.00 MiB`, `-512 bytes`, `0`.
pub fn signed_size(change: i128) -> String {
    let magnitude = format_size(change.unsigned_abs().min(u64::MAX as u128) as u64);
    match change {
        0 => "0".to_string(),
        c if c > 0 => format!("+{magnitude}"),
        _ => format!("-{magnitude}"),
    }
}

/// Reads a byte count: a number, optionally with a decimal fraction, optionally followed by
/// `K`, `M`, `G` or `T` (powers of 1024, with or without `iB` or `B`), as `--capacity` takes
/// it: `80G`, `78.5G`, `0.5T`. The value must be a whole number of bytes (`1.5` alone is
/// refused; `1.5K` is 1,536 bytes).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    /// Enough fractional digits for any power-of-two unit's exact fractions of interest; more
    /// would only risk overflow.
    const MAX_FRACTION_DIGITS: usize = 12;
    let text = text.trim();
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_len);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "`{text}` is not a byte count: use digits with an optional K, M, G or T suffix \
                 (powers of 1024), e.g. 80G"
            ))
        }
    };
    let not_a_number = || format!("`{text}` is not a byte count: it needs digits, e.g. 80G");
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(not_a_number());
    }
    if fraction.len() > MAX_FRACTION_DIGITS {
        return Err(format!(
            "`{text}` has more than {MAX_FRACTION_DIGITS} digits after the decimal point"
        ));
    }
    let too_large = || format!("`{text}` is more bytes than 2^64");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    let fraction_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| not_a_number())?
    };
    // (whole + fraction / 10^n) * 2^shift, exactly, in integers.
    let scale = 10u128.pow(fraction.len() as u32);
    let scaled = whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(fraction_value))
        .and_then(|v| v.checked_mul(1u128 << shift))
        .ok_or_else(too_large)?;
    if scaled % scale != 0 {
        return Err(format!(
            "`{text}` is not a whole number of bytes; use a larger unit or fewer decimals"
        ));
    }
    u64::try_from(scaled / scale).map_err(|_| too_large())
}

/// Device indices as an error message lists them: `0, 1, 3`, or `none`.
pub fn device_list(devices: &[u32]) -> String {
    if devices.is_empty() {
        return "none".to_string();
    }
    let names: Vec<String> = devices.iter().map(u32::to_string).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_seconds_read_naturally() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(seconds(12_345_678), "12.345678 s");
        assert_eq!(seconds(5), "0.000005 s");
    }

    #[test]
    fn counted_nouns_are_singular_for_one_only() {
        assert_eq!(counted(0, "block"), "0 blocks");
        assert_eq!(counted(1, "block"), "1 block");
        assert_eq!(counted(2, "live block"), "2 live blocks");
        assert_eq!(counted(1_234, "segment"), "1,234 segments");
    }

    #[test]
    fn spans_say_where_they_lie_unless_they_begin_at_the_origin() {
        assert_eq!(span(None), "", "no events, no span");
        assert_eq!(span(Some((0, 0))), "(no times recorded)");
        assert_eq!(
            span(Some((7, 7))),
            "at 0.000007 s",
            "one time, not the origin's"
        );
        assert_eq!(span(Some((0, 1_500_000))), "over 1.500000 s");
        assert_eq!(
            span(Some((3_000_000, 3_500_000))),
            "over 0.500000 s (3.000000 s to 3.500000 s)"
        );
    }

    #[test]
    fn durations_take_the_unit_that_keeps_them_above_one() {
        assert_eq!(duration(2_500_000.0), "2.500 s");
        assert_eq!(duration(1_500.0), "1.500 ms");
        assert_eq!(
            duration(999.4),
            "999 µs",
            "below a millisecond, whole microseconds"
        );
    }

    #[test]
    fn byte_changes_carry_their_sign_and_no_change_is_zero() {
        assert_eq!(signed_size(0), "0");
        assert_eq!(signed_size(3 << 20), "+3.00 MiB");
        assert_eq!(signed_size(-512), "-512 bytes");
        assert_eq!(
            signed_size(i128::MIN),
            format!("-{}", format_size(u64::MAX)),
            "a change past u64 is shown at u64's largest"
        );
    }

    #[test]
    fn device_lists_are_comma_separated_or_none() {
        assert_eq!(device_list(&[]), "none");
        assert_eq!(device_list(&[0]), "0");
        assert_eq!(device_list(&[0, 1, 3]), "0, 1, 3");
    }

    #[test]
    fn byte_counts_read_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("80G"), Ok(80 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2kb"), Ok(2048));
        assert_eq!(parse_bytes("1T"), Ok(1 << 40));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("-1").is_err());
        assert_eq!(parse_bytes("1.5G"), Ok(3 << 29));
        assert_eq!(parse_bytes("78.5G"), Ok(157 << 29));
        assert_eq!(parse_bytes("0.5T"), Ok(1 << 39));
        assert_eq!(parse_bytes(".25K"), Ok(256));
        assert_eq!(parse_bytes("2."), Ok(2));
        assert_eq!(
            parse_bytes("1.5"),
            Err("`1.5` is not a whole number of bytes; use a larger unit or fewer decimals".into())
        );
        assert_eq!(
            parse_bytes("1.2.3G"),
            Err("`1.2.3G` is not a byte count: it needs digits, e.g. 80G".into())
        );
        assert!(parse_bytes(".").is_err());
        assert!(parse_bytes("0.0000000000001G").is_err(), "13 decimals");
        assert_eq!(
            parse_bytes("16383.9999999T"),
            Err("`16383.9999999T` is not a whole number of bytes; use a larger unit or fewer decimals".into())
        );
        assert_eq!(
            parse_bytes("16777216T"),
            Err("`16777216T` is more bytes than 2^64".to_string())
        );
        assert_eq!(
            parse_bytes("12 parsecs"),
            Err(
                "`12 parsecs` is not a byte count: use digits with an optional K, M, G or T \
                 suffix (powers of 1024), e.g. 80G"
                    .to_string()
            )
        );
        assert_eq!(
            parse_bytes("99999999999T"),
            Err("`99999999999T` is more bytes than 2^64".to_string())
        );
    }
}
