//! One device's caching allocator: its state, `free` (merging with free neighbours) and
//! `record_stream`.
//!
//! `malloc` lives in `malloc.rs`, the out-of-memory ladder and `empty_cache` in `release.rs`.
//! `free` returns a block to its pool, merging it with free neighbours, or defers it behind
//! events when other streams used it (`events.rs`).

use super::block::{Block, BlockArena, BlockId, BlockState};
use super::events::EventQueues;
use super::expandable::Expandable;
use super::free_list::{FreeKey, FreeList};
use super::observe::{Observers, PoolEvent};
use super::policy::PoolPolicy;
use super::segments::SegmentMap;
use crate::backend::{Backend, DeviceIndex, StreamId};
use crate::config::AllocatorConfig;
use crate::error::{Error, Result};
use crate::event::{HistorySettings, TraceEvent};
use crate::stats::DeviceStats;

/// A block id that names no block: a bookkeeping bug.
pub(crate) const NO_BLOCK: Error = Error::InvariantViolated {
    what: "block id names no block",
};

/// A free block absent from its free list: a bookkeeping bug.
const NOT_CACHED: Error = Error::InvariantViolated {
    what: "free block missing from its free list",
};

/// Returned when a device would need more than 2^32 - 1 blocks at once.
pub(crate) const TOO_MANY_BLOCKS: Error = Error::InvariantViolated {
    what: "more than 2^32 - 1 blocks on one device",
};

/// A block handed out by [`DeviceAllocator::malloc`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatedBlock {
    /// The block, for `free` and `record_stream`.
    pub id: BlockId,
    /// Device address of the first byte.
    pub addr: u64,
    /// Block size in bytes (the rounded request, or more when the block was not split).
    pub size: usize,
    /// Bytes asked for.
    pub requested: usize,
    /// Stream the block was allocated on.
    pub stream: StreamId,
    /// Allocation number on this device, counting from 1.
    pub alloc_id: u64,
}

/// The caching allocator of one device. Not thread-safe by itself; the
/// [`CachingAllocator`](crate::CachingAllocator) keeps each behind a mutex.
pub struct DeviceAllocator<E> {
    pub(crate) device: DeviceIndex,
    /// The decisions the settings make: sizing, which cached block, splitting, release.
    pub(crate) policy: PoolPolicy,
    pub(crate) blocks: BlockArena,
    pub(crate) small: FreeList,
    pub(crate) large: FreeList,
    /// Segments by address, and the bytes they reserve.
    pub(crate) segments: SegmentMap,
    /// The events deferred frees wait on (`events.rs`).
    pub(crate) events: EventQueues<E>,
    /// Memory fraction set by `set_memory_fraction`, if any.
    pub(crate) fraction: Option<f64>,
    /// Device capacity, once the backend told it.
    pub(crate) total_bytes: Option<usize>,
    pub(crate) next_alloc_id: u64,
    /// What keeps the pool's events: the statistics, the live table of leak tracking and,
    /// while recording, the history (`observe.rs`).
    pub(crate) observers: Observers,
    /// Expandable segments: whether they are on, and the unmapped blocks (`expandable.rs`).
    pub(crate) expandable: Expandable,
}

impl<E> DeviceAllocator<E> {
    /// An empty allocator for `device` with `config`.
    pub fn new(device: DeviceIndex, config: AllocatorConfig) -> Self {
        let stats = DeviceStats {
            // PyTorch exports size_t's maximum as an int64, which reads -1.
            max_split_size: config.max_split_size() as i64,
            ..DeviceStats::default()
        };
        let config_expandable = config.expandable_segments();
        DeviceAllocator {
            device,
            fraction: config.per_process_memory_fraction(),
            policy: PoolPolicy::new(config),
            blocks: BlockArena::default(),
            small: FreeList::default(),
            large: FreeList::default(),
            segments: SegmentMap::default(),
            events: EventQueues::default(),
            observers: Observers::new(stats),
            total_bytes: None,
            next_alloc_id: 0,
            expandable: Expandable::new(config_expandable),
        }
    }

    /// Statistics of this device.
    pub fn stats(&self) -> &DeviceStats {
        self.observers.stats()
    }

    /// Mutable statistics, for the allocator's peak and accumulated resets. Not public: every
    /// other change to them is the bookkeeping's, and `check_invariants` holds them to it.
    pub(crate) fn stats_mut(&mut self) -> &mut DeviceStats {
        self.observers.stats_mut()
    }

    /// Starts, reconfigures or stops recording this device's history
    /// ([`Observers::record_history`]).
    pub fn record_history(&mut self, settings: &HistorySettings) {
        self.observers.record_history(self.device, settings);
    }

    /// The recorded events, oldest first (empty when not recording).
    pub fn history(&self) -> Vec<TraceEvent> {
        self.observers.history()
    }

    /// The settings this allocator runs with.
    pub fn config(&self) -> &AllocatorConfig {
        self.policy.config()
    }

    pub(crate) fn pool_ref(&self, small: bool) -> &FreeList {
        if small {
            &self.small
        } else {
            &self.large
        }
    }

    pub(crate) fn pool(&mut self, small: bool) -> &mut FreeList {
        if small {
            &mut self.small
        } else {
            &mut self.large
        }
    }

    pub(crate) fn block(&self, id: BlockId) -> Result<&Block> {
        self.blocks.get(id).ok_or(NO_BLOCK)
    }

    pub(crate) fn block_mut(&mut self, id: BlockId) -> Result<&mut Block> {
        self.blocks.get_mut(id).ok_or(NO_BLOCK)
    }

    pub(crate) fn free_key(id: BlockId, block: &Block) -> FreeKey {
        FreeKey {
            stream: block.stream,
            size: block.size,
            addr: block.addr,
            id,
        }
    }

    /// Removes a cached block from its pool.
    pub(crate) fn uncache(&mut self, id: BlockId) -> Result<()> {
        let block = self.block(id)?;
        let (key, small) = (Self::free_key(id, block), block.small);
        self.remove_cached(small, &key)
    }

    /// Frees an allocated block: at once when only its own stream used it, else after events
    /// recorded now on every other stream that used it have completed.
    ///
    /// A failure to record an event keeps the block pending forever: memory a stream may still
    /// use is kept rather than risked (see `insert_events`).
    pub fn free<B: Backend<Event = E>>(&mut self, backend: &B, id: BlockId) -> Result<()> {
        let block = self.blocks.get_mut(id).ok_or(NO_BLOCK)?;
        if block.state != BlockState::Allocated {
            return Err(Error::InvariantViolated {
                what: "free of a block that is not allocated",
            });
        }
        let at = block.place();
        let (requested, other_streams) = (block.requested, block.stream_uses.is_some());
        self.observers.emit(PoolEvent::FreeRequested {
            block: id,
            at,
            requested,
            oversize: self.policy.is_oversize(at.size),
        });
        if !other_streams || (self.policy.serves_other_streams() && self.order_uses(backend, id)?) {
            self.free_block(id)
        } else {
            self.block_mut(id)?.state = BlockState::PendingFree;
            self.insert_events(backend, id)
        }
    }

    /// Returns a freed block with no outstanding events to its pool, merging free neighbours.
    pub(crate) fn free_block(&mut self, id: BlockId) -> Result<()> {
        let block = self.blocks.get_mut(id).ok_or(NO_BLOCK)?;
        debug_assert!(block.event_count == 0 && block.stream_uses.is_none());
        block.state = BlockState::Free;
        let at = block.place();
        let requested = std::mem::take(&mut block.requested);
        self.observers.emit(PoolEvent::FreeCompleted {
            block: id,
            at,
            requested,
        });
        self.cache_merging(id, false)
    }

    /// Caches the free block `id` on its stream, merged with the free neighbours cached for
    /// the same stream, and keeps the inactive-split statistics (`counted`: whether `id`
    /// itself is already counted in them, as a free block moved from another stream is).
    // Inlined into `free_block`, on the hot path of every free, as it was written there.
    #[inline(always)]
    pub(crate) fn cache_merging(&mut self, id: BlockId, counted: bool) -> Result<()> {
        let block = self.blocks.get(id).ok_or(NO_BLOCK)?;
        let (small, stream, prev, next) = (block.small, block.stream, block.prev, block.next);
        let (mut addr, mut size) = (block.addr, block.size);
        let (mut net_blocks, mut net_bytes): (i64, i64) = if counted && block.is_split() {
            (-1, -(size as i64))
        } else {
            (0, 0)
        };
        let mut merged = id;
        let mut absorbed_prev = None;
        let mut absorbed_next = None;
        if let Some(key) = self.free_neighbour(prev, stream) {
            // The lower block absorbs this one and keeps its id.
            self.absorb_next(key.id, id)?;
            net_blocks -= 1;
            net_bytes -= key.size as i64;
            (merged, addr, size) = (key.id, key.addr, key.size + size);
            absorbed_prev = Some(key);
        }
        if let Some(key) = self.free_neighbour(next, stream) {
            self.absorb_next(merged, key.id)?;
            net_blocks -= 1;
            net_bytes -= key.size as i64;
            size += key.size;
            absorbed_next = Some(key);
        }
        let lookups = self.pool_ref(small).lookups();
        let block = self.blocks.get_mut(merged).ok_or(NO_BLOCK)?;
        block.gc_count_base = lookups;
        let counts_split = !block.expandable;
        if block.is_split() {
            net_blocks += 1;
            net_bytes += size as i64;
        }
        // The merged block takes over a neighbour's free-list entry when it has one.
        let merged_key = FreeKey {
            stream,
            size,
            addr,
            id: merged,
        };
        match (absorbed_prev, absorbed_next) {
            (None, None) => self.pool(small).insert(merged_key),
            (Some(prev), None) => self.replace_cached(small, &prev, merged_key)?,
            (prev, Some(next)) => {
                self.replace_cached(small, &next, merged_key)?;
                if let Some(prev) = prev {
                    self.remove_cached(small, &prev)?;
                }
            }
        }
        if counts_split {
            self.observers.emit(PoolEvent::InactiveSplit {
                small,
                blocks: net_blocks,
                bytes: net_bytes,
            });
        }
        Ok(())
    }

    /// The free-list entry of the neighbour `id`, when there is one and it is cached for
    /// `stream` (under `stream_reuse:ordered` a segment's blocks may belong to several streams,
    /// and memory of two streams is never merged).
    #[inline]
    fn free_neighbour(&self, id: Option<BlockId>, stream: StreamId) -> Option<FreeKey> {
        let id = id?;
        self.blocks
            .get(id)
            .filter(|b| b.is_cached() && b.stream == stream)
            .map(|b| Self::free_key(id, b))
    }

    pub(crate) fn remove_cached(&mut self, small: bool, key: &FreeKey) -> Result<()> {
        if self.pool(small).remove(key) {
            Ok(())
        } else {
            Err(NOT_CACHED)
        }
    }

    pub(crate) fn replace_cached(
        &mut self,
        small: bool,
        old: &FreeKey,
        new: FreeKey,
    ) -> Result<()> {
        if self.pool(small).replace(old, new) {
            Ok(())
        } else {
            Err(NOT_CACHED)
        }
    }

    /// Merges `upper`, the block right after `lower`, into `lower`.
    pub(crate) fn absorb_next(&mut self, lower: BlockId, upper: BlockId) -> Result<()> {
        let upper_block = self.blocks.remove(upper).ok_or(NO_BLOCK)?;
        if let Some(next) = upper_block.next {
            self.blocks.get_mut(next).ok_or(NO_BLOCK)?.prev = Some(lower);
        }
        let lower_block = self.blocks.get_mut(lower).ok_or(NO_BLOCK)?;
        debug_assert_eq!(lower_block.addr + lower_block.size as u64, upper_block.addr);
        lower_block.size += upper_block.size;
        lower_block.next = upper_block.next;
        Ok(())
    }

    /// Marks `id` as used on `stream` too, so its memory is not reused before the work queued
    /// there by then has finished. Uses on the block's own stream need nothing.
    pub fn record_stream(&mut self, id: BlockId, stream: StreamId) -> Result<()> {
        let block = self.block_mut(id)?;
        if block.state != BlockState::Allocated {
            return Err(Error::InvariantViolated {
                what: "record_stream on a block that is not allocated",
            });
        }
        if stream != block.stream {
            let uses = block.stream_uses.get_or_insert_with(Default::default);
            if !uses.contains(&stream) {
                uses.push(stream);
            }
        }
        Ok(())
    }
}
