//! Expandable segments (`expandable_segments:True`), as PyTorch's `ExpandableSegment`: one
//! reserved address range per (stream, pool) that is mapped to memory unit by unit as requests
//! need it and unmapped again, whole units only, when the cache is emptied.
//!
//! A segment reserves address space for 1 1/8 of the device's capacity (rounded up to its
//! unit), as PyTorch does, so that units unmapped early can be mapped again at the end. Its
//! unit is the pool's segment size: 2 MiB for the small pool, 20 MiB for the large one, one
//! [`Backend::map_memory`] call each. The segment is tiled by blocks as a fixed one is, but a
//! block may be *unmapped*: free, with no memory behind it, in no free list and never handed
//! out, kept instead in a per-pool set ordered by (stream, address). Unmapped neighbours merge,
//! as free mapped neighbours do; a mapped and an unmapped block never merge.
//!
//! When no cached block fits, a request extends the segment: the unmapped block it finds (with
//! the free mapped block before it, if any) is mapped just far enough, merged with free mapped
//! neighbours and served by the usual best-fit and split rules. `empty_cache` and the
//! out-of-memory path unmap the whole units inside free blocks and release a segment once
//! nothing in it is mapped. Mapped bytes are reserved bytes; mapping counts as a device
//! allocation (`num_device_alloc`) and unmapping as a device free, per call as in PyTorch, and
//! the trace says `segment_map` and `segment_unmap`.

use super::block::{Block, BlockId, BlockState};
use super::device::{DeviceAllocator, NO_BLOCK, TOO_MANY_BLOCKS};
use super::free_list::FreeKey;
use super::observe::{Place, PoolEvent};
use super::segments::Segment;
use super::sizing::{LARGE_BUFFER, SMALL_BUFFER};
use crate::backend::{Backend, BackendError, StreamId};
use crate::error::{Error, Result};
use crate::event::ContextId;

mod space;

pub(crate) use space::Expandable;

/// The mapping unit of a pool, in bytes.
pub(crate) fn unit(small: bool) -> usize {
    if small {
        SMALL_BUFFER
    } else {
        LARGE_BUFFER
    }
}

const NOT_UNMAPPED: Error = Error::InvariantViolated {
    what: "unmapped block missing from its unmapped set",
};

impl<E> DeviceAllocator<E> {
    /// Whether new memory comes from expandable segments. The first call asks the backend;
    /// when it cannot map memory the allocator falls back to fixed segments and says so once.
    pub(crate) fn expandable_enabled<B: Backend<Event = E>>(&mut self, backend: &B) -> bool {
        if self.expandable.unsettled() {
            let supported = backend.supports_expandable_segments(self.device);
            self.expandable.settle(supported);
            if !supported {
                tracing::warn!(
                    device = self.device.get(),
                    "expandable_segments:True, but the {} backend cannot map memory on device \
                     {}; using fixed segments",
                    backend.name(),
                    self.device
                );
            }
        }
        self.expandable.is_on()
    }

    /// Among cached blocks at or after the best fit `key`, PyTorch's preference while
    /// expandable segments are on: a block followed by unmapped space counts as large as it
    /// could grow, so the walk moves on to the next block while that one could grow less.
    pub(crate) fn prefer_less_expandable(&self, key: FreeKey) -> FreeKey {
        if !self.expandable.is_on() {
            return key;
        }
        let pool = if self.block(key.id).is_ok_and(|b| b.small) {
            &self.small
        } else {
            &self.large
        };
        let mut current = key;
        loop {
            let is_expandable = self.blocks.get(current.id).is_some_and(|b| b.expandable);
            let Some(next) = pool.next_after(&current).filter(|_| is_expandable) else {
                return current;
            };
            if self.expandable_size(next.id) < self.expandable_size(current.id) {
                current = next;
            } else {
                return current;
            }
        }
    }

    /// A block's size plus that of the unmapped block right after it.
    fn expandable_size(&self, id: BlockId) -> usize {
        let Some(block) = self.blocks.get(id) else {
            return 0;
        };
        let unmapped_next = block
            .next
            .and_then(|next| self.blocks.get(next))
            .filter(|next| !next.mapped)
            .map_or(0, |next| next.size);
        block.size + unmapped_next
    }

    /// Serves `rounded` bytes on `stream` from an expandable segment, mapping what it lacks:
    /// a free mapped block of at least `rounded` bytes, taken out of its free list. `Ok(None)`
    /// when the device (or the memory fraction) has no room.
    pub(crate) fn alloc_expandable<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        rounded: usize,
        stream: StreamId,
        small: bool,
    ) -> Result<Option<BlockId>> {
        let candidate = match self.find_expandable_block(stream, small, rounded) {
            Some(id) => id,
            None => match self.reserve_expandable_segment(backend, stream, small)? {
                Some(id) => id,
                None => return Ok(None),
            },
        };
        // The candidate is unmapped, or free and mapped with unmapped space right after it.
        let mut candidate = candidate;
        if !self.block(candidate)?.mapped {
            let size = self.block(candidate)?.size.min(rounded);
            match self.map_block(backend, candidate, size, stream)? {
                Some(id) => candidate = id,
                None => return Ok(None),
            }
        }
        loop {
            let block = self.block(candidate)?;
            if block.size >= rounded {
                break;
            }
            let missing = rounded - block.size;
            let next = block.next.ok_or(Error::InvariantViolated {
                what: "expandable block too short with nothing after it",
            })?;
            let size = self.block(next)?.size.min(missing);
            match self.map_block(backend, next, size, stream)? {
                Some(id) => candidate = id,
                None => return Ok(None),
            }
        }
        self.uncache(candidate)?;
        Ok(Some(candidate))
    }

    /// The lowest unmapped block of `stream` that, with the free block right before it and
    /// the free blocks after it, spans `size` bytes: that free block when there is one, else
    /// the unmapped block.
    fn find_expandable_block(&self, stream: StreamId, small: bool, size: usize) -> Option<BlockId> {
        let allocatable = |id: Option<BlockId>| {
            id.and_then(|id| self.blocks.get(id))
                .is_some_and(|b| b.state == BlockState::Free)
        };
        for id in self.expandable.unmapped_on(small, stream) {
            let mut start = id;
            let prev = self.blocks.get(id)?.prev;
            if allocatable(prev) {
                start = prev?;
            }
            let mut bytes = 0usize;
            let mut cursor = Some(start);
            while bytes < size && allocatable(cursor) {
                let block = self.blocks.get(cursor?)?;
                bytes += block.size;
                cursor = block.next;
            }
            if bytes >= size {
                return Some(start);
            }
        }
        None
    }

    /// Reserves a new expandable segment for `stream`, wholly unmapped, and returns its only
    /// block. `Ok(None)` when the device has no address space left.
    fn reserve_expandable_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        stream: StreamId,
        small: bool,
    ) -> Result<Option<BlockId>> {
        let unit = unit(small);
        let total = self.total_bytes(backend)?;
        let size = total
            .checked_add(total / 8)
            .and_then(|bytes| bytes.checked_next_multiple_of(unit))
            .filter(|&bytes| bytes > 0)
            .ok_or(Error::SizeTooLarge {
                requested_bytes: total,
            })?;
        if !self.blocks.has_room() {
            return Err(TOO_MANY_BLOCKS);
        }
        let addr = match backend.reserve_address_range(self.device, size) {
            Ok(addr) => addr,
            Err(BackendError::OutOfMemory { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut block = Block::free(addr, size, stream, small, (None, None), 0);
        block.expandable = true;
        block.mapped = false;
        let id = self.blocks.insert(block).ok_or(TOO_MANY_BLOCKS)?;
        let context = self.observers.segment_context();
        self.segments.insert(
            addr,
            Segment {
                size,
                expandable: true,
                head: id,
                context,
            },
        );
        self.expandable.insert_unmapped(small, stream, addr, id);
        Ok(Some(id))
    }

    /// The address of the segment holding `addr`.
    fn segment_base(&self, addr: u64) -> Result<u64> {
        self.segments
            .at_or_before(addr)
            .map(|(base, _)| base)
            .ok_or(NO_BLOCK)
    }

    /// Maps the whole units covering the first `size` bytes of the unmapped block `id`, which
    /// then merges with free mapped neighbours and is cached. Returns the merged block, or
    /// `None` when the device (or the memory fraction) refused, having unmapped what this call
    /// mapped. Should an unmap fail too, the units still mapped are cached and counted like
    /// any others and the error is returned: the allocator's state matches the device's.
    fn map_block<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        id: BlockId,
        size: usize,
        stream: StreamId,
    ) -> Result<Option<BlockId>> {
        let block = self.block(id)?;
        let (addr, block_size, small) = (block.addr, block.size, block.small);
        if block.mapped || size == 0 || size > block_size {
            return Err(Error::InvariantViolated {
                what: "map of a block that is mapped or too small",
            });
        }
        let unit = unit(small);
        let wanted = size.div_ceil(unit) * unit;
        if self.over_limit_with(backend, wanted)? {
            return Ok(None);
        }
        if !self.blocks.has_room() {
            return Err(TOO_MANY_BLOCKS);
        }
        let mut bytes = 0;
        let mut refused = None;
        while bytes < wanted {
            match backend.map_memory(self.device, addr + bytes as u64, unit) {
                Ok(()) => bytes += unit,
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        if refused.is_some() {
            // Give back what this call mapped, as PyTorch does, last unit first: should the
            // device refuse an unmap too, what stays mapped is a prefix, accounted below.
            while bytes > 0 {
                let ptr = addr + (bytes - unit) as u64;
                if let Err(e) = backend.unmap_memory(self.device, ptr, unit) {
                    tracing::warn!(
                        device = self.device.get(),
                        "undoing a partial mapping failed; {bytes} bytes stay mapped: {e}"
                    );
                    break;
                }
                bytes -= unit;
            }
        }
        if bytes == 0 {
            return match refused {
                Some(e) if !e.is_out_of_memory() => Err(e.into()),
                _ => Ok(None),
            };
        }

        if self
            .expandable
            .remove_unmapped(small, stream, addr)
            .is_none()
        {
            return Err(NOT_UNMAPPED);
        }
        if bytes < block_size {
            let old_next = self.block(id)?.next;
            let mut rest = Block::free(
                addr + bytes as u64,
                block_size - bytes,
                stream,
                small,
                (Some(id), old_next),
                0,
            );
            rest.expandable = true;
            rest.mapped = false;
            let rest = self.blocks.insert(rest).ok_or(TOO_MANY_BLOCKS)?;
            if let Some(next) = old_next {
                self.block_mut(next)?.prev = Some(rest);
            }
            self.block_mut(id)?.next = Some(rest);
            self.expandable
                .insert_unmapped(small, stream, addr + bytes as u64, rest);
        }
        let lookups = self.pool_ref(small).lookups();
        let block = self.block_mut(id)?;
        block.mapped = true;
        block.size = bytes;
        block.gc_count_base = lookups;
        let (prev, next) = (block.prev, block.next);

        // Merge with free mapped neighbours; the lower block keeps its id.
        let mut merged = id;
        if let Some(prev) = prev.filter(|&p| self.blocks.get(p).is_some_and(Block::is_cached)) {
            self.uncache(prev)?;
            self.absorb_next(prev, id)?;
            merged = prev;
        }
        if let Some(next) = next.filter(|&n| self.blocks.get(n).is_some_and(Block::is_cached)) {
            self.uncache(next)?;
            self.absorb_next(merged, next)?;
        }
        let key = Self::free_key(merged, self.block(merged)?);
        self.pool(small).insert(key);

        self.segments.reserve(bytes);
        let at = Place {
            stream,
            addr,
            size: bytes,
            small,
        };
        self.observers.emit(PoolEvent::SegmentMap { at });
        match refused {
            None => Ok(Some(merged)),
            Some(e) if e.is_out_of_memory() => Ok(None),
            Some(e) => Err(e.into()),
        }
    }

    /// Unmaps the whole units inside the cached block `id` of an expandable segment; partial
    /// units at either end stay mapped as cached blocks. Returns the unmapped block that
    /// resulted (merged with unmapped neighbours), or `None` when no whole unit was inside.
    ///
    /// When the device refuses an unmap part way, the units unmapped so far are accounted
    /// for and the error is returned: the state stays valid.
    fn unmap_block<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        id: BlockId,
    ) -> Result<Option<BlockId>> {
        let block = self.block(id)?;
        if !block.is_cached() || !block.expandable {
            return Err(Error::InvariantViolated {
                what: "unmap of a block that is not a cached expandable block",
            });
        }
        let (addr, size, small, stream) = (block.addr, block.size, block.small, block.stream);
        let next = block.next;
        let unit = unit(small) as u64;
        let base = self.segment_base(addr)?;
        let begin = base + (addr - base).div_ceil(unit) * unit;
        let end = base + (addr + size as u64 - base) / unit * unit;
        if begin >= end {
            return Ok(None);
        }
        if !self.blocks.has_room() {
            return Err(TOO_MANY_BLOCKS);
        }
        let mut unmapped_end = begin;
        let mut failure = None;
        while unmapped_end < end {
            if let Err(e) = backend.unmap_memory(self.device, unmapped_end, unit as usize) {
                failure = Some(e);
                break;
            }
            unmapped_end += unit;
        }
        if unmapped_end == begin {
            return match failure {
                Some(e) => Err(e.into()),
                None => Ok(None),
            };
        }
        let end = unmapped_end;

        // Cut the block into [addr, begin) cached, [begin, end) unmapped, [end, ...) cached.
        self.uncache(id)?;
        let lookups = self.pool_ref(small).lookups();
        let piece = |start: u64, end: u64, links, mapped: bool| {
            let mut block =
                Block::free(start, (end - start) as usize, stream, small, links, lookups);
            block.expandable = true;
            block.mapped = mapped;
            block
        };
        let middle = if begin > addr {
            let middle = self
                .blocks
                .insert(piece(begin, end, (Some(id), next), false))
                .ok_or(TOO_MANY_BLOCKS)?;
            let front = self.block_mut(id)?;
            front.size = (begin - addr) as usize;
            front.next = Some(middle);
            let key = Self::free_key(id, self.block(id)?);
            self.pool(small).insert(key);
            if let Some(next) = next {
                self.block_mut(next)?.prev = Some(middle);
            }
            middle
        } else {
            let block = self.block_mut(id)?;
            block.size = (end - begin) as usize;
            block.mapped = false;
            id
        };
        let after = addr + size as u64;
        if end < after {
            let old_next = self.block(middle)?.next;
            let tail = self
                .blocks
                .insert(piece(end, after, (Some(middle), old_next), true))
                .ok_or(TOO_MANY_BLOCKS)?;
            if let Some(next) = old_next {
                self.block_mut(next)?.prev = Some(tail);
            }
            self.block_mut(middle)?.next = Some(tail);
            let key = Self::free_key(tail, self.block(tail)?);
            self.pool(small).insert(key);
        }

        // Merge with unmapped neighbours; the lower block keeps its id.
        let mut merged = middle;
        let is_unmapped = |d: &Self, b: Option<BlockId>| {
            b.and_then(|b| d.blocks.get(b)).is_some_and(|b| !b.mapped)
        };
        let before = self.block(middle)?.prev;
        if is_unmapped(self, before) {
            if let Some(before) = before {
                self.absorb_next(before, middle)?;
                merged = before;
            }
        } else {
            self.expandable
                .insert_unmapped(small, stream, begin, middle);
        }
        let following = self.block(merged)?.next;
        if is_unmapped(self, following) {
            if let Some(following) = following {
                let at = self.block(following)?.addr;
                self.expandable
                    .remove_unmapped(small, stream, at)
                    .ok_or(NOT_UNMAPPED)?;
                self.absorb_next(merged, following)?;
            }
        }
        let bytes = (end - begin) as usize;
        self.segments.unreserve(bytes);
        let context = self
            .segments
            .get(base)
            .map_or(ContextId::NONE, |s| s.context);
        let at = Place {
            stream,
            addr: begin,
            size: bytes,
            small,
        };
        self.observers.emit(PoolEvent::SegmentUnmap { at, context });
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(Some(merged)),
        }
    }

    /// Returns the address range of the wholly unmapped expandable segment whose only block
    /// is `id` to the device.
    fn release_expandable_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        id: BlockId,
    ) -> Result<()> {
        let block = self.block(id)?;
        if block.mapped || block.is_split() || !block.expandable {
            return Err(Error::InvariantViolated {
                what: "release of an expandable segment that is still mapped",
            });
        }
        let (addr, size, small, stream) = (block.addr, block.size, block.small, block.stream);
        backend.release_address_range(self.device, addr, size)?;
        self.expandable.remove_unmapped(small, stream, addr);
        self.blocks.remove(id);
        self.segments.remove(addr);
        Ok(())
    }

    /// Unmaps the whole free units of every cached expandable block of a pool, then releases
    /// every expandable segment of the pool that has nothing mapped.
    pub(crate) fn release_expandable_blocks<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        small: bool,
    ) -> Result<()> {
        let to_unmap: Vec<BlockId> = self
            .pool_ref(small)
            .iter()
            .map(|key| key.id)
            .filter(|&id| self.blocks.get(id).is_some_and(|b| b.expandable))
            .collect();
        for id in to_unmap {
            self.unmap_block(backend, id)?;
        }
        let empty: Vec<BlockId> = self
            .expandable
            .unmapped(small)
            .values()
            .copied()
            .filter(|&id| self.blocks.get(id).is_some_and(|b| !b.is_split()))
            .collect();
        for id in empty {
            self.release_expandable_segment(backend, id)?;
        }
        Ok(())
    }
}
