//! [`DeviceState`]: what one device's mutex guards, the pool's bookkeeping and the table of
//! live allocations (`leak::LiveTable`), so that tracking an allocation takes no second lock.
//! It dereferences to the [`DeviceAllocator`]: every pool call reads as it did before.
//!
//! The table's records are read together with the pool's blocks: a record is live while its
//! block is allocated, and the block gives its size, address, requested size and stream.

use crate::backend::StreamId;
use crate::leak::{LiveEntry, LiveTable, Origin};
use crate::pool::{AllocatedBlock, BlockId, BlockState, DeviceAllocator};
use std::ops::{Deref, DerefMut};

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

    /// Tells the live table that block `id` is about to be freed. Usually nothing to do: once
    /// the block is freed its record is no longer live (`leak::live` module docs).
    #[inline(always)]
    pub(super) fn untrack(&mut self, id: BlockId) {
        if self.live.watches_frees() {
            let blocks = &self.pool.blocks;
            self.live
                .remove(id.index(), || blocks.get(id).map_or(0, |b| b.size as u64));
        }
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

impl<E> Deref for DeviceState<E> {
    type Target = DeviceAllocator<E>;

    fn deref(&self) -> &DeviceAllocator<E> {
        &self.pool
    }
}

impl<E> DerefMut for DeviceState<E> {
    fn deref_mut(&mut self) -> &mut DeviceAllocator<E> {
        &mut self.pool
    }
}
