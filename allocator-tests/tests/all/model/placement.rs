//! Where memory goes, written independently of the library: PyTorch's rounding of a request
//! and the segment size for it, looking up a block by address in the segments the allocator
//! shows, and which cached block PyTorch's best fit picks for a request.

use blockpool::introspect::{BlockState, BlockView, PoolKind, SegmentView};
use blockpool::{AllocatorConfig, StreamId};

use super::harness::Harness;
use super::ops::MIB;
use super::state::stream_index;

/// PyTorch's `round_size`, written independently of the library's.
pub(super) fn round_size(size: usize, config: &AllocatorConfig) -> Option<usize> {
    if size < 512 {
        return Some(512);
    }
    let divisions = config.roundup_power2_divisions(size);
    if divisions > 1 && size > 512 * divisions {
        if size.is_power_of_two() {
            return Some(size);
        }
        let floor = 1usize << size.ilog2();
        return size.checked_next_multiple_of(floor >> divisions.ilog2());
    }
    size.checked_next_multiple_of(512)
}

/// PyTorch's segment size for a rounded request.
pub(super) fn segment_size(rounded: usize) -> Option<usize> {
    if rounded <= MIB {
        Some(2 * MIB)
    } else if rounded < 10 * MIB {
        Some(20 * MIB)
    } else {
        rounded.checked_next_multiple_of(2 * MIB)
    }
}

pub(super) fn block_at(segments: &[SegmentView], ptr: u64) -> Option<(&SegmentView, &BlockView)> {
    let segment = segments
        .iter()
        .find(|s| s.addr <= ptr && ptr < s.addr + s.size as u64)?;
    let block = segment.blocks.iter().find(|b| b.addr == ptr)?;
    Some((segment, block))
}

pub(super) fn is_whole_free_segment(segment: &SegmentView) -> bool {
    matches!(segment.blocks.as_slice(), [b] if b.state == BlockState::Free)
}

impl Harness {
    /// Whether the block at `ptr` of `device` was freed with events that have not completed.
    fn waits_for_events(&self, device: usize, ptr: u64) -> bool {
        self.guards.iter().any(|g| {
            g.device == device
                && g.ptr == ptr
                && g.waits.iter().any(|&(s, ticket)| {
                    self.devices[device].streams[stream_index(s)].completed < ticket
                })
        })
    }

    /// The cached block (address, size) PyTorch's best fit picks for `rounded` bytes on
    /// `stream`, or `None` when no cached block may serve it.
    ///
    /// Blocks whose deferred free has completed count as free and merged with their free
    /// neighbours, since `malloc` processes finished events first. The candidate is the
    /// smallest block of the stream's segments in the request's pool, lowest address first;
    /// it is refused when it is oversize for a request that could split, or wastes
    /// `max_non_split_rounding_size` or more for an oversize request.
    pub(super) fn best_fit(
        &self,
        device: usize,
        stream: StreamId,
        rounded: usize,
    ) -> Option<(u64, usize)> {
        let pool = if rounded <= MIB {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let mut best: Option<(usize, u64)> = None;
        let mut consider = |run: Option<(usize, u64)>| {
            if let Some(run) = run.filter(|&(size, _)| size >= rounded) {
                best = Some(best.map_or(run, |b| b.min(run)));
            }
        };
        let segments = self.segments(device);
        for segment in segments
            .iter()
            .filter(|s| s.stream == stream && s.pool == pool)
        {
            let mut run: Option<(usize, u64)> = None;
            for b in &segment.blocks {
                let free = match b.state {
                    BlockState::Free => true,
                    BlockState::PendingFree => !self.waits_for_events(device, b.addr),
                    BlockState::Allocated => false,
                };
                if free {
                    run = Some(run.map_or((b.size, b.addr), |(size, addr)| (size + b.size, addr)));
                } else {
                    consider(run.take());
                }
            }
            consider(run);
        }
        let (size, addr) = best?;
        let max_split = self.config.max_split_size();
        let margin = self.config.max_non_split_rounding_size();
        let oversize_for_split = rounded < max_split && size >= max_split;
        let too_wasteful = rounded >= max_split && size >= rounded.saturating_add(margin);
        (!oversize_for_split && !too_wasteful).then_some((addr, size))
    }
}

#[test]
fn reference_rounding_matches_pytorch_examples() {
    let default = AllocatorConfig::default();
    assert_eq!(round_size(0, &default), Some(512));
    assert_eq!(round_size(513, &default), Some(1024));
    assert_eq!(round_size(usize::MAX, &default), None);
    let four = AllocatorConfig::parse("roundup_power2_divisions:4").expect("valid config");
    assert_eq!(
        round_size(1200 << 10, &four),
        Some(1280 << 10),
        "next quarter step"
    );
    assert_eq!(
        round_size(1 << 21, &four),
        Some(1 << 21),
        "powers of two stay"
    );
    assert_eq!(segment_size(MIB), Some(2 * MIB));
    assert_eq!(segment_size(MIB + 512), Some(20 * MIB));
    assert_eq!(segment_size(10 * MIB + 512), Some(12 * MIB));
}
