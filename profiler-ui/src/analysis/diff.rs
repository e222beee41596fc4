//! Two traces compared site by site: the live bytes of each allocation site at the allocated
//! peak and at the end of each (each on its own device if asked: one rank against another),
//! and the differences, largest change first, beside each device's allocated and reserved
//! peaks. `memtrace diff` prints it (and gates on it, [`super::gate`]); the viewer's
//! multi-file page shows it for two files.

use super::frames::FrameView;
use super::sites::{sites_named_by, Site, SiteNames};
use super::timeline::{
    allocated_peak, memory_series, other_devices_out_of_memory_by, pick_device, walker,
};
use anyhow::Context as _;
use blockpool::trace::Snapshot;
use serde::Serialize;
use std::collections::BTreeMap;

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

/// How much `b` is above `a`, in percent of `a`: negative when it is below, `None` when `a` is
/// 0 and `b` is not (growth from nothing has no percentage).
pub fn percent_change(a: u64, b: u64) -> Option<f64> {
    match (a, b) {
        (0, 0) => Some(0.0),
        (0, _) => None,
        _ => Some((b as f64 - a as f64) / a as f64 * 100.0),
    }
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
    /// The most bytes A's device held in segments (reserved), at any point.
    pub peak_reserved_a: u64,
    /// The most bytes B's device held in segments (reserved), at any point.
    pub peak_reserved_b: u64,
    /// Every site of either trace, largest change (peak, then end) first.
    pub sites: Vec<SiteDiff>,
    /// For each trace whose compared device did not run out of memory while another of its
    /// devices did, a line that says so: `first trace: out of memory on device 0 (1 event),
    /// not on device 1: --device-a 0 shows it` (`second trace:` and `--device-b` for B).
    pub notes: Vec<String>,
}

/// One side of the comparison: a device's peaks and its sites at the allocated peak and at
/// the end.
struct Side {
    /// Allocated bytes at the allocated peak.
    peak_allocated: u64,
    /// The most reserved bytes at any point.
    peak_reserved: u64,
    /// The sites live at the allocated peak.
    at_peak: Vec<Site>,
    /// The sites live at the end.
    at_end: Vec<Site>,
}

/// The peaks of `device`, and its sites at the allocated peak and at the end.
fn peak_and_end(snapshot: &Snapshot, device: u32, view: FrameView) -> anyhow::Result<Side> {
    let names = SiteNames::new(snapshot, view);
    let series = memory_series(snapshot, device)?;
    let peak = allocated_peak(&series);
    let peak_reserved = series.iter().map(|s| s.reserved).max().unwrap_or(0);
    let mut walker = walker(snapshot, device)?;
    walker.seek(peak.index)?;
    let at_peak = sites_named_by(&names, &walker);
    let len = walker.len();
    walker.seek(len)?;
    let at_end = sites_named_by(&names, &walker);
    Ok(Side {
        peak_allocated: peak.allocated,
        peak_reserved,
        at_peak,
        at_end,
    })
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
    let side_a = peak_and_end(a, device_a, view)?;
    let side_b = peak_and_end(b, device_b, view)?;
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
    put(side_a.at_peak, |d, v| d.peak_a = v);
    put(side_b.at_peak, |d, v| d.peak_b = v);
    put(side_a.at_end, |d, v| d.end_a = v);
    put(side_b.at_end, |d, v| d.end_b = v);
    let mut sites: Vec<SiteDiff> = sites.into_values().collect();
    sites.sort_by(|x, y| {
        (y.peak_change().abs(), y.end_change().abs())
            .cmp(&(x.peak_change().abs(), x.end_change().abs()))
            .then_with(|| x.site.cmp(&y.site))
    });
    let notes = [
        ("first trace", a, device_a, "--device-a"),
        ("second trace", b, device_b, "--device-b"),
    ]
    .into_iter()
    .filter_map(|(which, snapshot, device, option)| {
        other_devices_out_of_memory_by(snapshot, device, option)
            .map(|note| format!("{which}: {note}"))
    })
    .collect();
    Ok(DiffReport {
        device_a,
        device_b,
        peak_a: side_a.peak_allocated,
        peak_b: side_b.peak_allocated,
        peak_reserved_a: side_a.peak_reserved,
        peak_reserved_b: side_b.peak_reserved,
        sites,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_change_is_of_the_first_and_undefined_from_nothing() {
        assert_eq!(percent_change(200, 250), Some(25.0));
        assert_eq!(percent_change(200, 150), Some(-25.0), "a fall is negative");
        assert_eq!(percent_change(7, 7), Some(0.0));
        assert_eq!(
            percent_change(0, 0),
            Some(0.0),
            "nothing to nothing is no change"
        );
        assert_eq!(
            percent_change(0, 1),
            None,
            "growth from nothing has no percentage"
        );
    }
}
