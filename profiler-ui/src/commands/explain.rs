//! `memtrace explain FILE [--device N] [--oom K | --peak] [--device-memory BYTES] [--config STR]
//! [--all-frames] [--full-stack] [--json]` (also `memtrace oom`): why a device ran out of
//! memory. At its first out-of-memory event (the K-th with `--oom K`), or at the reserved peak
//! when it has none (or with `--peak`), the device's memory split so the parts add up
//! ([`crate::analysis::explain`]), the failing request and its stack, and why it failed.

use crate::analysis::explain::{explain, percent, request_of, Context, Explanation, Request};
use crate::analysis::fragmentation::ReservedPeak;
use crate::analysis::frames::{shown_frames, stack_line, FrameView};
use crate::analysis::sites::SiteNames;
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device, walker};
use crate::cli::ExplainArgs;
use crate::commands::replay::prepare::choose_config;
use crate::format::{count, counted, format_size, seconds};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::{Action, Snapshot};
use serde::Serialize;
use std::fmt::Write as _;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct ExplainReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The device.
    pub device: u32,
    /// `out_of_memory` (the state an out-of-memory event met) or `reserved_peak` (the first
    /// state where reserved memory is highest).
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

/// Runs `memtrace explain`.
pub fn run(args: ExplainArgs, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(&args.file).context("cannot read the trace")?;
    let report = report(&args, &trace.snapshot, trace.format.as_str())?;
    if args.device.is_some() {
        note_other_devices_out_of_memory(&trace.snapshot, report.device);
    }
    out.report(&report, args.json, render)
}

/// Explains the moment `args` name.
pub fn report(
    args: &ExplainArgs,
    snapshot: &Snapshot,
    format: &'static str,
) -> anyhow::Result<ExplainReport> {
    let device = pick_device(snapshot, args.device)?;
    let mut walker = walker(snapshot, device)?;
    let numbers = snapshot.event_numbers(device);
    let ooms: Vec<usize> = walker
        .events()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == Action::Oom)
        .map(|(i, _)| i)
        .collect();
    let (config, config_source, _) = choose_config(args.config.as_ref(), snapshot);
    let view = FrameView::from_flag(args.all_frames);
    let names = SiteNames::new(snapshot, view);
    let ctx = Context {
        snapshot,
        names: &names,
        config: &config,
        device_total: args.device_memory,
    };
    let chosen = match (args.peak, args.oom) {
        (true, _) => None,
        (false, Some(k)) => Some(*ooms.get(k.saturating_sub(1)).with_context(|| match ooms.len() {
            0 => format!("--oom {k}: device {device} has no out-of-memory event (--peak explains its reserved peak)"),
            n => format!("--oom {k}: device {device} has {} (--oom 1 to {n})", counted(n as u64, "out-of-memory event")),
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
            let stack: Vec<String> = shown_frames(frames, args.full_stack)
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
        None => ("reserved_peak", reserved_peak(&mut walker)?, None, None),
    };
    // An out-of-memory event met the state before it; a peak holds after its event.
    walker.seek(index)?;
    let explanation = explain(&ctx, &walker, request.as_ref());
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
    Ok(ExplainReport {
        file: args.file.display().to_string(),
        format,
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

/// The state index of the walker's device's reserved peak where allocated memory is highest,
/// as `summary` takes fragmentation there.
fn reserved_peak(walker: &mut blockpool::trace::StateWalker) -> anyhow::Result<usize> {
    walker.seek(0)?;
    let start = walker.totals();
    let mut peak = ReservedPeak::start(start.reserved_bytes, start.allocated_bytes);
    for (i, totals) in walker.totals_ahead().enumerate() {
        peak.note(i + 1, totals.reserved_bytes, totals.allocated_bytes);
    }
    // Where the peak is fullest: the moment the reservation was most needed.
    Ok(peak.fullest_index)
}

/// The report as text.
pub fn render(report: &ExplainReport) -> String {
    let mut text = String::new();
    let at = if report.time_us > 0 {
        format!(" ({})", seconds(report.time_us))
    } else {
        String::new()
    };
    match &report.request {
        Some(request) => {
            let r = &request.request;
            let _ = writeln!(
                text,
                "device {}: out of memory at {}{at}, {} of {} on the device: {} requested ({} \
                 rounded) on stream {}, {} pool, at {}",
                report.device,
                report.label,
                report.out_of_memory_number.unwrap_or(0),
                count(report.out_of_memory_events as u64),
                format_size(r.bytes),
                format_size(r.rounded_bytes),
                r.stream,
                r.pool,
                request.site
            );
        }
        None => {
            let none = if report.out_of_memory_events == 0 {
                "no out-of-memory event was recorded on it; "
            } else {
                ""
            };
            let _ = writeln!(
                text,
                "device {}: {none}at the reserved peak, {}{at}",
                report.device, report.label
            );
        }
    }
    let e = &report.explanation;
    let _ = writeln!(text, "why: {}", e.why);
    render_parts(&mut text, e, "");
    if let Some(request) = &report.request {
        render_stack(&mut text, request);
    }
    text
}

/// The device line, the parts of reserved memory, live memory by category and by site, and
/// fragmentation, each line starting with `indent`.
pub fn render_parts(text: &mut String, e: &Explanation, indent: &str) {
    let reserved = e.reserved_bytes;
    let device = &e.device;
    match (device.free_bytes, device.total_bytes, device.outside_bytes) {
        (Some(free), Some(total), Some(outside)) => {
            let _ = writeln!(
                text,
                "{indent}the GPU: {} = {} reserved by this allocator + {} free + {} outside it \
                 (CUDA context, cuBLAS and NCCL workspaces, other processes)",
                format_size(total),
                format_size(reserved),
                format_size(free),
                format_size(outside)
            );
        }
        (Some(free), Some(total), None) => {
            let _ = writeln!(
                text,
                "{indent}the GPU: {} given, less than the {} reserved and {} free the trace \
                 shows: --device-memory is too small",
                format_size(total),
                format_size(reserved),
                format_size(free)
            );
        }
        (Some(free), None, _) => {
            let _ = writeln!(
                text,
                "{indent}the device: {} free + {} reserved by this allocator = {} this process \
                 could use (--device-memory with the GPU's total adds the memory outside it)",
                format_size(free),
                format_size(reserved),
                format_size(free.saturating_add(reserved))
            );
        }
        (None, _, _) => {}
    }
    let _ = writeln!(text, "{indent}reserved: {}", format_size(reserved));
    for part in &e.parts {
        let mut line = format!(
            "{indent}  {:>11} {:>6.1} %  {}",
            format_size(part.bytes),
            percent(part.bytes, reserved),
            part.name
        );
        if part.key == "too_small" {
            if let Some(largest) = e.largest_usable_free_block {
                let _ = write!(line, " (the largest {})", format_size(largest));
            }
        }
        let _ = writeln!(text, "{line}");
    }
    if !e.categories.is_empty() {
        let _ = writeln!(
            text,
            "{indent}live allocations by what their stacks say they hold:"
        );
        for share in &e.categories {
            let _ = writeln!(
                text,
                "{indent}  {:>11} {:>14}  {}",
                format_size(share.requested_bytes),
                counted(share.blocks, "block"),
                share.name
            );
        }
    }
    if !e.sites.is_empty() {
        let _ = writeln!(text, "{indent}live allocations by site, as requested:");
        for site in &e.sites {
            let _ = writeln!(
                text,
                "{indent}  {:>11} {:>14}  {}",
                format_size(site.requested_bytes),
                counted(site.blocks, "block"),
                site.label
            );
        }
        if e.other_sites > 0 {
            let _ = writeln!(
                text,
                "{indent}  {:>11} in {}",
                format_size(e.other_sites_requested_bytes),
                counted(e.other_sites, "other site")
            );
        }
    }
    if e.unsegmented_requested_bytes > 0 {
        let _ = writeln!(
            text,
            "{indent}(and {} live in blocks of no recorded segment, not in reserved)",
            format_size(e.unsegmented_requested_bytes)
        );
    }
    let _ = writeln!(
        text,
        "{indent}fragmentation: {:.2} % ({}, here)",
        100.0 * e.fragmentation,
        e.fragmentation_definition
    );
}

/// The failing request's stack.
fn render_stack(text: &mut String, request: &RequestReport) {
    if request.stack.is_empty() && request.frames_left_out == 0 {
        let _ = writeln!(text, "stack of the request: not recorded");
        return;
    }
    let left_out = match request.frames_left_out {
        0 => String::new(),
        n => format!(
            "; {} of the stack capture and the allocator left out: --full-stack shows {}",
            counted(n as u64, "frame"),
            if n == 1 { "it" } else { "them" }
        ),
    };
    let _ = writeln!(text, "stack of the request (innermost first{left_out}):");
    for frame in &request.stack {
        let _ = writeln!(text, "  {frame}");
    }
}
