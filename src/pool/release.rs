//! Getting segments from the device and giving them back: the out-of-memory ladder,
//! `empty_cache`, garbage collection and the memory fraction.
//!
//! When no cached block fits, `malloc` climbs PyTorch's ladder: garbage-collect old cached
//! blocks (only with a memory fraction and `garbage_collection_threshold`), ask the device,
//! release cached oversize blocks that could cover the request and ask again, then wait for
//! every pending event, release every wholly free segment and ask a last time (a *retry*).
//! Only then does the request fail, with an error that explains the numbers.

use super::block::{Block, BlockId, BlockState};
use super::device::{DeviceAllocator, Segment};
use super::stat_updates::{decrease, increase};
use crate::backend::{Backend, BackendError, StreamId};
use crate::error::{Error, OutOfMemoryError, Result};
use crate::trace::{Action, ContextId};

impl<E> DeviceAllocator<E> {
    /// Device capacity in bytes, asked of the backend once.
    pub(crate) fn total_bytes<B: Backend<Event = E>>(&mut self, backend: &B) -> Result<usize> {
        if let Some(total) = self.total_bytes {
            return Ok(total);
        }
        let total = backend.mem_get_info(self.device)?.total_bytes;
        self.total_bytes = Some(total);
        Ok(total)
    }

    /// The memory-fraction limit in bytes, if a fraction is set.
    pub(crate) fn limit_bytes<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
    ) -> Result<Option<usize>> {
        match self.fraction {
            None => Ok(None),
            Some(fraction) => {
                let total = self.total_bytes(backend)?;
                Ok(Some((fraction * total as f64) as usize))
            }
        }
    }

    /// Caps the bytes this allocator may reserve at `fraction` of the device's capacity;
    /// a fraction outside `[0, 1]` is refused and changes nothing.
    pub fn set_memory_fraction<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        fraction: f64,
    ) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidMemoryFraction { fraction });
        }
        self.total_bytes(backend)?;
        self.fraction = Some(fraction);
        Ok(())
    }

    /// Synchronizes pending events, then returns every wholly free segment to the device.
    /// Segments that still hold a live block stay.
    pub fn empty_cache<B: Backend<Event = E>>(&mut self, backend: &B) -> Result<()> {
        self.release_cached_blocks(backend)
    }

    /// Gets a new segment for a request no cached block could serve, climbing the ladder.
    pub(crate) fn allocate_segment_for<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        requested: usize,
        rounded: usize,
        segment_size: usize,
        stream: StreamId,
    ) -> Result<BlockId> {
        let small = super::sizing::is_small(rounded);
        let limit = self.limit_bytes(backend)?;
        // Without a limit the capacity is only needed to refuse never-fitting requests early;
        // a backend that cannot tell it just skips that check.
        let ceiling = limit.or_else(|| self.total_bytes(backend).ok());
        if let Some(ceiling) = ceiling.filter(|&c| segment_size > c) {
            return Err(Error::ExceedsCapacity {
                device: self.device,
                requested_bytes: segment_size,
                limit_bytes: ceiling,
                limited: limit.is_some(),
            });
        }
        if self.gc_enabled() {
            self.garbage_collect(backend)?;
        }
        let sizes = (segment_size, rounded);
        if let Some(id) = self.alloc_block(backend, sizes, stream, small, false)? {
            return Ok(id);
        }
        if self.release_available_cached_blocks(backend, rounded, stream, small)? {
            if let Some(id) = self.alloc_block(backend, sizes, stream, small, false)? {
                return Ok(id);
            }
        }
        // A stream that cannot be waited for keeps its blocks, but the segments that could be
        // released were, so the retry still happens; the failure is only reported with it.
        let synced = self.release_cached_blocks(backend);
        if let Some(id) = self.alloc_block(backend, sizes, stream, small, true)? {
            return Ok(id);
        }
        if let Err(e) = synced {
            tracing::warn!(
                device = self.device,
                "out of memory after releasing the cache failed in part: {e}"
            );
        }
        let info = backend.mem_get_info(self.device)?;
        self.stats.num_ooms += 1;
        // As PyTorch: `addr` is the device's free bytes, `size` the rounded request.
        let sizes = (info.free_bytes as u64, rounded as u64, 0);
        self.record(Action::Oom, stream, sizes, ContextId::NONE);
        Err(Error::OutOfMemory(Box::new(OutOfMemoryError {
            device: self.device,
            stream,
            requested_bytes: requested,
            rounded_bytes: rounded,
            allocation_bytes: segment_size,
            device_total_bytes: info.total_bytes,
            device_free_bytes: info.free_bytes,
            limit_bytes: limit,
            allocated_bytes: self.stats.allocated_bytes[0].current as usize,
            reserved_bytes: self.reserved,
        })))
    }

    /// Asks the device for a segment of `size` bytes, or with expandable segments for enough
    /// mapped memory to serve `rounded` bytes: an uncached free block either way. `Ok(None)`
    /// when the device (or the memory limit) refuses for lack of memory; other device
    /// failures are errors.
    fn alloc_block<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        (size, rounded): (usize, usize),
        stream: StreamId,
        small: bool,
        is_retry: bool,
    ) -> Result<Option<BlockId>> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if self.expandable_enabled(backend) {
            // The memory limit is checked against the bytes actually mapped.
            return self.alloc_expandable(backend, rounded, stream, small);
        }
        if let Some(limit) = self.limit_bytes(backend)? {
            if self.reserved.saturating_add(size) > limit {
                return Ok(None);
            }
        }
        let addr = match backend.alloc_segment(self.device, size) {
            Ok(addr) => addr,
            Err(BackendError::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let id = self
            .blocks
            .insert(Block::free(addr, size, stream, small, (None, None), 0));
        let Some(id) = id else {
            // Give the segment back rather than lose track of it.
            backend.free_segment(self.device, addr, size)?;
            return Err(super::device::TOO_MANY_BLOCKS);
        };
        let context = self.segment_context();
        self.segments.insert(
            addr,
            Segment {
                size,
                expandable: false,
                head: id,
                context,
            },
        );
        self.reserved += size;
        increase(&mut self.stats.segment, small, 1);
        increase(&mut self.stats.reserved_bytes, small, size as u64);
        if size >= self.config.max_split_size() {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.record(
            Action::SegmentAlloc,
            stream,
            (addr, size as u64, 0),
            ContextId::NONE,
        );
        Ok(Some(id))
    }

    /// Returns the cached, unsplit block `id` (a whole segment) to the device.
    fn release_block<B: Backend<Event = E>>(&mut self, backend: &B, id: BlockId) -> Result<()> {
        let block = self.block(id)?;
        if block.is_split() || block.state != BlockState::Free {
            return Err(Error::InvariantViolated {
                what: "release of a block that is not a whole free segment",
            });
        }
        let (addr, size, small, stream) = (block.addr, block.size, block.small, block.stream);
        backend.free_segment(self.device, addr, size)?;
        self.uncache(id)?;
        self.blocks.remove(id);
        let segment = self.segments.remove(&addr);
        let context = segment.map_or(ContextId::NONE, |s| s.context);
        self.record(Action::SegmentFree, stream, (addr, size as u64, 0), context);
        self.reserved -= size;
        self.stats.num_device_free += 1;
        decrease(&mut self.stats.segment, small, 1);
        decrease(&mut self.stats.reserved_bytes, small, size as u64);
        if size >= self.config.max_split_size() {
            self.stats.oversize_segments.decrease(1);
        }
        Ok(())
    }

    /// Releases cached oversize blocks of `stream` that together can cover the request: the
    /// smallest single one that is large enough, or else the largest ones, biggest first.
    /// Does nothing without a `max_split_size`.
    fn release_available_cached_blocks<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        rounded: usize,
        stream: StreamId,
        small: bool,
    ) -> Result<bool> {
        let max_split = self.config.max_split_size();
        if max_split == usize::MAX {
            return Ok(false);
        }
        let target = rounded.max(max_split);
        if self.expandable.on {
            return self.release_available_fixed_blocks(backend, target, stream, small);
        }
        if let Some(key) = self.pool_ref(small).best_fit(stream, target) {
            self.release_block(backend, key.id)?;
            return Ok(true);
        }
        let mut released = 0usize;
        while released < target {
            let Some(key) = self.pool_ref(small).largest_below(stream, target) else {
                break;
            };
            if key.size < max_split {
                break;
            }
            released += key.size;
            self.release_block(backend, key.id)?;
        }
        Ok(released >= target)
    }

    /// As `release_available_cached_blocks` while expandable segments are on: only blocks of
    /// fixed segments (adopted ones) are released; free units of expandable segments are
    /// unmapped by `release_cached_blocks` instead, as in PyTorch.
    fn release_available_fixed_blocks<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        target: usize,
        stream: StreamId,
        small: bool,
    ) -> Result<bool> {
        let max_split = self.config.max_split_size();
        let fixed = |d: &Self, id: BlockId| d.blocks.get(id).is_some_and(|b| !b.expandable);
        if let Some(key) = self.pool_ref(small).best_fit(stream, target) {
            if fixed(self, key.id) {
                self.release_block(backend, key.id)?;
                return Ok(true);
            }
        }
        let mut candidates: Vec<(usize, u64, BlockId)> = self
            .pool_ref(small)
            .iter()
            .filter(|k| k.stream == stream && k.size >= max_split && k.size < target)
            .filter(|k| fixed(self, k.id))
            .map(|k| (k.size, k.addr, k.id))
            .collect();
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        let mut released = 0usize;
        for (size, _, id) in candidates {
            if released >= target {
                break;
            }
            released += size;
            self.release_block(backend, id)?;
        }
        Ok(released >= target)
    }

    /// Waits for all pending events, then releases every cached block that is a whole fixed
    /// segment, and unmaps the free whole units of expandable segments (releasing those left
    /// with nothing mapped), in both pools.
    pub(crate) fn release_cached_blocks<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
    ) -> Result<()> {
        let synced = self.synchronize_and_free_events(backend);
        for small in [false, true] {
            let whole: Vec<BlockId> = self
                .pool_ref(small)
                .iter()
                .map(|k| k.id)
                .filter(|&id| {
                    self.blocks
                        .get(id)
                        .is_some_and(|b| !b.is_split() && !b.expandable)
                })
                .collect();
            for id in whole {
                self.release_block(backend, id)?;
            }
            self.release_expandable_blocks(backend, small)?;
        }
        synced
    }

    /// Frees unsplit cached large blocks, oldest (least recently looked past) first, until the
    /// reserved bytes fall below `garbage_collection_threshold` of the memory limit. Does not
    /// synchronize, so it is cheaper than releasing everything.
    fn garbage_collect<B: Backend<Event = E>>(&mut self, backend: &B) -> Result<()> {
        let Some(limit) = self.limit_bytes(backend)? else {
            return Ok(());
        };
        let threshold = (self.config.garbage_collection_threshold() * limit as f64) as usize;
        if self.reserved <= threshold {
            return Ok(());
        }
        let target = self.reserved - threshold;
        let now = self.large.lookups;
        let age = |b: &Block| now - b.gc_count_base;
        let mut total_age: u64 = 0;
        let mut freeable: u64 = 0;
        for key in self.large.iter() {
            if let Some(b) = self
                .blocks
                .get(key.id)
                .filter(|b| !b.is_split() && !b.expandable)
            {
                total_age += age(b);
                freeable += 1;
            }
        }
        let mut reclaimed = 0usize;
        let mut freed_one = true;
        while reclaimed < target && freed_one && freeable > 0 {
            let threshold_age = total_age as f64 / freeable as f64;
            freed_one = false;
            let old: Vec<(BlockId, u64, usize)> = self
                .large
                .iter()
                .filter_map(|k| self.blocks.get(k.id).map(|b| (k.id, b)))
                .filter(|(_, b)| !b.is_split() && !b.expandable && age(b) as f64 >= threshold_age)
                .map(|(id, b)| (id, age(b), b.size))
                .collect();
            for (id, block_age, size) in old {
                self.release_block(backend, id)?;
                freed_one = true;
                reclaimed += size;
                total_age -= block_age;
                freeable -= 1;
            }
        }
        Ok(())
    }
}
