//! `memtrace summary FOLDER | PATTERN | FILE FILE...`: one line per file (its busiest
//! device's events, peaks and out-of-memory events) and how the peaks spread across the files
//! ([`Spread`]: highest, lowest, mean, `max / min`, `max - mean`, the file farthest from the
//! mean), with the outliers: the files whose allocated or reserved peak is more than
//! [`OUTLIER_ABOVE_MEAN`] above the mean. Files are read one at a time, so memory is the
//! largest file's, not the sum; the list is resolved as `memtrace serve` resolves it (a
//! folder's trace files, or `run-{rank}.pickle`), up to [`MAX_SUMMARY_FILES`].

use crate::analysis::frames::FrameView;
use crate::analysis::spread::{spread, Spread};
use crate::analysis::summary::{out_of_memory_text, summarize_in, DeviceOoms};
use crate::analysis::timeline::busiest_device;
use crate::format::{count, counted, format_size};
use crate::load::load_trace;
use crate::output::Output;
use crate::serve::files::{is_pattern, resolve_at_most};
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Most files one `memtrace summary` reads.
pub const MAX_SUMMARY_FILES: usize = 4096;
/// A file is an outlier when one of its peaks is more than this fraction above the mean.
pub const OUTLIER_ABOVE_MEAN: f64 = 0.10;

/// One file's line.
#[derive(Debug, Serialize)]
pub struct FileLine {
    /// `rank N`, or the file name.
    pub label: String,
    /// Its rank, in a rank series.
    pub rank: Option<u32>,
    /// The path as found.
    pub path: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The device summarized (the busiest); `None` for a file without devices.
    pub device: Option<u32>,
    /// Its events.
    pub events: usize,
    /// Its allocated peak, in bytes.
    pub peak_allocated: u64,
    /// Its reserved peak, in bytes.
    pub peak_reserved: u64,
    /// Its out-of-memory events.
    pub out_of_memory: usize,
    /// Other devices of the file that ran out of memory (the summarized one is the busiest,
    /// not necessarily the one that ran out).
    pub out_of_memory_elsewhere: Vec<DeviceOoms>,
}

/// What `memtrace summary` over several files reports.
#[derive(Debug, Serialize)]
pub struct RankSummary {
    /// The files are one rank series (labelled `rank N`).
    pub ranks: bool,
    /// Each file, in rank (or name) order.
    pub files: Vec<FileLine>,
    /// How the allocated peaks spread across the files.
    pub allocated: Spread,
    /// How the reserved peaks spread.
    pub reserved: Spread,
    /// Indices (in `files`) of the outliers, ascending.
    pub outliers: Vec<usize>,
}

/// Whether `files` asks for the summary of several files: more than one path, a folder or a
/// rank pattern.
pub fn is_several(files: &[PathBuf]) -> bool {
    match files {
        [one] => one.is_dir() || is_pattern(one),
        _ => true,
    }
}

/// The report over `files`.
pub fn summarize(files: &[PathBuf]) -> anyhow::Result<RankSummary> {
    let entries = resolve_at_most(
        files,
        MAX_SUMMARY_FILES,
        &format!("memtrace summary reads at most {MAX_SUMMARY_FILES} at once"),
    )?;
    let mut lines = Vec::with_capacity(entries.len());
    for entry in &entries {
        let trace = load_trace(&entry.path)
            .with_context(|| format!("cannot read {}", entry.path.display()))?;
        let snapshot = &trace.snapshot;
        // Ranks are compared on their busiest devices, alike from file to file (the SQL of
        // the README picks them the same way).
        let device = busiest_device(snapshot, &snapshot.devices());
        let report = summarize_in(
            &entry.path,
            trace.format.as_str(),
            snapshot,
            FrameView::User,
        )?;
        let summary = report.devices.iter().find(|d| Some(d.device) == device);
        lines.push(FileLine {
            label: entry.label.clone(),
            rank: entry.rank,
            path: entry.path.display().to_string(),
            format: trace.format.as_str(),
            device,
            events: summary.map_or(0, |d| d.events),
            peak_allocated: summary.map_or(0, |d| d.peak_allocated.bytes),
            peak_reserved: summary.map_or(0, |d| d.peak_reserved.bytes),
            out_of_memory: summary.map_or(0, |d| d.out_of_memory.len()),
            out_of_memory_elsewhere: report.out_of_memory_elsewhere(device),
        });
    }
    let allocated = spread(&lines.iter().map(|l| l.peak_allocated).collect::<Vec<_>>());
    let reserved = spread(&lines.iter().map(|l| l.peak_reserved).collect::<Vec<_>>());
    let above = |peak: u64, spread: &Spread| peak as f64 > spread.mean * (1.0 + OUTLIER_ABOVE_MEAN);
    let outliers = (0..lines.len())
        .filter(|&i| {
            lines.len() > 1
                && (above(lines[i].peak_allocated, &allocated)
                    || above(lines[i].peak_reserved, &reserved))
        })
        .collect();
    Ok(RankSummary {
        ranks: entries.len() > 1 && entries.iter().all(|e| e.rank.is_some()),
        files: lines,
        allocated,
        reserved,
        outliers,
    })
}

/// The report as text.
pub fn render(report: &RankSummary) -> String {
    let mut text = String::new();
    let what = if report.ranks { "rank" } else { "file" };
    let _ = writeln!(text, "{}", counted(report.files.len() as u64, what));
    let _ = writeln!(
        text,
        "{:<24} {:>6} {:>12} {:>16} {:>16} {:>13}",
        "file", "device", "events", "peak allocated", "peak reserved", "out of memory"
    );
    for line in &report.files {
        let device = line.device.map_or("-".to_owned(), |d| d.to_string());
        let _ = writeln!(
            text,
            "{:<24} {device:>6} {:>12} {:>16} {:>16} {:>13}",
            line.label,
            count(line.events as u64),
            format_size(line.peak_allocated),
            format_size(line.peak_reserved),
            out_of_memory_text(line.out_of_memory, &line.out_of_memory_elsewhere)
        );
    }
    let label = |i: usize| report.files.get(i).map_or("?", |l| l.label.as_str());
    for (name, s) in [
        ("allocated", &report.allocated),
        ("reserved", &report.reserved),
    ] {
        let ratio = s
            .max_over_min
            .map_or("-".to_owned(), |r| format!("{r:.3}x"));
        let _ = writeln!(
            text,
            "{name} peaks: highest {} ({}), lowest {} ({}), mean {}, max / min {ratio}, \
             max - mean {}; farthest from the mean: {}",
            format_size(s.max),
            label(s.max_file),
            format_size(s.min),
            label(s.min_file),
            format_size(s.mean.round() as u64),
            format_size(s.max_minus_mean.max(0.0).round() as u64),
            label(s.outlier)
        );
    }
    let outliers: Vec<&str> = report.outliers.iter().map(|&i| label(i)).collect();
    let _ = writeln!(
        text,
        "outliers (a peak more than {:.0}% above the mean): {}",
        OUTLIER_ABOVE_MEAN * 100.0,
        if outliers.is_empty() {
            "none".to_owned()
        } else {
            outliers.join(", ")
        }
    );
    text
}

/// Runs `memtrace summary` over several files.
pub fn run(files: &[PathBuf], json: bool, out: &mut Output) -> anyhow::Result<()> {
    let report = summarize(files)?;
    out.report(&report, json, render)
}
