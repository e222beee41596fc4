//! The working state of one device while a trace is walked: live segments and active blocks
//! keyed by address, running totals, the placement checks every change passes, and the
//! tiled [`DeviceState`] a caller sees.
//!
//! Only active blocks are kept. Inactive space is the gaps between them: free neighbours
//! always merge (in this allocator as in PyTorch's), so the gaps are exactly the inactive
//! blocks a snapshot lists.

use super::error::Conflict;
use crate::backend::StreamId;
use crate::pool::sizing::{LARGE_BUFFER, SMALL_BUFFER};
use crate::pool::PoolKind;
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{BlockState, ContextId};
use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

/// One device's memory at one event: its segments, tiled by their blocks, and the active
/// blocks no known segment holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// Device index.
    pub device: u32,
    /// Every segment, lowest address first, tiled by its blocks as in
    /// [`Snapshot::segments`](crate::trace::Snapshot::segments): active blocks, and one
    /// inactive block (requested 0, no context) for each gap between them.
    pub segments: Vec<Segment>,
    /// Active blocks whose memory lies in no known segment, lowest address first: RMM logs
    /// record no segments, and a truncated trace may not show the segment a block lives in.
    pub unsegmented: Vec<Block>,
}

impl DeviceState {
    /// The totals this state implies.
    pub fn totals(&self) -> MemoryTotals {
        let mut totals = MemoryTotals::default();
        for segment in &self.segments {
            totals.reserved_bytes += segment.size;
            totals.segments += 1;
        }
        let blocks = self.segments.iter().flat_map(|s| &s.blocks);
        for block in blocks.chain(&self.unsegmented) {
            totals.add_block(block.state, block.size, block.requested, 1);
        }
        totals
    }
}

/// Running totals of one device's memory, named after the `memory_stats` keys they equal for
/// a trace of this allocator (`.all.current`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    /// Bytes in allocated blocks (`allocated_bytes`).
    pub allocated_bytes: u64,
    /// Bytes in active blocks, allocated or pending free (`active_bytes`).
    pub active_bytes: u64,
    /// Bytes the callers of active blocks asked for (`requested_bytes`).
    pub requested_bytes: u64,
    /// Bytes in segments (`reserved_bytes`).
    pub reserved_bytes: u64,
    /// Allocated blocks (`allocation`).
    pub allocations: u64,
    /// Active blocks (`active`).
    pub active_blocks: u64,
    /// Segments (`segment`).
    pub segments: u64,
}

impl MemoryTotals {
    /// Adds (`sign` 1) or removes (`sign` -1) a segment's share, wrapping as
    /// [`add_block`](Self::add_block) does.
    pub(super) fn add_segment(&mut self, size: u64, sign: i64) {
        add_signed(&mut self.reserved_bytes, size, sign);
        add_signed(&mut self.segments, 1, sign);
    }

    /// Adds (`sign` 1) or removes (`sign` -1) a block's share. Totals wrap rather than
    /// panic; they cannot go below zero because only blocks that were added are removed.
    pub(super) fn add_block(&mut self, state: BlockState, size: u64, requested: u64, sign: i64) {
        let add = |total: &mut u64, value: u64| add_signed(total, value, sign);
        if state.is_active() {
            add(&mut self.active_bytes, size);
            add(&mut self.requested_bytes, requested);
            add(&mut self.active_blocks, 1);
        }
        if state == BlockState::ActiveAllocated {
            add(&mut self.allocated_bytes, size);
            add(&mut self.allocations, 1);
        }
    }
}

/// Adds `value` to `total` for a positive `sign`, else subtracts it, wrapping.
fn add_signed(total: &mut u64, value: u64, sign: i64) {
    *total = if sign > 0 {
        total.wrapping_add(value)
    } else {
        total.wrapping_sub(value)
    };
}

/// A live segment, as the working state keeps it (its address is the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LiveSegment {
    pub size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
    /// Mapped memory of an expandable segment.
    pub expandable: bool,
    pub context: ContextId,
}

impl LiveSegment {
    /// A segment the events describe but no end state shows: its pool is inferred from its
    /// size, as this allocator and PyTorch's carve small-pool blocks from 2 MiB segments and
    /// never make a large-pool segment of that size.
    pub fn from_event(size: u64, stream: StreamId, context: ContextId) -> LiveSegment {
        let pool = if size == SMALL_BUFFER as u64 {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        LiveSegment {
            size,
            stream,
            pool,
            expandable: false,
            context,
        }
    }
}

impl LiveSegment {
    /// Mapped memory of an expandable segment that a `segment_map` or `segment_unmap` event
    /// describes and no neighbour tells the pool of: PyTorch's allocator and this one map the
    /// large pool in 20 MiB units, so a range that is not a whole number of them is the small
    /// pool's (2 MiB units); a whole number of them is taken as the large pool's.
    pub fn from_mapping(size: u64, stream: StreamId, context: ContextId) -> LiveSegment {
        let pool = if size % LARGE_BUFFER as u64 == 0 {
            PoolKind::Large
        } else {
            PoolKind::Small
        };
        LiveSegment {
            size,
            stream,
            pool,
            expandable: true,
            context,
        }
    }
}

/// An active block, as the working state keeps it (its address is the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LiveBlock {
    pub size: u64,
    pub requested: u64,
    /// `ActiveAllocated` or `ActivePendingFree`, never `Inactive`.
    pub state: BlockState,
    pub context: ContextId,
}

/// The end of `[addr, addr + size)`, checked.
pub(super) fn range_end(addr: u64, size: u64) -> Result<u64, Conflict> {
    if size == 0 {
        return Err(Conflict::Empty);
    }
    addr.checked_add(size)
        .ok_or(Conflict::PastAddressSpace { size })
}

/// Live segments and active blocks of one device, with their totals.
///
/// Invariants the checks keep: segments do not overlap, blocks do not overlap, and every
/// block lies wholly inside one segment or wholly outside all of them.
#[derive(Clone, Debug, Default)]
pub(super) struct Memory {
    pub segments: BTreeMap<u64, LiveSegment>,
    pub blocks: BTreeMap<u64, LiveBlock>,
    pub totals: MemoryTotals,
}

impl Memory {
    /// How many segments and active blocks are live.
    pub fn live(&self) -> usize {
        self.segments.len() + self.blocks.len()
    }

    pub fn insert_block(&mut self, addr: u64, block: LiveBlock) {
        if let Some(old) = self.blocks.insert(addr, block) {
            self.count_block(&old, -1);
        }
        self.count_block(&block, 1);
    }

    pub fn remove_block(&mut self, addr: u64) -> Option<LiveBlock> {
        let block = self.blocks.remove(&addr)?;
        self.count_block(&block, -1);
        Some(block)
    }

    /// Removes the allocated block at `addr` and returns it (one lookup): `None` when no
    /// block is there, [`Conflict::PendingAfterAlloc`] when the block there is pending free.
    pub fn take_allocated(&mut self, addr: u64) -> Result<Option<LiveBlock>, Conflict> {
        let Entry::Occupied(entry) = self.blocks.entry(addr) else {
            return Ok(None);
        };
        if entry.get().state != BlockState::ActiveAllocated {
            return Err(Conflict::PendingAfterAlloc);
        }
        let block = entry.remove();
        self.count_block(&block, -1);
        Ok(Some(block))
    }

    /// Makes the pending block at `addr` allocated again in place and returns it as it was
    /// (one lookup): `None` when no block is there, [`Conflict::LiveAfterFree`] when the
    /// block there is allocated.
    pub fn unfree(&mut self, addr: u64) -> Result<Option<LiveBlock>, Conflict> {
        let Some(block) = self.blocks.get_mut(&addr) else {
            return Ok(None);
        };
        let pending = *block;
        if pending.state != BlockState::ActivePendingFree {
            return Err(Conflict::LiveAfterFree {
                state: pending.state,
            });
        }
        block.state = BlockState::ActiveAllocated;
        let allocated = *block;
        self.count_block(&pending, -1);
        self.count_block(&allocated, 1);
        Ok(Some(pending))
    }

    fn count_block(&mut self, block: &LiveBlock, sign: i64) {
        self.totals
            .add_block(block.state, block.size, block.requested, sign);
    }

    pub fn insert_segment(&mut self, addr: u64, segment: LiveSegment) {
        if let Some(old) = self.segments.insert(addr, segment) {
            self.count_segment(&old, -1);
        }
        self.count_segment(&segment, 1);
    }

    pub fn remove_segment(&mut self, addr: u64) -> Option<LiveSegment> {
        let segment = self.segments.remove(&addr)?;
        self.count_segment(&segment, -1);
        Some(segment)
    }

    fn count_segment(&mut self, segment: &LiveSegment, sign: i64) {
        self.totals.add_segment(segment.size, sign);
    }

    /// The first active block overlapping `[addr, end)`.
    pub fn block_overlapping(&self, addr: u64, end: u64) -> Option<u64> {
        if let Some((&start, block)) = self.blocks.range(..addr).next_back() {
            if start.saturating_add(block.size) > addr {
                return Some(start);
            }
        }
        self.blocks.range(addr..end).next().map(|(&start, _)| start)
    }

    /// The first segment overlapping `[addr, end)`.
    pub fn segment_overlapping(&self, addr: u64, end: u64) -> Option<u64> {
        if let Some((&start, segment)) = self.segments.range(..addr).next_back() {
            if start.saturating_add(segment.size) > addr {
                return Some(start);
            }
        }
        self.segments
            .range(addr..end)
            .next()
            .map(|(&start, _)| start)
    }

    /// The segment holding address `addr`, with its address.
    pub fn segment_at(&self, addr: u64) -> Option<(u64, LiveSegment)> {
        let (&start, &segment) = self.segments.range(..=addr).next_back()?;
        (start.saturating_add(segment.size) > addr).then_some((start, segment))
    }

    /// Checks that a new active block `[addr, addr + size)` overlaps no live block and lies
    /// wholly inside one segment or wholly outside all of them.
    pub fn check_block_place(&self, addr: u64, size: u64) -> Result<(), Conflict> {
        let end = range_end(addr, size)?;
        if let Some(block) = self.block_overlapping(addr, end) {
            return Err(Conflict::OverlapsBlock { block });
        }
        self.check_segments_hold(addr, end)
    }

    /// Checks that `[addr, end)` lies wholly inside one segment or wholly outside all.
    fn check_segments_hold(&self, addr: u64, end: u64) -> Result<(), Conflict> {
        match self.segment_at(addr) {
            Some((start, segment)) if end > start.saturating_add(segment.size) => {
                Err(Conflict::CrossesSegment { segment: start })
            }
            Some(_) => Ok(()),
            None => match self.segment_overlapping(addr, end) {
                Some(segment) => Err(Conflict::CrossesSegment { segment }),
                None => Ok(()),
            },
        }
    }

    /// [`check_block_place`](Self::check_block_place) for a block an undone free brings
    /// back, which also finds no block at `addr` itself ([`Conflict::LiveAfterFree`], before
    /// any other conflict), with one lookup fewer than asking first.
    pub fn check_freed_block_place(&self, addr: u64, size: u64) -> Result<(), Conflict> {
        let end = match range_end(addr, size) {
            Ok(end) => end,
            Err(conflict) => {
                return Err(self.blocks.get(&addr).map_or(conflict, |block| {
                    Conflict::LiveAfterFree { state: block.state }
                }))
            }
        };
        let inside = self.blocks.range(addr..end).next();
        if let Some((&start, block)) = inside {
            if start == addr {
                return Err(Conflict::LiveAfterFree { state: block.state });
            }
        }
        if let Some((&start, block)) = self.blocks.range(..addr).next_back() {
            if start.saturating_add(block.size) > addr {
                return Err(Conflict::OverlapsBlock { block: start });
            }
        }
        if let Some((&block, _)) = inside {
            return Err(Conflict::OverlapsBlock { block });
        }
        self.check_segments_hold(addr, end)
    }

    /// Checks that a new segment `[addr, addr + size)` overlaps no segment and that every
    /// block overlapping it lies wholly inside it (`blocks_allowed`) or that none does.
    pub fn check_segment_place(
        &self,
        addr: u64,
        size: u64,
        blocks_allowed: bool,
    ) -> Result<(), Conflict> {
        let end = range_end(addr, size)?;
        if let Some(segment) = self.segment_overlapping(addr, end) {
            return Err(Conflict::OverlapsSegment { segment });
        }
        if let Some((&start, block)) = self.blocks.range(..addr).next_back() {
            if start.saturating_add(block.size) > addr {
                return Err(Conflict::CrossesSegment { segment: addr });
            }
        }
        let mut inside = self.blocks.range(addr..end);
        if !blocks_allowed {
            if let Some((&block, _)) = inside.next() {
                return Err(Conflict::LiveBlockOutsideSegment { block });
            }
        } else if let Some((&start, block)) = inside.next_back() {
            if start.saturating_add(block.size) > end {
                return Err(Conflict::CrossesSegment { segment: addr });
            }
        }
        Ok(())
    }

    /// The tiled view of this memory.
    pub fn device_state(&self, device: u32) -> DeviceState {
        let mut segments = Vec::with_capacity(self.segments.len());
        let mut unsegmented = Vec::new();
        let mut blocks = self.blocks.iter().peekable();
        for (&address, live) in &self.segments {
            let end = address.saturating_add(live.size);
            while let Some((&addr, block)) = blocks.next_if(|(&a, _)| a < address) {
                unsegmented.push(active_block(addr, block));
            }
            let mut tiles = Vec::new();
            let mut next = address;
            while let Some((&addr, block)) = blocks.next_if(|(&a, _)| a < end) {
                if addr > next {
                    tiles.push(inactive_block(next, addr - next));
                }
                tiles.push(active_block(addr, block));
                next = addr.saturating_add(block.size);
            }
            if end > next {
                tiles.push(inactive_block(next, end - next));
            }
            segments.push(Segment {
                device,
                address,
                size: live.size,
                stream: live.stream,
                pool: live.pool,
                expandable: live.expandable,
                context: live.context,
                blocks: tiles,
            });
        }
        unsegmented.extend(blocks.map(|(&addr, block)| active_block(addr, block)));
        DeviceState {
            device,
            segments,
            unsegmented,
        }
    }
}

fn active_block(address: u64, block: &LiveBlock) -> Block {
    Block {
        address,
        size: block.size,
        requested: block.requested,
        state: block.state,
        context: block.context,
    }
}

fn inactive_block(address: u64, size: u64) -> Block {
    Block {
        address,
        size,
        requested: 0,
        state: BlockState::Inactive,
        context: ContextId::NONE,
    }
}
