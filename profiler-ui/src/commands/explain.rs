//! `memtrace explain FILE [--device N] [--oom K | --peak] [--device-memory BYTES] [--config STR]
//! [--all-frames] [--full-stack] [--json]` (also `memtrace oom`): why a device ran out of
//! memory. At its first out-of-memory event (the K-th with `--oom K`), or at the reserved peak
//! when it has none (or with `--peak`), the device's memory split so the parts add up
//! ([`crate::analysis::explain`]), the failing request and its stack, and why it failed.

use crate::analysis::explain::moment::{explain_moment, MomentReport, Options, RequestReport};
use crate::analysis::explain::{percent, Explanation};
use crate::analysis::frames::FrameView;
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device, walker_taking};
use crate::cli::ExplainArgs;
use crate::format::{count, counted, format_size, seconds};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct ExplainReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The moment explained.
    #[serde(flatten)]
    pub moment: MomentReport,
}

/// Runs `memtrace explain`.
pub fn run(args: ExplainArgs, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(&args.file).context("cannot read the trace")?;
    let format = trace.format.as_str();
    let mut snapshot = trace.snapshot;
    let device = pick_device(&snapshot, args.device)?;
    let options = Options {
        oom: args.oom,
        peak: args.peak,
        device_total: args.device_memory,
        config: args.config.clone(),
        view: FrameView::from_flag(args.all_frames),
        full_stack: args.full_stack,
    };
    if args.device.is_some() {
        note_other_devices_out_of_memory(&snapshot, device);
    }
    let numbers = snapshot.event_numbers(device);
    // The events move into the walker, so a large trace holds them once.
    let mut walker = walker_taking(&mut snapshot, device)?;
    let moment = explain_moment(&snapshot, &numbers, device, &mut walker, &options)?;
    let report = ExplainReport {
        file: args.file.display().to_string(),
        format,
        moment,
    };
    out.report(&report, args.json, render)
}

/// The report as text.
pub fn render(report: &ExplainReport) -> String {
    let report = &report.moment;
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
            let peak = if report.moment == "allocated_peak" {
                "at the allocated peak (the trace records no segments)"
            } else {
                "at the reserved peak, where it is fullest"
            };
            let _ = writeln!(
                text,
                "device {}: {none}{peak}, {}{at}",
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
                "{indent}  {:>11} in {} other sites",
                format_size(e.other_sites_requested_bytes),
                count(e.other_sites)
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

/// The heading of a failing request's stack, saying how many frames were left out.
pub fn stack_heading(left_out: usize) -> String {
    let left_out = match left_out {
        0 => String::new(),
        n => format!(
            "; {} of the stack capture and the allocator left out: --full-stack prints {}",
            counted(n as u64, "frame"),
            if n == 1 { "it" } else { "them" }
        ),
    };
    format!("stack of the request (innermost first{left_out}):")
}

/// The failing request's stack.
fn render_stack(text: &mut String, request: &RequestReport) {
    if request.stack.is_empty() && request.frames_left_out == 0 {
        let _ = writeln!(text, "stack of the request: not recorded");
        return;
    }
    let _ = writeln!(text, "{}", stack_heading(request.frames_left_out));
    for frame in &request.stack {
        let _ = writeln!(text, "  {frame}");
    }
}
