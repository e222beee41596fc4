//! Deferred frees: a block used on other streams (`record_stream`) is freed only after events
//! recorded on each of those streams at free time have completed.
//!
//! Events wait in one queue per stream, oldest first. `process_events`, run at every
//! allocation, pops completed events from the front of every queue, so a slow stream delays
//! only its own blocks (no head-of-line blocking across streams).

use super::block::{BlockId, BlockState};
use super::device::DeviceAllocator;
use crate::backend::Backend;
use crate::error::{Error, Result};

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
                    self.events
                        .entry(stream)
                        .or_default()
                        .push_back((event, id));
                }
                Err(e) => {
                    self.block_mut(id)?.event_count += 1;
                    self.stranded_events += 1;
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
        let mut done_streams = Vec::new();
        let mut result = Ok(());
        let streams: Vec<_> = self.events.keys().copied().collect();
        for stream in streams {
            while let Some(queue) = self.events.get_mut(&stream) {
                let Some((event, _)) = queue.front() else {
                    done_streams.push(stream);
                    break;
                };
                match backend.query_event(event) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        result = Err(e.into());
                        break;
                    }
                }
                if let Some((event, id)) = queue.pop_front() {
                    backend.release_event(event);
                    self.event_completed(id)?;
                }
            }
        }
        for stream in done_streams {
            self.events.remove(&stream);
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
        self.stats.num_sync_all_streams += 1;
        let mut result = Ok(());
        let queues = std::mem::take(&mut self.events);
        for (stream, queue) in queues {
            let mut queue = queue.into_iter();
            while let Some((event, id)) = queue.next() {
                let synced = backend.synchronize_event(&event).map_err(Error::from);
                if let Err(e) = synced {
                    if result.is_ok() {
                        result = Err(e);
                    }
                    // Keep this event and the ones behind it for later.
                    let rest = self.events.entry(stream).or_default();
                    rest.push_back((event, id));
                    rest.extend(queue);
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
        self.events.values().map(|q| q.len()).sum()
    }
}
