//! Getting segments from the device and giving them back: the out-of-memory ladder,
//! `empty_cache`, garbage collection and the memory fraction.
//!
//! When no cached block fits, `malloc` climbs PyTorch's ladder: garbage-collect old cached
//! blocks (only with a memory fraction and `garbage_collection_threshold`), ask the device,
//! release cached oversize blocks that could cover the request and ask again, then wait for
//! every pending event, release every wholly free segment and ask a last time (a *retry*).
//! Only then does the request fail, with an error that explains the numbers.

use super::block::{Block, BlockId, BlockState};
use super::device::{AllocatedBlock, DeviceAllocator};
use super::observe::{Place, PoolEvent};
use super::segments::Segment;
use crate::backend::{Backend, BackendError, StreamId};
use crate::error::{Error, OutOfMemoryError, Result};
use crate::event::ContextId;

/// Where a `malloc` stands: served, or waiting for the device to allocate a segment.
#[derive(Debug)]
#[must_use = "a device request must be answered with `finish_segment`"]
pub enum MallocStep {
    /// The request is served.
    Done(AllocatedBlock),
    /// Ask the backend for a segment of [`SegmentRequest::segment_size`] bytes on this
    /// allocator's device, then give its answer to [`DeviceAllocator::finish_segment`].
    Device(SegmentRequest),
}

/// A fixed segment `malloc` needs from the device, at one rung of the out-of-memory ladder.
///
/// Not `Clone`: each request is answered once, by moving it into
/// [`DeviceAllocator::finish_segment`].
#[derive(Debug, PartialEq, Eq)]
pub struct SegmentRequest {
    /// Bytes the caller asked for.
    pub requested: usize,
    /// The request rounded as the block will be.
    pub rounded: usize,
    /// Bytes to ask the device for.
    pub segment_size: usize,
    /// Stream the block is for.
    pub stream: StreamId,
    pub(super) small: bool,
    pub(super) attempt: Attempt,
}

/// The rungs of the ladder at which the device is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attempt {
    /// Straight after the cache missed (and garbage collection, when on).
    First,
    /// After releasing cached oversize blocks that could cover the request.
    AfterReleasingOversize,
    /// After waiting for every event and releasing every wholly free segment: a retry.
    AfterReleasingAll,
}

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

    /// The ladder's start for a request no cached block could serve: refuses a segment that
    /// can never fit (counted in `num_ooms` and traced as `oom`, as PyTorch does), garbage-
    /// collects when that is on, then makes the first attempt.
    pub(super) fn start_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        request: SegmentRequest,
    ) -> Result<MallocStep> {
        let limit = self.limit_bytes(backend)?;
        // Without a limit the capacity is only needed to refuse never-fitting requests early;
        // a backend that cannot tell it just skips that check.
        let ceiling = limit.or_else(|| self.total_bytes(backend).ok());
        // Expandable segments map whole units: a block needs at least its size in units.
        let needed = if self.expandable_enabled(backend) {
            let unit = super::expandable::unit(request.small);
            request.rounded.div_ceil(unit).saturating_mul(unit)
        } else {
            request.segment_size
        };
        if let Some(ceiling) = ceiling.filter(|&c| needed > c) {
            // As PyTorch, whose device allocation fails here: counted and traced as an
            // out-of-memory, though the error says it can never fit.
            let free = backend
                .mem_get_info(self.device)
                .map_or(0, |i| i.free_bytes);
            self.count_oom(request.stream, free, request.rounded);
            return Err(Error::ExceedsCapacity {
                device: self.device,
                requested_bytes: needed,
                limit_bytes: ceiling,
                limited: limit.is_some(),
            });
        }
        if self.gc_enabled() {
            self.garbage_collect(backend)?;
        }
        self.attempt(backend, request)
    }

    /// One rung of the ladder: maps memory into an expandable segment here, or returns the
    /// fixed segment to ask the device for; a memory limit that leaves no room counts as the
    /// device refusing.
    fn attempt<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        request: SegmentRequest,
    ) -> Result<MallocStep> {
        if request.attempt == Attempt::AfterReleasingAll {
            self.observers.emit(PoolEvent::AllocRetry);
        }
        if self.expandable_enabled(backend) {
            // The memory limit is checked against the bytes actually mapped.
            let found =
                self.alloc_expandable(backend, request.rounded, request.stream, request.small)?;
            return match found {
                Some(id) => self.serve_from_segment(id, &request),
                None => self.after_refusal(backend, request),
            };
        }
        if self.over_limit_with(backend, request.segment_size)? {
            return self.after_refusal(backend, request);
        }
        Ok(MallocStep::Device(request))
    }

    /// Whether reserving `bytes` more would pass the memory fraction's limit.
    pub(super) fn over_limit_with<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        bytes: usize,
    ) -> Result<bool> {
        Ok(self
            .limit_bytes(backend)?
            .is_some_and(|limit| self.segments.reserved().saturating_add(bytes) > limit))
    }

    /// Takes the device's answer to a [`MallocStep::Device`] request: a new segment serves
    /// the request; out of memory climbs to the next rung (another request, or the final
    /// out-of-memory error); any other device failure is returned as it is.
    ///
    /// `answer` must be what `backend.alloc_segment` returned for this allocator's device and
    /// [`SegmentRequest::segment_size`]: an `Ok` address becomes a segment of this allocator,
    /// which gives it back to the device in time.
    ///
    /// The allocator may have changed since the request was made (other threads allocate and
    /// free while the device is asked without the lock); the segment joins it as it is now.
    pub fn finish_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        request: SegmentRequest,
        answer: std::result::Result<u64, BackendError>,
    ) -> Result<MallocStep> {
        match answer {
            Ok(addr) if self.over_limit_with(backend, request.segment_size)? => {
                // Other threads' segments, allocated while this one was, took the room under
                // the memory fraction: give this one back and treat it as refused.
                backend.free_segment(self.device, addr, request.segment_size)?;
                self.after_refusal(backend, request)
            }
            Ok(addr) => {
                let id = self.insert_segment(backend, addr, &request)?;
                self.serve_from_segment(id, &request)
            }
            Err(BackendError::OutOfMemory { .. }) => self.after_refusal(backend, request),
            Err(e) => Err(e.into()),
        }
    }

    fn serve_from_segment(&mut self, id: BlockId, request: &SegmentRequest) -> Result<MallocStep> {
        self.alloc_found_block(id, None, request.rounded, request.requested)
            .map(MallocStep::Done)
    }

    /// The device (or the memory limit) refused `request`: release what the next rung
    /// releases and try again, or fail with the out-of-memory error after the last one.
    fn after_refusal<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        request: SegmentRequest,
    ) -> Result<MallocStep> {
        let (rounded, stream, small) = (request.rounded, request.stream, request.small);
        if request.attempt == Attempt::First
            && self.release_available_cached_blocks(backend, rounded, stream, small)?
        {
            let next = SegmentRequest {
                attempt: Attempt::AfterReleasingOversize,
                ..request
            };
            return self.attempt(backend, next);
        }
        if request.attempt != Attempt::AfterReleasingAll {
            // A stream that cannot be waited for keeps its blocks, but the segments that could
            // be released were, so the retry still happens.
            if let Err(e) = self.release_cached_blocks(backend) {
                tracing::warn!(
                    device = self.device.get(),
                    "releasing the cache for an out-of-memory retry failed in part: {e}"
                );
            }
            let next = SegmentRequest {
                attempt: Attempt::AfterReleasingAll,
                ..request
            };
            return self.attempt(backend, next);
        }
        let info = backend.mem_get_info(self.device)?;
        self.count_oom(stream, info.free_bytes, rounded);
        Err(Error::OutOfMemory(Box::new(OutOfMemoryError {
            device: self.device,
            stream,
            requested_bytes: request.requested,
            rounded_bytes: rounded,
            allocation_bytes: request.segment_size,
            device_total_bytes: info.total_bytes,
            device_free_bytes: info.free_bytes,
            limit_bytes: self.limit_bytes(backend)?,
            allocated_bytes: self.stats().allocated_bytes.all.current as usize,
            reserved_bytes: self.segments.reserved(),
        })))
    }

    /// Tells the observers of a failed request of `rounded` bytes (`oom`).
    fn count_oom(&mut self, stream: StreamId, free_bytes: usize, rounded: usize) {
        self.observers.emit(PoolEvent::Oom {
            stream,
            free_bytes,
            rounded,
        });
    }

    /// Adds the fixed segment the device returned at `addr` for `request`, as one uncached
    /// free block, and counts it.
    fn insert_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        addr: u64,
        request: &SegmentRequest,
    ) -> Result<BlockId> {
        let (size, stream, small) = (request.segment_size, request.stream, request.small);
        let id = self
            .blocks
            .insert(Block::free(addr, size, stream, small, (None, None), 0));
        let Some(id) = id else {
            // Give the segment back rather than lose track of it.
            backend.free_segment(self.device, addr, size)?;
            return Err(super::device::TOO_MANY_BLOCKS);
        };
        let context = self.observers.segment_context();
        self.segments.insert(
            addr,
            Segment {
                size,
                expandable: false,
                head: id,
                context,
            },
        );
        self.segments.reserve(size);
        let at = Place {
            stream,
            addr,
            size,
            small,
        };
        let oversize = self.policy.is_oversize(size);
        self.observers
            .emit(PoolEvent::SegmentAlloc { at, oversize });
        Ok(id)
    }

    /// Returns the cached, unsplit block `id` (a whole segment) to the device.
    fn release_block<B: Backend<Event = E>>(&mut self, backend: &B, id: BlockId) -> Result<()> {
        let block = self.block(id)?;
        if block.is_split() || block.state != BlockState::Free {
            return Err(Error::InvariantViolated {
                what: "release of a block that is not a whole free segment",
            });
        }
        let at = block.place();
        let (addr, size) = (at.addr, at.size);
        backend.free_segment(self.device, addr, size)?;
        self.uncache(id)?;
        self.blocks.remove(id);
        let segment = self.segments.remove(addr);
        let context = segment.map_or(ContextId::NONE, |s| s.context);
        self.segments.unreserve(size);
        let oversize = self.policy.is_oversize(size);
        self.observers.emit(PoolEvent::SegmentFree {
            at,
            oversize,
            context,
        });
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
        let Some(target) = self.policy.oversize_release_target(rounded) else {
            return Ok(false);
        };
        // Only blocks of fixed segments are released here: free units of expandable segments
        // are unmapped by `release_cached_blocks` instead, as in PyTorch.
        let fixed = |d: &Self, id: BlockId| d.blocks.get(id).is_some_and(|b| !b.expandable);
        if let Some(key) = self.pool_ref(small).best_fit(stream, target) {
            if fixed(self, key.id) {
                self.release_block(backend, key.id)?;
                return Ok(true);
            }
        }
        // Else the largest oversize blocks below the target, biggest (then highest address)
        // first, until they add up to it.
        let mut released = 0usize;
        let mut next = self.pool_ref(small).largest_below(stream, target);
        while released < target {
            let Some(key) = next.filter(|k| self.policy.is_oversize(k.size)) else {
                break;
            };
            next = self.pool_ref(small).before(&key);
            if fixed(self, key.id) {
                released += key.size;
                self.release_block(backend, key.id)?;
            }
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
        self.coalesce_free_segments()?;
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
            if self.expandable.is_on() {
                self.release_expandable_blocks(backend, small)?;
            }
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
        let threshold = self.policy.gc_threshold(limit);
        let reserved = self.segments.reserved();
        if reserved <= threshold {
            return Ok(());
        }
        let target = reserved - threshold;
        let now = self.large.lookups();
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

#[cfg(test)]
mod tests;
