//! History recording inside one device's allocator: the ring buffer of events and the
//! contexts of live blocks, kept under the device lock the allocator already holds.
//!
//! The caller gathers the time and context of each call before taking the lock and hands them
//! over with [`DeviceAllocator::set_event_stamp`]; the events the call then records (at the
//! places PyTorch calls `record_trace`) carry them. With recording off, each of those places
//! costs one predictable branch on `history.is_none()`.
//!
//! While the history is streamed to a file, each event is also appended to a buffer that the
//! stream's writer thread swaps out (`take_streamed`): a push under the lock already held, no
//! I/O and, once the buffer has grown, no allocation.

use super::block::BlockId;
use super::device::DeviceAllocator;
use crate::backend::StreamId;
use crate::event::{
    Action, ContextId, ContextLevel, EventStamp, HistorySettings, TraceEvent, TraceRing,
};

/// What a recording device keeps.
#[derive(Debug)]
pub(crate) struct History {
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
    fn keep_context(&self) -> ContextId {
        if self.level >= ContextLevel::State {
            self.now.context
        } else {
            ContextId::NONE
        }
    }
}

impl<E> DeviceAllocator<E> {
    /// Starts, reconfigures or stops recording. Starting keeps no earlier events; reconfiguring
    /// keeps the newest `max_entries` of them; stopping drops the history and block contexts.
    pub fn record_history(&mut self, settings: &HistorySettings) {
        if !settings.enabled {
            self.history = None;
            return;
        }
        match self.history.as_deref_mut() {
            Some(history) => {
                history.ring.set_max_entries(settings.max_entries);
                history.level = settings.context;
            }
            None => {
                self.history = Some(Box::new(History {
                    ring: TraceRing::new(settings.max_entries),
                    level: settings.context,
                    now: EventStamp::default(),
                    last_time_us: 0,
                    block_context: Vec::new(),
                    streamed: None,
                    stream_dropped: 0,
                }))
            }
        }
    }

    /// The recorded events, oldest first (empty when not recording).
    pub fn history(&self) -> Vec<TraceEvent> {
        self.history
            .as_deref()
            .map_or_else(Vec::new, |h| h.ring.to_vec())
    }

    /// Sets the time and context of the call about to run: the events it records carry them.
    #[inline]
    pub fn set_event_stamp(&mut self, stamp: EventStamp) {
        if let Some(history) = self.history.as_deref_mut() {
            history.now = stamp;
        }
    }

    /// Records an `annotate` event stamped `stamp` (its context is the new tag stack).
    pub fn record_annotation(&mut self, stamp: EventStamp) {
        self.set_event_stamp(stamp);
        self.record(
            Action::Annotate,
            StreamId::DEFAULT,
            (0, 0, 0),
            ContextId::NONE,
        );
    }

    /// The allocation context of the allocated or pending block `id` (none when not recorded).
    pub(crate) fn block_context(&self, id: BlockId) -> ContextId {
        self.history
            .as_deref()
            .and_then(|h| h.block_context.get(id.index()).copied())
            .unwrap_or_default()
    }

    /// The context a new segment keeps, for its `segment_free` event.
    #[inline]
    pub(crate) fn segment_context(&self) -> ContextId {
        self.history
            .as_deref()
            .map_or(ContextId::NONE, History::keep_context)
    }

    /// Records `action` with `(addr, size, requested)`; `fallback` is the context to use when
    /// the call gathered none.
    #[inline]
    pub(crate) fn record(
        &mut self,
        action: Action,
        stream: StreamId,
        (addr, size, requested): (u64, u64, u64),
        fallback: ContextId,
    ) {
        if let Some(history) = self.history.as_deref_mut() {
            // Stamps are taken before the lock, so a thread that waited for it may bring an
            // earlier time than the last event's; the history stays in time order.
            history.last_time_us = history.last_time_us.max(history.now.time_us);
            let event = TraceEvent {
                action,
                device: self.device.get() as u32,
                stream,
                addr,
                size,
                requested,
                time_us: history.last_time_us,
                context: history.context(action, fallback),
            };
            history.ring.push(event);
            if let Some(streamed) = &mut history.streamed {
                if streamed.len() < MAX_STREAM_BUFFER {
                    streamed.push(event);
                } else {
                    history.stream_dropped += 1;
                }
            }
        }
    }

    /// Starts buffering every event recorded from now on for a stream (nothing while not
    /// recording).
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn start_streaming(&mut self) {
        if let Some(history) = self.history.as_deref_mut() {
            history.streamed = Some(Vec::new());
            history.stream_dropped = 0;
        }
    }

    /// Swaps the events buffered for the stream with `buffer` (which should be empty, so its
    /// capacity is reused); returns how many were dropped since the last take.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn take_streamed(&mut self, buffer: &mut Vec<TraceEvent>) -> u64 {
        match self.history.as_deref_mut() {
            Some(History {
                streamed: Some(streamed),
                stream_dropped,
                ..
            }) => {
                std::mem::swap(streamed, buffer);
                std::mem::take(stream_dropped)
            }
            _ => 0,
        }
    }

    /// Stops buffering for the stream, appending the last buffered events to `buffer`;
    /// returns how many were dropped since the last take.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn stop_streaming(&mut self, buffer: &mut Vec<TraceEvent>) -> u64 {
        match self.history.as_deref_mut() {
            Some(history) => {
                if let Some(mut streamed) = history.streamed.take() {
                    buffer.append(&mut streamed);
                }
                std::mem::take(&mut history.stream_dropped)
            }
            None => 0,
        }
    }

    /// Records the `alloc` of block `id` and remembers its context while it lives.
    #[inline]
    pub(crate) fn record_alloc(&mut self, id: BlockId, stream: StreamId, sizes: (u64, u64, u64)) {
        if let Some(history) = self.history.as_deref_mut() {
            let keep = history.keep_context();
            let index = id.index();
            if keep != ContextId::NONE || index < history.block_context.len() {
                if index >= history.block_context.len() {
                    history.block_context.resize(index + 1, ContextId::NONE);
                }
                history.block_context[index] = keep;
            }
            self.record(Action::Alloc, stream, sizes, ContextId::NONE);
        }
    }

    /// Records `free_completed` for block `id` and forgets its context.
    #[inline]
    pub(crate) fn record_free_completed(
        &mut self,
        id: BlockId,
        stream: StreamId,
        sizes: (u64, u64, u64),
    ) {
        if self.history.is_some() {
            let context = self.block_context(id);
            self.record(Action::FreeCompleted, stream, sizes, context);
            if let Some(slot) = self
                .history
                .as_deref_mut()
                .and_then(|h| h.block_context.get_mut(id.index()))
            {
                *slot = ContextId::NONE;
            }
        }
    }
}
