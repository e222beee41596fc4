//! History recording for the [`CachingAllocator`]: turning it on and off
//! ([`CachingAllocator::record_memory_history`]), reading it back, and the event stamps (time
//! and context) each call gathers before it takes a device lock. With recording off a stamp is
//! one atomic load and one branch, so this stays off the hot path's cost.

use super::caching::{CachingAllocator, Shared};
use crate::backend::{Backend, DeviceIndex};
use crate::error::{Error, Result};
use crate::event::{
    AnnotationSink, Context, ContextId, ContextLevel, EventStamp, HistorySettings, TraceEvent,
};
use crate::pool::{PoolEvent, SegmentView};
use crate::trace::snapshot::{Block, Contexts, Segment, Snapshot};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

/// The process's time origin for event times, and the same moment on the kernel's monotonic
/// clock in nanoseconds (0 where [`coarse_now_ns`] has no coarse clock to read).
fn origin() -> &'static (Instant, u64) {
    static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
    BASE.get_or_init(|| (Instant::now(), monotonic_ns(false)))
}

/// The process's time origin for event times.
pub(super) fn clock_base() -> Instant {
    origin().0
}

/// Nanoseconds since [`clock_base`].
pub(super) fn now_ns() -> u64 {
    clock_base().elapsed().as_nanos() as u64
}

/// Nanoseconds since [`clock_base`] as of the kernel's last clock tick (up to a few
/// milliseconds behind [`now_ns`]), at a quarter of its cost: `CLOCK_MONOTONIC_COARSE`, the
/// timeline `Instant` reads. Good for ages of live allocations, not for event times. Elsewhere
/// than Linux it is [`now_ns`].
pub(super) fn coarse_now_ns() -> u64 {
    if cfg!(target_os = "linux") {
        monotonic_ns(true).saturating_sub(origin().1)
    } else {
        now_ns()
    }
}

#[cfg(target_os = "linux")]
fn monotonic_ns(coarse: bool) -> u64 {
    use rustix::time::{clock_gettime, ClockId};
    let clock = if coarse {
        ClockId::MonotonicCoarse
    } else {
        ClockId::Monotonic
    };
    let t = clock_gettime(clock);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

#[cfg(not(target_os = "linux"))]
fn monotonic_ns(_coarse: bool) -> u64 {
    0
}

const LEVELS: [ContextLevel; 4] = [
    ContextLevel::None,
    ContextLevel::State,
    ContextLevel::Alloc,
    ContextLevel::All,
];

impl<B: Backend> CachingAllocator<B> {
    /// Starts, reconfigures or stops recording the history of every device, as PyTorch's
    /// `torch.cuda.memory._record_memory_history`.
    ///
    /// Each device keeps its newest `settings.max_entries` events in a ring buffer; event times
    /// count microseconds from the call that turned recording on (reconfiguring keeps the
    /// origin and the newest events); an event's time is taken when its call starts, before
    /// it waits for the device lock, and is raised to the previous event's when a waiting
    /// thread brings an earlier one, so each history is in time order. `enabled: false` stops recording and clears every
    /// device's history. Which events carry a context is `settings.context` (see
    /// [`ContextLevel`]); contexts are the thread's [`annotate`](crate::annotate) tags, plus the
    /// call stack with [`Backtraces::Rust`](crate::event::Backtraces::Rust).
    ///
    /// `max_entries == 0` with `enabled` is refused with
    /// [`Error::InvalidHistorySettings`] and changes nothing (PyTorch clamps it to 1).
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::Action;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// drop(alloc.allocate(0, 4096, StreamId::DEFAULT)?);
    /// let actions: Vec<Action> = alloc.history(0)?.iter().map(|e| e.action).collect();
    /// assert_eq!(
    ///     actions,
    ///     [Action::SegmentAlloc, Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
    /// );
    /// alloc.record_memory_history(HistorySettings::DISABLED)?;
    /// assert!(alloc.history(0)?.is_empty(), "turning recording off clears the history");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_memory_history(&self, settings: HistorySettings) -> Result<()> {
        if settings.enabled && settings.max_entries == 0 {
            return Err(Error::InvalidHistorySettings {
                reason: "max_entries must be at least 1",
            });
        }
        let shared = &self.shared;
        let _serial = shared.history_settings.lock();
        let weak: Weak<Shared<B>> = Arc::downgrade(shared);
        let sink: Weak<dyn AnnotationSink> = weak;
        if settings.enabled {
            if shared.recording.load(Ordering::Acquire) == 0 {
                shared.recording_since_ns.store(now_ns(), Ordering::Release);
                let unix_us = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros() as u64);
                shared
                    .recording_since_unix_us
                    .store(unix_us, Ordering::Release);
            }
            let stacks = settings.stacks == crate::event::Backtraces::Rust;
            shared.stacks.store(stacks, Ordering::Release);
            shared
                .recording
                .store(settings.context as u8 + 1, Ordering::Release);
            for device in shared.devices.iter() {
                device.lock().record_history(&settings);
            }
            crate::event::register_sink(sink);
        } else {
            crate::event::unregister_sink(&sink);
            #[cfg(feature = "trace-files")]
            shared.end_stream();
            shared.recording.store(0, Ordering::Release);
            for device in shared.devices.iter() {
                device.lock().record_history(&settings);
            }
        }
        Ok(())
    }

    /// The recorded events of `device`, oldest first (empty when history is off;
    /// [`DeviceView::history`](crate::DeviceView::history)).
    pub fn history(&self, device: impl Into<DeviceIndex>) -> Result<Vec<TraceEvent>> {
        let device = device.into();
        Ok(self.device(device)?.history())
    }

    /// A snapshot of every device: segments with their blocks, the recorded history (empty
    /// when recording is off) and the contexts they refer to, renumbered within the snapshot;
    /// as PyTorch's `torch.cuda.memory._snapshot()`.
    ///
    /// While recording, each device first records a `snapshot` event whose size is its active
    /// bytes, as PyTorch does, so the trace shows when snapshots were taken.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::{Action, BlockState};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// let a = alloc.allocate(0, 1000, StreamId::DEFAULT)?;
    /// let snapshot = alloc.snapshot();
    /// let segment = &snapshot.segments[0];
    /// assert_eq!((segment.size, segment.blocks.len()), (2 << 20, 2));
    /// assert_eq!(segment.blocks[0].state, BlockState::ActiveAllocated);
    /// assert_eq!((segment.blocks[0].size, segment.blocks[0].requested), (1024, 1000));
    /// let actions: Vec<Action> = snapshot.events.iter().map(|e| e.action).collect();
    /// assert_eq!(actions, [Action::SegmentAlloc, Action::Alloc, Action::Snapshot]);
    /// # drop(a);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        let shared = &self.shared;
        let recording = shared.recording.load(Ordering::Acquire) != 0;
        let mut contexts = Contexts::new();
        let mut local: HashMap<ContextId, ContextId> = HashMap::new();
        let mut remap = |id: ContextId| -> ContextId {
            if id == ContextId::NONE {
                return id;
            }
            *local.entry(id).or_insert_with(|| {
                shared
                    .contexts
                    .get(id)
                    .map_or(ContextId::NONE, |c| contexts.intern(c))
            })
        };
        let mut segments = Vec::new();
        let mut events = Vec::new();
        for (device, allocator) in shared.devices.iter().enumerate() {
            let mut allocator = allocator.lock();
            let views = allocator.segments();
            if recording {
                let active = allocator.stats().active_bytes.all.current.max(0) as u64;
                allocator.observers.set_event_stamp(EventStamp {
                    time_us: shared.recording_time_us(),
                    context: ContextId::NONE,
                });
                allocator.observers.emit(PoolEvent::Snapshot { active });
            }
            let history = allocator.history();
            drop(allocator);
            push_segments(device as u32, views, &mut remap, &mut segments);
            events.extend(history.into_iter().map(|mut e| {
                e.context = remap(e.context);
                e
            }));
        }
        // Each device's history is in time order; a stable sort interleaves them by time.
        events.sort_by_key(|e| e.time_us);
        let origin = shared.recording_since_unix_us.load(Ordering::Acquire);
        Snapshot {
            segments,
            events,
            contexts,
            allocator_config: Some(shared.config.to_string()),
            time_origin_unix_us: (recording && origin != 0).then_some(origin),
            pytorch: Default::default(),
        }
    }

    /// The context an event refers to: its annotation tags and call stack. `None` for
    /// [`ContextId::NONE`] and ids never handed out. Each allocator interns its own contexts
    /// (up to [`DEFAULT_MAX_CONTEXTS`](crate::event::DEFAULT_MAX_CONTEXTS)), so an id means
    /// something in the allocator that recorded it only.
    pub fn context(&self, id: ContextId) -> Option<Context> {
        self.shared.contexts.get(id)
    }

    /// How many contexts were recorded without their call stack (or as none) because this
    /// allocator's table of contexts was full
    /// ([`DEFAULT_MAX_CONTEXTS`](crate::event::DEFAULT_MAX_CONTEXTS) distinct contexts).
    pub fn dropped_contexts(&self) -> u64 {
        self.shared.contexts.dropped()
    }
}

/// Appends `views` of `device` to `segments` as a snapshot has them, contexts mapped by
/// `remap`.
pub(super) fn push_segments(
    device: u32,
    views: Vec<SegmentView>,
    remap: &mut dyn FnMut(ContextId) -> ContextId,
    segments: &mut Vec<Segment>,
) {
    for view in views {
        let blocks: Vec<Block> = view
            .blocks
            .iter()
            .map(|b| Block {
                address: b.addr,
                size: b.size as u64,
                requested: b.requested as u64,
                state: b.state.into(),
                context: remap(b.context),
            })
            .collect();
        segments.push(Segment {
            device,
            address: view.addr,
            size: view.size as u64,
            stream: view.stream,
            pool: view.pool,
            expandable: view.is_expandable,
            context: remap(view.context),
            blocks,
        });
    }
}

impl<B: Backend> Shared<B> {
    /// The time and, when the recording level is at least `gather`, the context of a call, for
    /// the events it records. Gathered before taking a device lock: capturing a call stack is
    /// slow. With recording off this is one load and one branch.
    #[inline]
    pub(super) fn stamp(&self, gather: ContextLevel) -> EventStamp {
        self.recording_stamp(gather).unwrap_or_default()
    }

    /// [`Shared::stamp`], or `None` while history is not recorded.
    #[inline]
    pub(super) fn recording_stamp(&self, gather: ContextLevel) -> Option<EventStamp> {
        match self.recording.load(Ordering::Relaxed) {
            0 => None,
            state => Some(self.gather_stamp(state, gather)),
        }
    }

    #[inline(never)]
    fn gather_stamp(&self, state: u8, gather: ContextLevel) -> EventStamp {
        let level = LEVELS[usize::from(state - 1).min(LEVELS.len() - 1)];
        let context = if level >= gather {
            self.contexts.current(self.stacks.load(Ordering::Relaxed))
        } else {
            ContextId::NONE
        };
        EventStamp {
            time_us: self.recording_time_us(),
            context,
        }
    }

    /// Microseconds since recording started.
    pub(super) fn recording_time_us(&self) -> u64 {
        let since = self.recording_since_ns.load(Ordering::Relaxed);
        now_ns().saturating_sub(since) / 1000
    }
}

impl<B: Backend> AnnotationSink for Shared<B> {
    fn record_annotation(&self) {
        if self.recording.load(Ordering::Acquire) == 0 {
            return;
        }
        let context = self.contexts.current(self.stacks.load(Ordering::Relaxed));
        let stamp = EventStamp {
            time_us: self.recording_time_us(),
            context,
        };
        for device in self.devices.iter() {
            let mut device = device.lock();
            device.observers.set_event_stamp(stamp);
            device.observers.emit(PoolEvent::Annotate);
        }
    }
}
