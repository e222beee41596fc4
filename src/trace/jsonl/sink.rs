//! Streaming history to a trace file while the program runs: a background thread takes each
//! device's newly recorded events every [`FLUSH_INTERVAL`] and writes them, so a crash loses
//! at most the events of the last interval.
//!
//! The devices only append each event to a buffer under the lock they already hold (no I/O,
//! no allocation once the buffer has grown); the thread swaps the buffers out for empty ones,
//! one short lock per device, and does the context lookups, formatting, compression and
//! writing with no allocator lock held.

use super::error::JsonlError;
use super::writer::TraceWriter;
use crate::event::ContextTable;
use crate::trace::file::FileOut;
use crate::trace::snapshot::Segment;
use crate::trace::{ContextId, TraceEvent};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a [`HistoryStream`] writes the events recorded since its last write and flushes
/// the file (and the gzip stream).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Where a stream's events come from: an allocator, seen through a weak reference so that a
/// forgotten stream does not keep it alive.
pub(crate) trait StreamSource: Send + Sync {
    /// Swaps each device's buffered events (the allocator's context ids) with `buffers[device]`,
    /// which must be empty, growing `buffers` to one per device; returns events dropped since
    /// the last call because a buffer was full. Does nothing unless `stream` is this source's
    /// current stream.
    fn take_events(&self, stream: &Arc<StreamState>, buffers: &mut Vec<Vec<TraceEvent>>) -> u64;
    /// Stops buffering events for `stream`, taking the last ones as `take_events` does.
    fn detach(&self, stream: &Arc<StreamState>, buffers: &mut Vec<Vec<TraceEvent>>) -> u64;
    /// The segments now, with the allocator's context ids.
    fn end_segments(&self) -> Vec<Segment>;
}

/// What the allocator and the writer thread share.
#[derive(Default)]
pub(crate) struct StreamState {
    handoff: Mutex<Handoff>,
    wake: Condvar,
}

#[derive(Default)]
struct Handoff {
    /// Events handed over by the allocator itself (recording turned off, allocator dropped).
    events: Vec<TraceEvent>,
    dropped: u64,
    stop: bool,
}

impl StreamState {
    /// Hands the last events of a device over when the allocator stops buffering them itself.
    pub(crate) fn hand_over(&self, events: &mut Vec<TraceEvent>, dropped: u64) {
        let mut handoff = self.handoff.lock();
        handoff.events.append(events);
        handoff.dropped += dropped;
    }
}

/// What a finished [`HistoryStream`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSummary {
    /// The file.
    pub path: PathBuf,
    /// Event lines written.
    pub events: u64,
    /// Segment lines written (the end state).
    pub segments: u64,
    /// Events recorded faster than the file could take them, and dropped (noted in the end
    /// line).
    pub dropped_events: u64,
}

/// A running stream of history to a trace file, from
/// [`CachingAllocator::stream_history_to`](crate::CachingAllocator::stream_history_to).
///
/// [`stop`](HistoryStream::stop) (or dropping it) writes the events not yet written, the
/// allocator's segments at that moment and the end line, and closes the file.
#[must_use = "dropping the stream stops it at once"]
pub struct HistoryStream {
    state: Arc<StreamState>,
    path: PathBuf,
    thread: Option<JoinHandle<Result<StreamSummary, JsonlError>>>,
}

impl HistoryStream {
    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes what is left, the end state and the end line, closes the file and says what was
    /// written; or the error that stopped the writer earlier.
    pub fn stop(mut self) -> Result<StreamSummary, JsonlError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<StreamSummary, JsonlError> {
        self.state.handoff.lock().stop = true;
        self.state.wake.notify_all();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(JsonlError::Write(io::Error::other(
                "the trace writer thread panicked",
            ))),
            None => Err(JsonlError::Write(io::Error::other(
                "the stream was already stopped",
            ))),
        }
    }
}

impl Drop for HistoryStream {
    fn drop(&mut self) {
        if self.thread.is_some() {
            if let Err(e) = self.finish() {
                tracing::warn!(path = %self.path.display(), "history stream failed: {e}");
            }
        }
    }
}

impl std::fmt::Debug for HistoryStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryStream")
            .field("path", &self.path)
            .finish()
    }
}

/// Starts the writer thread for a file whose header `writer` has written; the source must
/// already buffer events for `state`.
pub(crate) fn spawn_stream(
    path: PathBuf,
    writer: TraceWriter<FileOut>,
    state: Arc<StreamState>,
    source: Weak<dyn StreamSource>,
    table: Arc<ContextTable>,
) -> Result<HistoryStream, JsonlError> {
    let thread_state = Arc::clone(&state);
    let thread_path = path.clone();
    let thread = std::thread::Builder::new()
        .name("blockpool-trace".into())
        .spawn(move || {
            let mut pump = Pump {
                writer,
                state: thread_state,
                source,
                table,
                contexts: Vec::new(),
                buffers: Vec::new(),
                batch: Vec::new(),
            };
            let (events, segments, dropped_events) = match pump.run() {
                Ok(counts) => counts,
                Err(e) => {
                    // Stop the devices buffering for a writer that is gone.
                    if let Some(source) = pump.source.upgrade() {
                        source.detach(&pump.state, &mut pump.buffers);
                    }
                    return Err(e);
                }
            };
            pump.close()?;
            Ok(StreamSummary {
                path: thread_path,
                events,
                segments,
                dropped_events,
            })
        })
        .map_err(JsonlError::Write)?;
    Ok(HistoryStream {
        state,
        path,
        thread: Some(thread),
    })
}

/// The writer thread's state.
struct Pump {
    writer: TraceWriter<FileOut>,
    state: Arc<StreamState>,
    source: Weak<dyn StreamSource>,
    /// The allocator's contexts, kept past the allocator so its last events resolve.
    table: Arc<ContextTable>,
    /// The allocator's context ids to the file's, indexed by the allocator's id (ids are
    /// handed out densely from 1); `None` until first written.
    contexts: Vec<Option<ContextId>>,
    /// One per device, swapped with the devices' buffers.
    buffers: Vec<Vec<TraceEvent>>,
    batch: Vec<TraceEvent>,
}

impl Pump {
    /// Writes batches until told to stop; returns (events, segments, dropped) written.
    fn run(&mut self) -> Result<(u64, u64, u64), JsonlError> {
        let mut events = 0u64;
        let mut dropped = 0u64;
        loop {
            let stop = {
                let mut handoff = self.state.handoff.lock();
                if !handoff.stop {
                    self.state.wake.wait_for(&mut handoff, FLUSH_INTERVAL);
                }
                self.batch.append(&mut handoff.events);
                dropped += std::mem::take(&mut handoff.dropped);
                handoff.stop
            };
            // The source is upgraded only for the swap: the writer never keeps the allocator.
            let source = self.source.upgrade();
            let gone = source.is_none();
            let mut segments = Vec::new();
            if let Some(source) = source {
                dropped += if stop {
                    let d = source.detach(&self.state, &mut self.buffers);
                    segments = source.end_segments();
                    d
                } else {
                    source.take_events(&self.state, &mut self.buffers)
                };
            }
            // Anything handed over while the source was being dropped.
            {
                let mut handoff = self.state.handoff.lock();
                self.batch.append(&mut handoff.events);
                dropped += std::mem::take(&mut handoff.dropped);
            }
            for buffer in &mut self.buffers {
                self.batch.append(buffer);
            }
            // Each device's events are in time order; a stable sort interleaves devices.
            self.batch.sort_by_key(|e| e.time_us);
            events += self.batch.len() as u64;
            self.write_batch(&segments).map_err(JsonlError::Write)?;
            if stop || gone {
                self.writer.note_dropped_events(dropped);
                return Ok((events, segments.len() as u64, dropped));
            }
            self.writer.flush().map_err(JsonlError::Write)?;
        }
    }

    fn write_batch(&mut self, segments: &[Segment]) -> io::Result<()> {
        let mut batch = std::mem::take(&mut self.batch);
        for event in &batch {
            let context = self.context(event.context)?;
            self.writer.event(&TraceEvent { context, ..*event })?;
        }
        batch.clear();
        self.batch = batch;
        for segment in segments {
            let mut segment = segment.clone();
            segment.context = self.context(segment.context)?;
            for block in &mut segment.blocks {
                block.context = self.context(block.context)?;
            }
            self.writer.segment(&segment)?;
        }
        Ok(())
    }

    /// The file's id for the allocator's context `id`, writing it the first time.
    fn context(&mut self, id: ContextId) -> io::Result<ContextId> {
        if id == ContextId::NONE {
            return Ok(id);
        }
        let index = id.0 as usize;
        if let Some(Some(local)) = self.contexts.get(index) {
            return Ok(*local);
        }
        let local = match self.table.get(id) {
            Some(context) => self.writer.context(&context)?,
            None => ContextId::NONE,
        };
        if index >= self.contexts.len() {
            self.contexts.resize(index + 1, None);
        }
        self.contexts[index] = Some(local);
        Ok(local)
    }

    /// Ends the file; called once `run` returned.
    fn close(self) -> Result<(), JsonlError> {
        let out = self.writer.finish().map_err(JsonlError::Write)?;
        out.close().map_err(JsonlError::Write)
    }
}
