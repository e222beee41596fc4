//! Deferred frees: a block used on other streams (`record_stream`) is freed only after events
//! recorded on each of those streams at free time have completed.
//!
//! Events wait in [`EventQueues`], one queue per stream, oldest first: a component with its
//! state private, reached through pushes, pops of completed events and a drain for a full
//! synchronization. `process_events`, run at every allocation, pops completed events from the
//! front of every queue, so a slow stream delays only its own blocks (no head-of-line blocking
//! across streams).

use super::block::{BlockId, BlockState};
use super::device::DeviceAllocator;
use super::observe::PoolEvent;
use crate::backend::{Backend, StreamId};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, VecDeque};

/// The events that deferred frees wait on, per stream.
#[derive(Debug)]
pub(crate) struct EventQueues<E> {
    /// Per stream, oldest first: (event, block waiting on it). Ordered by stream so that
    /// completing them is deterministic.
    queues: BTreeMap<StreamId, VecDeque<(E, BlockId)>>,
    /// Events that could not be recorded: each keeps its block pending forever, so memory a
    /// stream may still use is never handed out again.
    stranded: usize,
}

impl<E> Default for EventQueues<E> {
    fn default() -> Self {
        EventQueues {
            queues: BTreeMap::new(),
            stranded: 0,
        }
    }
}

impl<E> EventQueues<E> {
    /// Queues `event`, recorded on `stream`, for the block `id`.
    fn push(&mut self, stream: StreamId, event: E, id: BlockId) {
        self.queues
            .entry(stream)
            .or_default()
            .push_back((event, id));
    }

    /// Counts an event that could not be recorded.
    fn strand(&mut self) {
        self.stranded += 1;
    }

    /// Whether no event is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }

    /// Events that could not be recorded.
    pub fn stranded(&self) -> usize {
        self.stranded
    }

    /// The streams with queued events, in order.
    fn streams(&self) -> Vec<StreamId> {
        self.queues.keys().copied().collect()
    }

    /// The block whose event at the front of `stream`'s queue has completed, the event
    /// released; `None` when the front event has not completed or the queue is empty (an
    /// emptied queue is dropped).
    fn pop_completed<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        stream: StreamId,
    ) -> Result<Option<BlockId>> {
        let Some(queue) = self.queues.get_mut(&stream) else {
            return Ok(None);
        };
        let Some((event, _)) = queue.front() else {
            self.queues.remove(&stream);
            return Ok(None);
        };
        if !backend.query_event(event)? {
            return Ok(None);
        }
        let popped = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&stream);
        }
        Ok(popped.map(|(event, id)| {
            backend.release_event(event);
            id
        }))
    }

    /// Every queue, taken out: for a full synchronization, which puts back what it could not
    /// wait for ([`requeue`](Self::requeue)).
    fn drain(&mut self) -> BTreeMap<StreamId, VecDeque<(E, BlockId)>> {
        std::mem::take(&mut self.queues)
    }

    /// Puts `entries` back at the end of `stream`'s queue.
    fn requeue(&mut self, stream: StreamId, entries: impl IntoIterator<Item = (E, BlockId)>) {
        self.queues.entry(stream).or_default().extend(entries);
    }
}

impl<E> DeviceAllocator<E> {
    /// Records an event on every stream that used the freed block `id`.
    ///
    /// When recording fails, the block is kept pending forever (a stranded event stands in for
    /// the one that could not be recorded): the stream might still be using the memory, so it
    /// is never handed out again, and the error is returned.
    pub(crate) fn insert_events<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        id: BlockId,
    ) -> Result<()> {
        let streams = self.block_mut(id)?.stream_uses.take().unwrap_or_default();
        for stream in *streams {
            match backend.record_event(self.device, stream) {
                Ok(event) => {
                    self.block_mut(id)?.event_count += 1;
                    self.events.push(stream, event, id);
                }
                Err(e) => {
                    self.block_mut(id)?.event_count += 1;
                    self.events.strand();
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Completes deferred frees whose events have finished, per stream, in order.
    #[inline]
    pub fn process_events<B: Backend<Event = E>>(&mut self, backend: &B) -> Result<()> {
        if self.events.is_empty() {
            return Ok(());
        }
        self.process_pending_events(backend)
    }

    fn process_pending_events<B: Backend<Event = E>>(&mut self, backend: &B) -> Result<()> {
        let mut result = Ok(());
        for stream in self.events.streams() {
            loop {
                match self.events.pop_completed(backend, stream) {
                    Ok(Some(id)) => self.event_completed(id)?,
                    Ok(None) => break,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        result
    }

    /// Waits for every outstanding event and completes the frees behind them.
    ///
    /// An event that cannot be waited for stays queued (its block is never reused early); the
    /// others are still processed and the first error is returned.
    pub(crate) fn synchronize_and_free_events<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
    ) -> Result<()> {
        self.observers.emit(PoolEvent::SyncAllStreams);
        let mut result = Ok(());
        for (stream, queue) in self.events.drain() {
            let mut queue = queue.into_iter();
            while let Some((event, id)) = queue.next() {
                let synced = backend.synchronize_event(&event).map_err(Error::from);
                if let Err(e) = synced {
                    if result.is_ok() {
                        result = Err(e);
                    }
                    // Keep this event and the ones behind it for later.
                    self.events
                        .requeue(stream, std::iter::once((event, id)).chain(queue));
                    break;
                }
                backend.release_event(event);
                if let Err(e) = self.event_completed(id) {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
            }
        }
        result
    }

    fn event_completed(&mut self, id: BlockId) -> Result<()> {
        let block = self.block_mut(id)?;
        if block.state != BlockState::PendingFree || block.event_count == 0 {
            return Err(Error::InvariantViolated {
                what: "event completed for a block not pending free",
            });
        }
        block.event_count -= 1;
        if block.event_count == 0 {
            self.free_block(id)?;
        }
        Ok(())
    }

    /// Number of events still outstanding.
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }
}
