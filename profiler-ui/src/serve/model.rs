//! The trace as the viewer holds it, computed once at start: per device, every allocation's
//! lifetime in state indices, the memory curves at every state, the time of every state, and a
//! [`StateWalker`] for the allocator's segments and blocks at any event.
//!
//! State `i` is the memory after the device's first `i` events (0: before any; the number of
//! events: the end), as everywhere in blockpool's trace tools.

use super::error::ServeError;
use super::joined;
use super::lifetimes::{allocation_lifetimes, event_lifetimes, segment_spans, EventLifetimes};
use super::lod::{self, Series};
use super::streams::{StreamsView, WhatIf};
use crate::analysis::frames::FrameView;
use crate::analysis::leaks::{find_leaks_from, LeakOptions, LeakReport};
use crate::analysis::sites::{site_name, BEFORE_RECORDING};
use crate::analysis::summary::{summarize_device_from, SummaryReport};
use crate::analysis::timeline::default_device;
use blockpool::trace::perfetto::{annotation_intervals, AnnotationInterval};
use blockpool::trace::{ContextId, Snapshot, StateError, StateWalker};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

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
    /// Memory by stream (`/api/streams`), made when first asked for.
    pub stream_memory: OnceLock<Arc<StreamsView>>,
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
    /// Where a filtered window's bytes alive per state are summed, kept from one request to
    /// the next (a request that finds them held sums into its own).
    pub sums: Mutex<lod::Sums>,
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
    /// The device opened when a request names none: the first out-of-memory event's, else
    /// the busiest, as every command picks it.
    pub default_device: Option<u32>,
    /// How to replay a device under the stream-ordered policy, when the command serving the
    /// trace lends one ([`with_what_if`](Self::with_what_if)).
    pub what_if: Option<WhatIf>,
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
            // What the events alone give (the events' part of the allocations' lifetimes,
            // the event numbers, the annotations) is made while the states are rebuilt (a
            // part's events are all its device's).
            let (walker, from_events) = std::thread::scope(|scope| {
                let from_events = scope.spawn(|| FromEvents {
                    lifetimes: event_lifetimes(&part.events),
                    numbers: part.event_numbers(device),
                    annotations: annotation_intervals(&part, device),
                });
                (part.state_walker(device), joined(from_events))
            });
            let walker = walker.map_err(|source| ServeError::State { device, source })?;
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
                let model = build_device(device, walker, from_events, || joined(leaks));
                (joined(summary), model)
            });
            let model = model?;
            summaries.push(summary?);
            devices.push(model);
        }
        let contexts = context_texts(&snapshot);
        let default_device = default_device(&snapshot, &model_devices(&devices));
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
            default_device,
            what_if: None,
        })
    }

    /// The model, replaying its devices with `what_if` for `/api/streams`.
    pub fn with_what_if(self, what_if: WhatIf) -> TraceModel {
        TraceModel {
            what_if: Some(what_if),
            ..self
        }
    }

    /// The devices, as the snapshot lists them (without a pass over its events).
    pub fn device_ids(&self) -> Vec<u32> {
        model_devices(&self.devices)
    }

    /// The device `device`, or the default one when `None`.
    pub fn device(&self, device: Option<u32>) -> Option<&DeviceModel> {
        match device.or(self.default_device) {
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

/// The devices of `models`, in order.
fn model_devices(models: &[DeviceModel]) -> Vec<u32> {
    models.iter().map(|m| m.device).collect()
}

/// What a device's model takes from its events alone.
struct FromEvents {
    lifetimes: EventLifetimes,
    numbers: blockpool::trace::EventNumbers,
    annotations: Vec<AnnotationInterval>,
}

/// The model of `device`, `walker` its walker at index 0 and `from_events` what its events
/// alone give; `leaks` gives its leak report, made meanwhile. The allocations' lifetimes and
/// their bytes alive are made on a thread of their own while this one makes the curves and
/// the segments' spans from the walker.
fn build_device(
    device: u32,
    mut walker: StateWalker,
    from_events: FromEvents,
    leaks: impl FnOnce() -> anyhow::Result<LeakReport>,
) -> Result<DeviceModel, ServeError> {
    let failed = |source| ServeError::State { device, source };
    let events = walker.len();
    let initial = walker.state();
    let (spans, from_walker) = std::thread::scope(|scope| {
        let spans = scope.spawn(|| {
            let (allocations, state_time_us) =
                allocation_lifetimes(&initial, from_events.lifetimes);
            let mut streams: Vec<u64> = allocations.iter().map(|a| a.stream).collect();
            streams.sort_unstable();
            streams.dedup();
            let allocation_bytes = lod::alive_bytes(&allocations, state_time_us.len());
            (allocations, state_time_us, streams, allocation_bytes)
        });
        let from_walker = (|| {
            let curves = Curves::of(&mut walker)?;
            let peak_index = curves.allocated_peak();
            let segments = segment_spans(&initial, walker.events());
            let segment_bytes = lod::alive_bytes(&segments, events.saturating_add(1));
            // Leave the walker at the peak, where the page first asks for the segments.
            walker.seek(peak_index)?;
            Ok((curves, peak_index, segments, segment_bytes))
        })();
        (joined(spans), from_walker)
    });
    let (allocations, state_time_us, streams, allocation_bytes) = spans;
    let (curves, peak_index, segments, segment_bytes) = from_walker.map_err(failed)?;
    debug_assert_eq!(
        state_time_us.len(),
        events + 1,
        "a state per event, and the first"
    );
    let has_times = state_time_us.last() > state_time_us.first();
    let leaks = Arc::new(leaks()?);
    Ok(DeviceModel {
        device,
        events,
        state_time_us,
        curves,
        allocations,
        peak_index,
        numbers: from_events.numbers,
        annotations: from_events.annotations,
        leaks,
        leaks_by_options: Mutex::new(HashMap::new()),
        streams,
        stream_memory: OnceLock::new(),
        segments,
        allocation_bytes,
        segment_bytes,
        has_times,
        walker: Mutex::new(walker),
        sums: Mutex::new(lod::Sums::default()),
    })
}
