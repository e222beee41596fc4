//! The per-device table of live allocations ([`LiveTable`]) and the public view of one entry
//! ([`LiveAllocation`]).
//!
//! The table is a slab indexed by the block's slot in its device's block arena: a block id is
//! dense and stable while the block is allocated, so recording an allocation is a store into
//! a slot and forgetting it a take, with no hashing. It lives beside the device's bookkeeping,
//! under the same lock, so it costs no second lock. It also keeps the device's live bytes and
//! the peak of each open leak scope (each allocation raises every open scope's peak, so a
//! scope nested in another folds its peak into the parent's by construction, as RMM's
//! statistics counters do when popped).

use crate::backend::{DeviceIndex, StreamId};
use crate::event::ContextId;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

/// What the table keeps of one live allocation: only what the pool's block does not already
/// say (its address, requested size and stream are read from the block when a report is
/// made), so that recording stays a few stores.
#[derive(Clone, Debug)]
pub(crate) struct LiveEntry {
    /// Allocation number on its device (the pool's, counting from 1).
    pub alloc_id: u64,
    /// Block size in bytes.
    pub size: u64,
    pub site: &'static Location<'static>,
    /// Nanoseconds since the process's clock base when allocated; 0 when not taken.
    pub created_ns: u64,
    /// The annotation context, [`ContextId::NONE`] unless context capture was on.
    pub context: ContextId,
    pub name: Option<Arc<str>>,
    /// Whether it came from the raw-pointer API (`malloc`), not an owning handle.
    pub raw: bool,
}

/// A leak scope still open on a device: the peak of the device's live bytes since it opened.
#[derive(Clone, Copy, Debug)]
struct OpenScope {
    id: u64,
    peak_bytes: u64,
}

/// Live allocations of one device (module docs).
#[derive(Debug, Default)]
pub(crate) struct LiveTable {
    slots: Vec<Option<LiveEntry>>,
    /// Sum of the live entries' sizes, in bytes.
    bytes: u64,
    scopes: Vec<OpenScope>,
}

impl LiveTable {
    /// Records `entry` for the block in slot `index`.
    #[inline(always)]
    pub fn insert(&mut self, index: usize, entry: LiveEntry) {
        if index >= self.slots.len() {
            self.grow(index);
        }
        self.bytes += entry.size;
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        if let Some(old) = slot.replace(entry) {
            // A slot is reused only after its block was freed, which empties it; refilling a
            // full one means a free went unrecorded. Keep the totals right regardless.
            debug_assert!(false, "live slot {index} refilled while full");
            self.bytes -= old.size;
        }
        if self.has_scopes() {
            for scope in &mut self.scopes {
                scope.peak_bytes = scope.peak_bytes.max(self.bytes);
            }
        }
    }

    /// Makes room for slot `index`; rare (the arena's slots are recycled), so out of line.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, index: usize) {
        let len = (index + 1).max(self.slots.len() * 2).max(64);
        self.slots.resize_with(len, || None);
    }

    /// Forgets the block in slot `index`, if it was recorded.
    #[inline(always)]
    pub fn remove(&mut self, index: usize) -> Option<LiveEntry> {
        let entry = self.slots.get_mut(index)?.take()?;
        self.bytes -= entry.size;
        Some(entry)
    }

    /// Whether a scope is open (allocations then raise its peak).
    #[inline]
    fn has_scopes(&self) -> bool {
        !self.scopes.is_empty()
    }

    /// The entry of slot `index`, when it is the allocation numbered `alloc_id`.
    pub fn get_mut(&mut self, index: usize, alloc_id: u64) -> Option<&mut LiveEntry> {
        self.slots
            .get_mut(index)?
            .as_mut()
            .filter(|e| e.alloc_id == alloc_id)
    }

    /// Every live entry with its slot, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &LiveEntry)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| Some((i, slot.as_ref()?)))
    }

    /// Forgets every entry (tracking was turned off); open scopes stay open.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.bytes = 0;
    }

    /// Opens scope `id`: its peak starts at the live bytes now, which it returns.
    pub fn open_scope(&mut self, id: u64) -> u64 {
        self.scopes.push(OpenScope {
            id,
            peak_bytes: self.bytes,
        });
        self.bytes
    }

    /// Closes scope `id`, returning its peak of live bytes (`None` if it was not open).
    pub fn close_scope(&mut self, id: u64) -> Option<u64> {
        let at = self.scopes.iter().position(|s| s.id == id)?;
        Some(self.scopes.remove(at).peak_bytes)
    }
}

/// One live allocation, as [`CachingAllocator::live_allocations`] lists them (a flat list, as
/// RMM's tracking adaptor gives).
///
/// [`CachingAllocator::live_allocations`]: crate::CachingAllocator::live_allocations
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveAllocation {
    /// Device of the memory.
    pub device: DeviceIndex,
    /// Allocation number on its device, counting from 1 (as [`Allocation::id`]).
    ///
    /// [`Allocation::id`]: crate::Allocation::id
    pub id: u64,
    /// Device address of the first byte.
    pub ptr: u64,
    /// Block size in bytes.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Stream it was allocated on.
    pub stream: StreamId,
    /// Its site label ([`site_label`](super::site_label)).
    pub site: String,
    /// Its name ([`Allocation::set_name`](crate::Allocation::set_name)), if any.
    pub name: Option<String>,
    /// How long ago it was allocated, when the time was taken
    /// ([`LeakTracking::Context`](super::LeakTracking::Context) or more).
    pub age: Option<Duration>,
    /// Whether it came from the raw-pointer API ([`CachingAllocator::malloc`]), not an
    /// owning handle.
    ///
    /// [`CachingAllocator::malloc`]: crate::CachingAllocator::malloc
    pub raw: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(alloc_id: u64, size: u64) -> LiveEntry {
        LiveEntry {
            alloc_id,
            size,
            site: Location::caller(),
            created_ns: 0,
            context: ContextId::NONE,
            name: None,
            raw: false,
        }
    }

    #[test]
    fn insert_and_remove_keep_count_and_bytes() {
        let mut table = LiveTable::default();
        table.insert(3, entry(1, 512));
        table.insert(0, entry(2, 1024));
        assert_eq!((table.iter().count(), table.bytes), (2, 1536));
        assert_eq!(table.remove(3).map(|e| e.alloc_id), Some(1));
        assert!(table.remove(3).is_none(), "a slot is forgotten once");
        assert!(
            table.remove(99).is_none(),
            "a slot past the end is no entry"
        );
        assert_eq!((table.iter().count(), table.bytes), (1, 1024));
        assert!(
            table.get_mut(0, 1).is_none(),
            "slot 0 holds allocation 2, not 1"
        );
        assert!(table.get_mut(0, 2).is_some());
    }

    #[test]
    fn nested_scope_peak_is_folded_into_the_parent() {
        let mut table = LiveTable::default();
        table.insert(0, entry(1, 100));
        assert_eq!(table.open_scope(1), 100);
        table.insert(1, entry(2, 50));
        table.remove(1);
        assert_eq!(table.open_scope(2), 100);
        table.insert(1, entry(3, 400));
        table.remove(1);
        assert_eq!(
            table.close_scope(2),
            Some(500),
            "inner peak: 100 live + 400"
        );
        table.insert(1, entry(4, 10));
        assert_eq!(
            table.close_scope(1),
            Some(500),
            "the outer scope saw the inner one's peak"
        );
        assert_eq!(table.close_scope(1), None, "closed once");
    }
}
