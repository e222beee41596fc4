//! Blocks and the slab that holds them.
//!
//! A segment is one device allocation; it is cut into blocks that tile it exactly, linked in
//! address order through `prev`/`next`. Splitting keeps the block's id on the front part and
//! gives the remainder a new id, and merging keeps the lower block's id, so the id of a
//! segment's first block never changes while the segment lives.

use crate::backend::StreamId;

/// Index of a block in its device's slab. Valid while the block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub(crate) u32);

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
    pub state: BlockState,
    pub prev: Option<BlockId>,
    pub next: Option<BlockId>,
    /// Streams other than `stream` that used the block (`record_stream`).
    pub stream_uses: Vec<StreamId>,
    /// Outstanding events while `PendingFree`.
    pub event_count: u32,
    /// The pool's free-list lookup count when the block was cached (garbage collection age).
    pub gc_count_base: u64,
}

impl Block {
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
    pub fn insert(&mut self, block: Block) -> BlockId {
        self.live += 1;
        if let Some(index) = self.vacant.pop() {
            self.slots[index as usize] = Some(block);
            BlockId(index)
        } else {
            self.slots.push(Some(block));
            BlockId((self.slots.len() - 1) as u32)
        }
    }

    pub fn remove(&mut self, id: BlockId) -> Option<Block> {
        let block = self.slots.get_mut(id.0 as usize)?.take()?;
        self.vacant.push(id.0);
        self.live -= 1;
        Some(block)
    }

    #[inline]
    pub fn get(&self, id: BlockId) -> Option<&Block> {
        self.slots.get(id.0 as usize)?.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, id: BlockId) -> Option<&mut Block> {
        self.slots.get_mut(id.0 as usize)?.as_mut()
    }

    pub fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(addr: u64) -> Block {
        Block {
            addr,
            size: 512,
            requested: 0,
            stream: StreamId::DEFAULT,
            small: true,
            state: BlockState::Free,
            prev: None,
            next: None,
            stream_uses: Vec::new(),
            event_count: 0,
            gc_count_base: 0,
        }
    }

    #[test]
    fn removed_slots_are_reused() {
        let mut arena = BlockArena::default();
        let a = arena.insert(block(0));
        let b = arena.insert(block(512));
        assert_eq!(arena.remove(a).map(|b| b.addr), Some(0));
        assert!(
            arena.get(a).is_none(),
            "a removed block must not be reachable"
        );
        let c = arena.insert(block(1024));
        assert_eq!(c, a, "the vacant slot is reused");
        assert_eq!(arena.len(), 2);
        assert_eq!(arena.get(b).map(|b| b.addr), Some(512));
        assert!(arena.remove(BlockId(99)).is_none());
    }
}
