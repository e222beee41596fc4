//! How a device's memory looks from outside: [`SegmentView`] and [`BlockView`] snapshots of
//! every segment and its blocks (for `memory_snapshot`-style reports and tests), and lookups of
//! a single block by id or address. Nothing here changes the allocator; none of it is on the
//! allocation hot path.

use super::block::{BlockId, BlockState};
use super::device::DeviceAllocator;
use super::free_list::PoolKind;
use crate::backend::StreamId;
use crate::event::ContextId;

/// A segment as seen from outside: its blocks in address order.
///
/// An expandable segment shows as one view per run of mapped memory, as PyTorch's snapshots
/// show it: unmapped address space is in no view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentView {
    /// Device address of the segment.
    pub addr: u64,
    /// Segment size in bytes.
    pub size: usize,
    /// Stream the segment was allocated for.
    pub stream: StreamId,
    /// Which pool the segment belongs to.
    pub pool: PoolKind,
    /// The blocks tiling the segment, lowest address first.
    pub blocks: Vec<BlockView>,
    /// Whether this is (mapped memory of) an expandable segment.
    pub is_expandable: bool,
    /// Context of the call that allocated the segment, when history was recorded with
    /// [`ContextLevel::State`](crate::event::ContextLevel::State) or more; [`ContextId::NONE`]
    /// otherwise.
    pub context: ContextId,
}

/// A block as seen from outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockView {
    /// Device address.
    pub addr: u64,
    /// Size in bytes.
    pub size: usize,
    /// Bytes requested (0 when free).
    pub requested: usize,
    /// Life state.
    pub state: BlockState,
    /// Stream the block belongs to: the segment's, except under `stream_reuse:ordered`,
    /// where a block taken by another stream belongs to that stream.
    pub stream: StreamId,
    /// Context of the call that allocated the block, while it is allocated or pending and
    /// history is recorded with [`ContextLevel::State`](crate::event::ContextLevel::State) or
    /// more; [`ContextId::NONE`] otherwise.
    pub context: ContextId,
}

impl<E> DeviceAllocator<E> {
    /// The block starting at `addr`, if any segment of this device has one.
    pub fn block_at(&self, addr: u64) -> Option<(BlockId, BlockState)> {
        let (_, segment) = self.segments.at_or_before(addr)?;
        let mut cursor = Some(segment.head);
        while let Some(id) = cursor {
            let block = self.blocks.get(id)?;
            if block.addr == addr {
                return block.mapped.then_some((id, block.state));
            }
            if block.addr > addr {
                return None;
            }
            cursor = block.next;
        }
        None
    }

    /// Every segment with its blocks, lowest address first; an expandable segment as one view
    /// per run of mapped memory.
    pub fn segments(&self) -> Vec<SegmentView> {
        let mut views = Vec::with_capacity(self.segments.len());
        for (_, segment) in self.segments.iter() {
            let mut run: Option<SegmentView> = None;
            let mut cursor = Some(segment.head);
            while let Some((id, block)) = cursor.and_then(|id| self.blocks.get(id).map(|b| (id, b)))
            {
                cursor = block.next;
                if !block.mapped {
                    views.extend(run.take());
                    continue;
                }
                let view = run.get_or_insert_with(|| SegmentView {
                    addr: block.addr,
                    size: 0,
                    stream: block.stream,
                    pool: if block.small {
                        PoolKind::Small
                    } else {
                        PoolKind::Large
                    },
                    blocks: Vec::new(),
                    context: segment.context,
                    is_expandable: segment.expandable,
                });
                view.size += block.size;
                view.blocks.push(BlockView {
                    addr: block.addr,
                    size: block.size,
                    requested: block.requested,
                    state: block.state,
                    stream: block.stream,
                    context: match block.state {
                        BlockState::Free => ContextId::NONE,
                        _ => self.observers.block_context(id),
                    },
                });
            }
            views.extend(run);
        }
        views
    }
}
