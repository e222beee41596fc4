//! [`StateWalker`]: a device's state moved event by event, either way, with running totals;
//! and [`Snapshot::state_at`], one state on its own.

use super::change::Change;
use super::error::StateError;
use super::memory::{DeviceState, Memory, MemoryTotals};
use super::undo::{rebuild, Rebuilt};
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{Snapshot, TraceEvent};
use std::sync::Arc;

impl Snapshot {
    /// The memory of `device` after its first `index` events: 0 is before any recorded event
    /// (with the allocations and segments made before the trace began), the number of the
    /// device's events is the end state.
    ///
    /// The trace is walked back from the end state, as PyTorch's viewer does (see
    /// [`StateWalker`] for what is tolerated); this costs one pass over the device's events,
    /// so for many indices walk a [`StateWalker`] instead.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::BlockState;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let before = alloc.allocate(0, 1000, StreamId::DEFAULT)?;
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// drop(before);
    /// let snapshot = alloc.snapshot();
    /// // Events: free_requested, free_completed, snapshot.
    /// let start = snapshot.state_at(0, 0)?;
    /// let block = &start.segments[0].blocks[0];
    /// assert_eq!((block.size, block.requested, block.state), (1024, 1000, BlockState::ActiveAllocated));
    /// let end = snapshot.state_at(0, 3)?;
    /// assert_eq!(end.segments, snapshot.segments);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn state_at(&self, device: u32, index: usize) -> Result<DeviceState, StateError> {
        let mut walker = self.state_walker(device)?;
        walker.seek(index)?;
        Ok(walker.state())
    }

    /// A [`StateWalker`] over the events of `device`, at index 0.
    pub fn state_walker(&self, device: u32) -> Result<StateWalker, StateError> {
        StateWalker::new(self, device)
    }
}

/// Events from which [`StateWalker::new`] copies a one-device trace's events on a second
/// thread while it rebuilds the states (below, a thread costs more than it saves).
pub(super) const COPY_BESIDE_FROM: usize = 1 << 20;

/// The memory of one device at an event index of a [`Snapshot`], moved one event at a time
/// in either direction, with running [`MemoryTotals`].
///
/// Building one walks the device's events back from the end state (PyTorch's viewer,
/// `MemoryViz.js`, does the same) and keeps what each event changed; after that, moving to
/// any index costs one step per event between (from where the walker is or from the end
/// state), and stepping cannot fail. Memory is bounded by the device's live blocks and
/// segments, now and at the end, plus one small record per event.
///
/// What is tolerated, as the viewer tolerates it:
/// - allocations and segments made before the trace began (a ring buffer keeps only the
///   newest events): they are live at index 0;
/// - blocks and segments the events leave live that the end state does not show (RMM logs
///   have no end state): they are added to it, so they show from their `alloc` on;
/// - sizes that differ between an event and the block it names (PyTorch's events carry the
///   requested size): a block keeps the size of the end state or of the event restoring it.
///
/// A block has its allocation's context for its whole life, taken from its `alloc` event
/// (a free event may carry the free call's); a block allocated before the trace began has only
/// its free event's context, as in PyTorch's viewer.
///
/// Anything else the events and the end state disagree on (two live blocks overlapping, a
/// block live after its free, a segment freed or never allocated with live blocks in it) is a
/// [`StateError::Contradiction`] naming the event.
///
/// A clone shares the events, the changes and the end state with the original (they never
/// change) and copies only the current state: walking a clone costs what walking the original
/// does, and no second pass over the trace.
#[derive(Clone, Debug)]
pub struct StateWalker {
    device: u32,
    memory: Memory,
    /// The state after the last event, where a seek near the end starts from.
    end: Arc<Memory>,
    events: Arc<Vec<TraceEvent>>,
    changes: Arc<Vec<Change>>,
    position: usize,
}

impl StateWalker {
    /// The walker over the events of `device` in `snapshot`, at index 0. A device with no
    /// segments and no events gives an empty walker.
    pub fn new(snapshot: &Snapshot, device: u32) -> Result<StateWalker, StateError> {
        let all = &snapshot.events;
        if all.len() < COPY_BESIDE_FROM || all.iter().any(|e| e.device != device) {
            let events: Vec<TraceEvent> = snapshot.device_events(device).copied().collect();
            return Self::from_events(device, snapshot.device_segments(device), events);
        }
        // Every event is the device's: the walker's copy of them is made on a second thread
        // while the states are rebuilt from the snapshot's own.
        let (events, rebuilt) = std::thread::scope(|scope| {
            let copy = scope.spawn(|| all.clone());
            let rebuilt = rebuild(device, snapshot.device_segments(device), all);
            let events = copy
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (events, rebuilt)
        });
        Ok(Self::rebuilt(device, events, rebuilt?))
    }

    /// The walker over `events` of `device` whose segments at the end are `end_segments`, at
    /// index 0, taking the events instead of copying them (a caller done with its snapshot's
    /// events saves their memory). Events and segments of other devices are left out, as
    /// [`new`](Self::new) leaves them out.
    pub fn from_events<'a>(
        device: u32,
        end_segments: impl Iterator<Item = &'a Segment>,
        mut events: Vec<TraceEvent>,
    ) -> Result<StateWalker, StateError> {
        events.retain(|e| e.device == device);
        let rebuilt = rebuild(device, end_segments.filter(|s| s.device == device), &events)?;
        Ok(Self::rebuilt(device, events, rebuilt))
    }

    /// The walker at index 0 over `events`, whose states `rebuilt` holds.
    fn rebuilt(device: u32, events: Vec<TraceEvent>, rebuilt: Rebuilt) -> StateWalker {
        StateWalker {
            device,
            memory: rebuilt.start,
            end: Arc::new(rebuilt.end),
            events: Arc::new(events),
            changes: Arc::new(rebuilt.changes),
            position: 0,
        }
    }

    /// The device index.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// How many of the device's events have been applied: the index of the current state.
    pub fn position(&self) -> usize {
        self.position
    }

    /// How many events the device has; its states are numbered 0 to this.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the device has no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The device's events, oldest first.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Applies the next event and returns it; `None` (and no change) at the end.
    pub fn step(&mut self) -> Option<&TraceEvent> {
        let change = self.changes.get(self.position)?;
        change.apply(&mut self.memory, true);
        self.position += 1;
        self.events.get(self.position - 1)
    }

    /// Undoes the last applied event and returns it; `None` (and no change) at index 0.
    pub fn step_back(&mut self) -> Option<&TraceEvent> {
        let index = self.position.checked_sub(1)?;
        let change = self.changes.get(index)?;
        change.apply(&mut self.memory, false);
        self.position = index;
        self.events.get(index)
    }

    /// Moves to the state after the first `index` events, stepping either way from where it
    /// is, or back from the end state when that is less work (a copy of the end state costs
    /// about a step per live block and segment).
    pub fn seek(&mut self, index: usize) -> Result<(), StateError> {
        if index > self.len() {
            return Err(StateError::IndexOutOfRange {
                device: self.device,
                index,
                events: self.len(),
            });
        }
        let from_end = (self.len() - index).saturating_add(self.end.live());
        if from_end < index.abs_diff(self.position) {
            self.memory = Memory::clone(&self.end);
            self.position = self.len();
        }
        while self.position < index && self.step().is_some() {}
        while self.position > index && self.step_back().is_some() {}
        Ok(())
    }

    /// The totals after each event from the current position on (the first is after the
    /// event [`step`](Self::step) would apply next), without moving or changing the state:
    /// only the totals are carried from change to change, so a whole trace's curves cost a
    /// pass over numbers rather than over the live blocks.
    pub fn totals_ahead(&self) -> impl Iterator<Item = MemoryTotals> + '_ {
        self.blocks_ahead().map(|(totals, _)| totals)
    }

    /// As [`totals_ahead`](Self::totals_ahead), each with the size of the active block the
    /// event changed (the block it allocated, freed or made pending; `None` when it changed
    /// segments or nothing): per-event figures of a whole trace without moving the state.
    pub fn blocks_ahead(&self) -> impl Iterator<Item = (MemoryTotals, Option<u64>)> + '_ {
        let mut totals = self.memory.totals;
        self.changes[self.position.min(self.changes.len())..]
            .iter()
            .map(move |change| {
                change.apply_to_totals(&mut totals);
                (totals, change.block_size())
            })
    }

    /// The totals of the current state.
    pub fn totals(&self) -> MemoryTotals {
        self.memory.totals
    }

    /// The active block (allocated or pending free) at `address` in the current state, as
    /// [`state`](Self::state) shows it, without a pass over the others: after an `alloc`
    /// event, the block it handed out, its size as the end state knows it when it lives on
    /// there.
    pub fn active_block(&self, address: u64) -> Option<Block> {
        self.memory.blocks.get(&address).map(|block| Block {
            address,
            size: block.size,
            requested: block.requested,
            state: block.state,
            context: block.context,
        })
    }

    /// The current state, tiled; this costs one pass over the live blocks and segments.
    pub fn state(&self) -> DeviceState {
        self.memory.device_state(self.device)
    }
}
