//! The per-device table of live allocations ([`LiveTable`]) and the public view of one entry
//! ([`LiveAllocation`]).
//!
//! The table is a slab indexed by the block's slot in its device's block arena: a block id is
//! dense and stable while the block is allocated, so recording an allocation is three stores
//! into its slot (allocation id, site, raw flag), with no hashing and nothing built or
//! dropped. It is one of the pool's observers (`pool/observe/live.rs`): it records the pool's
//! `alloc` events with the origin the call set ([`LiveTable::set_call`]), under the device lock
//! the pool is already behind, so it costs no second lock.
//!
//! A free leaves the slot as it is. A record counts only while its block is allocated, which
//! the pool's block says (the pool reads the two together, `live_records`), and the next
//! allocation of the block overwrites it. That holds because every allocated block either got
//! its own record when it was allocated or has none in its slot: a block is allocated without
//! a record only while tracking is off, and turning it off empties the table, after which no
//! allocation records itself (the level is read again under the device lock); adopted blocks
//! (handed out by `adopt_segment`, not allocated) have their slot's record removed.
//!
//! What most allocations lack (a name, and the time and context taken at
//! [`LeakTracking::Context`](super::LeakTracking::Context)) sits in a second slab of
//! [`Details`], written only for the allocations that have them. While one is stored, or a
//! scope is open, frees are watched ([`LiveTable::watches_frees`]) and
//! [`LiveTable::remove`] drops the details and the bytes. At the default level, with no scope
//! open, an unnamed allocation writes its slot and its free reads two words.
//!
//! While a leak scope is open the table sums the live bytes (taken from the live blocks when
//! the first scope opens, then kept at each allocation and free), and each allocation raises
//! every open scope's peak, so a scope nested in another folds its peak into the parent's by
//! construction, as RMM's statistics counters do when popped.

use crate::backend::{DeviceIndex, StreamId};
use crate::event::ContextId;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

/// What an allocation call tells the table beyond what its block says: where it came from,
/// and the details only some allocations have. The call hands it over with
/// [`LiveTable::set_call`] before the pool allocates; the pool's `alloc` event records it.
#[derive(Clone, Debug)]
pub(crate) struct Origin {
    pub site: &'static Location<'static>,
    /// Whether it came from the raw-pointer API (`malloc`), not an owning handle.
    pub raw: bool,
    /// Its name, time and context; `None` when it has none of them (an unnamed allocation
    /// at [`LeakTracking::Sites`](super::LeakTracking::Sites)).
    /// (Boxed: most allocations have none, and an origin is copied at each call.)
    pub details: Option<Box<Details>>,
}

/// What only some allocations carry (module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Details {
    /// Nanoseconds since the process's clock base when allocated; 0 when not taken.
    pub created_ns: u64,
    /// The annotation context, [`ContextId::NONE`] unless context capture was on.
    pub context: ContextId,
    pub name: Option<Arc<str>>,
}

/// One live allocation as the table reports it: its slot, its details and its block's size
/// put together. Its address, requested size and stream are read from the block too, when a
/// report is made.
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

/// What the table knows of the last tracked allocation of one block slot: plain data, so
/// that recording is a few stores.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Allocation number on its device (from 1); 0 while the slot holds none.
    alloc_id: u64,
    /// `None` only in a slot that never held an allocation.
    site: Option<&'static Location<'static>>,
    raw: bool,
}

/// The details of allocation `alloc_id` (0: none), in its block's slot.
#[derive(Clone, Debug, Default)]
struct DetailsSlot {
    alloc_id: u64,
    details: Details,
}

/// One slot's record, as [`LiveTable::records`] lists it: still to be checked against its
/// block, which says whether it is live and how large it is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record<'a> {
    pub alloc_id: u64,
    site: &'static Location<'static>,
    raw: bool,
    details: Option<&'a Details>,
}

impl Record<'_> {
    /// The entry of this record, for a block of `size` bytes.
    pub fn entry(self, size: u64) -> LiveEntry {
        LiveEntry {
            alloc_id: self.alloc_id,
            size,
            site: self.site,
            created_ns: self.details.map_or(0, |d| d.created_ns),
            context: self.details.map_or(ContextId::NONE, |d| d.context),
            name: self.details.and_then(|d| d.name.clone()),
            raw: self.raw,
        }
    }
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
    slots: Vec<Slot>,
    /// Details by slot, belonging to a slot's record when their allocation numbers match;
    /// grown only when one is stored.
    details: Vec<DetailsSlot>,
    /// Number of details stored (`alloc_id` not 0).
    detailed: usize,
    /// Sum of the live allocations' sizes in bytes, kept only while a scope is open.
    bytes: u64,
    scopes: Vec<OpenScope>,
    /// The origin of the allocation the call in progress makes; `None` while tracking is off.
    /// Only an `alloc` event of the call that set it reads it: every allocating call sets one
    /// after taking the device lock, so what a failed call leaves is overwritten unread.
    call: Option<Origin>,
}

impl LiveTable {
    /// Records allocation `alloc_id` of `size` bytes, made at `origin`, in slot `index`: its
    /// block's slot, which may hold the record of an allocation freed since.
    #[inline(always)]
    pub fn insert(&mut self, index: usize, alloc_id: u64, size: u64, origin: Origin) {
        if index >= self.slots.len() {
            self.grow(index);
        }
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        *slot = Slot {
            alloc_id,
            site: Some(origin.site),
            raw: origin.raw,
        };
        if let Some(details) = origin.details {
            self.set_details(index, alloc_id, *details);
        }
        if self.has_scopes() {
            self.raise_peaks(size);
        }
    }

    /// Makes room for slot `index`; rare (the arena's slots are recycled), so out of line.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, index: usize) {
        let len = (index + 1).max(self.slots.len() * 2).max(64);
        self.slots.resize_with(len, Slot::default);
    }

    /// Stores the details of allocation `alloc_id` in slot `index`: only named allocations
    /// and those made with context capture come here.
    #[inline(always)]
    fn set_details(&mut self, index: usize, alloc_id: u64, details: Details) {
        if index >= self.details.len() {
            let len = (index + 1).max(self.slots.len());
            self.details.resize_with(len, DetailsSlot::default);
        }
        let Some(stored) = self.details.get_mut(index) else {
            return;
        };
        // Details are emptied at their allocation's free (`remove`): a full slot holds this
        // allocation's (a rename), never an older one's.
        if stored.alloc_id == 0 {
            self.detailed += 1;
        }
        *stored = DetailsSlot { alloc_id, details };
    }

    /// Adds `size` bytes to the live sum and raises every open scope's peak to it.
    #[inline(never)]
    fn raise_peaks(&mut self, size: u64) {
        self.bytes += size;
        for scope in &mut self.scopes {
            scope.peak_bytes = scope.peak_bytes.max(self.bytes);
        }
    }

    /// Whether a free has to call [`remove`](Self::remove): only while details are stored or
    /// a scope is open. Otherwise a free leaves its slot alone (module docs).
    #[inline(always)]
    pub fn watches_frees(&self) -> bool {
        self.detailed != 0 || self.has_scopes()
    }

    /// Forgets the record of slot `index`: at a watched free of its block, dropping its
    /// details and, while a scope is open, taking the block's size in bytes (`size` reads it)
    /// off the live sum; or to remove a stale record (then `size` must give 0: it was not
    /// counted).
    pub fn remove(&mut self, index: usize, size: impl FnOnce() -> u64) {
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        let alloc_id = std::mem::take(&mut slot.alloc_id);
        if alloc_id == 0 {
            return;
        }
        if let Some(stored) = self.details.get_mut(index) {
            if stored.alloc_id == alloc_id {
                self.detailed -= 1;
                // The time and context are read only with a matching number.
                stored.alloc_id = 0;
                stored.details.name = None;
            }
        }
        if self.has_scopes() {
            self.bytes = self.bytes.saturating_sub(size());
        }
    }

    /// Whether a scope is open (allocations then raise its peak).
    #[inline]
    pub fn has_scopes(&self) -> bool {
        !self.scopes.is_empty()
    }

    /// Names the allocation in slot `index`, when it is the one numbered `alloc_id`.
    pub fn set_name(&mut self, index: usize, alloc_id: u64, name: Arc<str>) {
        let Some(slot) = self.slots.get(index) else {
            return;
        };
        if alloc_id == 0 || slot.alloc_id != alloc_id {
            return;
        }
        if let Some(stored) = self.details.get_mut(index) {
            if stored.alloc_id == alloc_id {
                stored.details.name = Some(name);
                return;
            }
        }
        self.set_details(
            index,
            alloc_id,
            Details {
                name: Some(name),
                ..Details::default()
            },
        );
    }

    /// Every slot's record with its slot index, in slot order, stale ones included: a
    /// record is live only while its block is allocated (module docs).
    pub fn records(&self) -> impl Iterator<Item = (usize, Record<'_>)> + '_ {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            if slot.alloc_id == 0 {
                return None;
            }
            let details = self
                .details
                .get(index)
                .filter(|stored| stored.alloc_id == slot.alloc_id)
                .map(|stored| &stored.details);
            let record = Record {
                alloc_id: slot.alloc_id,
                site: slot.site?,
                raw: slot.raw,
                details,
            };
            Some((index, record))
        })
    }

    /// Sets the origin of the allocation the call about to run makes (`None`: it is not
    /// recorded). Set again each time the call takes the device lock: another call may have
    /// set its own while the lock was down.
    #[inline(always)]
    pub fn set_call(&mut self, origin: Option<Origin>) {
        self.call = origin;
    }

    /// Takes the origin [`set_call`](Self::set_call) left, for the allocation being made.
    #[inline(always)]
    pub fn take_call(&mut self) -> Option<Origin> {
        self.call.take()
    }

    /// Forgets every record (tracking was turned off); open scopes stay open.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.details.clear();
        self.detailed = 0;
        self.bytes = 0;
    }

    /// Opens scope `id`: its peak starts at the live bytes now, which it returns. The sum is
    /// kept only while a scope is open, so with none open `live_bytes` is asked for it.
    pub fn open_scope(&mut self, id: u64, live_bytes: impl FnOnce(&Self) -> u64) -> u64 {
        if !self.has_scopes() {
            self.bytes = live_bytes(self);
        }
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

    fn insert(table: &mut LiveTable, index: usize, alloc_id: u64, size: u64) {
        let origin = Origin {
            site: Location::caller(),
            raw: false,
            details: None,
        };
        table.insert(index, alloc_id, size, origin);
    }

    fn ids(table: &LiveTable) -> Vec<u64> {
        table.records().map(|(_, r)| r.alloc_id).collect()
    }

    #[test]
    fn a_free_leaves_the_record_until_the_block_is_allocated_again() {
        let mut table = LiveTable::default();
        insert(&mut table, 3, 1, 512);
        insert(&mut table, 0, 2, 1024);
        assert_eq!(ids(&table), [2, 1], "slot order");
        assert!(
            !table.watches_frees(),
            "no details, no scope: frees leave the table alone"
        );
        // Allocation 1 is freed and its block allocated again: the slot is overwritten.
        insert(&mut table, 3, 3, 512);
        assert_eq!(ids(&table), [2, 3]);
        table.remove(3, || 512);
        assert!(table.records().all(|(i, _)| i != 3), "removed once");
        table.remove(3, || 512);
        table.remove(99, || 0);
        assert_eq!(ids(&table), [2], "a slot past the end is no record");
    }

    #[test]
    fn names_are_set_only_on_the_allocation_they_name() {
        let mut table = LiveTable::default();
        insert(&mut table, 0, 2, 1024);
        table.set_name(0, 1, "stale".into());
        assert!(
            !table.watches_frees(),
            "slot 0 holds allocation 2, not 1: naming 1 stores nothing"
        );
        table.set_name(0, 2, "kv".into());
        table.set_name(0, 2, "kv-cache".into());
        let (_, record) = table.records().next().expect("one record");
        assert_eq!(record.entry(1024).name.as_deref(), Some("kv-cache"));
        assert_eq!(table.detailed, 1, "renaming keeps one details entry");
    }

    #[test]
    fn details_are_dropped_at_the_free_and_not_inherited_by_the_next_allocation() {
        let mut table = LiveTable::default();
        let name: Arc<str> = "weights".into();
        let details = Details {
            created_ns: 7,
            context: ContextId(3),
            name: Some(Arc::clone(&name)),
        };
        let origin = Origin {
            site: Location::caller(),
            raw: true,
            details: Some(Box::new(details)),
        };
        table.insert(5, 1, 4096, origin);
        let (index, record) = table.records().next().expect("one record");
        let entry = record.entry(4096);
        assert_eq!(
            (index, entry.created_ns, entry.context, entry.raw),
            (5, 7, ContextId(3), true)
        );
        drop(entry);
        assert_eq!(Arc::strong_count(&name), 2, "the table holds the name");
        assert!(
            table.watches_frees(),
            "details are stored: frees are watched"
        );
        table.remove(5, || 4096);
        assert_eq!(Arc::strong_count(&name), 1, "the free dropped the name");
        assert!(!table.watches_frees());
        insert(&mut table, 5, 2, 512);
        let (_, record) = table.records().next().expect("the slot's next allocation");
        let entry = record.entry(512);
        assert_eq!(
            (
                entry.alloc_id,
                entry.created_ns,
                entry.context,
                entry.name,
                entry.raw
            ),
            (2, 0, ContextId::NONE, None, false),
            "a slot's next allocation has none of the previous one's details"
        );
    }

    #[test]
    fn nested_scope_peak_is_folded_into_the_parent() {
        let mut table = LiveTable::default();
        insert(&mut table, 0, 1, 100);
        assert_eq!(table.open_scope(1, |_| 100), 100);
        assert!(table.watches_frees(), "an open scope watches frees");
        insert(&mut table, 1, 2, 50);
        table.remove(1, || 50);
        assert_eq!(
            table.open_scope(2, |_| unreachable!("the sum is kept while a scope is open")),
            100
        );
        insert(&mut table, 1, 3, 400);
        table.remove(1, || 400);
        assert_eq!(
            table.close_scope(2),
            Some(500),
            "inner peak: 100 live + 400"
        );
        insert(&mut table, 1, 4, 10);
        assert_eq!(
            table.close_scope(1),
            Some(500),
            "the outer scope saw the inner one's peak"
        );
        assert_eq!(table.close_scope(1), None, "closed once");
        assert!(!table.watches_frees());
    }
}
