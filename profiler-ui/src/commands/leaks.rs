//! `memtrace leaks FILE [--device N] [--all-frames] [--step PREFIX] [--growth-steps K] [--json]`:
//! the sites whose live memory grows step after step, the persistent memory apart, and what was
//! allocated during the trace and is alive at its end, per device.
//!
//! `--json` prints one [`LeakReport`] per device, as the viewer's `/api/leaks` serves it:
//! `device`; `steps` (the step tags) and `step_rule` (`kind`: `named`, `outermost` or `none`;
//! `prefix`; `text`, the sentence below); `measured_at` (the measurement names: `before STEP`,
//! then each step); `settings` (`min_growth_steps`, `warmup_steps`); `growing` (per site:
//! `site`, `autograd_node`, `label`, `steps`, `since`, `bytes`, `blocks`, `growth_bytes`,
//! `growth_blocks`, `growth_bytes_per_step`, `growth_blocks_per_step`, and the series
//! `bytes_by_step` and `blocks_by_step` in `measured_at` order); `persistent` (`site`,
//! `autograd_node`, `label`, `bytes`, `blocks`, `since`); `alive_at_end` (sites as `top` lists
//! them, persistent ones left out); `alive_from_before_bytes`.

use crate::analysis::leaks::{find_leaks, LeakOptions, LeakReport};
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device};
use crate::format::{counted, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;

/// Runs `memtrace leaks`.
pub fn run(
    file: &Path,
    device: Option<u32>,
    options: &LeakOptions,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    // Refuse bad settings before reading what may be a large file.
    blockpool::leak::StepDetector::new(options.growth_settings()).context("--growth-steps")?;
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let reports: Vec<anyhow::Result<_>> = match device {
        Some(_) => {
            let device = pick_device(snapshot, device)?;
            // Without --device every device is reported, the one that ran out of memory too.
            note_other_devices_out_of_memory(snapshot, device);
            vec![find_leaks(snapshot, device, options)]
        }
        // Split once, so each device's pass reads its own events.
        None => snapshot
            .by_device()
            .into_iter()
            .map(|(d, part)| find_leaks(&part, d, options))
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
pub fn render(report: &LeakReport, text: &mut String) {
    let _ = writeln!(text, "device {}", report.device);
    let _ = writeln!(text, "  steps: {}", report.step_rule.text);
    if let (false, Some(first)) = (report.steps.is_empty(), report.measured_at.first()) {
        let _ = writeln!(text, "  measured: {first}, then at the end of each step");
    }
    let k = report.settings.min_growth_steps;
    let measurements = report.measured_at.len();
    if measurements <= k as usize {
        let _ = writeln!(
            text,
            "  growing: cannot tell from {}: {} (--growth-steps) take {}",
            counted(measurements as u64, "measurement"),
            counted(u64::from(k), "consecutive growing step"),
            u64::from(k) + 1
        );
    } else if report.growing.is_empty() {
        let _ = writeln!(
            text,
            "  growing: none (no site grew at each of the last {})",
            counted(u64::from(k), "measurement")
        );
    } else {
        let _ = writeln!(
            text,
            "  growing ({k} or more consecutive growing steps): {}",
            counted(report.growing.len() as u64, "site")
        );
    }
    for g in &report.growing {
        let series: Vec<String> = g.bytes_by_step.iter().map(|&b| format_size(b)).collect();
        let _ = writeln!(
            text,
            "    +{:>10} +{} per step over {} since {}: {}  ({})",
            format_size(g.growth_bytes_per_step),
            counted(g.growth_blocks_per_step, "block"),
            counted(g.steps, "step"),
            g.since,
            g.label,
            series.join(" -> ")
        );
    }
    let persistent: u64 = report.persistent.iter().map(|p| p.bytes).sum();
    let _ = match report.settings.warmup_steps {
        0 => write!(
            text,
            "  persistent (unchanged since the first measurement): "
        ),
        warmup => write!(
            text,
            "  persistent (unchanged since one of the first {} measurements): ",
            u64::from(warmup) + 1,
        ),
    };
    let _ = match report.persistent.len() {
        0 => writeln!(text, "none"),
        n => writeln!(
            text,
            "{} in {}",
            format_size(persistent),
            counted(n as u64, "site")
        ),
    };
    for p in &report.persistent {
        let _ = writeln!(
            text,
            "    {:>10}  {:>13}  {}  (since {})",
            format_size(p.bytes),
            counted(p.blocks, "block"),
            p.label,
            p.since
        );
    }
    let total: u64 = report.alive_at_end.iter().map(|s| s.bytes).sum();
    let blocks: u64 = report.alive_at_end.iter().map(|s| s.blocks).sum();
    let _ = writeln!(
        text,
        "  alive at the end, allocated during the trace (persistent sites apart): {} in {}",
        format_size(total),
        counted(blocks, "block")
    );
    for site in &report.alive_at_end {
        let _ = writeln!(
            text,
            "    {:>10}  {:>13}  {}",
            format_size(site.bytes),
            counted(site.blocks, "block"),
            site.label
        );
    }
    let _ = writeln!(
        text,
        "  alive at the end, allocated before the trace began: {}",
        format_size(report.alive_from_before_bytes)
    );
}
