//! Sizing rules of PyTorch's caching allocator: how requests are rounded, which pool serves
//! them, how large a new segment is, and when a block is split.

use super::free_list::PoolKind;
use crate::config::AllocatorConfig;

/// Every block is a multiple of this many bytes (and requests below it become this size).
pub const MIN_BLOCK_SIZE: usize = 512;
/// Largest request served by the small pool, in bytes (1 MiB).
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size for small-pool requests, in bytes (2 MiB).
pub const SMALL_BUFFER: usize = 2 << 20;
/// Segment size for requests between 1 MiB and [`MIN_LARGE_ALLOC`], in bytes (20 MiB).
pub const LARGE_BUFFER: usize = 20 << 20;
/// Requests of at least this many bytes (10 MiB) get a segment of their own rounded size.
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Large segments are rounded up to a multiple of this many bytes (2 MiB).
pub const ROUND_LARGE: usize = 2 << 20;

/// Rounds a request to the block size the allocator will hand out, or `None` when the
/// rounded size would not fit in `usize`.
///
/// Below 512 bytes: 512. Otherwise a multiple of 512, unless `roundup_power2_divisions`
/// gives `d > 1` divisions for this size class and the size exceeds `512 * d`: then the next
/// of `d` equal steps between the surrounding powers of two (powers of two stay as they are).
#[inline]
pub fn round_size(size: usize, config: &AllocatorConfig) -> Option<usize> {
    if size < MIN_BLOCK_SIZE {
        return Some(MIN_BLOCK_SIZE);
    }
    let divisions = config.roundup_power2_divisions(size);
    if divisions > 1 && size > MIN_BLOCK_SIZE.saturating_mul(divisions) {
        roundup_power2_next_division(size, divisions)
    } else {
        round_up(size, MIN_BLOCK_SIZE)
    }
}

/// Rounds `size` up to the next of `divisions` equal steps between the powers of two around
/// it: with 4 divisions, 1200 lies between 1024 and 2048, whose steps are 1024, 1280, 1536 and
/// 1792, so it becomes 1280.
fn roundup_power2_next_division(size: usize, divisions: usize) -> Option<usize> {
    if size.is_power_of_two() {
        return Some(size);
    }
    let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
    // Only the power-of-two part of `divisions` counts, as in PyTorch.
    let step = floor >> (usize::BITS - 1 - divisions.leading_zeros());
    if step == 0 {
        return floor.checked_mul(2);
    }
    round_up(size, step)
}

#[inline]
fn round_up(size: usize, multiple: usize) -> Option<usize> {
    debug_assert!(multiple.is_power_of_two());
    size.checked_add(multiple - 1).map(|s| s & !(multiple - 1))
}

/// Whether a rounded size belongs to the small pool (at most 1 MiB).
#[inline]
pub fn is_small(rounded_size: usize) -> bool {
    rounded_size <= SMALL_SIZE
}

/// Size of the segment to request from the device for a rounded size that no cached block
/// could serve, or `None` on overflow: 2 MiB for the small pool, 20 MiB below 10 MiB, else the
/// size rounded up to 2 MiB.
#[inline]
pub fn segment_size(rounded_size: usize) -> Option<usize> {
    if rounded_size <= SMALL_SIZE {
        Some(SMALL_BUFFER)
    } else if rounded_size < MIN_LARGE_ALLOC {
        Some(LARGE_BUFFER)
    } else {
        round_up(rounded_size, ROUND_LARGE)
    }
}

/// Whether a free block of `block_size` bytes in `pool` serving a request of `rounded_size`
/// bytes is split and its remainder kept as a free block.
///
/// Small pool, and every pool while expandable segments are on (`expandable`): when at least
/// 512 bytes remain, as memory past the request can be unmapped later. Large pool otherwise:
/// when more than 1 MiB remains and the request is below `max_split_size` (larger blocks are
/// never split, to limit fragmentation).
#[inline]
pub fn should_split(
    block_size: usize,
    rounded_size: usize,
    pool: PoolKind,
    expandable: bool,
    config: &AllocatorConfig,
) -> bool {
    let remaining = block_size - rounded_size;
    if pool == PoolKind::Small || expandable {
        remaining >= MIN_BLOCK_SIZE
    } else {
        rounded_size < config.max_split_size() && remaining > SMALL_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default() -> AllocatorConfig {
        AllocatorConfig::default()
    }

    #[test]
    fn requests_below_512_bytes_round_to_512() {
        assert_eq!(round_size(0, &default()), Some(512));
        assert_eq!(round_size(1, &default()), Some(512));
        assert_eq!(round_size(511, &default()), Some(512));
    }

    #[test]
    fn requests_round_up_to_a_multiple_of_512() {
        assert_eq!(round_size(512, &default()), Some(512));
        assert_eq!(round_size(513, &default()), Some(1024));
        assert_eq!(round_size(4096, &default()), Some(4096));
        assert_eq!(round_size((1 << 20) + 1, &default()), Some((1 << 20) + 512));
    }

    #[test]
    fn rounding_that_would_overflow_is_refused() {
        assert_eq!(round_size(usize::MAX, &default()), None);
        assert_eq!(round_size(usize::MAX - 510, &default()), None);
        assert_eq!(
            round_size(usize::MAX - 511, &default()),
            Some(usize::MAX - 511)
        );
    }

    #[test]
    fn power2_division_picks_the_next_step() {
        assert_eq!(roundup_power2_next_division(1200, 4), Some(1280));
        assert_eq!(roundup_power2_next_division(1024, 4), Some(1024));
        assert_eq!(roundup_power2_next_division(1792, 4), Some(1792));
        assert_eq!(roundup_power2_next_division(1793, 4), Some(2048));
        // 6 divisions count as 4, as in PyTorch.
        assert_eq!(roundup_power2_next_division(1200, 6), Some(1280));
        // More divisions than the floor has bits: next power of two.
        assert_eq!(roundup_power2_next_division(3, 8), Some(4));
        assert_eq!(roundup_power2_next_division(usize::MAX, 4), None);
    }

    #[test]
    fn segment_sizes_follow_the_three_tiers() {
        assert_eq!(segment_size(512), Some(2 << 20));
        assert_eq!(segment_size(1 << 20), Some(2 << 20));
        assert_eq!(segment_size((1 << 20) + 512), Some(20 << 20));
        assert_eq!(segment_size((10 << 20) - 512), Some(20 << 20));
        assert_eq!(segment_size(10 << 20), Some(10 << 20));
        assert_eq!(segment_size((10 << 20) + 512), Some(12 << 20));
        assert_eq!(segment_size(usize::MAX - 511), None);
    }

    #[test]
    fn small_blocks_split_when_512_bytes_remain() {
        assert!(should_split(
            2 << 20,
            (2 << 20) - 512,
            PoolKind::Small,
            false,
            &default()
        ));
        assert!(!should_split(
            1024,
            1024,
            PoolKind::Small,
            false,
            &default()
        ));
    }

    #[test]
    fn large_blocks_split_only_when_more_than_1_mib_remains() {
        assert!(!should_split(
            20 << 20,
            19 << 20,
            PoolKind::Large,
            false,
            &default()
        ));
        assert!(should_split(
            20 << 20,
            (19 << 20) - 512,
            PoolKind::Large,
            false,
            &default()
        ));
    }

    #[test]
    fn expandable_segments_split_large_blocks_at_512_bytes() {
        assert!(should_split(
            20 << 20,
            (20 << 20) - 512,
            PoolKind::Large,
            true,
            &default()
        ));
        let capped = AllocatorConfig::builder()
            .max_split_size_mb(40)
            .build()
            .expect("valid config");
        assert!(
            should_split(100 << 20, 60 << 20, PoolKind::Large, true, &capped),
            "past max_split_size too"
        );
    }
}
