//! The summary of a trace, as `memtrace summary` prints it and the viewer's `/api/meta` carries
//! it: per device, the peaks of allocated, reserved and requested memory and when they
//! happened, fragmentation (as [`super::fragmentation`] defines it, at the reserved peak), the
//! free memory and the sites holding the most memory at the allocated peak, and every
//! out-of-memory event with the state it met and why it failed.
//!
//! Sizes: allocated and reserved bytes add up block and segment sizes; PyTorch's trace
//! records what callers requested, not block sizes, so a block the trace alone shows counts at
//! its request rounded as the allocator rounds it (the import does this), the least it took.
//! Requested bytes add up requests.

use super::explain::{explain, request_of, Context, Explanation};
use super::fragmentation::ReservedPeak;
use super::frames::FrameView;
use super::frames::{shown_frames, stack_line};
use super::sites::{sites_named_by, Site, SiteNames};
use super::streams::{several_streams_allocate, streams_report_from, StreamsReport};
use super::timeline::{time_span, walker, walker_taking};
use blockpool::trace::{
    Action, BlockState, ContextId, DeviceState, EventNumbers, Snapshot, StateWalker,
};
use serde::Serialize;
use std::path::Path;

/// How many allocation sites the report lists at the peak.
const TOP_SITES: usize = 10;

/// The summary, as `memtrace summary --json` prints it.
#[derive(Debug, Serialize)]
pub struct SummaryReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// Every device with segments or events.
    pub devices: Vec<DeviceSummary>,
}

/// One device of a [`SummaryReport`].
#[derive(Debug, Serialize)]
pub struct DeviceSummary {
    /// Device index.
    pub device: u32,
    /// Recorded events, inserted annotations included.
    pub events: usize,
    /// Of those, the annotations the import inserted among the file's trace entries (PyTorch's
    /// `external_annotations`), which have no event number.
    pub inserted_annotations: usize,
    /// Time from the device's own first event to its own last, in microseconds, as `info`
    /// measures it (0 without events or times).
    pub span_us: u64,
    /// Time of the device's first event, in microseconds since the trace's origin (the clock of
    /// the peaks' `time_us`); absent without events.
    pub first_time_us: Option<u64>,
    /// Time of its last event.
    pub last_time_us: Option<u64>,
    /// Highest bytes in allocated blocks, by block size (see the module docs for blocks the
    /// trace knows only by request).
    pub peak_allocated: Peak,
    /// Highest bytes in segments.
    pub peak_reserved: Peak,
    /// Highest bytes the callers of active blocks asked for, by request size.
    pub peak_requested: Peak,
    /// Segments at the allocated peak.
    pub segments_at_peak: u64,
    /// Segments at the end of the trace.
    pub segments_at_end: u64,
    /// Fragmentation, one definition for every command ([`super::fragmentation`]):
    /// (reserved - allocated) / reserved at the reserved peak, in its state where allocated is
    /// highest; 0 with nothing reserved.
    pub fragmentation_at_reserved_peak: f64,
    /// The event after which that state holds (`None`: before the first event); the memory
    /// at the reserved peak is split there too.
    pub fragmentation_after_event: Option<usize>,
    /// How scattered the free memory is at the allocated peak: 1 - largest free block / all
    /// free bytes, 0 when the free memory is one block, near 1 when it is many small ones (a
    /// large request finds no room although much is free); 0 with nothing free.
    pub free_scattered: f64,
    /// Largest inactive block at the allocated peak, in bytes.
    pub largest_free_block: u64,
    /// Inactive bytes at the allocated peak.
    pub free_bytes: u64,
    /// The sites holding the most allocated bytes at the allocated peak, most first.
    pub top_sites: Vec<Site>,
    /// Every out-of-memory event.
    pub out_of_memory: Vec<OomExplained>,
    /// Without one, the device's memory at the reserved peak, split so the parts add up.
    pub at_reserved_peak: Option<Explanation>,
    /// When two or more streams allocate, what the streams held (`memtrace streams` tells it
    /// all); absent otherwise.
    pub streams: Option<StreamsBrief>,
}

/// The streams of a device where two or more allocate, in brief.
#[derive(Debug, Serialize)]
pub struct StreamsBrief {
    /// Streams that allocated during the trace.
    pub allocating: u64,
    /// At the reserved peak, bytes cached on streams that had made their last allocation while
    /// others still allocated.
    pub stranded_at_reserved_peak_bytes: u64,
    /// At the reserved peak, bytes freed and waiting for other streams (`record_stream`).
    pub waiting_at_reserved_peak_bytes: u64,
    /// The most bytes stranded at once.
    pub stranded_peak_bytes: u64,
    /// Frees that waited for other streams.
    pub frees_waited: u64,
}

impl StreamsBrief {
    fn of(report: &StreamsReport) -> StreamsBrief {
        StreamsBrief {
            allocating: report.streams.iter().filter(|s| s.allocations > 0).count() as u64,
            stranded_at_reserved_peak_bytes: report.reserved_peak.stranded_bytes,
            waiting_at_reserved_peak_bytes: report.reserved_peak.waiting_bytes,
            stranded_peak_bytes: report.stranded.peak_bytes,
            frees_waited: report.waiting.frees,
        }
    }
}

/// Out-of-memory events of one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceOoms {
    /// Device index.
    pub device: u32,
    /// Its out-of-memory events.
    pub events: usize,
}

impl SummaryReport {
    /// The devices other than `device` that ran out of memory, lowest first: a report of one
    /// device must not hide them.
    pub fn out_of_memory_elsewhere(&self, device: Option<u32>) -> Vec<DeviceOoms> {
        self.devices
            .iter()
            .filter(|d| Some(d.device) != device && !d.out_of_memory.is_empty())
            .map(|d| DeviceOoms {
                device: d.device,
                events: d.out_of_memory.len(),
            })
            .collect()
    }
}

/// `1 (device 1: 2)`: a device's out-of-memory events, and other devices' beside them.
pub fn out_of_memory_text(events: usize, elsewhere: &[DeviceOoms]) -> String {
    if elsewhere.is_empty() {
        return events.to_string();
    }
    let others: Vec<String> = elsewhere
        .iter()
        .map(|d| format!("device {}: {}", d.device, d.events))
        .collect();
    format!("{events} ({})", others.join(", "))
}

/// A peak: its value and the first state reaching it.
#[derive(Debug, Default, Serialize)]
pub struct Peak {
    /// Bytes.
    pub bytes: u64,
    /// The event after which the peak first holds, by its number (PyTorch's index in
    /// `device_traces`, see [`blockpool::trace::EventNumbers`]); `None` when it already holds
    /// before the first event. `--at N` shows this state.
    pub after_event: Option<usize>,
    /// The walker's state index: the peak holds after this many of the device's events,
    /// inserted annotations included (not a number to show).
    #[serde(skip)]
    pub index: usize,
    /// Time of the event that reached it, in microseconds since the origin.
    pub time_us: u64,
}

/// An out-of-memory event and the state it met.
#[derive(Debug, Serialize)]
pub struct OomExplained {
    /// The event's number (PyTorch's index in `device_traces`, see
    /// [`blockpool::trace::EventNumbers`]); `None` for an event the import inserted. The state
    /// it met is the one before it.
    pub event: Option<usize>,
    /// How the event is named in text: `event 7`.
    pub label: String,
    /// Time, in microseconds since the origin.
    pub time_us: u64,
    /// Bytes the failing request asked for (PyTorch records the size it tried to allocate).
    pub requested_bytes: u64,
    /// The stream the request was made on (PyTorch writes the `cudaStream_t` value).
    pub stream: u64,
    /// The site of the failing request (the same naming as the top sites), `<unknown>` when
    /// the trace recorded no stack for it.
    pub site: String,
    /// The failing request's call stack, innermost first, one `file:line:function` per frame,
    /// as recorded (empty when not recorded).
    pub stack: Vec<String>,
    /// The frames of `stack` text shows: without those memory_viz hides and the allocator's and
    /// dispatcher's plumbing ([`super::frames::shown_frames`]), so the user's code comes first.
    pub shown_stack: Vec<String>,
    /// Bytes the device said were free (as the trace records it).
    pub device_free_bytes: u64,
    /// `device_free_bytes + reserved_bytes`: the memory this allocator could have had then.
    /// Memory other processes held is in neither, so the device itself may be larger.
    pub device_memory_bytes: u64,
    /// Bytes in segments at that moment.
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks.
    pub allocated_bytes: u64,
    /// Inactive (cached) bytes.
    pub cached_free_bytes: u64,
    /// Largest cached free block.
    pub largest_free_block: u64,
    /// Why it failed, in words.
    pub explanation: String,
    /// The device's memory at that moment, split so the parts add up (as `memtrace explain`
    /// prints it).
    pub memory: Explanation,
}

/// Builds the summary of `snapshot`, sites named in `view`.
pub fn summarize_in(
    file: &Path,
    format: &'static str,
    snapshot: &Snapshot,
    view: FrameView,
) -> anyhow::Result<SummaryReport> {
    let devices = snapshot
        .by_device()
        .into_iter()
        .map(|(device, part)| summarize_device(&part, device, view))
        .collect::<anyhow::Result<_>>()?;
    Ok(SummaryReport {
        file: file.display().to_string(),
        format,
        devices,
    })
}

fn summarize_device(
    snapshot: &Snapshot,
    device: u32,
    view: FrameView,
) -> anyhow::Result<DeviceSummary> {
    summarize_device_from(snapshot, device, view, walker(snapshot, device)?)
}

/// The summary of `device`, walking `walker` (the device's) from index 0 instead of
/// rebuilding the device's states; `snapshot` holds the device's events and segments (all of
/// a trace's, or [`Snapshot::by_device`]'s part).
pub fn summarize_device_from(
    snapshot: &Snapshot,
    device: u32,
    view: FrameView,
    walker: StateWalker,
) -> anyhow::Result<DeviceSummary> {
    let numbers = snapshot.event_numbers(device);
    summarize_walk(snapshot, numbers, device, view, walker)
}

/// As [`summarize_in`], taking the trace: with one device, its events move into the walker
/// instead of being copied, so the summary of a large trace holds them once.
pub fn summarize_owned(
    file: &Path,
    format: &'static str,
    mut snapshot: Snapshot,
    view: FrameView,
) -> anyhow::Result<SummaryReport> {
    let [device] = snapshot.devices()[..] else {
        return summarize_in(file, format, &snapshot, view);
    };
    let numbers = snapshot.event_numbers(device);
    let walker = walker_taking(&mut snapshot, device)?;
    Ok(SummaryReport {
        file: file.display().to_string(),
        format,
        devices: vec![summarize_walk(&snapshot, numbers, device, view, walker)?],
    })
}

/// The summary of `device` from its `walker`; `snapshot` gives the contexts, `numbers` the
/// events' numbers.
fn summarize_walk(
    snapshot: &Snapshot,
    numbers: EventNumbers,
    device: u32,
    view: FrameView,
    mut walker: StateWalker,
) -> anyhow::Result<DeviceSummary> {
    walker.seek(0)?;
    // A copy of the walker at the start, for the streams' own walk when several allocate.
    let streams_walker = several_streams_allocate(walker.events()).then(|| walker.clone());
    let start = walker.totals();
    let time_of = |index: usize, walker: &blockpool::trace::StateWalker| {
        index
            .checked_sub(1)
            .and_then(|i| walker.events().get(i))
            .map_or(0, |e| e.time_us)
    };
    let mut allocated = Peak {
        bytes: start.allocated_bytes,
        ..Peak::default()
    };
    let mut reserved = Peak {
        bytes: start.reserved_bytes,
        ..Peak::default()
    };
    let mut requested = Peak {
        bytes: start.requested_bytes,
        ..Peak::default()
    };
    let mut fragmentation = ReservedPeak::start(start.reserved_bytes, start.allocated_bytes);
    let mut ooms = Vec::new();
    let mut end = start;
    // The totals alone, carried from event to event; the walker moves only to the states
    // looked at below.
    let steps = walker.events().iter().zip(walker.totals_ahead());
    for (i, (event, totals)) in steps.enumerate() {
        let (action, size, free) = (event.action, event.size, event.addr);
        let (stream, context) = (event.stream.raw(), event.context);
        let index = i + 1;
        end = totals;
        fragmentation.note(index, totals.reserved_bytes, totals.allocated_bytes);
        for (peak, value) in [
            (&mut allocated, totals.allocated_bytes),
            (&mut reserved, totals.reserved_bytes),
            (&mut requested, totals.requested_bytes),
        ] {
            if value > peak.bytes {
                *peak = Peak {
                    bytes: value,
                    index,
                    ..Peak::default()
                };
            }
        }
        if action == Action::Oom {
            ooms.push((index - 1, size, free, stream, context));
        }
    }
    let segments_at_end = end.segments;
    for peak in [&mut allocated, &mut reserved, &mut requested] {
        peak.time_us = time_of(peak.index, &walker);
        peak.after_event = numbers.state(peak.index);
    }
    let (config, _, _) = super::settings::recorded_config(None, snapshot);
    let names = SiteNames::new(snapshot, view);
    let ctx = Context {
        snapshot,
        names: &names,
        config: &config,
        device_total: None,
    };
    let out_of_memory = ooms
        .into_iter()
        .map(
            |(index, requested_bytes, device_free_bytes, stream, context)| {
                walker.seek(index)?;
                let totals = walker.totals();
                let time_us = walker.events().get(index).map_or(0, |e| e.time_us);
                let request = request_of(
                    requested_bytes,
                    blockpool::StreamId::from_raw(stream),
                    device_free_bytes,
                    &config,
                );
                let memory = explain(&ctx, &walker, Some(&request));
                Ok(OomExplained {
                    event: numbers.number(index),
                    label: numbers.label(index),
                    time_us,
                    requested_bytes,
                    stream,
                    site: names.of_allocation(context, false).label(),
                    stack: stack_of(snapshot, context, true),
                    shown_stack: stack_of(snapshot, context, false),
                    device_free_bytes,
                    device_memory_bytes: device_free_bytes.saturating_add(totals.reserved_bytes),
                    reserved_bytes: totals.reserved_bytes,
                    allocated_bytes: totals.allocated_bytes,
                    cached_free_bytes: memory.free_bytes(),
                    largest_free_block: memory.largest_free_block,
                    explanation: memory.why.clone(),
                    memory,
                })
            },
        )
        .collect::<Result<Vec<_>, blockpool::trace::StateError>>()?;
    let at_reserved_peak = if out_of_memory.is_empty() {
        walker.seek(fragmentation.fullest_index)?;
        Some(explain(&ctx, &walker, None))
    } else {
        None
    };
    walker.seek(allocated.index)?;
    let state = walker.state();
    let totals = walker.totals();
    let (free_bytes, largest_free_block) = free_space(&state);
    let ratio = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let events = walker.len();
    let times = time_span(walker.events());
    let span_us = times.map_or(0, |(first, last)| last - first);
    Ok(DeviceSummary {
        device,
        events,
        inserted_annotations: numbers.len() - numbers.count(),
        span_us,
        first_time_us: times.map(|t| t.0),
        last_time_us: times.map(|t| t.1),
        segments_at_peak: totals.segments,
        segments_at_end,
        fragmentation_at_reserved_peak: fragmentation.fragmentation,
        fragmentation_after_event: numbers.state(fragmentation.fullest_index),
        free_scattered: if free_bytes == 0 {
            0.0
        } else {
            1.0 - ratio(largest_free_block, free_bytes)
        },
        largest_free_block,
        free_bytes,
        top_sites: top_sites(&names, &walker),
        out_of_memory,
        at_reserved_peak,
        streams: streams_walker
            .map(|walker| StreamsBrief::of(&streams_report_from(walker, numbers.clone()))),
        peak_allocated: allocated,
        peak_reserved: reserved,
        peak_requested: requested,
    })
}

/// The frames of `context` a report shows, innermost first, as `file:line:function`
/// ([`shown_frames`]: all of them with `full`).
fn stack_of(snapshot: &Snapshot, context: ContextId, full: bool) -> Vec<String> {
    snapshot.contexts.get(context).map_or_else(Vec::new, |c| {
        shown_frames(&c.frames, full)
            .into_iter()
            .map(stack_line)
            .collect()
    })
}

/// Inactive bytes and the largest inactive block of `state`.
fn free_space(state: &DeviceState) -> (u64, u64) {
    state
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::Inactive)
        .fold((0, 0), |(total, largest), b| {
            (total.saturating_add(b.size), largest.max(b.size))
        })
}

/// Allocated bytes by site in `state`, most first, at most [`TOP_SITES`].
fn top_sites(names: &SiteNames, walker: &StateWalker) -> Vec<Site> {
    let mut sites = sites_named_by(names, walker);
    sites.truncate(TOP_SITES);
    sites
}
