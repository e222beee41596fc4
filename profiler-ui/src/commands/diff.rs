//! `memtrace diff A B [--device N | --device-a N --device-b M] [--all-frames] [--json]`: per allocation site,
//! the live bytes at the allocated peak and at the end of each trace (each on its own device if
//! asked: one rank against another), and the differences, largest change first.

use crate::analysis::frames::FrameView;
use crate::analysis::sites::{sites_named_by, Site, SiteNames};
use crate::analysis::timeline::{allocated_peak, memory_series, pick_device, walker};
use crate::format::{format_size, signed_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One site in both traces.
#[derive(Debug, Default, Serialize)]
pub struct SiteDiff {
    /// The site.
    pub site: String,
    /// Live allocated bytes at A's allocated peak.
    pub peak_a: u64,
    /// Live allocated bytes at B's allocated peak.
    pub peak_b: u64,
    /// At the end of A.
    pub end_a: u64,
    /// At the end of B.
    pub end_b: u64,
}

impl SiteDiff {
    /// B's peak bytes minus A's.
    pub fn peak_change(&self) -> i128 {
        self.peak_b as i128 - self.peak_a as i128
    }

    /// B's end bytes minus A's.
    pub fn end_change(&self) -> i128 {
        self.end_b as i128 - self.end_a as i128
    }
}

/// The diff report.
#[derive(Debug, Serialize)]
pub struct DiffReport {
    /// The device of A compared.
    pub device_a: u32,
    /// The device of B compared.
    pub device_b: u32,
    /// Allocated bytes at A's peak.
    pub peak_a: u64,
    /// Allocated bytes at B's peak.
    pub peak_b: u64,
    /// Every site of either trace, largest change (peak, then end) first.
    pub sites: Vec<SiteDiff>,
}

/// Sites at the allocated peak and at the end of `device`.
fn peak_and_end(
    snapshot: &Snapshot,
    device: u32,
    view: FrameView,
) -> anyhow::Result<(u64, Vec<Site>, Vec<Site>)> {
    let names = SiteNames::new(snapshot, view);
    let peak = allocated_peak(&memory_series(snapshot, device)?);
    let mut walker = walker(snapshot, device)?;
    walker.seek(peak.index)?;
    let at_peak = sites_named_by(&names, &walker, false);
    let len = walker.len();
    walker.seek(len)?;
    let at_end = sites_named_by(&names, &walker, false);
    Ok((peak.allocated, at_peak, at_end))
}

/// Compares device `devices.0` of `a` with device `devices.1` of `b` (each, when `None`, the
/// trace's busiest), sites named in `view`.
pub fn diff(
    a: &Snapshot,
    b: &Snapshot,
    devices: (Option<u32>, Option<u32>),
    view: FrameView,
) -> anyhow::Result<DiffReport> {
    let device_a = pick_device(a, devices.0).context("first trace")?;
    let device_b = pick_device(b, devices.1).context("second trace")?;
    let (peak_a, a_peak, a_end) = peak_and_end(a, device_a, view)?;
    let (peak_b, b_peak, b_end) = peak_and_end(b, device_b, view)?;
    let mut sites: BTreeMap<String, SiteDiff> = BTreeMap::new();
    let mut put = |list: Vec<Site>, set: fn(&mut SiteDiff, u64)| {
        for site in list {
            let entry = sites.entry(site.label.clone()).or_insert_with(|| SiteDiff {
                site: site.label.clone(),
                ..SiteDiff::default()
            });
            set(entry, site.bytes);
        }
    };
    put(a_peak, |d, v| d.peak_a = v);
    put(b_peak, |d, v| d.peak_b = v);
    put(a_end, |d, v| d.end_a = v);
    put(b_end, |d, v| d.end_b = v);
    let mut sites: Vec<SiteDiff> = sites.into_values().collect();
    sites.sort_by(|x, y| {
        (y.peak_change().abs(), y.end_change().abs())
            .cmp(&(x.peak_change().abs(), x.end_change().abs()))
            .then_with(|| x.site.cmp(&y.site))
    });
    Ok(DiffReport {
        device_a,
        device_b,
        peak_a,
        peak_b,
        sites,
    })
}

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
