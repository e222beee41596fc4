//! Leak tracking as an observer of the pool's events: the table of live allocations
//! (`leak::LiveTable`) records each `alloc` with the origin its call set, lets a record go at
//! a watched `free_requested`, and clears the stale record of an adopted block's slot. Also
//! the table read together with the pool's blocks: a record is live while its block is
//! allocated, and the block gives its size, address, requested size and stream.

use super::{PoolEvent, PoolObserver};
use crate::backend::StreamId;
use crate::leak::{LiveEntry, LiveTable};
use crate::pool::block::{BlockId, BlockState};
use crate::pool::device::DeviceAllocator;

impl PoolObserver for LiveTable {
    #[inline(always)]
    fn observe(&mut self, event: &PoolEvent) {
        match *event {
            PoolEvent::Alloc {
                block,
                alloc_id,
                ref at,
                ..
            } => {
                if let Some(origin) = self.take_call() {
                    self.insert(block.index(), alloc_id, at.size as u64, origin);
                }
            }
            // The allocation stops being live at the free request, even when the free itself
            // waits for other streams: the caller let it go. Unwatched, a free leaves the
            // slot alone (the next allocation of the block overwrites it).
            PoolEvent::FreeRequested { block, ref at, .. } if self.watches_frees() => {
                self.remove(block.index(), || at.size as u64);
            }
            // Adopted blocks are not tracked: a record an earlier allocation left in the slot
            // would read as theirs. It was stale, so no live bytes counted it.
            PoolEvent::AdoptBlock { block, .. } => self.remove(block.index(), || 0),
            _ => {}
        }
    }
}

/// A live entry copied out of the table with what the pool's block adds to it.
#[derive(Clone, Debug)]
pub(crate) struct LiveRecord {
    pub(crate) entry: LiveEntry,
    pub(crate) addr: u64,
    pub(crate) requested: u64,
    pub(crate) stream: StreamId,
}

impl<E> DeviceAllocator<E> {
    /// Copies the live entries that `keep` selects, with their blocks' address, requested
    /// size and stream.
    pub(crate) fn live_records(&self, keep: impl Fn(&LiveEntry) -> bool) -> Vec<LiveRecord> {
        self.observers
            .live()
            .records()
            .filter_map(|(index, record)| {
                let block = self
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
    pub(crate) fn open_leak_scope(&mut self, id: u64) -> u64 {
        let blocks = &self.blocks;
        self.observers.live_mut().open_scope(id, |live| {
            live.records()
                .filter_map(|(index, _)| blocks.get(BlockId::from_index(index)))
                .filter(|b| b.state == BlockState::Allocated)
                .map(|b| b.size as u64)
                .sum()
        })
    }
}
