//! The pool's one event interface, and the observers that keep what it tells.
//!
//! The pool says what happened, as a [`PoolEvent`], at the places PyTorch's allocator records
//! its trace events (`alloc`, `free_requested`, `free_completed`, `segment_alloc`, ...), plus
//! the few changes of its bookkeeping that only statistics count (inactive split blocks, retries,
//! adoption). It holds no counting or recording code of its own: the statistics
//! (`stats.rs`) and the history (`history.rs`) are [`PoolObserver`]s of these events, as RMM's
//! statistics, tracking and logging adaptors observe its resource; so is the table of live
//! allocations of leak tracking (`live.rs`), which takes each allocation's origin from its
//! call ([`Observers::set_call`]).
//!
//! Events are plain values built at the emit site and matched inline: each observer's match
//! on a variant known there folds to the few stores it makes, so the cache-hit path costs what
//! the counting woven into it did (benches/README.md, "The pool's events and observers").

mod history;
mod live;
mod stats;

pub(crate) use history::History;
pub(crate) use live::LiveRecord;

use super::block::BlockId;
use crate::backend::{DeviceIndex, StreamId};
use crate::event::{ContextId, EventStamp, HistorySettings, TraceEvent};
use crate::leak::{LiveTable, Origin};
use crate::stats::DeviceStats;

/// Where an event happened: the stream, the memory and its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub stream: StreamId,
    /// Device address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub size: usize,
    /// Whether the memory belongs to the small pool.
    pub small: bool,
}

/// What happened in one device's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolEvent {
    /// Block `block` was handed out for `requested` bytes (`alloc`), as allocation number
    /// `alloc_id` of the device.
    Alloc {
        block: BlockId,
        alloc_id: u64,
        at: Place,
        requested: usize,
        /// Whether the block is oversize (the policy's `is_oversize`).
        oversize: bool,
    },
    /// The free of an allocated block was asked for; it stops counting as allocated, and
    /// its memory returns to the cache now or once the streams that used it are done
    /// (`free_requested`).
    FreeRequested {
        block: BlockId,
        at: Place,
        requested: usize,
        oversize: bool,
    },
    /// A freed block returned to the cache, before merging with its neighbours; it stops
    /// counting as active (`free_completed`).
    FreeCompleted {
        block: BlockId,
        at: Place,
        requested: usize,
    },
    /// The device gave a fixed segment (`segment_alloc`).
    SegmentAlloc { at: Place, oversize: bool },
    /// A fixed segment went back to the device; `context` is the one it kept
    /// (`segment_free`).
    SegmentFree {
        at: Place,
        oversize: bool,
        context: ContextId,
    },
    /// Memory was mapped into an expandable segment (`segment_map`).
    SegmentMap { at: Place },
    /// Memory of an expandable segment was unmapped; `context` is the segment's
    /// (`segment_unmap`).
    SegmentUnmap { at: Place, context: ContextId },
    /// A request of `rounded` bytes failed with `free_bytes` free on the device (`oom`).
    Oom {
        stream: StreamId,
        free_bytes: usize,
        rounded: usize,
    },
    /// A snapshot was taken with `active` bytes in active blocks (`snapshot`).
    Snapshot { active: u64 },
    /// The thread's annotation tags changed (the call's stamp carries the new context).
    Annotate,
    /// The free split blocks (other than in expandable segments) changed by `blocks` and
    /// `bytes`, either of which may be negative: no trace event.
    InactiveSplit {
        small: bool,
        blocks: i64,
        bytes: i64,
    },
    /// The device was asked again after every cached segment was released: no trace event.
    AllocRetry,
    /// Every outstanding event was waited for: no trace event.
    SyncAllStreams,
    /// A segment allocated elsewhere (PyTorch's, through the C ABI) was adopted: counted as
    /// a segment, never as a device call, and not traced.
    AdoptSegment { at: Place, oversize: bool },
    /// A live block of an adopted segment: counted as an allocation, not traced, and with
    /// no origin of its own for the live table.
    AdoptBlock {
        block: BlockId,
        at: Place,
        requested: usize,
        oversize: bool,
    },
}

/// Something that keeps what the pool's events tell.
pub(crate) trait PoolObserver {
    /// Takes in `event`, which already happened.
    fn observe(&mut self, event: &PoolEvent);
}

/// The observers one device's pool tells: its statistics, its live table (which records
/// nothing while leak tracking is off), and its history while recording.
#[derive(Debug)]
pub(crate) struct Observers {
    stats: DeviceStats,
    live: LiveTable,
    /// `None` while history is off (boxed: it is rarely on).
    history: Option<Box<History>>,
}

impl Observers {
    /// Observers with these starting statistics and no history.
    pub(crate) fn new(stats: DeviceStats) -> Self {
        Observers {
            stats,
            live: LiveTable::default(),
            history: None,
        }
    }

    /// Tells every observer `event`.
    #[inline(always)]
    pub(crate) fn emit(&mut self, event: PoolEvent) {
        self.stats.observe(&event);
        self.live.observe(&event);
        if let Some(history) = self.history.as_deref_mut() {
            history.observe(&event);
        }
    }

    /// The statistics the events have counted.
    pub(crate) fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// Mutable statistics, for the allocator's peak and accumulated resets only.
    pub(crate) fn stats_mut(&mut self) -> &mut DeviceStats {
        &mut self.stats
    }

    /// Starts, reconfigures or stops recording the history of `device`. Starting keeps no
    /// earlier events; reconfiguring keeps the newest `max_entries` of them; stopping drops
    /// the history and block contexts.
    pub(crate) fn record_history(&mut self, device: DeviceIndex, settings: &HistorySettings) {
        if !settings.enabled {
            self.history = None;
            return;
        }
        match self.history.as_deref_mut() {
            Some(history) => history.reconfigure(settings),
            None => self.history = Some(Box::new(History::new(device, settings))),
        }
    }

    /// The recorded events, oldest first (empty when not recording).
    pub(crate) fn history(&self) -> Vec<TraceEvent> {
        self.history
            .as_deref()
            .map_or_else(Vec::new, History::events)
    }

    /// The history while recording, for streaming it to a file.
    #[cfg_attr(not(feature = "trace-files"), allow(dead_code))]
    pub(crate) fn history_mut(&mut self) -> Option<&mut History> {
        self.history.as_deref_mut()
    }

    /// Sets the time and context of the call about to run: the events it emits carry them.
    #[inline]
    pub(crate) fn set_event_stamp(&mut self, stamp: EventStamp) {
        if let Some(history) = self.history.as_deref_mut() {
            history.set_stamp(stamp);
        }
    }

    /// Sets the stamp of an allocating call about to run, and the origin its allocation is
    /// recorded with in the live table (`None`: not recorded, leak tracking is off). A call
    /// sets both again each time it takes the device lock.
    #[inline(always)]
    pub(crate) fn set_call(&mut self, stamp: EventStamp, origin: Option<Origin>) {
        self.set_event_stamp(stamp);
        self.live.set_call(origin);
    }

    /// The table of live allocations.
    pub(crate) fn live(&self) -> &LiveTable {
        &self.live
    }

    /// The table of live allocations, for naming, scopes and clearing.
    pub(crate) fn live_mut(&mut self) -> &mut LiveTable {
        &mut self.live
    }

    /// The allocation context of the allocated or pending block `id` (none when not recorded).
    pub(crate) fn block_context(&self, id: BlockId) -> ContextId {
        self.history
            .as_deref()
            .map_or(ContextId::NONE, |h| h.block_context(id))
    }

    /// The context a new segment keeps, for its `segment_free` or `segment_unmap` event.
    #[inline]
    pub(crate) fn segment_context(&self) -> ContextId {
        self.history
            .as_deref()
            .map_or(ContextId::NONE, History::keep_context)
    }
}

#[cfg(test)]
mod tests;
