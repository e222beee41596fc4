//! The checks every value passes, whether it comes from a config string or from the builder,
//! and what each key accepts, in the words the error messages use. Both front ends call these
//! functions so that a value is refused the same way, with the same message, by either.

use super::error::ConfigError;
use super::settings::MIB;

/// Largest `pinned_num_register_threads` accepted (PyTorch's `pinned_max_register_threads`).
pub const PINNED_MAX_REGISTER_THREADS: usize = 128;
/// Smallest `max_split_size_mb` and `max_non_split_rounding_mb` (PyTorch's `kLargeBuffer`).
const MIN_SPLIT_SIZE_MB: u64 = 20;

// What each key accepts, as the error messages say it.
pub(super) const ACCEPTS_SPLIT_MB: &str = "a whole number of MiB, at least 20";
pub(super) const ACCEPTS_DIVISIONS: &str =
    "a power of two (1, 2, 4, ...) or a list such as `[256:1,512:2,>:8]`";
pub(super) const ACCEPTS_LIST_SIZE: &str =
    "a size in MiB that is a power of two, or `>`, before each `:` of a list";
pub(super) const ACCEPTS_LIST_DIVISIONS: &str = "0 or a power of two after each `:` of a list";
pub(super) const ACCEPTS_GC_THRESHOLD: &str = "a number strictly between 0 and 1, such as 0.6";
pub(super) const ACCEPTS_FRACTION: &str = "a number from 0 to 1";
pub(super) const ACCEPTS_THREADS: &str = "a power of two from 1 to 128";
const ACCEPTS_RESERVE_MB: &str = "a whole number of MiB, at least 1";

fn out_of_range(key: &str, value: &str, accepted: &'static str) -> ConfigError {
    ConfigError::OutOfRange {
        key: key.to_owned(),
        value: value.to_owned(),
        accepted,
    }
}

fn not_power_of_two(key: &str, value: &str, accepted: &'static str) -> ConfigError {
    ConfigError::NotPowerOfTwo {
        key: key.to_owned(),
        value: value.to_owned(),
        accepted,
    }
}

/// MiB to bytes, saturating at the largest whole number of MiB in a `usize` (as PyTorch does).
fn mib_to_bytes(mb: u64) -> usize {
    usize::try_from(mb)
        .unwrap_or(usize::MAX)
        .min(usize::MAX / MIB)
        * MIB
}

pub(super) fn split_size_from_mb(key: &str, value: &str, mb: u64) -> Result<usize, ConfigError> {
    if mb < MIN_SPLIT_SIZE_MB {
        return Err(out_of_range(key, value, ACCEPTS_SPLIT_MB));
    }
    Ok(mib_to_bytes(mb))
}

/// The single-value form: PyTorch refuses 0 there, though a list may hold it.
pub(super) fn uniform_divisions<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_DIVISIONS))?;
    if !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_DIVISIONS));
    }
    Ok(n)
}

pub(super) fn class_divisions<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_LIST_DIVISIONS))?;
    if n != 0 && !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_LIST_DIVISIONS));
    }
    Ok(n)
}

pub(super) fn gc_threshold(key: &str, value: &str, t: f64) -> Result<f64, ConfigError> {
    // Written so that NaN fails.
    if t > 0.0 && t < 1.0 {
        Ok(t)
    } else {
        Err(out_of_range(key, value, ACCEPTS_GC_THRESHOLD))
    }
}

pub(super) fn memory_fraction(key: &str, value: &str, fraction: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&fraction) {
        Ok(fraction)
    } else {
        Err(out_of_range(key, value, ACCEPTS_FRACTION))
    }
}

pub(super) fn register_threads<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    // Power of two first, then the limit, in PyTorch's order.
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_THREADS))?;
    if !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_THREADS));
    }
    if n > PINNED_MAX_REGISTER_THREADS {
        return Err(out_of_range(key, value, ACCEPTS_THREADS));
    }
    Ok(n)
}

pub(super) fn reserve_segment_size(key: &str, value: &str, mb: u64) -> Result<usize, ConfigError> {
    if mb == 0 {
        return Err(out_of_range(key, value, ACCEPTS_RESERVE_MB));
    }
    Ok(mib_to_bytes(mb))
}

pub(super) fn check_backend(name: &str, raw: &str) -> Result<(), ConfigError> {
    match name {
        "native" => Ok(()),
        "cudaMallocAsync" | "hipMallocAsync" => Err(ConfigError::UnsupportedBackend {
            backend: raw.to_owned(),
        }),
        _ => Err(ConfigError::UnknownBackend {
            backend: raw.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{parse_err, parse_ok, MIB_U};
    use crate::config::AllocatorConfig;

    #[test]
    fn max_split_size_below_20_mb_is_rejected() {
        let error = parse_err("max_split_size_mb:19");
        assert_eq!(
            error,
            ConfigError::OutOfRange {
                key: "max_split_size_mb".into(),
                value: "19".into(),
                accepted: ACCEPTS_SPLIT_MB,
            }
        );
        assert_eq!(
            error.to_string(),
            "invalid allocator config: `19` is out of range for `max_split_size_mb`, which \
             takes a whole number of MiB, at least 20"
        );
    }

    #[test]
    fn max_split_size_of_exactly_20_mb_is_accepted_as_in_current_pytorch() {
        assert_eq!(
            parse_ok("max_split_size_mb:20").max_split_size(),
            20 * MIB_U
        );
    }

    #[test]
    fn single_division_must_be_a_nonzero_power_of_two() {
        let error = parse_err("roundup_power2_divisions:3");
        assert_eq!(
            error.to_string(),
            "invalid allocator config: `3` is not a power of two; `roundup_power2_divisions` \
             takes a power of two (1, 2, 4, ...) or a list such as `[256:1,512:2,>:8]`"
        );
        assert!(matches!(
            parse_err("roundup_power2_divisions:0"),
            ConfigError::NotPowerOfTwo { .. }
        ));
    }

    #[test]
    fn garbage_collection_threshold_is_strictly_between_0_and_1() {
        assert_eq!(
            parse_ok("garbage_collection_threshold:0.6").garbage_collection_threshold(),
            0.6
        );
        for bad in ["0", "1", "1.0", "1.2", "-0.5", "NaN", "inf"] {
            assert_eq!(
                parse_err(&format!("garbage_collection_threshold:{bad}")),
                ConfigError::OutOfRange {
                    key: "garbage_collection_threshold".into(),
                    value: bad.into(),
                    accepted: ACCEPTS_GC_THRESHOLD,
                },
                "threshold {bad} must be rejected"
            );
        }
    }

    #[test]
    fn per_process_memory_fraction_is_from_0_to_1_inclusive() {
        for (conf, expected) in [("0", 0.0), ("1", 1.0), ("0.75", 0.75)] {
            let c = parse_ok(&format!("per_process_memory_fraction:{conf}"));
            assert_eq!(c.per_process_memory_fraction(), Some(expected));
        }
        for bad in ["1.5", "-0.1", "nan"] {
            assert!(
                matches!(
                    parse_err(&format!("per_process_memory_fraction:{bad}")),
                    ConfigError::OutOfRange { value, .. } if value == bad
                ),
                "fraction {bad} must be rejected"
            );
        }
    }

    #[test]
    fn register_threads_must_be_a_power_of_two_up_to_128() {
        assert_eq!(
            parse_ok("pinned_num_register_threads:128").pinned_num_register_threads(),
            128
        );
        assert!(matches!(
            parse_err("pinned_num_register_threads:6"),
            ConfigError::NotPowerOfTwo { value, .. } if value == "6"
        ));
        assert!(matches!(
            parse_err("pinned_num_register_threads:0"),
            ConfigError::NotPowerOfTwo { .. }
        ));
        assert_eq!(
            parse_err("pinned_num_register_threads:256").to_string(),
            "invalid allocator config: `256` is out of range for `pinned_num_register_threads`, \
             which takes a power of two from 1 to 128"
        );
    }

    #[test]
    fn pinned_reserve_segment_size_must_be_positive() {
        assert!(matches!(
            parse_err("pinned_reserve_segment_size_mb:0"),
            ConfigError::OutOfRange { value, .. } if value == "0"
        ));
    }

    #[test]
    fn native_backend_is_accepted_and_async_backends_are_refused() {
        assert_eq!(parse_ok("backend:native"), AllocatorConfig::default());
        assert_eq!(
            parse_err("backend:cudaMallocAsync").to_string(),
            "invalid allocator config: backend `cudaMallocAsync` is not available: blockpool is \
             the native caching allocator, so only `backend:native` is accepted"
        );
        assert_eq!(
            parse_err("backend:jemalloc"),
            ConfigError::UnknownBackend {
                backend: "jemalloc".into()
            }
        );
    }
}
