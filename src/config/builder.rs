//! [`AllocatorConfigBuilder`]: a config built in code, with the same checks as the parser.

use super::checks::{
    class_divisions, gc_threshold, memory_fraction, register_threads, reserve_segment_size,
    split_size_from_mb, uniform_divisions,
};
use super::error::ConfigError;
use super::key::Key;
use super::settings::{AllocatorConfig, MIB, ROUNDUP_POWER2_INTERVALS};
use super::stream_reuse::StreamReuse;

/// Builds an [`AllocatorConfig`] in code, with the parser's checks. Each method is named after
/// its key; the first invalid value is reported by [`build`](Self::build).
///
/// ```
/// use blockpool::config::AllocatorConfig;
///
/// let config = AllocatorConfig::builder()
///     .max_split_size_mb(256)
///     .roundup_power2_divisions(4)
///     .expandable_segments(true)
///     .build()?;
/// assert_eq!(
///     config.to_string(),
///     "max_split_size_mb:256,roundup_power2_divisions:4,expandable_segments:True"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct AllocatorConfigBuilder {
    config: AllocatorConfig,
    error: Option<ConfigError>,
}

impl From<AllocatorConfig> for AllocatorConfigBuilder {
    /// A builder that starts from `config` (say, the one [`AllocatorConfig::from_env`] read).
    fn from(config: AllocatorConfig) -> Self {
        AllocatorConfigBuilder {
            config,
            error: None,
        }
    }
}

impl AllocatorConfigBuilder {
    fn set<T>(
        mut self,
        checked: Result<T, ConfigError>,
        store: impl FnOnce(&mut AllocatorConfig, T),
    ) -> Self {
        match checked {
            Ok(value) => store(&mut self.config, value),
            Err(error) => {
                self.error.get_or_insert(error);
            }
        }
        self
    }

    /// `max_split_size_mb`: blocks of this many MiB and more are never split (at least 20;
    /// values past `usize::MAX` bytes saturate).
    pub fn max_split_size_mb(self, mb: u64) -> Self {
        let key = Key::MaxSplitSizeMb.name();
        self.set(split_size_from_mb(key, &mb.to_string(), mb), |c, v| {
            c.max_split_size = v
        })
    }
    /// `max_split_size_mb` in bytes: a whole number of MiB, at least 20 MiB, or `usize::MAX`
    /// for no limit (the default).
    pub fn max_split_size_bytes(self, bytes: usize) -> Self {
        let key = Key::MaxSplitSizeMb.name();
        let checked = if bytes == usize::MAX {
            Ok(usize::MAX)
        } else if bytes % MIB != 0 {
            Err(ConfigError::NotWholeMebibytes { key, bytes })
        } else {
            let mb = u64::try_from(bytes / MIB).unwrap_or(u64::MAX);
            split_size_from_mb(key, &mb.to_string(), mb)
        };
        self.set(checked, |c, v| c.max_split_size = v)
    }
    /// `max_non_split_rounding_mb`: how many MiB larger than an oversize request a cached
    /// block may be (at least 20, the default).
    pub fn max_non_split_rounding_mb(self, mb: u64) -> Self {
        let key = Key::MaxNonSplitRoundingMb.name();
        let checked = split_size_from_mb(key, &mb.to_string(), mb);
        self.set(checked, |c, v| c.max_non_split_rounding_size = v)
    }
    /// `roundup_power2_divisions:N`: the same power-of-two divisions for every size class.
    pub fn roundup_power2_divisions(self, divisions: usize) -> Self {
        let key = Key::RoundupPower2Divisions.name();
        let checked = uniform_divisions(key, &divisions.to_string(), divisions);
        self.set(checked, |c, v| {
            c.roundup_power2_divisions = [v; ROUNDUP_POWER2_INTERVALS]
        })
    }
    /// `roundup_power2_divisions` per size class, class 0 (up to 2 MiB) first; each 0 or a
    /// power of two, as in the list form.
    pub fn roundup_power2_divisions_per_class(
        self,
        classes: [usize; ROUNDUP_POWER2_INTERVALS],
    ) -> Self {
        let key = Key::RoundupPower2Divisions.name();
        let checked = classes
            .iter()
            .try_for_each(|&d| class_divisions(key, &d.to_string(), d).map(drop))
            .map(|()| classes);
        self.set(checked, |c, v| c.roundup_power2_divisions = v)
    }
    /// `garbage_collection_threshold`: strictly between 0 and 1.
    pub fn garbage_collection_threshold(self, threshold: f64) -> Self {
        let key = Key::GarbageCollectionThreshold.name();
        let checked = gc_threshold(key, &threshold.to_string(), threshold);
        self.set(checked, |c, v| c.garbage_collection_threshold = v)
    }
    /// `expandable_segments`.
    pub fn expandable_segments(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.expandable_segments = v)
    }
    /// `release_lock_on_cudamalloc`: release the device's lock while a fixed segment is
    /// allocated (as PyTorch does around `cudaMalloc`), so other threads keep allocating and
    /// freeing from the cache during a slow driver call.
    pub fn release_lock_on_cudamalloc(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.release_lock_on_cudamalloc = v)
    }
    /// `per_process_memory_fraction`: from 0 to 1.
    pub fn per_process_memory_fraction(self, fraction: f64) -> Self {
        let key = Key::PerProcessMemoryFraction.name();
        let checked = memory_fraction(key, &fraction.to_string(), fraction);
        self.set(checked, |c, v| c.per_process_memory_fraction = Some(v))
    }
    /// `stream_reuse`: which streams a cached block may serve ([`StreamReuse`]).
    pub fn stream_reuse(self, policy: StreamReuse) -> Self {
        self.set(Ok(policy), |c, v| c.stream_reuse = v)
    }
    /// `pinned_use_cuda_host_register`.
    pub fn pinned_use_cuda_host_register(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.pinned_use_cuda_host_register = v)
    }
    /// `pinned_num_register_threads`: a power of two up to 128.
    pub fn pinned_num_register_threads(self, threads: usize) -> Self {
        let key = Key::PinnedNumRegisterThreads.name();
        let checked = register_threads(key, &threads.to_string(), threads);
        self.set(checked, |c, v| c.pinned_num_register_threads = v)
    }
    /// `pinned_use_background_threads`.
    pub fn pinned_use_background_threads(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.pinned_use_background_threads = v)
    }
    /// `pinned_reserve_segment_size_mb`: at least 1 MiB.
    pub fn pinned_reserve_segment_size_mb(self, mb: u64) -> Self {
        let key = Key::PinnedReserveSegmentSizeMb.name();
        let checked = reserve_segment_size(key, &mb.to_string(), mb);
        self.set(checked, |c, v| c.pinned_reserve_segment_size = v)
    }
    /// The config, or the first invalid value given.
    pub fn build(self) -> Result<AllocatorConfig, ConfigError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{parse_err, parse_ok, MIB_U};

    #[test]
    fn builder_sets_every_key() {
        let built = AllocatorConfig::builder()
            .max_split_size_mb(256)
            .max_non_split_rounding_mb(64)
            .roundup_power2_divisions(4)
            .garbage_collection_threshold(0.8)
            .expandable_segments(true)
            .release_lock_on_cudamalloc(true)
            .per_process_memory_fraction(0.5)
            .stream_reuse(StreamReuse::Ordered)
            .pinned_use_cuda_host_register(true)
            .pinned_num_register_threads(16)
            .pinned_use_background_threads(true)
            .pinned_reserve_segment_size_mb(128)
            .build();
        let parsed = AllocatorConfig::parse(
            "max_split_size_mb:256,max_non_split_rounding_mb:64,roundup_power2_divisions:4,\
             garbage_collection_threshold:0.8,expandable_segments:True,\
             release_lock_on_cudamalloc:True,per_process_memory_fraction:0.5,\
             stream_reuse:ordered,pinned_use_cuda_host_register:True,pinned_num_register_threads:16,\
             pinned_use_background_threads:True,pinned_reserve_segment_size_mb:128",
        );
        assert_eq!(built, parsed);
    }

    #[test]
    fn builder_applies_the_parser_checks_and_reports_the_first_error() {
        let error = AllocatorConfig::builder()
            .expandable_segments(true)
            .max_split_size_mb(10)
            .garbage_collection_threshold(1.5)
            .build();
        assert_eq!(
            error,
            Err(parse_err("max_split_size_mb:10")),
            "same error as the parser's"
        );
        let error = AllocatorConfig::builder()
            .roundup_power2_divisions_per_class([3; 16])
            .build();
        assert!(matches!(error, Err(ConfigError::NotPowerOfTwo { value, .. }) if value == "3"));
        let error = AllocatorConfig::builder()
            .pinned_num_register_threads(256)
            .build();
        assert!(matches!(error, Err(ConfigError::OutOfRange { .. })));
    }

    #[test]
    fn builder_split_size_in_bytes_must_be_whole_mib_or_unlimited() {
        let c = AllocatorConfig::builder()
            .max_split_size_bytes(64 * MIB_U)
            .build();
        assert_eq!(c.map(|c| c.max_split_size()), Ok(64 * MIB_U));
        let c = AllocatorConfig::builder()
            .max_split_size_bytes(usize::MAX)
            .build();
        assert_eq!(c, Ok(AllocatorConfig::default()));
        assert_eq!(
            AllocatorConfig::builder()
                .max_split_size_bytes(64 * MIB_U + 1)
                .build(),
            Err(ConfigError::NotWholeMebibytes {
                key: "max_split_size_mb",
                bytes: 64 * MIB_U + 1
            })
        );
    }

    #[test]
    fn builder_from_a_config_keeps_its_settings() {
        let base = parse_ok("max_split_size_mb:100");
        let c = AllocatorConfigBuilder::from(base)
            .expandable_segments(true)
            .build();
        assert_eq!(
            c,
            Ok(parse_ok("max_split_size_mb:100,expandable_segments:True"))
        );
    }
}
