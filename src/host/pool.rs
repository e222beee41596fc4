#![forbid(unsafe_code)]
//! Bookkeeping of the pinned host cache: power-of-two sizing, one LIFO free list per bucket,
//! every block the cache owns (by address) with the streams it was used on, and the queue of
//! events that guard freed blocks. No locks and no I/O: the backend is passed into the calls
//! that need it, and the caller holds the lock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::error::{HostError, HostResult};
use super::stats::HostStats;
use crate::backend::{Backend, DeviceIndex, StreamId};

/// Number of size buckets: bucket `i` holds blocks of `2^i` bytes, up to `2^63`.
pub const HOST_BUCKETS: usize = 64;

/// The block size for a request of `size_bytes`: the next power of two (PyTorch's
/// `PowerOf2Ceil`), 0 for 0, `None` when it overflows.
///
/// ```
/// use blockpool::host::round_size;
///
/// assert_eq!(round_size(1), Some(1));
/// assert_eq!(round_size(1000), Some(1024));
/// assert_eq!(round_size(4096), Some(4096));
/// assert_eq!(round_size(usize::MAX), None);
/// ```
pub fn round_size(size_bytes: usize) -> Option<usize> {
    match size_bytes {
        0 => Some(0),
        n => n.checked_next_power_of_two(),
    }
}

/// The bucket of a block of `size_bytes`: the base-2 logarithm rounded up (PyTorch's
/// `Log2_64_Ceil`); 0 for 0 and 1.
///
/// ```
/// use blockpool::host::size_index;
///
/// assert_eq!(size_index(1), 0);
/// assert_eq!(size_index(1024), 10);
/// assert_eq!(size_index(1025), 11);
/// ```
pub fn size_index(size_bytes: usize) -> usize {
    match size_bytes {
        0 | 1 => 0,
        n => (usize::BITS - (n - 1).leading_zeros()) as usize,
    }
}

/// A stream on a device, where a block was used.
pub(super) type StreamKey = (DeviceIndex, StreamId);

/// Where a block is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockState {
    /// Handed out.
    InUse,
    /// Freed, waiting for `event_count` events to complete.
    WaitingForEvents,
    /// In its bucket's free list.
    Cached,
}

#[derive(Debug)]
struct HostBlock {
    /// Rounded size in bytes (a power of two).
    size: usize,
    state: BlockState,
    /// Whether an owning handle holds it (a raw free must not free it).
    by_handle: bool,
    /// Streams it was used on since it was handed out.
    streams: BTreeSet<StreamKey>,
    /// Events still to complete before it can be cached (queued, or never recorded).
    event_count: usize,
}

/// Every block of one host cache, its free lists, event queue and statistics.
pub(super) struct HostPool<E> {
    /// Every block the cache owns, by address.
    blocks: BTreeMap<u64, HostBlock>,
    /// Cached block addresses per bucket; the newest is reused first.
    free_lists: Vec<Vec<u64>>,
    /// Events guarding freed blocks, oldest first.
    events: VecDeque<(E, u64)>,
    /// Events that could not be recorded: their blocks are never reused.
    stranded_events: usize,
    stats: HostStats,
}

impl<E> HostPool<E> {
    pub(super) fn new() -> Self {
        HostPool {
            blocks: BTreeMap::new(),
            free_lists: vec![Vec::new(); HOST_BUCKETS],
            events: VecDeque::new(),
            stranded_events: 0,
            stats: HostStats::default(),
        }
    }

    pub(super) fn stats(&self) -> &HostStats {
        &self.stats
    }

    pub(super) fn stats_mut(&mut self) -> &mut HostStats {
        &mut self.stats
    }

    /// Events queued and not yet seen complete.
    pub(super) fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// Bytes of cached blocks, ready for reuse.
    pub(super) fn cached_bytes(&self) -> usize {
        self.blocks
            .values()
            .filter(|b| b.state == BlockState::Cached)
            .map(|b| b.size)
            .sum()
    }

    /// Blocks in use or waiting for events.
    pub(super) fn active_blocks(&self) -> usize {
        self.blocks.len() - self.free_lists.iter().map(Vec::len).sum::<usize>()
    }

    /// Hands out the newest cached block of `rounded` bytes, if any.
    pub(super) fn take_cached(&mut self, rounded: usize, by_handle: bool) -> Option<u64> {
        let ptr = self.free_lists.get_mut(size_index(rounded))?.pop()?;
        let block = self.blocks.get_mut(&ptr)?;
        debug_assert_eq!(
            block.state,
            BlockState::Cached,
            "free list holds a live block"
        );
        block.state = BlockState::InUse;
        block.by_handle = by_handle;
        self.stats.active_requests.increase(1);
        self.stats.active_bytes.increase(rounded as u64);
        Some(ptr)
    }

    /// Adds a block the backend just pinned, handed out at once.
    pub(super) fn insert(&mut self, ptr: u64, rounded: usize, by_handle: bool) -> HostResult<()> {
        if ptr == 0 || self.blocks.contains_key(&ptr) {
            debug_assert!(false, "backend returned a null or live pinned address");
            return Err(HostError::InvariantViolated {
                what: "the backend returned a null or already live pinned address",
            });
        }
        let block = HostBlock {
            size: rounded,
            state: BlockState::InUse,
            by_handle,
            streams: BTreeSet::new(),
            event_count: 0,
        };
        self.blocks.insert(ptr, block);
        let bytes = rounded as u64;
        self.stats.allocations.increase(1);
        self.stats.allocated_bytes.increase(bytes);
        self.stats.active_requests.increase(1);
        self.stats.active_bytes.increase(bytes);
        self.stats.num_host_alloc += 1;
        if let Some(n) = self.stats.bucket_allocation.get_mut(size_index(rounded)) {
            *n += 1;
        }
        Ok(())
    }

    /// Marks the block used on `stream`: when freed, it waits for the work queued there.
    /// `ptr` may point anywhere inside the block.
    pub(super) fn record_stream(&mut self, ptr: u64, stream: StreamKey) -> HostResult<()> {
        let Some((_, block)) = self
            .blocks
            .range_mut(..=ptr)
            .next_back()
            .filter(|(&start, b)| ptr - start < b.size as u64)
        else {
            return Err(HostError::NotFromThisAllocator { ptr });
        };
        if block.state != BlockState::InUse {
            return Err(HostError::UseAfterFree { ptr });
        }
        block.streams.insert(stream);
        Ok(())
    }

    /// Frees the block at `ptr`: cached at once when it was used on no stream, otherwise it
    /// waits for one event per returned stream, which the caller records and queues with
    /// [`HostPool::push_event`] (or [`HostPool::strand_event`] when recording fails).
    pub(super) fn start_free(&mut self, ptr: u64, by_handle: bool) -> HostResult<Vec<StreamKey>> {
        let block = self
            .blocks
            .get_mut(&ptr)
            .ok_or(HostError::UnknownPointer { ptr })?;
        if block.state != BlockState::InUse {
            return Err(HostError::DoubleFree { ptr });
        }
        if block.by_handle && !by_handle {
            return Err(HostError::OwnedByHandle { ptr });
        }
        if block.streams.is_empty() {
            self.cache(ptr);
            return Ok(Vec::new());
        }
        let streams: Vec<_> = std::mem::take(&mut block.streams).into_iter().collect();
        block.state = BlockState::WaitingForEvents;
        block.event_count = streams.len();
        Ok(streams)
    }

    /// Queues `event`, recorded when the block at `ptr` was freed.
    pub(super) fn push_event(&mut self, event: E, ptr: u64) {
        self.events.push_back((event, ptr));
    }

    /// Notes an event that could not be recorded: its block stays waiting for ever, since the
    /// stream may still be using it.
    pub(super) fn strand_event(&mut self) {
        self.stranded_events += 1;
    }

    /// Moves a block whose events have all completed (or that had none) to its free list.
    fn cache(&mut self, ptr: u64) {
        let Some(block) = self.blocks.get_mut(&ptr) else {
            debug_assert!(false, "caching a block the pool does not hold");
            return;
        };
        block.state = BlockState::Cached;
        block.event_count = 0;
        let size = block.size;
        if let Some(list) = self.free_lists.get_mut(size_index(size)) {
            list.push(ptr);
        }
        self.stats.active_requests.decrease(1);
        self.stats.active_bytes.decrease(size as u64);
    }

    /// One event of the block at `ptr` completed; caches it after its last.
    fn event_completed(&mut self, ptr: u64) -> HostResult<()> {
        let block = self.blocks.get_mut(&ptr);
        let Some(block) = block.filter(|b| b.state == BlockState::WaitingForEvents) else {
            debug_assert!(false, "event completed for a block not waiting for events");
            return Err(HostError::InvariantViolated {
                what: "an event completed for a block not waiting for events",
            });
        };
        block.event_count = block.event_count.saturating_sub(1);
        if block.event_count == 0 {
            self.cache(ptr);
        }
        Ok(())
    }

    /// PyTorch's `process_events`: completes queued events oldest first and stops at the
    /// first one still running (it and every newer event wait for the next call).
    pub(super) fn process_events<B: Backend<Event = E>>(&mut self, backend: &B) -> HostResult<()> {
        while let Some((event, _)) = self.events.front() {
            let done = backend
                .query_event(event)
                .map_err(HostError::backend("query an event"))?;
            if !done {
                break;
            }
            if let Some((event, ptr)) = self.events.pop_front() {
                backend.release_event(event);
                self.event_completed(ptr)?;
            }
        }
        Ok(())
    }

    /// Waits for every queued event and caches the blocks behind them. An event that cannot be
    /// waited for stays queued with those behind it; the first error is returned.
    pub(super) fn synchronize_events<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
    ) -> HostResult<()> {
        while let Some((event, _)) = self.events.front() {
            backend
                .synchronize_event(event)
                .map_err(HostError::backend("wait for an event"))?;
            if let Some((event, ptr)) = self.events.pop_front() {
                backend.release_event(event);
                self.event_completed(ptr)?;
            }
        }
        Ok(())
    }

    /// Gives every cached block back to the backend and returns how many bytes went back. A
    /// block the backend refuses to free stays cached; the first such error is returned with
    /// the bytes that did go back.
    pub(super) fn release_cached<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
    ) -> (usize, HostResult<()>) {
        let mut released = 0;
        let mut result = Ok(());
        for index in 0..self.free_lists.len() {
            let list = std::mem::take(&mut self.free_lists[index]);
            let mut kept = Vec::new();
            for ptr in list {
                let Some(size) = self.blocks.get(&ptr).map(|b| b.size) else {
                    debug_assert!(false, "free list names a block the pool does not hold");
                    continue;
                };
                match backend.free_host(ptr, size) {
                    Ok(()) => {
                        self.blocks.remove(&ptr);
                        self.stats.allocations.decrease(1);
                        self.stats.allocated_bytes.decrease(size as u64);
                        self.stats.num_host_free += 1;
                        released += size;
                    }
                    Err(e) => {
                        kept.push(ptr);
                        if result.is_ok() {
                            result = Err(HostError::Backend {
                                op: "free pinned memory",
                                source: e,
                            });
                        }
                    }
                }
            }
            self.free_lists[index] = kept;
        }
        (released, result)
    }

    /// Checks that the statistics, free lists and event counts agree with the blocks.
    pub(super) fn check_invariants(&self) -> HostResult<()> {
        let fail = |what| Err(HostError::InvariantViolated { what });
        let active = self
            .blocks
            .values()
            .filter(|b| b.state != BlockState::Cached);
        let (active_count, active_bytes) = active.fold((0, 0), |(n, s), b| (n + 1, s + b.size));
        let total_bytes: usize = self.blocks.values().map(|b| b.size).sum();
        let s = &self.stats;
        if s.allocations.current != self.blocks.len() as i64
            || s.allocated_bytes.current != total_bytes as i64
        {
            return fail("allocations stats differ from the blocks held");
        }
        if s.active_requests.current != active_count
            || s.active_bytes.current != active_bytes as i64
        {
            return fail("active stats differ from the blocks in use or waiting");
        }
        for (index, list) in self.free_lists.iter().enumerate() {
            let cached = |p: &u64| {
                self.blocks
                    .get(p)
                    .is_some_and(|b| b.state == BlockState::Cached && size_index(b.size) == index)
            };
            if !list.iter().all(cached) {
                return fail("a free list holds a block not cached in that bucket");
            }
        }
        let free_listed: usize = self.free_lists.iter().map(Vec::len).sum();
        if free_listed as i64 != self.blocks.len() as i64 - active_count {
            return fail("a cached block is missing from its free list");
        }
        let owed: usize = self.blocks.values().map(|b| b.event_count).sum();
        if owed != self.events.len() + self.stranded_events {
            return fail("event counts differ from the events queued");
        }
        Ok(())
    }
}
