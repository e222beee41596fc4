//! The history as an observer of the pool's events: the ring buffer of trace events and the
//! contexts of live blocks, kept under the device lock the allocator already holds.
//!
//! The caller gathers the time and context of each call before taking the lock and hands them
//! over with [`Observers::set_event_stamp`](super::Observers::set_event_stamp); the events the
//! call then emits carry them. With recording off, each emit costs one predictable branch on
//! whether there is a history.
//!
//! While the history is streamed to a file, each event is also appended to a buffer that the
//! stream's writer thread swaps out (`take_streamed`): a push under the lock already held, no
//! I/O and, once the buffer has grown, no allocation.

use super::{Place, PoolEvent, PoolObserver};
use crate::backend::{DeviceIndex, StreamId};
use crate::event::{
    Action, ContextId, ContextLevel, EventStamp, HistorySettings, TraceEvent, TraceRing,
};
use crate::pool::block::BlockId;

/// What a recording device keeps.
#[derive(Debug)]
pub(crate) struct History {
    /// The device, as events name it.
    device: u32,
    ring: TraceRing,
    level: ContextLevel,
    /// Stamp of the call in progress.
    now: EventStamp,
    /// Time of the newest event, in microseconds since recording started.
    last_time_us: u64,
    /// Allocation context of each allocated or pending block, by slab index (`State` and up).
    block_context: Vec<ContextId>,
    /// Events recorded since the stream's writer last took them, while streaming.
    streamed: Option<Vec<TraceEvent>>,
    /// Events not buffered for the stream because the buffer was full.
    stream_dropped: u64,
}

/// The most events a device buffers for a stream between two takes (about 56 MiB); more are
/// counted as dropped rather than let memory grow without bound when the writer falls behind.
pub(crate) const MAX_STREAM_BUFFER: usize = 1 << 20;

impl History {
    /// The context an event of `action` carries: the call's own when it gathered one, else
    /// `fallback` (the context of the block's or segment's allocation), from `Alloc` up.
    #[inline]
    fn context(&self, action: Action, fallback: ContextId) -> ContextId {
        if action == Action::Annotate {
            self.now.context
        } else if self.level < ContextLevel::Alloc {
            ContextId::NONE
        } else if self.now.context != ContextId::NONE {
            self.now.context
        } else {
            fallback
        }
    }

    /// The context a newly allocated block or segment keeps (`State` and up).
    #[inline]
    pub(crate) fn keep_context(&self) -> ContextId {
        if self.level >= ContextLevel::State {
            self.now.context
        } else {
            ContextId::NONE
        }
    }
}

impl History {
    /// A history of `device` recording as `settings` say, with no events yet.
    pub(crate) fn new(device: DeviceIndex, settings: &HistorySettings) -> Self {
        History {
            device: device.get() as u32,
            ring: TraceRing::new(settings.max_entries),
            level: settings.context,
            now: EventStamp::default(),
            last_time_us: 0,
            block_context: Vec::new(),
            streamed: None,
            stream_dropped: 0,
        }
    }

    /// Keeps the newest `settings.max_entries` events and records contexts at the new level.
    pub(crate) fn reconfigure(&mut self, settings: &HistorySettings) {
        self.ring.set_max_entries(settings.max_entries);
        self.level = settings.context;
    }

    /// The recorded events, oldest first.
    pub(crate) fn events(&self) -> Vec<TraceEvent> {
        self.ring.to_vec()
    }

    /// Sets the time and context of the call about to run.
    #[inline]
    pub(crate) fn set_stamp(&mut self, stamp: EventStamp) {
        self.now = stamp;
    }

    /// The allocation context of the allocated or pending block `id`.
    pub(crate) fn block_context(&self, id: BlockId) -> ContextId {
        self.block_context
            .get(id.index())
            .copied()
            .unwrap_or_default()
    }

    /// Records `action` with `(addr, size, requested)`; `fallback` is the context to use when
    /// the call gathered none.
    #[inline]
    fn record(
        &mut self,
        action: Action,
        stream: StreamId,
        (addr, size, requested): (u64, u64, u64),
        fallback: ContextId,
    ) {
        // Stamps are taken before the lock, so a thread that waited for it may bring an
        // earlier time than the last event's; the history stays in time order.
        self.last_time_us = self.last_time_us.max(self.now.time_us);
        let event = TraceEvent {
            action,
            device: self.device,
            stream,
            addr,
            size,
            requested,
            time_us: self.last_time_us,
            context: self.context(action, fallback),
        };
        self.ring.push(event);
        if let Some(streamed) = &mut self.streamed {
            if streamed.len() < MAX_STREAM_BUFFER {
                streamed.push(event);
            } else {
                self.stream_dropped += 1;
            }
        }
    }

    /// Records the `alloc` of block `id` and remembers its context while it lives.
    #[inline]
    fn record_alloc(&mut self, id: BlockId, stream: StreamId, sizes: (u64, u64, u64)) {
        let keep = self.keep_context();
        let index = id.index();
        if keep != ContextId::NONE || index < self.block_context.len() {
            if index >= self.block_context.len() {
                self.block_context.resize(index + 1, ContextId::NONE);
            }
            self.block_context[index] = keep;
        }
        self.record(Action::Alloc, stream, sizes, ContextId::NONE);
    }

    /// Records `free_completed` for block `id` and forgets its context.
    #[inline]
    fn record_free_completed(&mut self, id: BlockId, stream: StreamId, sizes: (u64, u64, u64)) {
        let context = self.block_context(id);
        self.record(Action::FreeCompleted, stream, sizes, context);
        if let Some(slot) = self.block_context.get_mut(id.index()) {
            *slot = ContextId::NONE;
        }
    }

    /// Starts buffering every event recorded from now on for a stream.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn start_streaming(&mut self) {
        self.streamed = Some(Vec::new());
        self.stream_dropped = 0;
    }

    /// Swaps the events buffered for the stream with `buffer` (which should be empty, so its
    /// capacity is reused); returns how many were dropped since the last take.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn take_streamed(&mut self, buffer: &mut Vec<TraceEvent>) -> u64 {
        match &mut self.streamed {
            Some(streamed) => {
                std::mem::swap(streamed, buffer);
                std::mem::take(&mut self.stream_dropped)
            }
            None => 0,
        }
    }

    /// Stops buffering for the stream, appending the last buffered events to `buffer`;
    /// returns how many were dropped since the last take.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn stop_streaming(&mut self, buffer: &mut Vec<TraceEvent>) -> u64 {
        if let Some(mut streamed) = self.streamed.take() {
            buffer.append(&mut streamed);
        }
        std::mem::take(&mut self.stream_dropped)
    }
}

/// `(addr, size, requested)` of an event at `at`.
#[inline]
fn sizes(at: &Place, requested: usize) -> (u64, u64, u64) {
    (at.addr, at.size as u64, requested as u64)
}

impl PoolObserver for History {
    /// Records the events PyTorch traces, with the `(addr, size, requested)` it gives them;
    /// the bookkeeping-only events leave no trace.
    #[inline]
    fn observe(&mut self, event: &PoolEvent) {
        match *event {
            PoolEvent::Alloc {
                block,
                ref at,
                requested,
                ..
            } => self.record_alloc(block, at.stream, sizes(at, requested)),
            PoolEvent::FreeRequested {
                block,
                ref at,
                requested,
                ..
            } => {
                let context = self.block_context(block);
                let sizes = sizes(at, requested);
                self.record(Action::FreeRequested, at.stream, sizes, context);
            }
            PoolEvent::FreeCompleted {
                block,
                ref at,
                requested,
            } => self.record_free_completed(block, at.stream, sizes(at, requested)),
            PoolEvent::SegmentAlloc { ref at, .. } => {
                let sizes = sizes(at, 0);
                self.record(Action::SegmentAlloc, at.stream, sizes, ContextId::NONE);
            }
            PoolEvent::SegmentFree {
                ref at, context, ..
            } => self.record(Action::SegmentFree, at.stream, sizes(at, 0), context),
            PoolEvent::SegmentMap { ref at } => {
                let sizes = sizes(at, 0);
                self.record(Action::SegmentMap, at.stream, sizes, ContextId::NONE);
            }
            PoolEvent::SegmentUnmap { ref at, context } => {
                self.record(Action::SegmentUnmap, at.stream, sizes(at, 0), context);
            }
            PoolEvent::Oom {
                stream,
                free_bytes,
                rounded,
            } => {
                // As PyTorch: `addr` holds the device's free bytes, `size` the rounded request.
                let sizes = (free_bytes as u64, rounded as u64, 0);
                self.record(Action::Oom, stream, sizes, ContextId::NONE);
            }
            PoolEvent::Snapshot { active } => {
                let sizes = (0, active, 0);
                self.record(Action::Snapshot, StreamId::DEFAULT, sizes, ContextId::NONE);
            }
            PoolEvent::Annotate => {
                let sizes = (0, 0, 0);
                self.record(Action::Annotate, StreamId::DEFAULT, sizes, ContextId::NONE);
            }
            PoolEvent::InactiveSplit { .. }
            | PoolEvent::AllocRetry
            | PoolEvent::SyncAllStreams
            | PoolEvent::AdoptSegment { .. }
            | PoolEvent::AdoptBlock { .. } => {}
        }
    }
}
