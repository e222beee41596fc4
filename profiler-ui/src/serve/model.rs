//! The trace as the viewer holds it, computed once at start: per device, every allocation's
//! lifetime in state indices, the memory curves at every state, the time of every state, and a
//! [`StateWalker`] for the allocator's segments and blocks at any event.
//!
//! State `i` is the memory after the device's first `i` events (0: before any; the number of
//! events: the end), as everywhere in blockpool's trace tools.

use super::error::ServeError;
use super::joined;
use super::lod::{self, Series};
use crate::analysis::frames::FrameView;
use crate::analysis::leaks::{find_leaks_from, LeakOptions, LeakReport};
use crate::analysis::sites::{site_name, BEFORE_RECORDING};
use crate::analysis::summary::{summarize_device_from, SummaryReport};
use blockpool::trace::perfetto::{annotation_intervals, AnnotationInterval};
use blockpool::trace::{
    Action, ContextId, DeviceState, Snapshot, StateError, StateWalker, TraceEvent,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Leak reports with other than the default options a device keeps at once.
const MAX_LEAK_REPORTS: usize = 16;

/// One allocation: a block from its `alloc` event (or from before the trace) to its
/// `free_completed` event (or past the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Device address.
    pub addr: u64,
    /// Block size in bytes.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Stream handle.
    pub stream: u64,
    /// Context of the allocating call.
    pub context: ContextId,
    /// First state the block is alive in: 0 for a block allocated before the trace began.
    pub start: usize,
    /// First state it is no longer alive in; `events + 1` for a block alive at the end.
    pub end: usize,
}

/// Memory of one device at every state, `events + 1` values each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Curves {
    /// Bytes in allocated blocks.
    pub allocated: Series,
    /// Bytes in segments.
    pub reserved: Series,
    /// Bytes the callers of active blocks asked for.
    pub requested: Series,
    /// Bytes in active blocks (allocated or pending free).
    pub active: Series,
}

impl Curves {
    /// The curves of `walker`'s device, from its totals alone (it ends at index 0).
    pub fn of(walker: &mut StateWalker) -> Result<Curves, StateError> {
        walker.seek(0)?;
        let states = walker.len().saturating_add(1);
        let column = || Vec::with_capacity(states);
        let (mut allocated, mut reserved, mut requested, mut active) =
            (column(), column(), column(), column());
        for totals in std::iter::once(walker.totals()).chain(walker.totals_ahead()) {
            allocated.push(totals.allocated_bytes);
            reserved.push(totals.reserved_bytes);
            requested.push(totals.requested_bytes);
            active.push(totals.active_bytes);
        }
        Ok(Curves {
            allocated: allocated.into(),
            reserved: reserved.into(),
            requested: requested.into(),
            active: active.into(),
        })
    }

    /// The first state where allocated bytes are highest (0 when there are none).
    pub fn allocated_peak(&self) -> usize {
        self.allocated.peak(0, self.allocated.len())
    }
}

/// Everything the viewer shows of one device.
#[derive(Debug)]
pub struct DeviceModel {
    /// Device index.
    pub device: u32,
    /// Recorded events.
    pub events: usize,
    /// Time of each state in microseconds since the origin: the time of its last event (of the
    /// first event for state 0), never decreasing.
    pub state_time_us: Vec<u64>,
    /// Memory at every state.
    pub curves: Curves,
    /// Every allocation, in the order they became alive (by `start`, then address order for
    /// those alive from the start); an allocation's id is its index here.
    pub allocations: Vec<Allocation>,
    /// The state where allocated bytes first peak.
    pub peak_index: usize,
    /// The device's event numbers: the file's indices (PyTorch's `device_traces`), which the
    /// page shows, beside the state indices the API takes.
    pub numbers: blockpool::trace::EventNumbers,
    /// Annotation intervals, ordered by start.
    pub annotations: Vec<AnnotationInterval>,
    /// Leaks with the default options ([`LeakOptions::default`]: sites named by the user's own
    /// code, `ProfilerStep#` steps): growing, persistent, and alive at the end.
    pub leaks: Arc<LeakReport>,
    /// Leak reports with other options, made when first asked for.
    pub leaks_by_options: Mutex<HashMap<LeakOptions, Arc<LeakReport>>>,
    /// Streams that allocations were made on, ascending.
    pub streams: Vec<u64>,
    /// Reserved memory as lifetimes, one per segment (or mapped range of an expandable
    /// segment) from the event that reserved it to the one that released it, in the order
    /// they became reserved; `requested` is 0. See [`segment_spans`].
    pub segments: Vec<Allocation>,
    /// Bytes of the allocations alive at each state, and of the segments reserved: what a
    /// timeline window with nothing filtered out shows ([`lod::alive_bytes`]).
    pub allocation_bytes: Series,
    /// See [`allocation_bytes`](Self::allocation_bytes).
    pub segment_bytes: Series,
    /// Whether the events carry times (the last state's time is after the first's); without
    /// them only the event axis means anything.
    pub has_times: bool,
    /// Moves to any state for the segment view; one request at a time uses it.
    pub walker: Mutex<StateWalker>,
}

/// Per context id: the texts a search matches, lowercased, and the site name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContextText {
    /// Tags joined by `/`.
    pub tags: String,
    /// Frames, one `name file:line` per line, innermost first.
    pub stack: String,
    /// The site name, as the tables show it (not lowercased).
    pub site: String,
}

/// A loaded trace and what the viewer computed from it.
#[derive(Debug)]
pub struct TraceModel {
    /// The file, as given on the command line.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The trace.
    pub snapshot: Snapshot,
    /// Each device with segments or events, ascending.
    pub devices: Vec<DeviceModel>,
    /// Index `n` describes `ContextId(n)`; index 0 is "no context".
    pub contexts: Vec<ContextText>,
    /// `memtrace summary`'s report.
    pub summary: SummaryReport,
}

impl TraceModel {
    /// Computes everything the viewer serves from `snapshot`.
    pub fn build(
        file: &Path,
        format: &'static str,
        snapshot: Snapshot,
    ) -> Result<TraceModel, ServeError> {
        // Each device's states are rebuilt once; the model, its curves, its leaks and its
        // summary each walk a clone of that walker.
        let mut devices = Vec::new();
        let mut summaries = Vec::new();
        for (device, part) in snapshot.by_device() {
            let walker = part
                .state_walker(device)
                .map_err(|source| ServeError::State { device, source })?;
            // The summary and the leak report walk clones of the walker on threads of their
            // own while this one makes the rest: they share nothing but the recorded changes.
            let (summary_walker, leaks_walker) = (walker.clone(), walker.clone());
            let (summary, model) = std::thread::scope(|scope| {
                let summary = scope.spawn(|| {
                    summarize_device_from(&part, device, FrameView::User, summary_walker)
                });
                let leaks = scope.spawn(|| {
                    find_leaks_from(&part, device, &LeakOptions::default(), leaks_walker)
                });
                let model = build_device(&part, device, walker, || joined(leaks));
                (joined(summary), model)
            });
            let model = model?;
            summaries.push(summary?);
            devices.push(model);
        }
        let contexts = context_texts(&snapshot);
        let summary = SummaryReport {
            file: file.display().to_string(),
            format,
            devices: summaries,
        };
        Ok(TraceModel {
            file: file.display().to_string(),
            format,
            snapshot,
            devices,
            contexts,
            summary,
        })
    }

    /// The device `device`, or the first when `None`.
    pub fn device(&self, device: Option<u32>) -> Option<&DeviceModel> {
        match device {
            None => self.devices.first(),
            Some(d) => self.devices.iter().find(|m| m.device == d),
        }
    }

    /// The site of `allocation` as the page names it: its context's, or
    /// [`BEFORE_RECORDING`] for a block alive before the first event with no recorded stack.
    pub fn allocation_site(&self, allocation: &Allocation) -> &str {
        let recorded = self
            .snapshot
            .contexts
            .get(allocation.context)
            .is_some_and(|c| !c.tags.is_empty() || !c.frames.is_empty());
        if allocation.start == 0 && !recorded {
            return BEFORE_RECORDING;
        }
        &self.context_text(allocation.context).site
    }

    /// The leak report of `device` with `options`, made once per options.
    pub fn leaks(
        &self,
        device: &DeviceModel,
        options: &LeakOptions,
    ) -> anyhow::Result<Arc<LeakReport>> {
        if *options == LeakOptions::default() {
            return Ok(Arc::clone(&device.leaks));
        }
        // A panic while the lock is held cannot leave the map half-written.
        let cached = device
            .leaks_by_options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(options)
            .cloned();
        if let Some(report) = cached {
            return Ok(report);
        }
        // Computed outside the locks, on a clone of the device's walker (no rebuild): other
        // requests keep being answered meanwhile.
        let walker = device
            .walker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let report = Arc::new(find_leaks_from(
            &self.snapshot,
            device.device,
            options,
            walker,
        )?);
        let mut cache = device
            .leaks_by_options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Each prefix typed in the page's step box is a report: keep the memory bounded.
        if cache.len() >= MAX_LEAK_REPORTS {
            cache.clear();
        }
        cache.insert(options.clone(), Arc::clone(&report));
        Ok(report)
    }

    /// The texts of `context` (empty ones for an unknown id).
    pub fn context_text(&self, context: ContextId) -> &ContextText {
        static NONE: ContextText = ContextText {
            tags: String::new(),
            stack: String::new(),
            site: String::new(),
        };
        self.contexts.get(context.0 as usize).unwrap_or(&NONE)
    }
}

fn context_texts(snapshot: &Snapshot) -> Vec<ContextText> {
    let mut texts = vec![ContextText {
        site: site_name(snapshot, ContextId::NONE),
        ..ContextText::default()
    }];
    for (id, context) in snapshot.contexts.iter() {
        let stack = context
            .frames
            .iter()
            .map(|f| format!("{} {}:{}", f.name, f.filename, f.line_text()))
            .collect::<Vec<_>>()
            .join("\n");
        texts.push(ContextText {
            tags: context.tags.join("/").to_lowercase(),
            stack: stack.to_lowercase(),
            site: site_name(snapshot, id),
        });
    }
    texts
}

/// The model of `device`, `walker` its walker at index 0; `leaks` gives its leak report,
/// made meanwhile.
fn build_device(
    snapshot: &Snapshot,
    device: u32,
    mut walker: StateWalker,
    leaks: impl FnOnce() -> anyhow::Result<LeakReport>,
) -> Result<DeviceModel, ServeError> {
    let failed = |source| ServeError::State { device, source };
    let events = walker.len();
    let alive_at_end = events.saturating_add(1);
    // Blocks alive before the first event, lowest address first.
    let mut allocations = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    let initial = walker.state();
    for segment in &initial.segments {
        for block in segment.blocks.iter().filter(|b| b.state.is_active()) {
            open.insert(block.address, allocations.len());
            allocations.push(Allocation {
                addr: block.address,
                size: block.size,
                requested: block.requested,
                stream: segment.stream.0,
                context: block.context,
                start: 0,
                end: alive_at_end,
            });
        }
    }
    for block in &initial.unsegmented {
        open.insert(block.address, allocations.len());
        allocations.push(Allocation {
            addr: block.address,
            size: block.size,
            requested: block.requested,
            stream: 0,
            context: block.context,
            start: 0,
            end: alive_at_end,
        });
    }
    // A block stays active until its memory is back in the cache (`free_completed`); traces
    // without those events end blocks at `free_requested`.
    let free_action = if walker
        .events()
        .iter()
        .any(|e| e.action == Action::FreeCompleted)
    {
        Action::FreeCompleted
    } else {
        Action::FreeRequested
    };
    let mut state_time_us = Vec::with_capacity(alive_at_end);
    let mut time = walker.events().first().map_or(0, |e| e.time_us);
    state_time_us.push(time);
    for (index, event) in walker.events().iter().enumerate() {
        time = time.max(event.time_us);
        state_time_us.push(time);
        let state = index + 1;
        if event.action == Action::Alloc {
            if let Some(previous) = open.insert(event.addr, allocations.len()) {
                // A second alloc at a live address: the trace lost the free in between.
                allocations[previous].end = state;
            }
            allocations.push(Allocation {
                addr: event.addr,
                size: event.size,
                requested: event.requested,
                stream: event.stream.0,
                context: event.context,
                start: state,
                end: alive_at_end,
            });
        } else if event.action == free_action {
            if let Some(id) = open.remove(&event.addr) {
                allocations[id].end = state;
            }
        }
    }
    let curves = Curves::of(&mut walker).map_err(failed)?;
    let peak_index = curves.allocated_peak();
    let segments = segment_spans(&initial, walker.events());
    let mut streams: Vec<u64> = allocations.iter().map(|a| a.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    let allocation_bytes = lod::alive_bytes(&allocations, state_time_us.len());
    let segment_bytes = lod::alive_bytes(&segments, state_time_us.len());
    let has_times = state_time_us.last() > state_time_us.first();
    // Leave the walker at the peak, where the page first asks for the segments.
    walker.seek(peak_index).map_err(failed)?;
    let leaks = Arc::new(leaks()?);
    Ok(DeviceModel {
        device,
        events,
        state_time_us,
        curves,
        allocations,
        peak_index,
        numbers: snapshot.event_numbers(device),
        annotations: annotation_intervals(snapshot, device),
        leaks,
        leaks_by_options: Mutex::new(HashMap::new()),
        streams,
        segments,
        allocation_bytes,
        segment_bytes,
        has_times,
        walker: Mutex::new(walker),
    })
}

/// The reserved address ranges of a device over time: the segments of `initial` from state 0,
/// then each `segment_alloc` or `segment_map` opens a range at its event's state and each
/// `segment_free` or `segment_unmap` closes the range holding its address. Releasing part of a
/// range (an unmap of some pages of a mapped run) closes it and opens what is left as new
/// ranges, so at every state the open ranges tile exactly the reserved bytes the events say.
/// A release of an address no range holds (a truncated trace) is skipped.
pub fn segment_spans(initial: &DeviceState, events: &[TraceEvent]) -> Vec<Allocation> {
    let mut spans = Vec::new();
    let alive_at_end = events.len().saturating_add(1);
    // Open ranges by start address: span index.
    let mut open: BTreeMap<u64, usize> = BTreeMap::new();
    let span = |addr, size, stream, context, start| Allocation {
        addr,
        size,
        requested: 0,
        stream,
        context,
        start,
        end: alive_at_end,
    };
    for segment in &initial.segments {
        open.insert(segment.address, spans.len());
        spans.push(span(
            segment.address,
            segment.size,
            segment.stream.0,
            segment.context,
            0,
        ));
    }
    for (index, event) in events.iter().enumerate() {
        let state = index + 1;
        match event.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                if let Some(previous) = open.insert(event.addr, spans.len()) {
                    // A second reservation at an open address: the release was lost.
                    spans[previous].end = state;
                }
                spans.push(span(
                    event.addr,
                    event.size,
                    event.stream.0,
                    event.context,
                    state,
                ));
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let holder = open
                    .range(..=event.addr)
                    .next_back()
                    .map(|(&start, &id)| (start, id))
                    .filter(|&(start, id)| event.addr - start < spans[id].size);
                let Some((start, id)) = holder else { continue };
                open.remove(&start);
                spans[id].end = state;
                let range_end = start.saturating_add(spans[id].size);
                let released_end = event.addr.saturating_add(event.size.max(1)).min(range_end);
                let (stream, context) = (spans[id].stream, spans[id].context);
                if event.addr > start {
                    open.insert(start, spans.len());
                    spans.push(span(start, event.addr - start, stream, context, state));
                }
                if released_end < range_end && event.action == Action::SegmentUnmap {
                    open.insert(released_end, spans.len());
                    spans.push(span(
                        released_end,
                        range_end - released_end,
                        stream,
                        context,
                        state,
                    ));
                }
            }
            _ => {}
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockpool::StreamId;

    fn event(action: Action, addr: u64, size: u64) -> TraceEvent {
        TraceEvent {
            action,
            device: 0,
            stream: StreamId::DEFAULT,
            addr,
            size,
            requested: 0,
            time_us: 0,
            context: ContextId::NONE,
        }
    }

    fn spans(events: &[TraceEvent]) -> Vec<(u64, u64, usize, usize)> {
        let initial = DeviceState {
            device: 0,
            segments: Vec::new(),
            unsegmented: Vec::new(),
        };
        segment_spans(&initial, events)
            .iter()
            .map(|s| (s.addr, s.size, s.start, s.end))
            .collect()
    }

    #[test]
    fn unmapping_part_of_a_mapped_range_leaves_the_rest_reserved() {
        let events = [
            event(Action::SegmentMap, 0x0, 0x6000),
            event(Action::SegmentUnmap, 0x2000, 0x2000),
            event(Action::SegmentUnmap, 0x0, 0x2000),
            event(Action::SegmentUnmap, 0x4000, 0x2000),
        ];
        assert_eq!(
            spans(&events),
            [
                (0x0, 0x6000, 1, 2),
                (0x0, 0x2000, 2, 3),
                (0x4000, 0x2000, 2, 4),
            ],
            "the middle page goes at 2, leaving both ends; each end goes on its own"
        );
    }

    #[test]
    fn segments_live_from_their_alloc_to_their_free_and_unknown_frees_are_skipped() {
        let events = [
            event(Action::SegmentAlloc, 0x1000, 0x1000),
            event(Action::Alloc, 0x1000, 0x100),
            event(Action::SegmentFree, 0x9000, 0x1000),
            event(Action::SegmentAlloc, 0x4000, 0x2000),
            event(Action::SegmentFree, 0x1000, 0x1000),
        ];
        assert_eq!(
            spans(&events),
            [(0x1000, 0x1000, 1, 5), (0x4000, 0x2000, 4, 6)],
            "0x9000 is no segment's; 0x4000 is reserved at the end (events + 1)"
        );
    }
}
