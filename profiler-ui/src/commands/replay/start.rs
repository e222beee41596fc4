//! The state a replay starts from: the segments and live blocks rebuilt at a trace's first
//! event, turned into segments blockpool can adopt at the same relative addresses, and the
//! live blocks that have to be allocated afresh instead.
//!
//! PyTorch's events carry only requested sizes, so a block freed during the trace comes back
//! from the walk with its requested size; it is given the size the allocator would have
//! rounded that request to, as long as that fits before the next live block. A large-pool
//! block's unsplit remainder (at most 1 MiB) then shows as a free gap no large request can
//! use, so the replay behaves the same either way.

use blockpool::introspect::sizing::{round_size, MIN_BLOCK_SIZE};
use blockpool::introspect::{AdoptBlock, PoolKind};
use blockpool::trace::snapshot::Segment;
use blockpool::trace::DeviceState;
use blockpool::{AllocatorConfig, StreamId};

/// A segment of the starting state, ready to adopt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartSegment {
    /// Where the trace had the segment.
    pub trace_address: u64,
    /// Size in bytes.
    pub size: usize,
    /// Its pool.
    pub pool: PoolKind,
    /// Its stream.
    pub stream: StreamId,
    /// Its live blocks, lowest offset first.
    pub blocks: Vec<AdoptBlock>,
}

/// A live block to allocate before the first event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshBlock {
    /// Where the trace had the block.
    pub trace_address: u64,
    /// Bytes to ask for.
    pub requested: usize,
    /// The stream to allocate it on.
    pub stream: StreamId,
}

/// How a replay begins.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartPlan {
    /// Segments to adopt with their live blocks, lowest address first.
    pub segments: Vec<StartSegment>,
    /// Live blocks to allocate before the first event, lowest address first.
    pub fresh: Vec<FreshBlock>,
    /// Segments whose layout blockpool cannot hold (misaligned, sizes not multiples of 512
    /// bytes): their live blocks are in `fresh` instead.
    pub not_adoptable: u64,
}

/// The plan for `state`: its segments adopted (unless `fresh`), every other live block
/// allocated afresh. `config` rounds the sizes of blocks the trace knows only by request.
pub fn plan(state: &DeviceState, config: &AllocatorConfig, fresh: bool) -> StartPlan {
    let mut start = StartPlan::default();
    for segment in &state.segments {
        match (!fresh).then(|| layout(segment, config)).flatten() {
            Some(adoptable) => start.segments.push(adoptable),
            None => {
                start.not_adoptable += u64::from(!fresh);
                start.fresh.extend(live_blocks(segment));
            }
        }
    }
    start
        .fresh
        .extend(state.unsegmented.iter().map(|block| FreshBlock {
            trace_address: block.address,
            requested: request_of(block.requested, block.size),
            stream: StreamId::DEFAULT,
        }));
    start.fresh.sort_by_key(|b| b.trace_address);
    start
}

/// What to ask for to replay a block: its request, or its size when no request was recorded.
pub fn request_of(requested: u64, size: u64) -> usize {
    let bytes = if requested > 0 { requested } else { size };
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

fn live_blocks(segment: &Segment) -> impl Iterator<Item = FreshBlock> + '_ {
    segment
        .blocks
        .iter()
        .filter(|b| b.state.is_active())
        .map(|b| FreshBlock {
            trace_address: b.address,
            requested: request_of(b.requested, b.size),
            stream: segment.stream,
        })
}

/// `segment` as blockpool can adopt it, or `None` when its addresses or sizes do not fit
/// blockpool's 512-byte granularity.
fn layout(segment: &Segment, config: &AllocatorConfig) -> Option<StartSegment> {
    let size = usize::try_from(segment.size).ok()?;
    if size == 0 || size % MIN_BLOCK_SIZE != 0 {
        return None;
    }
    let offset_of = |address: u64| -> Option<usize> {
        usize::try_from(address.checked_sub(segment.address)?).ok()
    };
    let active: Vec<_> = segment
        .blocks
        .iter()
        .filter(|b| b.state.is_active())
        .collect();
    let mut blocks = Vec::with_capacity(active.len());
    for (i, block) in active.iter().enumerate() {
        let offset = offset_of(block.address)?;
        let space_end = match active.get(i + 1) {
            Some(next) => offset_of(next.address)?,
            None => size,
        };
        let space = space_end.checked_sub(offset)?;
        let recorded = usize::try_from(block.size).ok()?;
        let rounded_recorded = recorded.checked_next_multiple_of(MIN_BLOCK_SIZE)?;
        let requested = usize::try_from(block.requested).ok()?;
        let rounded_request = round_size(requested, config).unwrap_or(0);
        let block_size = rounded_recorded.max(rounded_request).min(space);
        if offset % MIN_BLOCK_SIZE != 0 || block_size == 0 || block_size % MIN_BLOCK_SIZE != 0 {
            return None;
        }
        blocks.push(AdoptBlock {
            offset,
            size: block_size,
            requested: requested.min(block_size),
        });
    }
    Some(StartSegment {
        trace_address: segment.address,
        size,
        pool: segment.pool,
        stream: segment.stream,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockpool::trace::snapshot::Block;
    use blockpool::trace::{BlockState, ContextId};

    fn block(address: u64, size: u64, requested: u64, state: BlockState) -> Block {
        Block {
            address,
            size,
            requested,
            state,
            context: ContextId::NONE,
        }
    }

    fn segment(address: u64, size: u64, blocks: Vec<Block>) -> Segment {
        Segment {
            device: 0,
            address,
            size,
            stream: StreamId::from_raw(3),
            pool: PoolKind::Large,
            expandable: false,
            context: ContextId::NONE,
            blocks,
        }
    }

    #[test]
    fn blocks_known_by_request_get_the_rounded_size_and_keep_their_offsets() {
        let base = 1 << 30;
        let state = DeviceState {
            device: 0,
            segments: vec![segment(
                base,
                20 << 20,
                vec![
                    block(base, 1000, 1000, BlockState::ActiveAllocated),
                    block(base + 1000, 4096 - 1000, 0, BlockState::Inactive),
                    block(base + 4096, 2 << 20, 2 << 20, BlockState::ActivePendingFree),
                    block(
                        base + 4096 + (2 << 20),
                        (18 << 20) - 4096,
                        0,
                        BlockState::Inactive,
                    ),
                ],
            )],
            unsegmented: vec![block(7 << 30, 300, 0, BlockState::ActiveAllocated)],
        };
        let start = plan(&state, &AllocatorConfig::default(), false);
        assert_eq!(start.not_adoptable, 0);
        assert_eq!(
            start.segments[0].blocks,
            [
                AdoptBlock {
                    offset: 0,
                    size: 1024,
                    requested: 1000
                },
                AdoptBlock {
                    offset: 4096,
                    size: 2 << 20,
                    requested: 2 << 20
                },
            ]
        );
        assert_eq!(start.segments[0].stream, StreamId::from_raw(3));
        assert_eq!(
            start.fresh,
            [FreshBlock {
                trace_address: 7 << 30,
                requested: 300,
                stream: StreamId::DEFAULT
            }]
        );

        let fresh = plan(&state, &AllocatorConfig::default(), true);
        assert!(fresh.segments.is_empty());
        assert_eq!(fresh.not_adoptable, 0, "--fresh adopts nothing on purpose");
        let addresses: Vec<u64> = fresh.fresh.iter().map(|b| b.trace_address).collect();
        assert_eq!(addresses, [base, base + 4096, 7 << 30], "address order");
    }

    #[test]
    fn misaligned_segments_are_allocated_afresh_instead() {
        let state = DeviceState {
            device: 0,
            segments: vec![
                segment(
                    0x1000,
                    4096,
                    vec![block(0x1100, 256, 256, BlockState::ActiveAllocated)],
                ),
                segment(
                    0x4000,
                    1000,
                    vec![block(0x4000, 1000, 1000, BlockState::ActiveAllocated)],
                ),
            ],
            unsegmented: Vec::new(),
        };
        let start = plan(&state, &AllocatorConfig::default(), false);
        assert!(start.segments.is_empty());
        assert_eq!(start.not_adoptable, 2);
        assert_eq!(start.fresh.len(), 2);
        assert_eq!(start.fresh[0].stream, StreamId::from_raw(3));
    }
}
