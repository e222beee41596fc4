//! `memtrace summary FILE [--all-frames] [--json]`: the summary of a trace ([`summarize_in`]: per device, the
//! peaks, fragmentation at the allocated peak, the top sites there and every out-of-memory event
//! explained), as text or as JSON.

use crate::analysis::frames::FrameView;
use crate::analysis::summary::{summarize_in, SummaryReport};
use crate::format::{count, format_size, seconds};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;

/// The report as text.
pub fn render(report: &SummaryReport) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "file:      {} ({})", report.file, report.format);
    if report.devices.is_empty() {
        let _ = writeln!(text, "devices:   none (no segments, no events)");
    }
    for d in &report.devices {
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
        let span = if timed {
            format!("over {}", seconds(d.span_us))
        } else {
            "(no times recorded)".to_string()
        };
        let _ = writeln!(text, "  events:    {} {span}", count(d.events as u64));
        for (name, peak) in [
            ("allocated", &d.peak_allocated),
            ("reserved", &d.peak_reserved),
            ("requested", &d.peak_requested),
        ] {
            let _ = writeln!(
                text,
                "  peak {name:<9} {:>10} at event {}{}",
                format_size(peak.bytes),
                count(peak.index as u64),
                at(peak.time_us)
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
            "  fragmentation at the allocated peak: {:.1}% of reserved is not allocated; free \
             memory {} in blocks, largest {} ({:.1}% scattered)",
            100.0 * d.fragmentation_reserved,
            format_size(d.free_bytes),
            format_size(d.largest_free_block),
            100.0 * d.fragmentation_free
        );
        if !d.top_sites.is_empty() {
            let _ = writeln!(text, "  top sites at the allocated peak:");
            for site in &d.top_sites {
                let _ = writeln!(
                    text,
                    "    {:>10}  {:>6} blocks  {}",
                    format_size(site.bytes),
                    count(site.blocks),
                    site.label
                );
            }
        }
        if d.out_of_memory.is_empty() {
            let _ = writeln!(text, "  out of memory: no out-of-memory event was recorded");
        }
        for oom in &d.out_of_memory {
            let _ = writeln!(
                text,
                "  out of memory at event {}{}: {}",
                count(oom.index as u64),
                at(oom.time_us),
                oom.explanation
            );
        }
    }
    text
}

/// Runs `memtrace summary`.
pub fn run(file: &Path, view: FrameView, json: bool, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let report = summarize_in(file, trace.format.as_str(), &trace.snapshot, view)?;
    if json {
        out.json(&report)
    } else {
        out.write(&render(&report))?;
        out.flush()?;
        Ok(())
    }
}
