//! Which moment of a device to explain and its report: the K-th out-of-memory event (the first
//! by default) with its request and stack, or the reserved peak where it is fullest; shared by
//! `memtrace explain` and the viewer's `/api/explain`.

use super::{explain, request_of, Context, Explanation, Request};
use crate::analysis::fragmentation::ReservedPeak;
use crate::analysis::frames::{shown_frames, stack_line, FrameView};
use crate::analysis::settings::recorded_config;
use crate::analysis::sites::SiteNames;
use crate::format::{count, counted};
use anyhow::Context as _;
use blockpool::trace::{Action, EventNumbers, Snapshot, StateWalker};
use blockpool::AllocatorConfig;
use serde::Serialize;

/// Which moment, and how to show it.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The K-th out-of-memory event (1 is the first); `None`: the first, if any.
    pub oom: Option<usize>,
    /// The reserved peak, even when the device ran out of memory.
    pub peak: bool,
    /// The GPU's total memory, when known.
    pub device_total: Option<u64>,
    /// The settings the recording ran under, when the trace does not say.
    pub config: Option<AllocatorConfig>,
    /// How sites are named.
    pub view: FrameView,
    /// Every frame of the request's stack.
    pub full_stack: bool,
}

/// One moment of a device explained, as `memtrace explain --json` and `/api/explain` give it.
#[derive(Debug, Serialize)]
pub struct MomentReport {
    /// The device.
    pub device: u32,
    /// `out_of_memory` (the state an out-of-memory event met), `reserved_peak` (the state of
    /// the reserved peak where allocated memory is highest) or `allocated_peak` (a trace without
    /// segments: the first state where allocated memory is highest).
    pub moment: &'static str,
    /// The out-of-memory event's number, or the event after which the peak first holds (`None`:
    /// before the first event, or an event the import inserted).
    pub event: Option<usize>,
    /// How the moment is named in text.
    pub label: String,
    /// Its time, in microseconds since the origin.
    pub time_us: u64,
    /// Out-of-memory events on the device.
    pub out_of_memory_events: usize,
    /// Which of them this is, 1 for the first; `None` at the reserved peak.
    pub out_of_memory_number: Option<usize>,
    /// The allocator settings the split judges blocks by (rounding, `max_split_size_mb`), in
    /// config syntax (empty: PyTorch's defaults).
    pub config: String,
    /// Where they came from: `--config`, `trace` or `default`.
    pub config_source: &'static str,
    /// The failing request, at an out-of-memory event.
    pub request: Option<RequestReport>,
    /// The device's memory, split.
    pub explanation: Explanation,
}

/// The failing request.
#[derive(Debug, Serialize)]
pub struct RequestReport {
    /// Its size, rounding, stream, pool and the device's free bytes.
    #[serde(flatten)]
    pub request: Request,
    /// Its site, as `top` names sites.
    pub site: String,
    /// Its stack, innermost first, `file:line:function` per frame: every recorded frame with
    /// `--full-stack`, else without those memory_viz hides and the allocator's plumbing.
    pub stack: Vec<String>,
    /// Recorded frames left out of `stack`.
    pub frames_left_out: usize,
}

/// Explains the moment `options` name on `device` of `snapshot`, whose states `walker` walks
/// (it is left anywhere) and whose events are numbered by `numbers`. `snapshot` gives the
/// contexts and the settings; its events may have moved into the walker
/// ([`crate::analysis::timeline::walker_taking`]).
pub fn explain_moment(
    snapshot: &Snapshot,
    numbers: &EventNumbers,
    device: u32,
    walker: &mut StateWalker,
    options: &Options,
) -> anyhow::Result<MomentReport> {
    let ooms: Vec<usize> = walker
        .events()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == Action::Oom)
        .map(|(i, _)| i)
        .collect();
    let (config, config_source, _) = recorded_config(options.config.as_ref(), snapshot);
    let names = SiteNames::new(snapshot, options.view);
    let ctx = Context {
        snapshot,
        names: &names,
        config: &config,
        device_total: options.device_total,
    };
    let chosen = match (options.peak, options.oom) {
        (true, _) => None,
        (false, Some(k)) => Some(*ooms.get(k.saturating_sub(1)).with_context(|| match ooms.len() {
            0 => format!("--oom {k}: device {device} has no out-of-memory event (--peak explains its reserved peak)"),
            n => format!(
                "--oom {k}: device {device} has {} (--oom 1 to {n})",
                counted(n as u64, "out-of-memory event")
            ),
        })?),
        (false, None) => ooms.first().copied(),
    };
    let (moment, index, request, request_report) = match chosen {
        Some(index) => {
            let event = &walker.events()[index];
            let request = request_of(event.size, event.stream, event.addr, &config);
            let frames = snapshot
                .contexts
                .get(event.context)
                .map_or(&[][..], |c| &c.frames[..]);
            let stack: Vec<String> = shown_frames(frames, options.full_stack)
                .into_iter()
                .map(stack_line)
                .collect();
            let report = RequestReport {
                request: request.clone(),
                site: names.of_allocation(event.context, false).label(),
                frames_left_out: frames.len() - stack.len(),
                stack,
            };
            ("out_of_memory", index, Some(request), Some(report))
        }
        None => {
            let (moment, index) = peak_moment(walker)?;
            (moment, index, None, None)
        }
    };
    // An out-of-memory event met the state before it; a peak holds after its event.
    walker.seek(index)?;
    let explanation = explain(&ctx, walker, request.as_ref());
    let (event, label, time_us) = if moment == "out_of_memory" {
        let time = walker.events().get(index).map_or(0, |e| e.time_us);
        (numbers.number(index), numbers.label(index), time)
    } else {
        let time = index
            .checked_sub(1)
            .and_then(|i| walker.events().get(i))
            .map_or(0, |e| e.time_us);
        let label = match numbers.state(index) {
            Some(number) => format!("after event {}", count(number as u64)),
            None => "before the first event".to_string(),
        };
        (numbers.state(index), label, time)
    };
    Ok(MomentReport {
        device,
        moment,
        event,
        label,
        time_us,
        out_of_memory_events: ooms.len(),
        out_of_memory_number: chosen
            .and_then(|i| ooms.iter().position(|&o| o == i))
            .map(|k| k + 1),
        config: config.to_string(),
        config_source,
        request: request_report,
        explanation,
    })
}

/// The moment to explain without an out-of-memory event: the reserved peak where allocated
/// memory is highest, as `summary` takes fragmentation there (`reserved_peak`); in a trace
/// that records no segments (an RMM log), the allocated peak (`allocated_peak`).
fn peak_moment(walker: &mut StateWalker) -> anyhow::Result<(&'static str, usize)> {
    walker.seek(0)?;
    let start = walker.totals();
    let mut peak = ReservedPeak::start(start.reserved_bytes, start.allocated_bytes);
    let (mut allocated, mut allocated_index) = (start.allocated_bytes, 0);
    for (i, totals) in walker.totals_ahead().enumerate() {
        peak.note(i + 1, totals.reserved_bytes, totals.allocated_bytes);
        if totals.allocated_bytes > allocated {
            (allocated, allocated_index) = (totals.allocated_bytes, i + 1);
        }
    }
    Ok(if peak.reserved_bytes == 0 {
        ("allocated_peak", allocated_index)
    } else {
        // Where the peak is fullest: the moment the reservation was most needed.
        ("reserved_peak", peak.fullest_index)
    })
}
