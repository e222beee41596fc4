//! History recording settings and the bounded ring buffer that keeps each device's events.
//!
//! The settings mirror PyTorch's `torch.cuda.memory._record_memory_history(enabled, context,
//! stacks, max_entries)`. The ring buffer is PyTorch's `TraceEntryRingBuffer`: once full, each
//! new event overwrites the oldest.

use super::entry::{ContextId, TraceEvent};

/// Which events carry a context, as PyTorch's `context=` argument.
///
/// PyTorch gathers a context at `malloc` from `State` up and at `free` and `empty_cache` only
/// with `All`; trace events keep one from `Alloc` up. Here the same holds:
///
/// | level | live blocks ([`BlockView::context`]) | `alloc`, `segment_alloc`, `oom` | `free_requested`, `free_completed`, `segment_free` |
/// |---|---|---|---|
/// | `None` | no | no | no |
/// | `State` | the allocating call's | no | no |
/// | `Alloc` | the allocating call's | the allocating call's | the context of the block's (segment's) allocation, or of the `malloc` that caused the event |
/// | `All` | the allocating call's | the allocating call's | the context of the call that caused the event (`free`, `empty_cache`, `malloc`) |
///
/// `annotate` events always carry theirs: the tag stack is what they record.
///
/// [`BlockView::context`]: crate::pool::BlockView::context
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContextLevel {
    /// Record no context (PyTorch's `context=None`).
    None,
    /// Keep the context of what is alive: each live block remembers its allocating call's
    /// (PyTorch's `"state"`).
    State,
    /// Also give every allocation-side event a context (PyTorch's `"alloc"`).
    Alloc,
    /// Also gather the context of `free` and `empty_cache` calls for their events (PyTorch's
    /// `"all"`, its default).
    #[default]
    All,
}

/// Whether contexts include the call stack, as PyTorch's `stacks=` argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backtraces {
    /// Annotation tags only: no stack is captured (cheap; the default).
    #[default]
    None,
    /// Also capture the Rust call stack (`std::backtrace::Backtrace::force_capture`) for every
    /// context gathered: microseconds per event, and frames have names and lines only where
    /// the binary has debug info.
    Rust,
}

/// What [`CachingAllocator::record_memory_history`](crate::CachingAllocator::record_memory_history)
/// turns on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistorySettings {
    /// Record events (`true`), or stop recording and clear every device's history (`false`,
    /// the other fields are then ignored).
    pub enabled: bool,
    /// Which events carry a context.
    pub context: ContextLevel,
    /// Maximum events kept per device; once reached, each new event overwrites the oldest.
    /// Must be at least 1 (PyTorch silently clamps 0 to 1; here it is an error).
    pub max_entries: usize,
    /// Whether contexts include the call stack.
    pub stacks: Backtraces,
}

impl Default for HistorySettings {
    /// PyTorch's defaults (`enabled="all", context="all", max_entries=sys.maxsize`), without
    /// call stacks.
    fn default() -> Self {
        HistorySettings {
            enabled: true,
            context: ContextLevel::All,
            max_entries: usize::MAX,
            stacks: Backtraces::None,
        }
    }
}

impl HistorySettings {
    /// Recording off: [`record_memory_history`](crate::CachingAllocator::record_memory_history)
    /// with these stops recording and clears the history.
    pub const DISABLED: HistorySettings = HistorySettings {
        enabled: false,
        context: ContextLevel::None,
        max_entries: 1,
        stacks: Backtraces::None,
    };
}

/// The time and context of one allocator call, gathered by the caller before it takes the
/// device lock (as PyTorch gathers context before taking its mutex); the events the call
/// records carry them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventStamp {
    /// Microseconds since recording was enabled.
    pub time_us: u64,
    /// Context of the call ([`ContextId::NONE`] when none was gathered).
    pub context: ContextId,
}

/// A bounded buffer of events: oldest overwritten first once `max_entries` are held.
#[derive(Clone, Debug)]
pub(crate) struct TraceRing {
    events: Vec<TraceEvent>,
    /// Index of the oldest event once the buffer is full (the next to be overwritten).
    next: usize,
    max_entries: usize,
}

impl TraceRing {
    /// An empty ring keeping at most `max_entries` (at least 1) events.
    pub fn new(max_entries: usize) -> TraceRing {
        TraceRing {
            events: Vec::new(),
            next: 0,
            max_entries: max_entries.max(1),
        }
    }

    /// Appends `event`, overwriting the oldest when full.
    #[inline]
    pub fn push(&mut self, event: TraceEvent) {
        if self.events.len() < self.max_entries {
            self.events.push(event);
        } else {
            self.events[self.next] = event;
            // A compare, not `%`: a division would cost more than the rest of the push.
            self.next += 1;
            if self.next == self.max_entries {
                self.next = 0;
            }
        }
    }

    /// The events, oldest first.
    pub fn to_vec(&self) -> Vec<TraceEvent> {
        let (newer, older) = self.events.split_at(self.next);
        older.iter().chain(newer).copied().collect()
    }

    /// Keeps the newest `max_entries` (at least 1) events and bounds the ring by it from now.
    pub fn set_max_entries(&mut self, max_entries: usize) {
        let mut events = self.to_vec();
        let max_entries = max_entries.max(1);
        if events.len() > max_entries {
            events.drain(..events.len() - max_entries);
        }
        *self = TraceRing {
            events,
            next: 0,
            max_entries,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StreamId;
    use crate::event::Action;

    fn event(addr: u64) -> TraceEvent {
        TraceEvent {
            action: Action::Alloc,
            device: 0,
            stream: StreamId::DEFAULT,
            addr,
            size: 512,
            requested: 512,
            time_us: addr,
            context: ContextId::NONE,
        }
    }

    fn addrs(ring: &TraceRing) -> Vec<u64> {
        ring.to_vec().iter().map(|e| e.addr).collect()
    }

    #[test]
    fn full_ring_overwrites_the_oldest_and_reads_oldest_first() {
        let mut ring = TraceRing::new(3);
        for addr in 1..=2 {
            ring.push(event(addr));
        }
        assert_eq!(addrs(&ring), [1, 2], "a ring not yet full keeps everything");
        for addr in 3..=7 {
            ring.push(event(addr));
        }
        assert_eq!(addrs(&ring), [5, 6, 7], "the three newest, oldest first");
    }

    #[test]
    fn shrinking_keeps_the_newest() {
        let mut ring = TraceRing::new(4);
        for addr in 1..=6 {
            ring.push(event(addr));
        }
        ring.set_max_entries(2);
        assert_eq!(addrs(&ring), [5, 6]);
        ring.push(event(7));
        assert_eq!(
            addrs(&ring),
            [6, 7],
            "the new bound applies to later events"
        );
        ring.set_max_entries(0);
        assert_eq!(addrs(&ring), [7], "a bound of 0 is clamped to 1");
    }
}
