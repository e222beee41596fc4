//! Memory over a device's events: allocated, reserved, requested and active bytes after each
//! event, the peaks, and which state a `--at EVENT` / `--peak` option names.

use crate::format::{counted, device_list};
use anyhow::Context as _;
use blockpool::trace::{Action, MemoryTotals, Snapshot, StateWalker, TraceEvent};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The memory of a device after some of its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// The state index: how many of the device's events have been applied.
    pub index: usize,
    /// Time of the last applied event, in microseconds since the origin (0 at index 0).
    pub time_us: u64,
    /// Bytes in allocated blocks.
    pub allocated: u64,
    /// Bytes in segments.
    pub reserved: u64,
    /// Bytes the callers of active blocks asked for.
    pub requested: u64,
    /// Bytes in active blocks (allocated or pending free).
    pub active: u64,
}

impl Sample {
    fn new(index: usize, time_us: u64, totals: MemoryTotals) -> Sample {
        Sample {
            index,
            time_us,
            allocated: totals.allocated_bytes,
            reserved: totals.reserved_bytes,
            requested: totals.requested_bytes,
            active: totals.active_bytes,
        }
    }
}

/// The walker over `device`, with a message that names the device when the trace contradicts
/// itself.
pub fn walker(snapshot: &Snapshot, device: u32) -> anyhow::Result<StateWalker> {
    snapshot
        .state_walker(device)
        .with_context(|| cannot_rebuild(device))
}

/// As [`walker`], taking `snapshot`'s events instead of copying them: it is left without
/// events, and the walker holds them once.
pub fn walker_taking(snapshot: &mut Snapshot, device: u32) -> anyhow::Result<StateWalker> {
    let events = std::mem::take(&mut snapshot.events);
    StateWalker::from_events(device, snapshot.segments.iter(), events)
        .with_context(|| cannot_rebuild(device))
}

/// Why the memory of `device` has no walker.
fn cannot_rebuild(device: u32) -> String {
    format!("cannot rebuild the memory of device {device}")
}

/// The memory of `device` at index 0 and after each of its events: `len + 1` samples.
pub fn memory_series(snapshot: &Snapshot, device: u32) -> anyhow::Result<Vec<Sample>> {
    Ok(series_of(walker(snapshot, device)?))
}

/// As [`memory_series`], walking `walker` (the device's) from index 0 instead of rebuilding
/// the device's states.
pub fn series_of(mut walker: StateWalker) -> Vec<Sample> {
    // The walk starts at index 0 whatever the position given.
    let _ = walker.seek(0);
    let mut series = Vec::with_capacity(walker.len() + 1);
    series.push(Sample::new(0, 0, walker.totals()));
    // The totals alone, carried from event to event: no live block is touched.
    let steps = walker.events().iter().zip(walker.totals_ahead());
    for (index, (event, totals)) in steps.enumerate() {
        series.push(Sample::new(index + 1, event.time_us, totals));
    }
    series
}

/// The earliest and the latest time of `events` (one device's), in microseconds since the
/// trace's origin; `None` without events. A device's span is measured with it, from its own
/// first event to its own last, wherever the other devices begin: `info` and `summary` both
/// give it.
pub fn time_span<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> Option<(u64, u64)> {
    events
        .into_iter()
        .fold(None, |span, event| widen_span(span, event.time_us))
}

/// `span` ([`time_span`]'s) with one more event's time, for a pass that reads the events for
/// more than their times.
pub fn widen_span(span: Option<(u64, u64)>, time_us: u64) -> Option<(u64, u64)> {
    Some(span.map_or((time_us, time_us), |(first, last)| {
        (first.min(time_us), last.max(time_us))
    }))
}

/// The first index where allocated bytes are highest (0 for a device without events).
pub fn allocated_peak(series: &[Sample]) -> Sample {
    series
        .iter()
        .copied()
        .reduce(|best, s| {
            if s.allocated > best.allocated {
                s
            } else {
                best
            }
        })
        .unwrap_or_default()
}

/// A state named by `--at`: before the first event, or after an event by its number (the
/// file's index, see [`blockpool::trace::EventNumbers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventPoint {
    /// `--at start`: before the first event, with what was live when recording began.
    Start,
    /// `--at N`: the state once event N has happened.
    After(usize),
}

impl EventPoint {
    /// Reads `start` or an event number.
    pub fn parse(text: &str) -> Result<EventPoint, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("start") {
            return Ok(EventPoint::Start);
        }
        text.parse().map(EventPoint::After).map_err(|_| {
            format!(
                "expected an event number (0 is the first event: --at N shows the state after \
                 event N) or `start` (before the first event), found `{text}`"
            )
        })
    }
}

/// A point of a trace named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Point {
    /// `--at`.
    At(EventPoint),
    /// Where allocated memory peaks.
    Peak,
    /// The end of the trace.
    End,
}

impl Point {
    /// The point of `--at` / `--peak`, the end when neither is given.
    pub fn from_options(at: Option<EventPoint>, peak: bool) -> Point {
        match (at, peak) {
            (Some(point), _) => Point::At(point),
            (None, true) => Point::Peak,
            (None, false) => Point::End,
        }
    }

    /// The walker's state index this point names on `device` (after this many of its events,
    /// inserted annotations included); an event number the device lacks is an error that says
    /// which it has.
    pub fn resolve(self, snapshot: &Snapshot, device: u32) -> anyhow::Result<usize> {
        let numbers = snapshot.event_numbers(device);
        match self {
            Point::At(EventPoint::Start) => Ok(0),
            Point::At(EventPoint::After(number)) => {
                numbers
                    .state_after(number)
                    .ok_or_else(|| match numbers.count() {
                        0 => anyhow::anyhow!(
                            "--at {number} is past the end: device {device} has no events (--at \
                         start is its only state)"
                        ),
                        n => anyhow::anyhow!(
                            "--at {number} is past the end: device {device} has events 0 to {} \
                         (--at N is the state after event N, --at start the one before event \
                         0)",
                            n - 1
                        ),
                    })
            }
            Point::End => Ok(numbers.len()),
            Point::Peak => Ok(allocated_peak(&memory_series(snapshot, device)?).index),
        }
    }
}

/// The device a command looks at: `--device`, else [`default_device`]; an unknown device is
/// an error that lists the known ones.
pub fn pick_device(snapshot: &Snapshot, device: Option<u32>) -> anyhow::Result<u32> {
    let devices = snapshot.devices();
    match device {
        Some(d) if devices.contains(&d) => Ok(d),
        Some(d) => anyhow::bail!(
            "device {d} has no segments or events in this trace (devices: {})",
            device_list(&devices)
        ),
        None => default_device(snapshot, &devices)
            .context("the trace has no devices: no segments and no events"),
    }
}

/// Of `devices`, the one every command and the viewer open when not told: the device of the
/// trace's first out-of-memory event, which is what most snapshots are taken to explain, else
/// the busiest ([`busiest_device`]), so a multi-GPU trace whose device 0 only holds a few
/// segments opens where the work was.
pub fn default_device(snapshot: &Snapshot, devices: &[u32]) -> Option<u32> {
    let out_of_memory = snapshot
        .events
        .iter()
        .find(|e| e.action == Action::Oom && devices.contains(&e.device));
    match out_of_memory {
        Some(event) => Some(event.device),
        None => busiest_device(snapshot, devices),
    }
}

/// The out-of-memory events of the devices other than `device`, counted per device, when
/// `device` has none and another has some; `None` otherwise.
pub fn out_of_memory_elsewhere(snapshot: &Snapshot, device: u32) -> Option<BTreeMap<u32, usize>> {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for event in snapshot.events.iter().filter(|e| e.action == Action::Oom) {
        if event.device == device {
            return None;
        }
        *counts.entry(event.device).or_default() += 1;
    }
    (!counts.is_empty()).then_some(counts)
}

/// `device 1 (1 event), device 2 (2 events)`: devices and their out-of-memory events, as
/// [`out_of_memory_elsewhere`] counts them.
pub fn devices_and_events(counts: &BTreeMap<u32, usize>) -> String {
    let listed: Vec<String> = counts
        .iter()
        .map(|(d, n)| format!("device {d} ({})", counted(*n as u64, "event")))
        .collect();
    listed.join(", ")
}

/// What a command looking at `device` says when other devices of the trace ran out of memory
/// and `device` did not: the user reading one device's report would not know otherwise.
/// `None` when no other device did, or `device` did too.
pub fn other_devices_out_of_memory(snapshot: &Snapshot, device: u32) -> Option<String> {
    other_devices_out_of_memory_by(snapshot, device, "--device")
}

/// As [`other_devices_out_of_memory`], naming `option` as the way to the device that ran out
/// of memory (`diff` names one trace's device with `--device-a` or `--device-b`).
pub fn other_devices_out_of_memory_by(
    snapshot: &Snapshot,
    device: u32,
    option: &str,
) -> Option<String> {
    let counts = out_of_memory_elsewhere(snapshot, device)?;
    let first = *counts.keys().next()?;
    Some(format!(
        "out of memory on {}, not on device {device}: {option} {first} shows it",
        devices_and_events(&counts)
    ))
}

/// Says [`other_devices_out_of_memory`] on standard error, where it does not mix with a
/// report on standard output.
pub fn note_other_devices_out_of_memory(snapshot: &Snapshot, device: u32) {
    if let Some(note) = other_devices_out_of_memory(snapshot, device) {
        eprintln!("memtrace: {note}");
    }
}

/// Of `devices`, the one with the most events, then the most reserved bytes, then the lowest
/// index. One pass over the events and the segments.
pub fn busiest_device(snapshot: &Snapshot, devices: &[u32]) -> Option<u32> {
    if let [only] = devices {
        return Some(*only);
    }
    let mut load: HashMap<u32, (usize, u64)> = HashMap::new();
    // Counted by runs: a device's events mostly follow each other.
    for run in snapshot.events.chunk_by(|a, b| a.device == b.device) {
        load.entry(run[0].device).or_default().0 += run.len();
    }
    for segment in &snapshot.segments {
        load.entry(segment.device).or_default().1 += segment.size;
    }
    devices.iter().copied().max_by_key(|d| {
        let (events, reserved) = load.get(d).copied().unwrap_or_default();
        (events, reserved, std::cmp::Reverse(*d))
    })
}

/// A top-level annotation: its tag and the state indices it spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The outermost tag.
    pub tag: String,
    /// State index where it begins.
    pub start: usize,
    /// State index where it ends.
    pub end: usize,
}

/// The outermost annotation tags of `device` as index ranges (the steps of a training loop
/// annotated `step0`, `step1`, ...), in order; stretches with no tag are not steps.
pub fn steps(snapshot: &Snapshot, device: u32) -> Vec<Step> {
    steps_by(snapshot, device, |tags| tags.first())
}

/// The ranges of `device`'s events over which `step_tag` picks the same tag from the
/// annotation stack (the stack after each `annotate` event, outermost first), in order; a
/// stretch where it picks none is not a step.
pub fn steps_by(
    snapshot: &Snapshot,
    device: u32,
    step_tag: impl Fn(&[std::sync::Arc<str>]) -> Option<&std::sync::Arc<str>>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut open: Option<(String, usize)> = None;
    let mut events = 0;
    for (i, event) in snapshot.device_events(device).enumerate() {
        events = i + 1;
        if event.action != Action::Annotate {
            continue;
        }
        let tag = snapshot
            .contexts
            .get(event.context)
            .and_then(|c| step_tag(&c.tags))
            .map(|t| t.to_string());
        if open.as_ref().map(|o| &o.0) != tag.as_ref() {
            if let Some((tag, start)) = open.take() {
                steps.push(Step { tag, start, end: i });
            }
            open = tag.map(|t| (t, i));
        }
    }
    if let Some((tag, start)) = open {
        steps.push(Step {
            tag,
            start,
            end: events,
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::{busiest_device, default_device, other_devices_out_of_memory};
    use blockpool::trace::{Action, ContextId, Snapshot, TraceEvent};
    use blockpool::StreamId;

    fn on(devices: &[u32]) -> Snapshot {
        with(devices, Action::Alloc)
    }

    fn with(devices: &[u32], action: Action) -> Snapshot {
        let event = |device| TraceEvent {
            action,
            device,
            stream: StreamId::DEFAULT,
            addr: 0x1000,
            size: 512,
            requested: 512,
            time_us: 0,
            context: ContextId::NONE,
        };
        Snapshot {
            events: devices.iter().map(|&d| event(d)).collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn the_busiest_device_counts_every_run_of_events() {
        // Device 1 has three events in two runs, device 0 two in two.
        let snapshot = on(&[0, 1, 1, 0, 1]);
        assert_eq!(busiest_device(&snapshot, &[0, 1]), Some(1));
        // A tie goes to the lower index (no segments: no reserved bytes either).
        let snapshot = on(&[2, 2, 0, 0]);
        assert_eq!(busiest_device(&snapshot, &[0, 2]), Some(0));
        // One device is that device, counted or not.
        assert_eq!(busiest_device(&on(&[]), &[3]), Some(3));
        assert_eq!(busiest_device(&on(&[]), &[]), None);
    }

    #[test]
    fn the_default_device_is_the_first_out_of_memory_events() {
        // Device 0 is the busiest; device 1 ran out of memory, then device 2.
        let mut snapshot = on(&[0, 0, 0, 1, 2]);
        let oom = |device| with(&[device], Action::Oom).events[0];
        snapshot.events.extend([oom(1), oom(2)]);
        assert_eq!(default_device(&snapshot, &[0, 1, 2]), Some(1));
        // Among the devices asked about only.
        assert_eq!(default_device(&snapshot, &[0, 2]), Some(2));
        // Without an out-of-memory event, the busiest.
        assert_eq!(default_device(&on(&[0, 0, 1]), &[0, 1]), Some(0));
    }

    #[test]
    fn another_devices_out_of_memory_is_said_unless_this_one_ran_out_too() {
        let oom = |device| with(&[device], Action::Oom).events[0];
        let mut snapshot = on(&[0, 0, 1]);
        snapshot.events.extend([oom(2), oom(1), oom(2)]);
        assert_eq!(
            other_devices_out_of_memory(&snapshot, 0).as_deref(),
            Some("out of memory on device 1 (1 event), device 2 (2 events), not on device 0: --device 1 shows it")
        );
        assert_eq!(other_devices_out_of_memory(&snapshot, 1), None);
        assert_eq!(other_devices_out_of_memory(&on(&[0, 1]), 0), None);
    }
}
