//! [`DeviceState`]: what one device's mutex guards, the pool's bookkeeping and the table of
//! live allocations (`leak::LiveTable`), so that tracking an allocation takes no second lock.
//! Pool calls name the pool (`state.pool.malloc_cached(..)`); the calls that change both the
//! pool and the live table (`free`) are this type's own, so each reads as the layer it is.
//!
//! The table's records are read together with the pool's blocks: a record is live while its
//! block is allocated, and the block gives its size, address, requested size and stream.

use crate::backend::{Backend, StreamId};
use crate::error::Result;
use crate::leak::{LiveEntry, LiveTable, Origin};
use crate::pool::{AllocatedBlock, BlockId, BlockState, DeviceAllocator};

/// One device's pool and live table, behind the device's mutex.
pub(super) struct DeviceState<E> {
    pub(super) pool: DeviceAllocator<E>,
    pub(super) live: LiveTable,
}

impl<E> DeviceState<E> {
    pub(super) fn new(pool: DeviceAllocator<E>) -> Self {
        DeviceState {
            pool,
            live: LiveTable::default(),
        }
    }
}

/// A live entry copied out of the table with what the pool's block adds to it.
#[derive(Clone, Debug)]
pub(super) struct LiveRecord {
    pub(super) entry: LiveEntry,
    pub(super) addr: u64,
    pub(super) requested: u64,
    pub(super) stream: StreamId,
}

impl<E> DeviceState<E> {
    /// Records `block`, allocated by a call made at `origin`, in the live table.
    #[inline(always)]
    pub(super) fn track(&mut self, block: &AllocatedBlock, origin: Origin<'_>) {
        self.live
            .insert(block.id.index(), block.alloc_id, block.size as u64, origin);
    }

    /// Frees block `id`: the live table lets its record go (usually nothing to do: once the
    /// block is freed its record is no longer live, `leak::live` module docs), then the pool
    /// frees it, at once or behind events.
    #[inline(always)]
    pub(super) fn free<B: Backend<Event = E>>(&mut self, backend: &B, id: BlockId) -> Result<()> {
        if self.live.watches_frees() {
            let blocks = &self.pool.blocks;
            self.live
                .remove(id.index(), || blocks.get(id).map_or(0, |b| b.size as u64));
        }
        self.pool.free(backend, id)
    }

    /// Copies the live entries that `keep` selects, with their blocks' address, requested
    /// size and stream.
    pub(super) fn live_records(&self, keep: impl Fn(&LiveEntry) -> bool) -> Vec<LiveRecord> {
        self.live
            .records()
            .filter_map(|(index, record)| {
                let block = self
                    .pool
                    .blocks
                    .get(BlockId::from_index(index))
                    .filter(|b| b.state == BlockState::Allocated)?;
                let entry = record.entry(block.size as u64);
                keep(&entry).then_some(LiveRecord {
                    entry,
                    addr: block.addr,
                    requested: block.requested as u64,
                    stream: block.stream,
                })
            })
            .collect()
    }

    /// Opens leak scope `id` on this device, returning the live bytes now.
    pub(super) fn open_leak_scope(&mut self, id: u64) -> u64 {
        let blocks = &self.pool.blocks;
        self.live.open_scope(id, |live| {
            live.records()
                .filter_map(|(index, _)| blocks.get(BlockId::from_index(index)))
                .filter(|b| b.state == BlockState::Allocated)
                .map(|b| b.size as u64)
                .sum()
        })
    }
}
