//! Free lists: cached blocks of one pool ordered by (stream, size, address), so that the first
//! entry at or after `(stream, size, 0)` is the best fit on that stream.

use super::block::BlockId;
use crate::backend::StreamId;
use std::collections::BTreeSet;
use std::ops::Bound;

/// The two pools of PyTorch's allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

/// Ordering key of a cached block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FreeKey {
    pub stream: StreamId,
    pub size: usize,
    pub addr: u64,
    pub id: BlockId,
}

/// The cached blocks of one pool.
#[derive(Debug, Default)]
pub(crate) struct FreeList {
    blocks: BTreeSet<FreeKey>,
    /// Number of best-fit lookups so far; the clock of garbage collection ages.
    pub lookups: u64,
}

impl FreeList {
    pub fn insert(&mut self, key: FreeKey) {
        let inserted = self.blocks.insert(key);
        debug_assert!(inserted, "block cached twice");
    }

    pub fn remove(&mut self, key: &FreeKey) -> bool {
        self.blocks.remove(key)
    }

    /// The smallest cached block on `stream` of at least `size` bytes (lowest address first).
    #[inline]
    pub fn best_fit(&self, stream: StreamId, size: usize) -> Option<FreeKey> {
        let start = FreeKey {
            stream,
            size,
            addr: 0,
            id: BlockId(0),
        };
        self.blocks
            .range((Bound::Included(start), Bound::Unbounded))
            .next()
            .filter(|k| k.stream == stream)
            .copied()
    }

    /// The largest cached block on `stream` smaller than `size` bytes.
    pub fn largest_below(&self, stream: StreamId, size: usize) -> Option<FreeKey> {
        let end = FreeKey {
            stream,
            size,
            addr: 0,
            id: BlockId(0),
        };
        self.blocks
            .range((Bound::Unbounded, Bound::Excluded(end)))
            .next_back()
            .filter(|k| k.stream == stream)
            .copied()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &FreeKey> {
        self.blocks.iter()
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn contains(&self, key: &FreeKey) -> bool {
        self.blocks.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(stream: u64, size: usize, addr: u64) -> FreeKey {
        FreeKey {
            stream: StreamId(stream),
            size,
            addr,
            id: BlockId(addr as u32),
        }
    }

    #[test]
    fn best_fit_prefers_smallest_then_lowest_address_on_the_same_stream() {
        let mut list = FreeList::default();
        list.insert(key(0, 4096, 300));
        list.insert(key(0, 2048, 200));
        list.insert(key(0, 2048, 100));
        list.insert(key(1, 1024, 400));
        assert_eq!(list.best_fit(StreamId(0), 1024), Some(key(0, 2048, 100)));
        assert_eq!(list.best_fit(StreamId(0), 3000), Some(key(0, 4096, 300)));
        assert_eq!(
            list.best_fit(StreamId(0), 8192),
            None,
            "never a block of stream 1"
        );
        assert_eq!(list.best_fit(StreamId(1), 512), Some(key(1, 1024, 400)));
        assert_eq!(list.best_fit(StreamId(2), 512), None);
    }

    #[test]
    fn largest_below_stays_on_the_stream() {
        let mut list = FreeList::default();
        list.insert(key(0, 4096, 300));
        list.insert(key(1, 1024, 400));
        assert_eq!(
            list.largest_below(StreamId(1), 8192),
            Some(key(1, 1024, 400))
        );
        assert_eq!(list.largest_below(StreamId(0), 4096), None);
        assert_eq!(
            list.largest_below(StreamId(0), 4097),
            Some(key(0, 4096, 300))
        );
    }
}
