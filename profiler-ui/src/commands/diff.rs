//! `memtrace diff A B [--device N | --device-a N --device-b M] [--all-frames] [--json]`: per allocation site,
//! the live bytes at the allocated peak and at the end of each trace (each on its own device if
//! asked: one rank against another), and the differences, largest change first, after the
//! allocated and reserved peaks. The analysis
//! is [`crate::analysis::diff`]; this prints it.

use crate::analysis::diff::diff;
use crate::analysis::frames::FrameView;
use crate::format::{format_size, signed_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use std::fmt::Write as _;
use std::path::Path;

/// Runs `memtrace diff`.
pub fn run(
    a: &Path,
    b: &Path,
    devices: (Option<u32>, Option<u32>),
    view: FrameView,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    let first = load_trace(a).context("cannot read the first trace")?;
    let second = load_trace(b).context("cannot read the second trace")?;
    let report = diff(&first.snapshot, &second.snapshot, devices, view)?;
    if json {
        return out.json(&report);
    }
    let mut text = String::new();
    if report.device_a != report.device_b {
        let _ = writeln!(
            text,
            "device {} of A against device {} of B",
            report.device_a, report.device_b
        );
    }
    let _ = writeln!(
        text,
        "allocated peak: {} -> {} ({})",
        format_size(report.peak_a),
        format_size(report.peak_b),
        signed_size(report.peak_b as i128 - report.peak_a as i128)
    );
    let _ = writeln!(
        text,
        "reserved peak: {} -> {} ({})",
        format_size(report.peak_reserved_a),
        format_size(report.peak_reserved_b),
        signed_size(report.peak_reserved_b as i128 - report.peak_reserved_a as i128)
    );
    let _ = writeln!(
        text,
        "{:>11} {:>11} {:>12}   {:>11} {:>11} {:>12}   site",
        "peak A", "peak B", "change", "end A", "end B", "change"
    );
    for d in report
        .sites
        .iter()
        .filter(|d| d.peak_change() != 0 || d.end_change() != 0)
    {
        let _ = writeln!(
            text,
            "{:>11} {:>11} {:>12}   {:>11} {:>11} {:>12}   {}",
            format_size(d.peak_a),
            format_size(d.peak_b),
            signed_size(d.peak_change()),
            format_size(d.end_a),
            format_size(d.end_b),
            signed_size(d.end_change()),
            d.site
        );
    }
    let same = report
        .sites
        .iter()
        .filter(|d| d.peak_change() == 0 && d.end_change() == 0)
        .count();
    let _ = writeln!(text, "{same} sites unchanged");
    out.write(&text)?;
    out.flush()?;
    Ok(())
}
