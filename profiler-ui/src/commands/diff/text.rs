//! `memtrace diff`'s report for people: the peaks, then one row per changed site in columns,
//! then how many sites are not listed.

use crate::analysis::diff::DiffReport;
use crate::format::{counted, format_size, signed_size};
use std::fmt::Write as _;

/// The report as text, at most `limit` changed sites listed (`None`: all).
pub fn render(report: &DiffReport, limit: Option<usize>) -> String {
    let mut text = String::new();
    if report.device_a != report.device_b {
        let _ = writeln!(
            text,
            "device {} of A against device {} of B",
            report.device_a, report.device_b
        );
    }
    for (what, a, b) in [
        ("allocated", report.peak_a, report.peak_b),
        ("reserved", report.peak_reserved_a, report.peak_reserved_b),
    ] {
        let _ = writeln!(
            text,
            "{what} peak: {} -> {} ({})",
            format_size(a),
            format_size(b),
            signed_size(b as i128 - a as i128)
        );
    }
    let _ = writeln!(
        text,
        "{:>11} {:>11} {:>12}   {:>11} {:>11} {:>12}   site",
        "peak A", "peak B", "change", "end A", "end B", "change"
    );
    let changed: Vec<_> = report
        .sites
        .iter()
        .filter(|d| d.peak_change() != 0 || d.end_change() != 0)
        .collect();
    let shown = limit.unwrap_or(usize::MAX).min(changed.len());
    for d in &changed[..shown] {
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
    let hidden = changed.len() - shown;
    if hidden > 0 {
        let _ = writeln!(
            text,
            "{} (--limit)",
            counted(hidden as u64, "more changed site")
        );
    }
    let _ = writeln!(
        text,
        "{} unchanged",
        counted((report.sites.len() - changed.len()) as u64, "site")
    );
    text
}
