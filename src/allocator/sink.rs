//! Trace files from a [`CachingAllocator`]: [`dump_snapshot`](CachingAllocator::dump_snapshot)
//! writes a snapshot, [`stream_history_to`](CachingAllocator::stream_history_to) writes the
//! history as it is recorded (the file side is `trace::jsonl`'s sink; here is what the devices
//! do for it).

use super::caching::{CachingAllocator, Shared};
use super::history::push_segments;
use crate::backend::Backend;
use crate::trace::jsonl::{
    self, create_file, spawn_stream, Header, HistoryStream, JsonlError, StreamSource, StreamState,
    TraceWriter,
};
use crate::trace::snapshot::Segment;
use crate::trace::TraceEvent;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

impl<B: Backend> CachingAllocator<B> {
    /// Writes [`snapshot`](CachingAllocator::snapshot) to a trace file at `path`, gzip-compressed
    /// when the name ends in `.gz` (see [`trace::jsonl`](crate::trace::jsonl) for the format).
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::jsonl;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// let a = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// let path = std::env::temp_dir().join(format!("dump-doc-{}.jsonl.gz", std::process::id()));
    /// alloc.dump_snapshot(&path)?;
    /// let (snapshot, report) = jsonl::load(&path)?;
    /// assert!(report.complete);
    /// assert_eq!(snapshot.segments[0].blocks[0].requested, 4096);
    /// # std::fs::remove_file(&path)?;
    /// # drop(a);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dump_snapshot(&self, path: impl AsRef<Path>) -> Result<(), JsonlError> {
        jsonl::save(&self.snapshot(), path)
    }

    /// Streams the history to a trace file at `path` (gzip when the name ends in `.gz`) while
    /// the program runs: every event recorded from now on, written by a background thread at
    /// least every [`FLUSH_INTERVAL`](jsonl::FLUSH_INTERVAL), so a crash loses at most the
    /// last interval's events and the file still reads.
    ///
    /// Recording must be on ([`record_memory_history`](CachingAllocator::record_memory_history));
    /// turning it off ends the events of the stream. [`HistoryStream::stop`] (or dropping the
    /// stream) writes the last events, the segments at that moment and the end line. While
    /// streaming, recording an event costs one more append to a buffer under the device lock.
    ///
    /// Fails with [`JsonlError::RecordingOff`], [`JsonlError::AlreadyStreaming`], or when the
    /// file cannot be created.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::jsonl;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// let path = std::env::temp_dir().join(format!("stream-doc-{}.jsonl", std::process::id()));
    /// let stream = alloc.stream_history_to(&path)?;
    /// drop(alloc.allocate(0, 4096, StreamId::DEFAULT)?);
    /// let summary = stream.stop()?;
    /// assert_eq!(summary.events, 4, "segment_alloc, alloc, free_requested, free_completed");
    /// let (snapshot, _) = jsonl::load(&path)?;
    /// assert_eq!(snapshot.events, alloc.history(0)?);
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stream_history_to(&self, path: impl AsRef<Path>) -> Result<HistoryStream, JsonlError> {
        let path = path.as_ref();
        let shared = &self.shared;
        let _serial = shared.history_settings.lock();
        if shared.recording.load(Ordering::Acquire) == 0 {
            return Err(JsonlError::RecordingOff);
        }
        if shared.stream.lock().is_some() {
            return Err(JsonlError::AlreadyStreaming);
        }
        let origin = shared.recording_since_unix_us.load(Ordering::Acquire);
        let header = Header::new(
            (origin != 0).then_some(origin),
            Some(shared.config.to_string()),
        );
        let mut writer =
            TraceWriter::new(create_file(path)?, &header).map_err(JsonlError::Write)?;
        writer.flush().map_err(JsonlError::Write)?;
        let state = Arc::new(StreamState::default());
        *shared.stream.lock() = Some(Arc::clone(&state));
        for device in shared.devices.iter() {
            if let Some(history) = device.lock().observers.history_mut() {
                history.start_streaming();
            }
        }
        let weak: Weak<Shared<B>> = Arc::downgrade(shared);
        let source: Weak<dyn StreamSource> = weak;
        let contexts = Arc::clone(&shared.contexts);
        match spawn_stream(
            path.to_path_buf(),
            writer,
            Arc::clone(&state),
            source,
            contexts,
        ) {
            Ok(stream) => Ok(stream),
            Err(e) => {
                shared.detach(&state, &mut Vec::new());
                Err(e)
            }
        }
    }
}

impl<B: Backend> Shared<B> {
    /// Ends the running stream's events, if any: the devices stop buffering and hand it
    /// their last events. Called when recording is turned off.
    pub(super) fn end_stream(&self) {
        let Some(state) = self.stream.lock().take() else {
            return;
        };
        let mut events = Vec::new();
        let mut dropped = 0;
        for device in self.devices.iter() {
            let mut device = device.lock();
            if let Some(history) = device.observers.history_mut() {
                dropped += history.stop_streaming(&mut events);
            }
        }
        state.hand_over(&mut events, dropped);
    }
}

impl<B: Backend> StreamSource for Shared<B> {
    fn take_events(&self, stream: &Arc<StreamState>, buffers: &mut Vec<Vec<TraceEvent>>) -> u64 {
        // Held throughout, so a stream started after this one ended never loses events to it.
        let slot = self.stream.lock();
        if !slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, stream)) {
            return 0;
        }
        buffers.resize_with(self.devices.len(), Vec::new);
        let mut dropped = 0;
        for (device, buffer) in self.devices.iter().zip(buffers.iter_mut()) {
            if let Some(history) = device.lock().observers.history_mut() {
                dropped += history.take_streamed(buffer);
            }
        }
        dropped
    }

    fn detach(&self, stream: &Arc<StreamState>, buffers: &mut Vec<Vec<TraceEvent>>) -> u64 {
        let mut slot = self.stream.lock();
        if !slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, stream)) {
            return 0;
        }
        *slot = None;
        buffers.resize_with(self.devices.len(), Vec::new);
        let mut dropped = 0;
        for (device, buffer) in self.devices.iter().zip(buffers.iter_mut()) {
            if let Some(history) = device.lock().observers.history_mut() {
                dropped += history.stop_streaming(buffer);
            }
        }
        dropped
    }

    fn end_segments(&self) -> Vec<Segment> {
        let mut segments = Vec::new();
        for (device, allocator) in self.devices.iter().enumerate() {
            let views = allocator.lock().segments();
            push_segments(device as u32, views, &mut |id| id, &mut segments);
        }
        segments
    }
}
