//! Numbers as the reports print them for people: counts with thousands separators, times in
//! seconds or in the unit that suits them, byte changes with their sign, lists of devices.
//! Byte sizes are blockpool's own [`format_size`] (`1.50 GiB`, PyTorch's units), re-exported
//! here so that every command and analysis takes its formatters from one place.

pub use blockpool::format_size;

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

/// Microseconds as seconds with six decimals.
pub fn seconds(us: u64) -> String {
    format!("{}.{:06} s", us / 1_000_000, us % 1_000_000)
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
}
