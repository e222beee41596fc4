//! [`DeviceState`]: what one device's mutex guards, the pool's bookkeeping and the table of
//! live allocations (`leak::LiveTable`), so that tracking an allocation takes no second lock.
//! It dereferences to the [`DeviceAllocator`]: every pool call reads as it did before.

use super::leaks::Origin;
use crate::backend::StreamId;
use crate::leak::{LiveEntry, LiveTable};
use crate::pool::{AllocatedBlock, BlockId, DeviceAllocator};
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
    /// Records `block` in the live table when `origin` is known (tracking on).
    #[inline]
    pub(super) fn track(&mut self, block: &AllocatedBlock, origin: Option<Origin>) {
        if let Some(origin) = origin {
            self.live.insert(
                block.id.index(),
                LiveEntry {
                    alloc_id: block.alloc_id,
                    size: block.size as u64,
                    site: origin.site,
                    created_ns: origin.created_ns,
                    context: origin.context,
                    name: origin.name,
                    raw: origin.raw,
                },
            );
        }
    }

    /// Copies the live entries that `keep` selects, with their blocks' address, requested
    /// size and stream.
    pub(super) fn live_records(&self, keep: impl Fn(&LiveEntry) -> bool) -> Vec<LiveRecord> {
        self.live
            .iter()
            .filter(|(_, entry)| keep(entry))
            .map(|(index, entry)| {
                // A live entry's block is allocated; the fallbacks only keep a bookkeeping
                // bug from hiding the entry.
                let block = self.pool.blocks.get(BlockId::from_index(index));
                LiveRecord {
                    entry: entry.clone(),
                    addr: block.map_or(0, |b| b.addr),
                    requested: block.map_or(entry.size, |b| b.requested as u64),
                    stream: block.map_or(StreamId::DEFAULT, |b| b.stream),
                }
            })
            .collect()
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
