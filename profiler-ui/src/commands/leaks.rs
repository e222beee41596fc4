//! `memtrace leaks FILE [--device N] [--all-frames] [--json]`: allocations made during the trace and alive at
//! its end, grouped by site, and the sites whose live memory grows across annotated steps.

use crate::analysis::frames::FrameView;
use crate::analysis::leaks::{find_leaks_in, LeakReport};
use crate::format::{count, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;

/// Runs `memtrace leaks`.
pub fn run(
    file: &Path,
    device: Option<u32>,
    view: FrameView,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let reports: Vec<anyhow::Result<_>> = match device {
        Some(_) => vec![find_leaks_in(
            snapshot,
            crate::analysis::timeline::pick_device(snapshot, device)?,
            view,
        )],
        // Split once, so each device's pass reads its own events.
        None => snapshot
            .by_device()
            .into_iter()
            .map(|(d, part)| find_leaks_in(&part, d, view))
            .collect(),
    };
    let reports = reports.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    if json {
        return out.json(&reports);
    }
    let mut text = String::new();
    if reports.is_empty() {
        text.push_str("no devices: the trace has no segments and no events\n");
    }
    for report in &reports {
        render(report, &mut text);
    }
    out.write(&text)?;
    out.flush()?;
    Ok(())
}

/// One device's report as text.
fn render(report: &LeakReport, text: &mut String) {
    let _ = writeln!(text, "device {}", report.device);
    let total: u64 = report.alive_at_end.iter().map(|s| s.bytes).sum();
    let blocks: u64 = report.alive_at_end.iter().map(|s| s.blocks).sum();
    let _ = writeln!(
        text,
        "  alive at the end, allocated during the trace: {} in {} blocks",
        format_size(total),
        count(blocks)
    );
    for site in &report.alive_at_end {
        let _ = writeln!(
            text,
            "    {:>10}  {:>6} blocks  {}",
            format_size(site.bytes),
            count(site.blocks),
            site.label
        );
    }
    let _ = writeln!(
        text,
        "  alive at the end, allocated before the trace began: {}",
        format_size(report.alive_from_before_bytes)
    );
    if report.steps.len() < 2 {
        let _ = writeln!(
            text,
            "  growth across steps: needs two or more annotated steps (outermost annotate tags); \
             found {}",
            report.steps.len()
        );
        return;
    }
    let _ = writeln!(
        text,
        "  growth across {} steps ({} .. {}):",
        report.steps.len(),
        report.steps[0],
        report.steps[report.steps.len() - 1]
    );
    if report.growing.is_empty() {
        let _ = writeln!(
            text,
            "    none: no site's live memory grows from step to step"
        );
    }
    for growth in &report.growing {
        let per_step: Vec<String> = growth
            .bytes_per_step
            .iter()
            .map(|&b| format_size(b))
            .collect();
        let _ = writeln!(
            text,
            "    +{:>10}  {}  ({})",
            format_size(growth.growth_bytes),
            growth.label,
            per_step.join(" -> ")
        );
    }
}
