//! Memory by stream: what each stream of a device held over its events, the cached memory
//! stranded on streams that never allocate again, and the freed memory still waiting for the
//! streams a block was used on (`record_stream`).
//!
//! A block belongs to the stream it was allocated on, a segment to the stream it was created
//! for, as PyTorch's caching allocator owns them: a stream's cached bytes are its segments'
//! bytes less its active blocks' (allocated, or freed and waiting). Only that stream can reuse
//! them, so once a stream has made its last allocation of the trace, what it caches is
//! stranded for as long as another stream still allocates. A freed block waits between its
//! `free_requested` and its `free_completed` event: the allocator holds it until the events
//! recorded on the streams that used it have completed. Traces that record no completions
//! (blockpool's traces without `record_stream`, RMM's logs) free at `free_requested`.
//!
//! One pass over the device's events with a [`StateWalker`]: work grows with the events and
//! memory with the live blocks and segments, the streams, and the chart's points (at most one
//! per stream and column in which it changed).

use crate::analysis::timeline::walker_taking;
use ahash::RandomState;
use blockpool::trace::{
    Action, BlockState, DeviceState, EventNumbers, Snapshot, StateWalker, TraceEvent,
};
use std::collections::HashMap;

mod report;

pub use report::{Chart, Moment, Stranded, StreamLine, StreamUsage, StreamsReport, Waiting};

/// Columns of the chart of cached bytes over the events, at most.
pub const CHART_COLUMNS: usize = 512;
/// Streams charted one by one, at most: those that cached the most bytes at once.
pub const CHART_STREAMS: usize = 8;

/// Why the stream-ordered policy would change nothing on a device where fewer than two
/// streams allocate.
pub const ONE_STREAM: &str = "one stream allocates: the stream-ordered policy would change nothing";

/// Whether two or more streams allocate in `events`.
pub fn several_streams_allocate<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> bool {
    let mut allocs = events.into_iter().filter(|e| e.action == Action::Alloc);
    let first = allocs.next().map(|e| e.stream);
    allocs.any(|e| Some(e.stream) != first)
}

/// The streams report of `device` in `snapshot`, taking its events instead of copying them:
/// it is left without events.
pub fn streams_report_taking(
    snapshot: &mut Snapshot,
    device: u32,
) -> anyhow::Result<StreamsReport> {
    let numbers = snapshot.event_numbers(device);
    Ok(streams_report_from(
        walker_taking(snapshot, device)?,
        numbers,
    ))
}

/// As [`streams_report_taking`], walking `walker` (the device's, whose events `numbers` numbers) from
/// its first event instead of rebuilding the device's states.
pub fn streams_report_from(mut walker: StateWalker, numbers: EventNumbers) -> StreamsReport {
    // The walk starts at index 0 whatever the position given; from there only the totals and
    // the changed blocks' sizes are carried from event to event, not the live blocks.
    let _ = walker.seek(0);
    let events = walker.events();
    let mut pass = Pass::new(&walker.state(), events, numbers);
    for (position, (event, (totals, block))) in events.iter().zip(walker.blocks_ahead()).enumerate()
    {
        pass.apply(&Step {
            state: position + 1,
            event: *event,
            next: events.get(position + 1).copied(),
            block,
            reserved: totals.reserved_bytes,
        });
    }
    pass.finish(walker.device())
}

/// One event as the pass applies it.
struct Step {
    /// The state after it.
    state: usize,
    event: TraceEvent,
    /// The event after it, if any.
    next: Option<TraceEvent>,
    /// The size of the active block it changed.
    block: Option<u64>,
    /// The device's reserved bytes after it.
    reserved: u64,
}

/// A block as the pass tracks it.
#[derive(Clone, Copy, Debug)]
struct Live {
    stream: u64,
    size: u64,
    state: BlockState,
    /// Where its free was requested: the event's position and time.
    requested_at: Option<(usize, u64)>,
}

/// A stream as the pass tracks it.
#[derive(Clone, Debug, Default)]
struct Running {
    usage: StreamUsage,
    reserved: u64,
    allocated: u64,
    waiting: u64,
    /// Whether it has made its last allocation (its cache counts as stranded).
    done: bool,
    /// Its chart points: (column, most cached bytes in it, cached bytes at its end).
    points: Vec<(usize, u64, u64)>,
}

impl Running {
    fn cached(&self) -> u64 {
        self.reserved
            .saturating_sub(self.allocated.saturating_add(self.waiting))
    }
}

/// The walk over the events.
struct Pass {
    numbers: EventNumbers,
    completions: bool,
    streams: HashMap<u64, Running, RandomState>,
    blocks: HashMap<u64, Live, RandomState>,
    segments: HashMap<u64, (u64, u64), RandomState>,
    /// Streams changed since the last state.
    touched: Vec<u64>,
    /// Per stream, the position of its last `alloc` event.
    last_alloc: HashMap<u64, usize, RandomState>,
    /// The position of the device's last `alloc` event.
    device_last_alloc: Option<usize>,
    /// Totals over the streams.
    cached: u64,
    stranded: u64,
    waiting: u64,
    allocated: u64,
    peak_reserved: Option<u64>,
    reserved_peak: Moment,
    stranded_summary: Stranded,
    waiting_summary: Waiting,
    columns: usize,
    states: usize,
    chart: Chart,
}

impl Pass {
    fn new(start: &DeviceState, events: &[TraceEvent], numbers: EventNumbers) -> Pass {
        let mut last_alloc = HashMap::default();
        for (position, event) in events.iter().enumerate() {
            if event.action == Action::Alloc {
                last_alloc.insert(event.stream.raw(), position);
            }
        }
        let device_last_alloc = last_alloc.values().copied().max();
        let states = events.len() + 1;
        let columns = states.min(CHART_COLUMNS);
        let mut pass = Pass {
            numbers,
            completions: events.iter().any(|e| e.action == Action::FreeCompleted),
            streams: HashMap::default(),
            blocks: HashMap::default(),
            segments: HashMap::default(),
            touched: Vec::new(),
            last_alloc,
            device_last_alloc,
            cached: 0,
            stranded: 0,
            waiting: 0,
            allocated: 0,
            peak_reserved: None,
            reserved_peak: Moment::default(),
            stranded_summary: Stranded::default(),
            waiting_summary: Waiting::default(),
            columns,
            states,
            chart: Chart {
                column_ends: (0..columns)
                    .map(|c| ((c + 1) * states).div_ceil(columns) - 1)
                    .collect(),
                cached: vec![0; columns],
                stranded: vec![0; columns],
                waiting: vec![0; columns],
                streams: Vec::new(),
            },
        };
        for segment in &start.segments {
            let stream = segment.stream.raw();
            pass.segments
                .insert(segment.address, (stream, segment.size));
            pass.change(stream, |s| s.reserved += segment.size);
            for block in segment.blocks.iter().filter(|b| b.state.is_active()) {
                pass.add_block(block.address, stream, block.size, block.state, None);
            }
        }
        for block in &start.unsegmented {
            pass.add_block(block.address, 0, block.size, block.state, None);
        }
        pass.enter_state(0, start.totals().reserved_bytes);
        pass
    }

    /// Tracks an active block.
    fn add_block(
        &mut self,
        address: u64,
        stream: u64,
        size: u64,
        state: BlockState,
        requested_at: Option<(usize, u64)>,
    ) {
        let waiting = state == BlockState::ActivePendingFree;
        self.change(stream, |s| {
            if waiting {
                s.waiting += size;
            } else {
                s.allocated += size;
            }
        });
        self.blocks.insert(
            address,
            Live {
                stream,
                size,
                state,
                requested_at,
            },
        );
    }

    /// Applies one event.
    fn apply(&mut self, step: &Step) {
        let (state, event) = (step.state, &step.event);
        let position = state - 1;
        let stream = event.stream.raw();
        match event.action {
            Action::Alloc => {
                let size = step.block.unwrap_or(event.size);
                self.change(stream, |s| {
                    s.usage.allocations += 1;
                    s.usage.allocated_bytes = s.usage.allocated_bytes.saturating_add(size);
                });
                self.remove_block(event.addr);
                self.add_block(event.addr, stream, size, BlockState::ActiveAllocated, None);
            }
            // Completed by the next event: the free did not wait.
            Action::FreeRequested if completed_by(event, step.next.as_ref()) => {
                self.remove_block(event.addr);
            }
            Action::FreeRequested if self.completions => {
                if let Some(live) = self.blocks.get_mut(&event.addr) {
                    if live.state == BlockState::ActiveAllocated {
                        live.state = BlockState::ActivePendingFree;
                        live.requested_at = Some((position, event.time_us));
                        let (owner, size) = (live.stream, live.size);
                        self.change(owner, |s| {
                            s.allocated = s.allocated.saturating_sub(size);
                            s.waiting += size;
                        });
                    }
                }
            }
            Action::FreeRequested | Action::FreeCompleted => {
                if let Some(live) = self.remove_block(event.addr) {
                    self.note_wait(&live, position, event.time_us);
                }
            }
            Action::SegmentAlloc => {
                self.segments.insert(event.addr, (stream, event.size));
                self.change(stream, |s| {
                    s.reserved = s.reserved.saturating_add(event.size)
                });
            }
            Action::SegmentFree => {
                let (owner, size) = self
                    .segments
                    .remove(&event.addr)
                    .unwrap_or((stream, event.size));
                self.change(owner, |s| s.reserved = s.reserved.saturating_sub(size));
            }
            Action::SegmentMap => {
                self.change(stream, |s| {
                    s.reserved = s.reserved.saturating_add(event.size)
                });
            }
            Action::SegmentUnmap => {
                self.change(stream, |s| {
                    s.reserved = s.reserved.saturating_sub(event.size)
                });
            }
            Action::Oom | Action::Snapshot | Action::Annotate => {}
        }
        // A stream whose last allocation this was is done from this state on.
        if event.action == Action::Alloc && self.last_alloc.get(&stream) == Some(&position) {
            self.change(stream, |s| s.done = true);
        }
        self.enter_state(state, step.reserved);
    }

    /// Stops tracking the active block at `address`, taking its bytes off its stream.
    fn remove_block(&mut self, address: u64) -> Option<Live> {
        let live = self.blocks.remove(&address)?;
        self.change(live.stream, |s| match live.state {
            BlockState::ActivePendingFree => s.waiting = s.waiting.saturating_sub(live.size),
            _ => s.allocated = s.allocated.saturating_sub(live.size),
        });
        Some(live)
    }

    /// Counts the free of `live`, completed at `position`, as a wait when other events came
    /// between its request and its completion.
    fn note_wait(&mut self, live: &Live, position: usize, time_us: u64) {
        let Some((requested, requested_us)) = live.requested_at else {
            return;
        };
        let events = position.saturating_sub(requested);
        if events <= 1 {
            return;
        }
        let summary = &mut self.waiting_summary;
        summary.frees += 1;
        summary.bytes = summary.bytes.saturating_add(live.size);
        summary.longest_events = summary.longest_events.max(events as u64);
        summary.longest_us = summary.longest_us.max(time_us.saturating_sub(requested_us));
        let size = live.size;
        self.change(live.stream, |s| {
            s.usage.frees_waited += 1;
            s.usage.bytes_waited = s.usage.bytes_waited.saturating_add(size);
        });
    }

    /// Changes `stream` with `f`, keeping the totals over the streams.
    fn change(&mut self, stream: u64, f: impl FnOnce(&mut Running)) {
        let last_alloc = &self.last_alloc;
        let running = self.streams.entry(stream).or_insert_with(|| Running {
            usage: StreamUsage {
                stream,
                ..StreamUsage::default()
            },
            // A stream that allocates nothing in the trace is done from its start.
            done: !last_alloc.contains_key(&stream),
            ..Running::default()
        });
        let before = (
            running.cached(),
            running.waiting,
            running.allocated,
            running.done,
        );
        f(running);
        let (cached, waiting, allocated, done) = before;
        let stranded_before = if done { cached } else { 0 };
        let stranded_after = if running.done { running.cached() } else { 0 };
        // Each total is the sum of the streams' values, the old one among them.
        self.cached = self.cached - cached + running.cached();
        self.stranded = self.stranded - stranded_before + stranded_after;
        self.waiting = self.waiting - waiting + running.waiting;
        self.allocated = self.allocated - allocated + running.allocated;
        if !self.touched.contains(&stream) {
            self.touched.push(stream);
        }
    }

    /// Records the state `state`, whose reserved bytes the walker counts as `reserved`.
    fn enter_state(&mut self, state: usize, reserved: u64) {
        // After the device's last allocation nobody needs the memory: nothing is stranded.
        let open = matches!(self.device_last_alloc, Some(last) if state <= last);
        let stranded = if open { self.stranded } else { 0 };
        let column = state * self.columns / self.states;
        let chart = &mut self.chart;
        chart.cached[column] = chart.cached[column].max(self.cached);
        chart.stranded[column] = chart.stranded[column].max(stranded);
        chart.waiting[column] = chart.waiting[column].max(self.waiting);
        let peaked = !matches!(self.peak_reserved, Some(peak) if reserved <= peak);
        let stranded_peaked = stranded > self.stranded_summary.peak_bytes;
        let waiting_peaked = self.waiting > self.waiting_summary.peak_bytes;
        if peaked || stranded_peaked || waiting_peaked {
            let moment = Moment {
                state,
                at: self.numbers.state_label(state),
                reserved_bytes: reserved,
                allocated_bytes: self.allocated,
                waiting_bytes: self.waiting,
                cached_bytes: self.cached,
                stranded_bytes: stranded,
            };
            if peaked {
                self.peak_reserved = Some(reserved);
                self.reserved_peak = moment.clone();
            }
            if stranded_peaked {
                self.stranded_summary.peak_bytes = stranded;
                self.stranded_summary.peak = Some(moment.clone());
            }
            if waiting_peaked {
                self.waiting_summary.peak_bytes = self.waiting;
                self.waiting_summary.peak = Some(moment);
            }
        }
        // Only the streams changed by the event can have new peaks or chart points.
        for stream in self.touched.drain(..) {
            let Some(running) = self.streams.get_mut(&stream) else {
                continue;
            };
            let cached = running.cached();
            let usage = &mut running.usage;
            usage.peak_reserved_bytes = usage.peak_reserved_bytes.max(running.reserved);
            usage.peak_cached_bytes = usage.peak_cached_bytes.max(cached);
            usage.peak_waiting_bytes = usage.peak_waiting_bytes.max(running.waiting);
            if running.done && open {
                usage.stranded_bytes = usage.stranded_bytes.max(cached);
            }
            match running.points.last_mut() {
                Some((at, most, last)) if *at == column => {
                    *most = (*most).max(cached);
                    *last = cached;
                }
                _ => running.points.push((column, cached, cached)),
            }
        }
    }

    /// The report, once every event is applied.
    fn finish(mut self, device: u32) -> StreamsReport {
        let last = self.device_last_alloc;
        let mut streams: Vec<Running> = self.streams.into_values().collect();
        streams.sort_by_key(|s| s.usage.stream);
        for running in &mut streams {
            let cached = running.cached();
            let usage = &mut running.usage;
            usage.end_reserved_bytes = running.reserved;
            usage.end_cached_bytes = cached;
            usage.last_allocation_state = self.last_alloc.get(&usage.stream).map(|p| p + 1);
            usage.last_allocation = self
                .last_alloc
                .get(&usage.stream)
                .map(|&p| self.numbers.label(p));
            // Still cached at the end, on a stream that stopped before the others did.
            let stopped_early = match (self.last_alloc.get(&usage.stream), last) {
                (None, _) => true,
                (Some(own), Some(last)) => *own < last,
                (Some(_), None) => false,
            };
            if stopped_early {
                self.stranded_summary.left_at_end_bytes += usage.end_cached_bytes;
            }
        }
        self.stranded_summary.streams = streams
            .iter()
            .filter(|s| s.usage.stranded_bytes > 0)
            .count() as u64;
        // The streams that cached the most at once, on their own lines.
        let mut charted: Vec<&Running> = streams
            .iter()
            .filter(|s| s.usage.peak_cached_bytes > 0)
            .collect();
        charted.sort_by_key(|s| (std::cmp::Reverse(s.usage.peak_cached_bytes), s.usage.stream));
        charted.truncate(CHART_STREAMS);
        self.chart.streams = charted
            .into_iter()
            .map(|running| StreamLine {
                stream: running.usage.stream,
                cached: line(&running.points, self.columns),
            })
            .collect();
        StreamsReport {
            device,
            completions: self.completions,
            streams: streams.into_iter().map(|s| s.usage).collect(),
            reserved_peak: self.reserved_peak,
            stranded: self.stranded_summary,
            waiting: self.waiting_summary,
            chart: self.chart,
        }
    }
}

/// Whether `next` completes the free that `requested` requested.
fn completed_by(requested: &TraceEvent, next: Option<&TraceEvent>) -> bool {
    next.is_some_and(|next| next.action == Action::FreeCompleted && next.addr == requested.addr)
}

/// A stream's chart line from its points: a column without a point holds what the last point
/// before it ended with.
fn line(points: &[(usize, u64, u64)], columns: usize) -> Vec<u64> {
    let mut values = vec![0; columns];
    let mut carried = 0;
    let mut points = points.iter().peekable();
    for (column, value) in values.iter_mut().enumerate() {
        match points.next_if(|(at, _, _)| *at == column) {
            Some(&(_, most, last)) => {
                *value = most;
                carried = last;
            }
            None => *value = carried,
        }
    }
    values
}

#[cfg(test)]
mod tests;
