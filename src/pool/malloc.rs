//! Allocating on one device: complete finished deferred frees, round the request, take the
//! best cached block on the same stream (honouring the oversize rules) and split it, or go to
//! the device for a new segment through the out-of-memory ladder in `release.rs`.
//!
//! A caller that asks the device itself, without the device lock
//! (`release_lock_on_cudamalloc`), uses the two halves: [`DeviceAllocator::start_malloc`] stops
//! at the device call, [`DeviceAllocator::finish_segment`] takes its answer back.

use super::block::{Block, BlockId, BlockState};
use super::device::{AllocatedBlock, DeviceAllocator, NO_BLOCK, TOO_MANY_BLOCKS};
use super::free_list::{FreeKey, PoolKind};
use super::observe::{Place, PoolEvent};
use super::release::{Attempt, MallocStep, SegmentRequest};
use super::sizing;
use crate::backend::{Backend, StreamId};
use crate::error::Result;

impl<E> DeviceAllocator<E> {
    /// Allocates `size` bytes on `stream`: a cached block when one fits, else a new segment.
    /// The allocator calls the halves itself (cache, callbacks, device); the pool's tests call
    /// this.
    ///
    /// `size` must be non-zero (zero-byte requests never reach a device allocator).
    #[cfg(test)]
    pub fn malloc<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        size: usize,
        stream: StreamId,
    ) -> Result<AllocatedBlock> {
        // The cache hit returns straight away (the common case, kept apart from the ladder).
        if let Some(block) = self.malloc_cached(backend, size, stream)? {
            return Ok(block);
        }
        let step = self.start_malloc(backend, size, stream, false)?;
        self.finish_malloc(backend, step)
    }

    /// Only the cache: completes finished deferred frees and takes the best cached block, or
    /// returns `None` without touching the device. The allocator calls this first, then on a
    /// miss runs the free-memory callbacks and goes on with [`DeviceAllocator::start_malloc`]
    /// (searching the cache again only if a callback freed something).
    #[inline(always)]
    pub fn malloc_cached<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        size: usize,
        stream: StreamId,
    ) -> Result<Option<AllocatedBlock>> {
        self.process_events(backend)?;
        let rounded = self.policy.round(size)?;
        self.take_cached(stream, rounded, size)
    }

    /// The best cached block for `rounded` bytes on `stream`, split and counted as allocated
    /// for a request of `size` bytes; `None` when none fits.
    #[inline(always)]
    pub(super) fn take_cached(
        &mut self,
        stream: StreamId,
        rounded: usize,
        size: usize,
    ) -> Result<Option<AllocatedBlock>> {
        match self.find_cached(stream, rounded, sizing::is_small(rounded)) {
            Some(key) => self
                .alloc_found_block(key.id, Some(key), rounded, size)
                .map(Some),
            None => Ok(None),
        }
    }

    /// The first half of `malloc`, for a caller that asks the device itself (without this
    /// allocator's lock, under `release_lock_on_cudamalloc`): rounds the request, takes the
    /// best cached block when `search_cache` and one fits, and otherwise climbs the
    /// out-of-memory ladder up to the next device allocation, which it returns as a
    /// [`MallocStep::Device`] request. Deferred frees are not processed here
    /// ([`DeviceAllocator::process_events`] is the caller's first step).
    pub fn start_malloc<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        size: usize,
        stream: StreamId,
        search_cache: bool,
    ) -> Result<MallocStep> {
        let rounded = self.policy.round(size)?;
        if search_cache {
            if let Some(block) = self.take_cached(stream, rounded, size)? {
                return Ok(MallocStep::Done(block));
            }
        }
        if self.policy.serves_other_streams() {
            if let Some(block) = self.take_from_other_streams(backend, stream, rounded, size)? {
                return Ok(MallocStep::Done(block));
            }
        }
        let segment_size = self.policy.segment_size(rounded, size)?;
        let request = SegmentRequest {
            requested: size,
            rounded,
            segment_size,
            stream,
            small: sizing::is_small(rounded),
            attempt: Attempt::First,
        };
        self.start_segment(backend, request)
    }

    /// Drives a [`MallocStep`] to its end with the device calls made here.
    #[inline]
    pub fn finish_malloc<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        mut step: MallocStep,
    ) -> Result<AllocatedBlock> {
        loop {
            match step {
                MallocStep::Done(block) => return Ok(block),
                MallocStep::Device(request) => {
                    let answer = backend.alloc_segment(self.device, request.segment_size);
                    step = self.finish_segment(backend, request, answer)?;
                }
            }
        }
    }

    /// Best fit from the pool, honouring the oversize rules. It stays in the free list until
    /// `alloc_found_block` re-keys or removes it.
    #[inline]
    fn find_cached(&mut self, stream: StreamId, rounded: usize, small: bool) -> Option<FreeKey> {
        let gc_on = self.gc_enabled();
        if gc_on {
            self.pool(small).count_lookup();
        }
        let pool = self.pool_ref(small);
        let key = pool.best_fit(stream, rounded)?;
        let key = self.prefer_less_expandable(key);
        (key.size <= self.policy.largest_block_for(rounded)).then_some(key)
    }

    /// Whether garbage collection runs: a memory fraction is set and the policy collects.
    pub(crate) fn gc_enabled(&self) -> bool {
        self.fraction.is_some() && self.policy.collects_garbage()
    }

    /// Marks a block found in the cache (`cached` is its free-list entry) or a new segment as
    /// allocated, splitting off the remainder when the split rule says so, and counts it.
    // Inlined on the cache-hit path (with `take_cached`, `malloc_cached` and
    // `BlockArena::insert`): returned through memory from call to call, the block's fields
    // were written and read back at other widths, and the stalled loads cost about 15 ns of a
    // 90 ns pair (`benches/README.md`).
    #[inline(always)]
    pub(super) fn alloc_found_block(
        &mut self,
        id: BlockId,
        cached: Option<FreeKey>,
        rounded: usize,
        requested: usize,
    ) -> Result<AllocatedBlock> {
        let block = self.blocks.get(id).ok_or(NO_BLOCK)?;
        let (small, addr, stream, old_size, old_next) = (
            block.small,
            block.addr,
            block.stream,
            block.size,
            block.next,
        );
        let pool = if small {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let already_split = block.is_split();
        // PyTorch leaves expandable segments out of the inactive-split statistics: their free
        // whole units can always be unmapped.
        let expandable = block.expandable;
        // With no slot left for a remainder, the whole block is handed out instead.
        let split = self
            .policy
            .should_split(old_size, rounded, pool, self.expandable.is_on())
            && self.blocks.has_room();
        let size = if split {
            let rest_size = old_size - rounded;
            let rest_key = FreeKey {
                stream,
                size: rest_size,
                addr: addr + rounded as u64,
                id,
            };
            let mut rest = Block::free(
                rest_key.addr,
                rest_size,
                stream,
                small,
                (Some(id), old_next),
                self.pool_ref(small).lookups(),
            );
            rest.expandable = expandable;
            let rest = self.blocks.insert(rest);
            let rest = rest.ok_or(TOO_MANY_BLOCKS)?;
            if let Some(next) = old_next {
                self.blocks.get_mut(next).ok_or(NO_BLOCK)?.prev = Some(rest);
            }
            let rest_key = FreeKey {
                id: rest,
                ..rest_key
            };
            match cached {
                // The cached block becomes its remainder: re-key it in place.
                Some(key) => self.replace_cached(small, &key, rest_key)?,
                None => self.pool(small).insert(rest_key),
            }
            if expandable {
                // Expandable segments stay out of the inactive-split statistics.
            } else if already_split {
                // An inactive split block shrinks by the part handed out.
                self.observers.emit(PoolEvent::InactiveSplit {
                    small,
                    blocks: 0,
                    bytes: -(rounded as i64),
                });
            } else {
                self.observers.emit(PoolEvent::InactiveSplit {
                    small,
                    blocks: 1,
                    bytes: rest_size as i64,
                });
            }
            let block = self.blocks.get_mut(id).ok_or(NO_BLOCK)?;
            block.next = Some(rest);
            block.size = rounded;
            rounded
        } else {
            if let Some(key) = cached {
                self.remove_cached(small, &key)?;
            }
            if already_split && !expandable {
                self.observers.emit(PoolEvent::InactiveSplit {
                    small,
                    blocks: -1,
                    bytes: -(old_size as i64),
                });
            }
            old_size
        };
        let block = self.blocks.get_mut(id).ok_or(NO_BLOCK)?;
        block.state = BlockState::Allocated;
        block.requested = requested;

        self.next_alloc_id += 1;
        let at = Place {
            stream,
            addr,
            size,
            small,
        };
        self.observers.emit(PoolEvent::Alloc {
            block: id,
            alloc_id: self.next_alloc_id,
            at,
            requested,
            oversize: self.policy.is_oversize(size),
        });
        Ok(AllocatedBlock {
            id,
            addr,
            size,
            requested,
            stream,
            alloc_id: self.next_alloc_id,
        })
    }
}
