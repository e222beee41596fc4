//! `memtrace summary FILE [--all-frames] [--json]`: the summary of a trace ([`summarize_owned`]:
//! per device, the peaks and what sizes they add up, fragmentation at the reserved peak, the
//! free memory and top sites at the allocated peak and every out-of-memory event explained), as
//! text or as JSON.

use crate::analysis::fragmentation::DEFINITION as FRAGMENTATION;
use crate::analysis::frames::FrameView;
use crate::analysis::summary::{summarize_owned, OomExplained, SummaryReport};
use crate::analysis::timeline::devices_and_events;
use crate::commands::explain::{render_parts, stack_heading};
use crate::format::{count, counted, format_size, seconds, span};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The report as text; `full_stack` prints every recorded frame of a failing request's stack.
pub fn render(report: &SummaryReport, full_stack: bool) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "file:      {} ({})", report.file, report.format);
    if report.devices.is_empty() {
        let _ = writeln!(text, "devices:   none (no segments, no events)");
    }
    for d in &report.devices {
        let after = |peak: &crate::analysis::summary::Peak| match peak.after_event {
            Some(number) => format!("after event {}", count(number as u64)),
            None => "before event 0".to_string(),
        };
        // Traces without times (old PyTorch files) say so once instead of "0.000000 s" each.
        let timed = d.span_us > 0;
        let at = |us: u64| {
            if timed {
                format!(" ({})", seconds(us))
            } else {
                String::new()
            }
        };
        let _ = writeln!(text, "device {}", d.device);
        let span = match span(d.first_time_us.zip(d.last_time_us)) {
            words if words.is_empty() => words,
            words => format!(" {words}"),
        };
        let _ = writeln!(text, "  events:    {}{span}", count(d.events as u64));
        if d.inserted_annotations > 0 {
            let _ = writeln!(
                text,
                "             (events are numbered as in the file's device_traces; {} from \
                 external_annotations {} among them without a number)",
                counted(d.inserted_annotations as u64, "annotation"),
                if d.inserted_annotations == 1 {
                    "is"
                } else {
                    "are"
                }
            );
        }
        for (name, peak, kind) in [
            ("allocated", &d.peak_allocated, "block sizes"),
            ("reserved", &d.peak_reserved, "segment sizes"),
            ("requested", &d.peak_requested, "request sizes"),
        ] {
            let _ = writeln!(
                text,
                "  peak {name:<9} {:>10} {}{} ({kind})",
                format_size(peak.bytes),
                after(peak),
                at(peak.time_us)
            );
        }
        if report.format == "pytorch" {
            let _ = writeln!(
                text,
                "             (PyTorch's trace records requests, not block sizes: a block it \
                 alone shows counts at its request rounded as the allocator rounds it, the \
                 least it took)"
            );
        }
        let _ = writeln!(
            text,
            "  segments:  {} at the allocated peak, {} at the end",
            count(d.segments_at_peak),
            count(d.segments_at_end)
        );
        let _ = writeln!(
            text,
            "  fragmentation: {:.2} % ({FRAGMENTATION}, as replay reports it)",
            100.0 * d.fragmentation_at_reserved_peak
        );
        if let Some(streams) = &d.streams {
            let _ = writeln!(
                text,
                "  streams:   {} allocate; at the reserved peak {} is cached on streams done \
                 allocating (stranded) and {} waits for other streams; {} waited \
                 (`memtrace streams` for each stream and what stream_reuse:ordered would reserve)",
                count(streams.allocating),
                format_size(streams.stranded_at_reserved_peak_bytes),
                format_size(streams.waiting_at_reserved_peak_bytes),
                counted(streams.frees_waited, "free")
            );
        }
        let _ = writeln!(
            text,
            "  free memory at the allocated peak: {} in blocks, largest {}; {:.1} % scattered \
             (1 - largest free block / free bytes: 0 % when it is one block)",
            format_size(d.free_bytes),
            format_size(d.largest_free_block),
            100.0 * d.free_scattered
        );
        if !d.top_sites.is_empty() {
            let _ = writeln!(text, "  top sites at the allocated peak:");
            for site in &d.top_sites {
                let _ = writeln!(
                    text,
                    "    {:>10}  {:>13}  {}",
                    format_size(site.bytes),
                    counted(site.blocks, "block"),
                    site.label
                );
            }
        }
        if d.out_of_memory.is_empty() {
            let _ = writeln!(
                text,
                "  out of memory: no out-of-memory event was recorded on this device{}",
                elsewhere(report, d.device)
            );
        }
        if let Some(memory) = &d.at_reserved_peak {
            let _ = writeln!(
                text,
                "  memory at the reserved peak ({}):",
                after(&d.peak_reserved)
            );
            render_parts(&mut text, memory, "    ");
        }
        for oom in &d.out_of_memory {
            render_oom(&mut text, oom, &at(oom.time_us), full_stack);
        }
    }
    text
}

/// For a device without out-of-memory events, the other devices of `report` that ran out of
/// memory and where their sections are: `; out of memory on device 0 (1 event): see its
/// section above`; empty when none did.
fn elsewhere(report: &SummaryReport, device: u32) -> String {
    let position = |d: u32| report.devices.iter().position(|s| s.device == d);
    let here = position(device);
    let counts: BTreeMap<u32, usize> = report
        .devices
        .iter()
        .filter(|d| d.device != device && !d.out_of_memory.is_empty())
        .map(|d| (d.device, d.out_of_memory.len()))
        .collect();
    if counts.is_empty() {
        return String::new();
    }
    let (whose, sections) = if counts.len() == 1 {
        ("its", "section")
    } else {
        ("their", "sections")
    };
    let places: Vec<_> = counts.keys().map(|&d| position(d) > here).collect();
    let place = if places.iter().all(|&below| below) {
        " below"
    } else if places.iter().all(|&below| !below) {
        " above"
    } else {
        ""
    };
    format!(
        "; out of memory on {}: see {whose} {sections}{place}",
        devices_and_events(&counts)
    )
}

/// `event 1,234`, or for an event the import inserted its label.
fn event_label(oom: &OomExplained) -> String {
    match oom.event {
        Some(number) => format!("event {}", count(number as u64)),
        None => oom.label.clone(),
    }
}

/// Frames of a failing request's stack printed before the rest is counted.
const OOM_STACK_FRAMES: usize = 12;

/// One out-of-memory event: the failing request (size, stream, site), why it failed, the
/// device's memory split, and the request's stack.
fn render_oom(text: &mut String, oom: &OomExplained, at: &str, full_stack: bool) {
    let _ = writeln!(
        text,
        "  out of memory at {}{}: {} requested on stream {} at {}",
        event_label(oom),
        at,
        format_size(oom.requested_bytes),
        oom.stream,
        oom.site
    );
    let _ = writeln!(text, "    why: {}", oom.explanation);
    render_parts(text, &oom.memory, "    ");
    let stack = if full_stack {
        &oom.stack
    } else {
        &oom.shown_stack
    };
    if oom.stack.is_empty() {
        let _ = writeln!(text, "    stack: not recorded");
        return;
    }
    let heading = stack_heading(oom.stack.len() - stack.len());
    let _ = writeln!(text, "    {heading}");
    for frame in stack.iter().take(OOM_STACK_FRAMES) {
        let _ = writeln!(text, "      {frame}");
    }
    if stack.len() > OOM_STACK_FRAMES {
        let _ = writeln!(
            text,
            "      ... {} more (--json has them all)",
            counted((stack.len() - OOM_STACK_FRAMES) as u64, "frame")
        );
    }
}

/// Runs `memtrace summary`.
pub fn run(
    file: &Path,
    view: FrameView,
    full_stack: bool,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let report = summarize_owned(file, trace.format.as_str(), trace.snapshot, view)?;
    out.report(&report, json, |report| render(report, full_stack))
}
