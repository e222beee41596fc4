//! Blocks and the slab that holds them.
//!
//! A segment is one device allocation; it is cut into blocks that tile it exactly, linked in
//! address order through `prev`/`next`. Splitting keeps the block's id on the front part and
//! gives the remainder a new id, and merging keeps the lower block's id, so the id of a
//! segment's first block never changes while the segment lives.

use super::observe::Place;
use crate::backend::StreamId;
use std::num::NonZeroU32;

/// Index of a block in its device's slab (plus one, so `Option<BlockId>` takes four bytes).
/// Valid while the block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub(crate) NonZeroU32);

impl BlockId {
    #[inline]
    pub(crate) fn index(self) -> usize {
        self.0.get() as usize - 1
    }

    #[inline]
    pub(crate) fn from_index(index: usize) -> BlockId {
        // Slab slots are counted in u32 and start at 1; `insert` refuses to grow past that.
        BlockId(NonZeroU32::MIN.saturating_add(index as u32))
    }
}

/// Where a block is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out to a caller.
    Allocated,
    /// Freed by the caller, waiting for events on the streams that used it.
    PendingFree,
    /// Cached in a free list, ready for reuse.
    Free,
}

/// One block: a run of bytes inside a segment.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub addr: u64,
    pub size: usize,
    /// Bytes the caller asked for (0 while free).
    pub requested: usize,
    pub stream: StreamId,
    pub small: bool,
    /// Whether the block lies in an expandable segment.
    pub expandable: bool,
    /// Whether memory is mapped behind the block: always for fixed segments; an unmapped
    /// block of an expandable segment is `Free`, never handed out and in no free list.
    pub mapped: bool,
    pub state: BlockState,
    pub prev: Option<BlockId>,
    pub next: Option<BlockId>,
    /// Streams other than `stream` that used the block (`record_stream`); boxed because it is
    /// almost always absent and blocks should stay small.
    #[allow(
        clippy::box_collection,
        reason = "one pointer instead of three keeps a slot in a cache line"
    )]
    pub stream_uses: Option<Box<Vec<StreamId>>>,
    /// Outstanding events while `PendingFree`.
    pub event_count: u32,
    /// The pool's free-list lookup count when the block was cached (garbage collection age).
    pub gc_count_base: u64,
}

impl Block {
    /// Where the block is, as its events say: its stream, memory and pool.
    #[inline]
    pub(crate) fn place(&self) -> Place {
        Place {
            stream: self.stream,
            addr: self.addr,
            size: self.size,
            small: self.small,
        }
    }

    /// A cached block with its neighbours `(prev, next)`, stamped with the free list's lookup
    /// count `gc_count_base`.
    pub fn free(
        addr: u64,
        size: usize,
        stream: StreamId,
        small: bool,
        (prev, next): (Option<BlockId>, Option<BlockId>),
        gc_count_base: u64,
    ) -> Block {
        Block {
            addr,
            size,
            requested: 0,
            stream,
            small,
            expandable: false,
            mapped: true,
            state: BlockState::Free,
            prev,
            next,
            stream_uses: None,
            event_count: 0,
            gc_count_base,
        }
    }

    /// Whether the block is cached for reuse: free with memory behind it.
    pub fn is_cached(&self) -> bool {
        self.state == BlockState::Free && self.mapped
    }

    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }
}

/// A slab of blocks with recycled slots.
#[derive(Default, Debug)]
pub(crate) struct BlockArena {
    slots: Vec<Option<Block>>,
    vacant: Vec<u32>,
    live: usize,
}

impl BlockArena {
    /// Stores `block`; `None` only when 2^32 - 1 blocks already live on one device.
    #[inline(always)]
    pub fn insert(&mut self, block: Block) -> Option<BlockId> {
        let index = match self.vacant.pop() {
            Some(index) => {
                self.slots[index as usize] = Some(block);
                index as usize
            }
            None if self.slots.len() < u32::MAX as usize => {
                self.slots.push(Some(block));
                self.slots.len() - 1
            }
            None => return None,
        };
        self.live += 1;
        Some(BlockId::from_index(index))
    }

    #[inline]
    pub fn remove(&mut self, id: BlockId) -> Option<Block> {
        let block = self.slots.get_mut(id.index())?.take()?;
        self.vacant.push(id.index() as u32);
        self.live -= 1;
        Some(block)
    }

    #[inline]
    pub fn get(&self, id: BlockId) -> Option<&Block> {
        self.slots.get(id.index())?.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, id: BlockId) -> Option<&mut Block> {
        self.slots.get_mut(id.index())?.as_mut()
    }

    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether `insert` can store one more block.
    #[inline]
    pub fn has_room(&self) -> bool {
        !self.vacant.is_empty() || self.slots.len() < u32::MAX as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(addr: u64) -> Block {
        Block::free(addr, 512, StreamId::DEFAULT, true, (None, None), 0)
    }

    #[test]
    fn blocks_stay_small() {
        assert!(
            std::mem::size_of::<Option<Block>>() <= 64,
            "a slab slot should fit a cache line"
        );
    }

    #[test]
    fn removed_slots_are_reused() {
        let mut arena = BlockArena::default();
        let a = arena.insert(block(0)).unwrap();
        let b = arena.insert(block(512)).unwrap();
        assert_eq!(arena.remove(a).map(|b| b.addr), Some(0));
        assert!(
            arena.get(a).is_none(),
            "a removed block must not be reachable"
        );
        let c = arena.insert(block(1024)).unwrap();
        assert_eq!(c, a, "the vacant slot is reused");
        assert_eq!(arena.len(), 2);
        assert_eq!(arena.get(b).map(|b| b.addr), Some(512));
        assert!(arena.remove(BlockId::from_index(99)).is_none());
    }
}
