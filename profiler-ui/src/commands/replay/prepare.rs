//! One device of a trace made ready to replay under any settings: the device (asked for, else
//! the one every command opens), its events and starting state, and what its own allocator
//! did (the settings it ran under are [`crate::analysis::settings`]'s). `memtrace replay` runs it once; `memtrace tune` runs
//! it under many settings.

use super::capacity::DEFAULT_CAPACITY;
use super::engine::{self, Outcome, Settings, Workload};
use super::recorded::{self, Recorded};
use super::start;
use crate::analysis::timeline::out_of_memory_elsewhere;
use crate::format::device_list;
use anyhow::Context as _;
use blockpool::config::StreamReuse;
use blockpool::trace::file::TraceFormat;
use blockpool::trace::snapshot::Segment;
use blockpool::trace::{Action, DeviceState, Snapshot, StateWalker, TraceEvent};
use blockpool::AllocatorConfig;
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::ops::Range;

/// A device of a trace, ready to replay.
pub struct Prepared {
    /// The device.
    pub device: u32,
    /// What the trace's allocator did; `None` when the trace records no segments (RMM logs).
    pub recorded: Option<Recorded>,
    /// The device's events, and its state before the first.
    walker: StateWalker,
    start_state: DeviceState,
    free_on: Action,
    trace_span: Option<Range<u64>>,
    numbers: blockpool::trace::EventNumbers,
    /// The other devices that ran out of memory when this one did not, with their
    /// out-of-memory events; empty otherwise.
    pub out_of_memory_elsewhere: BTreeMap<u32, usize>,
}

impl Prepared {
    /// Rebuilds `device` of `snapshot` (recorded in `format`) and walks it once for the
    /// recording's own figures.
    pub fn new(snapshot: &Snapshot, format: TraceFormat, device: u32) -> anyhow::Result<Self> {
        let mut walker = snapshot
            .state_walker(device)
            .with_context(|| format!("cannot rebuild the memory of device {device}"))?;
        let start_state = walker.state();
        // RMM logs and traces without segment information say nothing about reserved memory.
        let has_segments = snapshot.has_segment_information(device);
        let recorded =
            (format != TraceFormat::RmmCsv && has_segments).then(|| recorded::walk(&mut walker));
        let events = walker.events();
        let free_on = if events.iter().any(|e| e.action == Action::FreeCompleted) {
            Action::FreeCompleted
        } else {
            Action::FreeRequested
        };
        let trace_span = span(&start_state.segments, events);
        Ok(Prepared {
            device,
            out_of_memory_elsewhere: out_of_memory_elsewhere(snapshot, device).unwrap_or_default(),
            recorded,
            free_on,
            trace_span,
            numbers: snapshot.event_numbers(device),
            start_state,
            walker,
        })
    }

    /// The device's events, oldest first.
    pub fn events(&self) -> &[TraceEvent] {
        self.walker.events()
    }

    /// The device's state before its first event.
    pub fn start_state(&self) -> &DeviceState {
        &self.start_state
    }

    /// The events the file numbers.
    pub fn numbered_events(&self) -> u64 {
        self.numbers.count() as u64
    }

    /// What one replay under `config` runs: from the starting state's segments, or with
    /// `fresh` from its live blocks alone. Under the stream-ordered policy a block freed while
    /// other streams still use it (`record_stream`) is cached at once, its reuse ordered by
    /// event waits: its memory is freed at `free_requested`, not when the recording's
    /// allocator saw the streams' work complete.
    pub fn workload(&self, config: &AllocatorConfig, fresh: bool) -> Workload<'_> {
        let free_on = match config.stream_reuse() {
            StreamReuse::Ordered => Action::FreeRequested,
            StreamReuse::Compatible => self.free_on,
        };
        Workload {
            start: start::plan(&self.start_state, config, fresh),
            events: self.events(),
            numbers: self.numbers.clone(),
            free_on,
            trace_span: self.trace_span.clone(),
        }
    }

    /// One replay under `config` on a simulated device of `capacity_bytes` (trace addresses
    /// not kept), from the starting state's segments or with `fresh` its live blocks alone.
    pub fn replay(
        &self,
        config: &AllocatorConfig,
        capacity_bytes: u64,
        fresh: bool,
        progress: &ProgressBar,
    ) -> anyhow::Result<Outcome> {
        let settings = Settings {
            config: config.clone(),
            capacity_bytes,
            exact: false,
        };
        engine::run(&self.workload(config, fresh), &settings, progress)
    }

    /// The events whose runs the replay takes for `empty_cache` calls, as the trace has them:
    /// `segment_free`, `segment_unmap` (expandable segments) or both; none when it has neither.
    pub fn segment_releases(&self) -> Vec<&'static str> {
        [Action::SegmentFree, Action::SegmentUnmap]
            .into_iter()
            .filter(|&action| self.events().iter().any(|e| e.action == action))
            .map(Action::as_str)
            .collect()
    }

    /// The simulated device's capacity and where it came from: `given` (`--capacity`), else
    /// the recorded device's memory (`trace`: its out-of-memory events tell it), else
    /// [`DEFAULT_CAPACITY`] (`default`).
    pub fn capacity(&self, given: Option<u64>) -> (u64, &'static str) {
        let recorded = self.recorded.as_ref().and_then(|r| r.device_memory_bytes);
        match (given, recorded) {
            (Some(bytes), _) => (bytes, "--capacity"),
            (None, Some(bytes)) => (bytes, "trace"),
            (None, None) => (DEFAULT_CAPACITY, "default"),
        }
    }
}

/// The capacity line's words for where the capacity came from: `source` as
/// [`Prepared::capacity`] gives it, for `device`, whose
/// `elsewhere` are the other devices that ran out of memory.
pub fn capacity_words(source: &str, device: u32, elsewhere: &BTreeMap<u32, usize>) -> String {
    match source {
        "trace" => {
            "the recorded device: device_free + reserved at its out-of-memory event".to_string()
        }
        "default" if !elsewhere.is_empty() => {
            format!("default: device {device} recorded no out-of-memory event to tell its memory")
        }
        "default" => "default: the trace does not tell the device's memory".to_string(),
        other => other.to_string(),
    }
}

/// The device to replay: `asked`, which must have events or segments (or be 0 in an empty
/// trace), else the one every command opens (its first out-of-memory event's, else the
/// busiest), else 0.
pub fn pick_device(snapshot: &Snapshot, asked: Option<u32>) -> anyhow::Result<u32> {
    let devices = snapshot.devices();
    match asked {
        Some(device) if devices.contains(&device) || devices.is_empty() && device == 0 => {
            Ok(device)
        }
        Some(device) => anyhow::bail!(
            "device {device} has no events or segments in this trace (it has: {})",
            device_list(&devices)
        ),
        None => Ok(crate::analysis::timeline::default_device(snapshot, &devices).unwrap_or(0)),
    }
}

/// The addresses the trace's segments cover: the starting ones and every `segment_alloc`.
fn span(segments: &[Segment], events: &[TraceEvent]) -> Option<Range<u64>> {
    let starting = segments.iter().map(|s| (s.address, s.size));
    let allocated = events
        .iter()
        .filter(|e| matches!(e.action, Action::SegmentAlloc | Action::SegmentMap))
        .map(|e| (e.addr, e.size));
    starting
        .chain(allocated)
        .fold(None, |range, (address, size)| {
            let end = address.saturating_add(size);
            Some(match range {
                None => address..end,
                Some(r) => r.start.min(address)..r.end.max(end),
            })
        })
}
