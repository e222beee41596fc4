//! [`AllocatorConfig`]: every setting, PyTorch's defaults, and the accessors the pool reads
//! them through, in bytes. Where a config comes from lives beside this file: `parse.rs`,
//! `env.rs`, `builder.rs`.

use super::builder::AllocatorConfigBuilder;
use super::stream_reuse::StreamReuse;

/// Number of size classes for `roundup_power2_divisions`: powers of two from 1 MiB to 64 GiB.
pub const ROUNDUP_POWER2_INTERVALS: usize = 16;

/// One mebibyte, in bytes.
pub(super) const MIB: usize = 1 << 20;
const DEFAULT_MAX_NON_SPLIT_ROUNDING_SIZE: usize = 20 * MIB;
/// log2 of 1 MiB, where size class 0 starts.
const FIRST_CLASS_LOG2: u32 = 20;

/// Allocator settings. `Default` is PyTorch's default behaviour.
///
/// ```
/// use blockpool::config::AllocatorConfig;
///
/// let config: AllocatorConfig = "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"
///     .parse()?;
/// assert_eq!(config.max_split_size(), 128 << 20);
/// assert_eq!(config.roundup_power2_divisions(1200 << 20), 4);
/// assert_eq!(config.to_string(), "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    pub(super) max_split_size: usize,
    pub(super) max_non_split_rounding_size: usize,
    pub(super) roundup_power2_divisions: [usize; ROUNDUP_POWER2_INTERVALS],
    pub(super) garbage_collection_threshold: f64,
    pub(super) expandable_segments: bool,
    pub(super) release_lock_on_cudamalloc: bool,
    pub(super) per_process_memory_fraction: Option<f64>,
    pub(super) stream_reuse: StreamReuse,
    pub(super) pinned_use_cuda_host_register: bool,
    pub(super) pinned_num_register_threads: usize,
    pub(super) pinned_use_background_threads: bool,
    pub(super) pinned_reserve_segment_size: usize,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: usize::MAX,
            max_non_split_rounding_size: DEFAULT_MAX_NON_SPLIT_ROUNDING_SIZE,
            roundup_power2_divisions: [0; ROUNDUP_POWER2_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            per_process_memory_fraction: None,
            stream_reuse: StreamReuse::Compatible,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            pinned_reserve_segment_size: 0,
        }
    }
}

impl AllocatorConfig {
    /// Largest block size that may be split, in bytes (`usize::MAX`: no limit).
    pub fn max_split_size(&self) -> usize {
        self.max_split_size
    }
    /// How much larger than a request (>= max_split_size) a cached block may be, in bytes.
    pub fn max_non_split_rounding_size(&self) -> usize {
        self.max_non_split_rounding_size
    }
    /// Number of power-of-two divisions applied to `size` bytes (0 or 1: plain 512-byte
    /// rounding).
    ///
    /// Size class `k` holds sizes from `2^(20+k)` up to `2^(21+k)` bytes; 64 GiB and more fall
    /// in the last class (15). Sizes below 1 MiB fall in class 0, which is PyTorch's observable
    /// behaviour: its older signed formula clamps them up to 0, and its current one
    /// (`log_size > 20 ? log_size - 20 : 0`) does too, so a `[1:8]` setting also rounds
    /// small-pool requests above 4 KiB. PyTorch's current formula sends size 0 (only 0) to
    /// class 15 through an unsigned wrap; it never asks for sizes below 512 bytes, so that cannot
    /// be observed there. Here 0 is class 0.
    #[inline]
    pub fn roundup_power2_divisions(&self, size: usize) -> usize {
        self.roundup_power2_divisions[size_class(size)]
    }
    /// Divisions of every size class, class 0 (up to 2 MiB) first.
    pub fn roundup_power2_divisions_per_class(&self) -> [usize; ROUNDUP_POWER2_INTERVALS] {
        self.roundup_power2_divisions
    }
    /// Garbage-collection threshold as a fraction of the memory limit (0: off).
    pub fn garbage_collection_threshold(&self) -> f64 {
        self.garbage_collection_threshold
    }
    /// Whether expandable segments were asked for.
    ///
    /// They are used where the backend supports them
    /// ([`Backend::supports_expandable_segments`](crate::backend::Backend::supports_expandable_segments));
    /// elsewhere the allocator falls back to fixed segments and says so once.
    pub fn expandable_segments(&self) -> bool {
        self.expandable_segments
    }

    /// This configuration with expandable segments off, as an allocator runs it on a device
    /// that cannot map memory.
    pub(crate) fn without_expandable_segments(&self) -> AllocatorConfig {
        AllocatorConfig {
            expandable_segments: false,
            ..self.clone()
        }
    }
    /// Whether the device lock is released while a fixed segment is allocated
    /// (`CachingAllocator` does; a bare `DeviceAllocator` has no lock to release).
    pub fn release_lock_on_cudamalloc(&self) -> bool {
        self.release_lock_on_cudamalloc
    }
    /// Memory fraction applied to every device at construction, if any.
    pub fn per_process_memory_fraction(&self) -> Option<f64> {
        self.per_process_memory_fraction
    }
    /// Which streams a cached block may serve (`stream_reuse`): only its own, as PyTorch does
    /// ([`StreamReuse::Compatible`], the default), or any stream once that stream is ordered
    /// after the block's last use ([`StreamReuse::Ordered`]).
    pub fn stream_reuse(&self) -> StreamReuse {
        self.stream_reuse
    }
    /// Whether pinned host memory is allocated with `malloc` + `cudaHostRegister` instead of
    /// `cudaHostAlloc`.
    pub fn pinned_use_cuda_host_register(&self) -> bool {
        self.pinned_use_cuda_host_register
    }
    /// Number of threads that register pinned host memory (a power of two, default 1).
    pub fn pinned_num_register_threads(&self) -> usize {
        self.pinned_num_register_threads
    }
    /// Whether the pinned host cache processes its events on a background thread.
    pub fn pinned_use_background_threads(&self) -> bool {
        self.pinned_use_background_threads
    }
    /// Size of the pinned host segment reserved up front, in bytes (0: none).
    pub fn pinned_reserve_segment_size(&self) -> usize {
        self.pinned_reserve_segment_size
    }

    /// A builder that starts from the defaults.
    pub fn builder() -> AllocatorConfigBuilder {
        AllocatorConfigBuilder::default()
    }
}

/// Size class of `size` bytes for `roundup_power2_divisions` (see the accessor's docs).
#[inline]
fn size_class(size: usize) -> usize {
    let log2 = size.checked_ilog2().unwrap_or(0);
    (log2.saturating_sub(FIRST_CLASS_LOG2) as usize).min(ROUNDUP_POWER2_INTERVALS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::MIB_U;

    #[test]
    fn default_config_has_pytorch_defaults() {
        let c = AllocatorConfig::default();
        assert_eq!(
            c.max_split_size(),
            usize::MAX,
            "split size is unlimited by default"
        );
        assert_eq!(c.max_non_split_rounding_size(), 20 * MIB_U);
        assert_eq!(c.roundup_power2_divisions_per_class(), [0; 16]);
        assert_eq!(c.garbage_collection_threshold(), 0.0);
        assert!(!c.expandable_segments() && !c.release_lock_on_cudamalloc());
        assert_eq!(c.per_process_memory_fraction(), None);
        assert!(!c.pinned_use_cuda_host_register() && !c.pinned_use_background_threads());
        assert_eq!(c.pinned_num_register_threads(), 1);
        assert_eq!(c.pinned_reserve_segment_size(), 0);
    }

    #[test]
    fn sizes_map_to_classes_by_power_of_two_from_1_mib() {
        let per_class: [usize; 16] = std::array::from_fn(|k| 1 << k);
        let c = AllocatorConfig::builder()
            .roundup_power2_divisions_per_class(per_class)
            .build();
        let c = c.unwrap_or_else(|e| panic!("valid per-class divisions: {e}"));
        let class = |size: usize| c.roundup_power2_divisions(size).trailing_zeros();
        assert_eq!(
            [class(0), class(1), class(512), class(MIB_U)],
            [0; 4],
            "sub-MiB is class 0"
        );
        assert_eq!([class(2 * MIB_U - 1), class(2 * MIB_U)], [0, 1]);
        assert_eq!([class(1200 * MIB_U), class(32 << 30)], [10, 15]);
        assert_eq!(
            [class(64 << 30), class(usize::MAX)],
            [15, 15],
            "the last class is open"
        );
    }
}
