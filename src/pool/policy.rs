//! The decisions a pool policy may change, apart from the bookkeeping that carries them out.
//!
//! A [`PoolPolicy`] answers four questions for one device's allocator, and nothing else in the
//! pool reads the settings to answer them:
//! - **sizing:** how a request is rounded ([`PoolPolicy::round`]) and how large a segment is
//!   asked of the device for it ([`PoolPolicy::segment_size`]);
//! - **which cached block:** how much larger than the request a cached block may be
//!   ([`PoolPolicy::largest_block_for`]), and whether blocks cached for other streams may
//!   serve it ([`PoolPolicy::serves_other_streams`]);
//! - **splitting:** whether a block larger than the request is split
//!   ([`PoolPolicy::should_split`]);
//! - **release under pressure:** which cached blocks the out-of-memory ladder releases first
//!   ([`PoolPolicy::oversize_release_target`]) and how far garbage collection goes
//!   ([`PoolPolicy::gc_threshold`]).
//!
//! PyTorch's rules are the default policy; `stream_reuse:ordered` changes which streams a
//! block may come from (`ordered.rs` carries it out). The rules themselves live in `sizing.rs`,
//! where replay tools and the checkpoint planners read them too.

use super::free_list::PoolKind;
use super::sizing;
use crate::config::{AllocatorConfig, StreamReuse};
use crate::error::{Error, Result};

/// The policy of one device's allocator, built from its settings.
#[derive(Clone, Debug)]
pub(crate) struct PoolPolicy {
    config: AllocatorConfig,
    /// Whether blocks cached for one stream serve another: asked for (`stream_reuse:ordered`)
    /// and not turned off by a backend that cannot make a stream wait.
    other_streams: bool,
}

impl PoolPolicy {
    /// The policy `config` asks for.
    pub(crate) fn new(config: AllocatorConfig) -> PoolPolicy {
        PoolPolicy {
            other_streams: config.stream_reuse() == StreamReuse::Ordered,
            config,
        }
    }

    /// The settings the policy was built from.
    pub(crate) fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    /// `size` rounded as its block will be; [`Error::SizeTooLarge`] when that overflows.
    #[inline]
    pub(crate) fn round(&self, size: usize) -> Result<usize> {
        sizing::round_size(size, &self.config).ok_or(Error::SizeTooLarge {
            requested_bytes: size,
        })
    }

    /// The segment to ask the device for when nothing cached serves `rounded` bytes (asked as
    /// `size`); [`Error::SizeTooLarge`] when that overflows.
    pub(crate) fn segment_size(&self, rounded: usize, size: usize) -> Result<usize> {
        sizing::segment_size(rounded).ok_or(Error::SizeTooLarge {
            requested_bytes: size,
        })
    }

    /// The largest cached block that may serve `rounded` bytes: an oversize block never goes
    /// to a request that splitting could serve, and an oversize request takes one only when
    /// little of it is wasted (`max_non_split_rounding_size`).
    #[inline]
    pub(crate) fn largest_block_for(&self, rounded: usize) -> usize {
        let max_split = self.config.max_split_size();
        if rounded < max_split {
            max_split - 1
        } else {
            rounded.saturating_add(self.config.max_non_split_rounding_size()) - 1
        }
    }

    /// Whether a request that nothing cached for its stream fits may take a block cached for
    /// another stream (after its stream waits for that one's work), and a block used on other
    /// streams is cached at once behind waits instead of behind events.
    #[inline]
    pub(crate) fn serves_other_streams(&self) -> bool {
        self.other_streams
    }

    /// Keeps each stream's cache to itself from now on: the backend cannot make a stream wait.
    pub(crate) fn keep_streams_apart(&mut self) {
        self.other_streams = false;
    }

    /// Whether a fixed segment may hold blocks of several streams: under the ordered policy,
    /// even once [`PoolPolicy::keep_streams_apart`] turned it off (blocks moved before stay).
    pub(crate) fn streams_may_mix(&self) -> bool {
        self.config.stream_reuse() == StreamReuse::Ordered
    }

    /// Whether a free block of `block_size` bytes in `pool` serving `rounded` bytes is split,
    /// its remainder cached; `expandable`: whether expandable segments are in force.
    #[inline]
    pub(crate) fn should_split(
        &self,
        block_size: usize,
        rounded: usize,
        pool: PoolKind,
        expandable: bool,
    ) -> bool {
        sizing::should_split(block_size, rounded, pool, expandable, &self.config)
    }

    /// Whether a block or segment of `size` bytes is oversize (`max_split_size` or more): it
    /// is never split, and counts in the oversize statistics.
    #[inline]
    pub(crate) fn is_oversize(&self, size: usize) -> bool {
        size >= self.config.max_split_size()
    }

    /// The bytes of cached oversize blocks the out-of-memory ladder releases before a retry
    /// of `rounded` bytes: at least the request and at least `max_split_size`. `None` without
    /// a `max_split_size`, when no block is oversize.
    pub(crate) fn oversize_release_target(&self, rounded: usize) -> Option<usize> {
        let max_split = self.config.max_split_size();
        (max_split != usize::MAX).then(|| rounded.max(max_split))
    }

    /// Whether garbage collection runs at all, given a memory limit:
    /// `garbage_collection_threshold` is set.
    #[inline]
    pub(crate) fn collects_garbage(&self) -> bool {
        self.config.garbage_collection_threshold() > 0.0
    }

    /// The reserved bytes garbage collection brings the cache down to under a memory limit of
    /// `limit` bytes: `garbage_collection_threshold` of it.
    pub(crate) fn gc_threshold(&self, limit: usize) -> usize {
        (self.config.garbage_collection_threshold() * limit as f64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(conf: &str) -> PoolPolicy {
        PoolPolicy::new(conf.parse().expect("valid settings"))
    }

    #[test]
    fn the_default_policy_is_pytorchs() {
        let p = policy("");
        assert_eq!(p.round(1).unwrap(), 512);
        assert_eq!(p.round(1200).unwrap(), 1536);
        assert_eq!(p.segment_size(4096, 4096).unwrap(), 2 << 20);
        assert_eq!(p.segment_size(11 << 20, 11 << 20).unwrap(), 12 << 20);
        assert_eq!(p.largest_block_for(4096), usize::MAX - 1);
        assert!(!p.serves_other_streams());
        assert!(!p.streams_may_mix());
        assert!(!p.is_oversize(1 << 40));
        assert_eq!(p.oversize_release_target(4096), None);
        assert!(!p.collects_garbage());
        // Large pool: split only when more than 1 MiB would remain.
        assert!(!p.should_split(3 << 20, 2 << 20, PoolKind::Large, false));
        assert!(p.should_split(4 << 20, 2 << 20, PoolKind::Large, false));
        assert!(p.should_split(1024, 512, PoolKind::Small, false));
    }

    #[test]
    fn the_settings_change_the_answers() {
        let p = policy(
            "max_split_size_mb:40,max_non_split_rounding_mb:20,roundup_power2_divisions:4,\
             garbage_collection_threshold:0.5,stream_reuse:ordered",
        );
        // 1.2 MB lies between 1 MiB and 2 MiB, whose four steps are 256 KiB apart.
        assert_eq!(p.round(1_200_000).unwrap(), 1_310_720);
        assert_eq!(policy("").round(1_200_000).unwrap(), 1_200_128);
        assert_eq!(p.largest_block_for(4096), (40 << 20) - 1);
        assert_eq!(p.largest_block_for(50 << 20), (70 << 20) - 1);
        assert!(p.is_oversize(40 << 20) && !p.is_oversize((40 << 20) - 1));
        assert_eq!(p.oversize_release_target(4096), Some(40 << 20));
        assert_eq!(p.oversize_release_target(64 << 20), Some(64 << 20));
        // An oversize request is never split.
        assert!(!p.should_split(100 << 20, 40 << 20, PoolKind::Large, false));
        assert!(p.collects_garbage());
        assert_eq!(p.gc_threshold(1000), 500);
        assert!(p.serves_other_streams() && p.streams_may_mix());
    }

    #[test]
    fn a_backend_that_cannot_wait_keeps_streams_apart_but_they_may_still_mix() {
        let mut p = policy("stream_reuse:ordered");
        p.keep_streams_apart();
        assert!(!p.serves_other_streams());
        assert!(p.streams_may_mix());
    }

    #[test]
    fn a_size_that_overflows_is_refused_with_its_bytes() {
        let p = policy("");
        let err = p.round(usize::MAX).unwrap_err();
        assert!(matches!(
            err,
            Error::SizeTooLarge {
                requested_bytes: usize::MAX
            }
        ));
        let err = p.segment_size(usize::MAX - 100, 7).unwrap_err();
        assert!(matches!(err, Error::SizeTooLarge { requested_bytes: 7 }));
    }
}
