//! The stream-ordered policy (`stream_reuse:ordered`): memory cached for one stream serves
//! another once that stream waits, on the device, for the first one's work.
//!
//! Three places differ from PyTorch's rule, and only under this policy:
//! - a request that nothing cached for its stream fits takes the best block cached for another
//!   stream (`take_from_other_streams`) before the device is asked for memory: an event is
//!   recorded on the block's stream, the request's stream waits on it
//!   ([`Backend::stream_wait_event`]), and the block, merged with its new stream's free
//!   neighbours, belongs to the request's stream from then on;
//! - a block used on other streams (`record_stream`) is cached at once on its own stream,
//!   after that stream waits on events recorded on the others (`order_uses`), instead of
//!   waiting in the cache for those events to complete;
//! - a segment may hold blocks of several streams, which never merge with each other;
//!   releasing cached memory first merges each segment whose blocks are all free
//!   (`coalesce_free_segments`), since freeing a segment synchronizes the device anyway.
//!
//! Blocks of expandable segments keep to their stream: each stream's address range grows
//! from its own blocks. A backend that cannot make a stream wait turns the policy off for
//! the device, which then behaves as under the compatible policy.

use super::block::{BlockId, BlockState};
use super::device::{AllocatedBlock, DeviceAllocator, NO_BLOCK};
use super::free_list::FreeKey;
use super::observe::PoolEvent;
use super::sizing;
use crate::backend::{Backend, BackendError, StreamId};
use crate::error::Result;

impl<E> DeviceAllocator<E> {
    /// Under the ordered policy, serves `rounded` bytes (asked as `size`) on `stream` from
    /// the best block cached for another stream, after ordering `stream` behind that
    /// stream's work; `None` when no such block fits or the ordering could not be made.
    pub(super) fn take_from_other_streams<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        stream: StreamId,
        rounded: usize,
        size: usize,
    ) -> Result<Option<AllocatedBlock>> {
        let small = sizing::is_small(rounded);
        // The oversize rules of a cache hit hold here too.
        let largest = self.policy.largest_block_for(rounded);
        let blocks = &self.blocks;
        let found = self
            .pool_ref(small)
            .best_fit_elsewhere(stream, rounded, |key| {
                key.size <= largest && blocks.get(key.id).is_some_and(|b| !b.expandable)
            });
        let Some(key) = found else {
            return Ok(None);
        };
        if !self.wait_for(backend, stream, key.stream) {
            return Ok(None);
        }
        self.move_to_stream(key, stream)?;
        // The moved block (merged with its new neighbours) is now the best fit on `stream`,
        // whose own cache had nothing that fit.
        self.take_cached(stream, rounded, size)
    }

    /// Makes `waiter` wait for the work queued so far on `on`: records an event there and
    /// waits on it. False when that fails; a backend that cannot wait turns the policy off.
    pub(super) fn wait_for<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        waiter: StreamId,
        on: StreamId,
    ) -> bool {
        let event = match backend.record_event(self.device, on) {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(
                    device = self.device.get(),
                    "no event to order {waiter} after {on}: {e}"
                );
                return false;
            }
        };
        let waited = backend.stream_wait_event(self.device, waiter, &event);
        backend.release_event(event);
        match waited {
            Ok(()) => true,
            Err(BackendError::Unsupported { .. }) => {
                tracing::warn!(
                    device = self.device.get(),
                    backend = backend.name(),
                    "the backend cannot make a stream wait on an event; stream_reuse:ordered \
                     is off for this device, which keeps each stream's cache to itself"
                );
                self.policy.keep_streams_apart();
                false
            }
            Err(e) => {
                tracing::debug!(
                    device = self.device.get(),
                    "could not order {waiter} after {on}: {e}"
                );
                false
            }
        }
    }

    /// Moves the cached block `key` to `stream`'s cache, merged with the free neighbours
    /// cached there.
    fn move_to_stream(&mut self, key: FreeKey, stream: StreamId) -> Result<()> {
        let small = self.block(key.id)?.small;
        self.remove_cached(small, &key)?;
        self.block_mut(key.id)?.stream = stream;
        self.cache_merging(key.id, true)
    }

    /// Orders a freed block's own stream after every other stream that used it, so that it
    /// can be cached at once. Streams that could not be ordered are left in its uses, for the
    /// compatible path's events; true when none is left.
    pub(super) fn order_uses<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        id: BlockId,
    ) -> Result<bool> {
        let block = self.block_mut(id)?;
        let own = block.stream;
        let Some(uses) = block.stream_uses.take() else {
            return Ok(true);
        };
        let mut left = Vec::new();
        for other in *uses {
            if !left.is_empty() || !self.wait_for(backend, own, other) {
                left.push(other);
            }
        }
        if left.is_empty() {
            return Ok(true);
        }
        self.block_mut(id)?.stream_uses = Some(Box::new(left));
        Ok(false)
    }

    /// Merges each fixed segment whose blocks are all cached into one block, so that it can
    /// be released. Only blocks of different streams are left unmerged, which happens only
    /// under the ordered policy.
    pub(super) fn coalesce_free_segments(&mut self) -> Result<()> {
        if !self.policy.streams_may_mix() {
            return Ok(());
        }
        let heads: Vec<BlockId> = self
            .segments
            .iter()
            .map(|(_, s)| s)
            .filter(|s| !s.expandable)
            .map(|s| s.head)
            .collect();
        for head in heads {
            if self.all_cached_and_split(head)? {
                self.coalesce(head)?;
            }
        }
        Ok(())
    }

    /// Whether the segment starting with `head` has several blocks, all cached.
    fn all_cached_and_split(&self, head: BlockId) -> Result<bool> {
        let mut cursor = Some(head);
        let mut count = 0;
        while let Some(id) = cursor {
            let block = self.block(id)?;
            if block.state != BlockState::Free {
                return Ok(false);
            }
            count += 1;
            cursor = block.next;
        }
        Ok(count > 1)
    }

    /// Merges every block of the all-cached segment starting with `head` into `head`, cached
    /// on `head`'s stream.
    fn coalesce(&mut self, head: BlockId) -> Result<()> {
        let mut cursor = Some(head);
        while let Some(id) = cursor {
            let block = self.block(id)?;
            let (key, next) = (Self::free_key(id, block), block.next);
            self.remove_cached(block.small, &key)?;
            cursor = next;
        }
        let mut blocks = 1i64;
        while let Some(next) = self.block(head)?.next {
            self.absorb_next(head, next)?;
            blocks += 1;
        }
        // Every block was a free split block, counted in the inactive-split statistics; the
        // whole segment is not.
        let (small, size) = (self.block(head)?.small, self.block(head)?.size as i64);
        self.observers.emit(PoolEvent::InactiveSplit {
            small,
            blocks: -blocks,
            bytes: -size,
        });
        let block = self.blocks.get(head).ok_or(NO_BLOCK)?;
        let key = Self::free_key(head, block);
        self.pool(small).insert(key);
        Ok(())
    }
}
