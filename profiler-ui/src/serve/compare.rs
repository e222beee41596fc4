//! The figures of the multi-file page (`/api/compare`), computed once at start: per file, the
//! device compared, its peaks with the event that reached each and the sites at the allocated
//! peak; one scale for every file's small timeline; the spread of the peaks across the files
//! (the imbalance of a rank series); and, for two files, the sites that changed (the analysis
//! of `memtrace diff`).
//!
//! Each file is compared on one device: its busiest (the most events, then the most reserved
//! bytes), as every command picks it. Peaks are each file's own, wherever in its trace they
//! fall: the spread compares the highest point of each file, not the files at one moment.

use super::error::ServeError;
use super::files::FileEntry;
use super::lod::Axis;
use super::model::TraceModel;
use crate::analysis::diff::{diff, SiteDiff};
use crate::analysis::frames::FrameView;
use crate::analysis::sites::Site;
use crate::analysis::spread::{spread, Spread};
use crate::analysis::summary::{DeviceOoms, DeviceSummary, Peak};
use crate::analysis::timeline::busiest_device;
use serde::Serialize;

/// Most changed sites the two-file comparison lists.
const MAX_SITE_CHANGES: usize = 50;

/// What `/api/compare` answers.
#[derive(Debug, Serialize)]
pub struct Comparison {
    /// The files are one rank series (labelled `rank N`), not separate runs.
    pub ranks: bool,
    /// Each file, in the page's order.
    pub files: Vec<FileView>,
    /// One scale for every file's timeline.
    pub scale: Scale,
    /// How the peaks spread across the files; `None` with one file.
    pub imbalance: Option<Imbalance>,
    /// Sites of the second file against the first; only with exactly two files, each with a
    /// device.
    pub sites: Option<SitesCompared>,
}

/// One file as the page shows it.
#[derive(Debug, Serialize)]
pub struct FileView {
    /// Its index, as the `file` parameter of every route takes it.
    pub file: usize,
    /// Its name, or `rank N`.
    pub label: String,
    /// Its rank in a rank series.
    pub rank: Option<u32>,
    /// The path as given.
    pub path: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// Every device of the file.
    pub devices: Vec<DeviceBrief>,
    /// The device compared: the busiest.
    pub device: u32,
    /// Its events.
    pub events: usize,
    /// Time of its first event, in microseconds since the file's origin.
    pub first_us: u64,
    /// From its first to its last event, in microseconds (0: no times recorded).
    pub span_us: u64,
    /// The file's length on the scale's axis: `span_us + 1` on time, `events + 1` states on
    /// events.
    pub extent: u64,
    /// Highest bytes in allocated blocks (block sizes, as the allocator rounded them).
    pub peak_allocated: PeakView,
    /// Highest bytes in segments (memory held from the device).
    pub peak_reserved: PeakView,
    /// Highest bytes the callers of active blocks asked for.
    pub peak_requested: PeakView,
    /// The sites holding the most allocated bytes at the allocated peak, most first.
    pub top_sites: Vec<Site>,
    /// Out-of-memory events recorded on the device.
    pub out_of_memory: usize,
    /// Other devices of the file that ran out of memory (the compared one is the busiest, not
    /// necessarily the one that ran out).
    pub out_of_memory_elsewhere: Vec<DeviceOoms>,
}

/// A device of a file, in brief.
#[derive(Debug, Serialize)]
pub struct DeviceBrief {
    /// Device index.
    pub device: u32,
    /// Recorded events.
    pub events: usize,
    /// Highest allocated bytes.
    pub peak_allocated: u64,
    /// Highest reserved bytes.
    pub peak_reserved: u64,
}

/// A peak and what reached it.
#[derive(Debug, Serialize)]
pub struct PeakView {
    /// Bytes.
    pub bytes: u64,
    /// The state index: the peak holds after this many of the device's events (0: it is the
    /// memory held before the first recorded event).
    pub index: usize,
    /// The event after which the peak first holds, by its number (the file's own: PyTorch's
    /// index in `device_traces`); `None` before the first event.
    pub after_event: Option<usize>,
    /// Microseconds from the device's first event to the event that reached it.
    pub after_start_us: u64,
    /// The event that reached it; `None` at index 0.
    pub event: Option<PeakEvent>,
}

/// The event that reached a peak.
#[derive(Debug, Serialize)]
pub struct PeakEvent {
    /// `alloc`, `segment_alloc`, ...
    pub action: &'static str,
    /// Bytes it moved.
    pub size: u64,
    /// The site of its context.
    pub site: String,
}

/// One scale for every file's timeline: x from each file's first event, y from 0.
#[derive(Debug, Serialize)]
pub struct Scale {
    /// Time when every file has times, else events.
    pub axis: Axis,
    /// The longest file's extent.
    pub extent: u64,
    /// The highest reserved peak of any file, in bytes.
    pub bytes: u64,
}

/// The spread of the files' peaks.
#[derive(Debug, Serialize)]
pub struct Imbalance {
    /// Of the allocated peaks.
    pub allocated: Spread,
    /// Of the reserved peaks.
    pub reserved: Spread,
}

/// Two files site by site (`memtrace diff`'s analysis).
#[derive(Debug, Serialize)]
pub struct SitesCompared {
    /// The first file (A).
    pub a: usize,
    /// The second file (B).
    pub b: usize,
    /// Allocated bytes at A's peak.
    pub peak_a: u64,
    /// Allocated bytes at B's peak.
    pub peak_b: u64,
    /// The sites whose bytes at the peak or at the end changed, largest change first, at most
    /// [`MAX_SITE_CHANGES`].
    pub changed: Vec<SiteDiff>,
    /// Sites that changed, all of them.
    pub changed_count: usize,
    /// Sites the same at both peaks and both ends.
    pub unchanged_count: usize,
}

/// The comparison of `traces`, labelled by `files`.
pub fn compare(files: &[FileEntry], traces: &[TraceModel]) -> Result<Comparison, ServeError> {
    let mut views = Vec::with_capacity(traces.len());
    for (index, (entry, trace)) in files.iter().zip(traces).enumerate() {
        views.push(file_view(index, entry, trace)?);
    }
    let axis = if views.iter().all(|v| v.span_us > 0) {
        Axis::Time
    } else {
        Axis::Event
    };
    for view in &mut views {
        view.extent = match axis {
            Axis::Time => view.span_us + 1,
            Axis::Event => view.events as u64 + 1,
        };
    }
    let scale = Scale {
        axis,
        extent: views.iter().map(|v| v.extent).max().unwrap_or(1),
        bytes: views
            .iter()
            .map(|v| v.peak_reserved.bytes)
            .max()
            .unwrap_or(0),
    };
    let imbalance = (views.len() > 1).then(|| Imbalance {
        allocated: spread(
            &views
                .iter()
                .map(|v| v.peak_allocated.bytes)
                .collect::<Vec<_>>(),
        ),
        reserved: spread(
            &views
                .iter()
                .map(|v| v.peak_reserved.bytes)
                .collect::<Vec<_>>(),
        ),
    });
    let has_devices = |t: &TraceModel| !t.devices.is_empty();
    let sites = match (traces, &views[..]) {
        ([a, b], [va, vb]) if has_devices(a) && has_devices(b) => {
            Some(sites_compared(a, b, (va.device, vb.device))?)
        }
        _ => None,
    };
    Ok(Comparison {
        ranks: views.len() > 1 && files.iter().all(|f| f.rank.is_some()),
        files: views,
        scale,
        imbalance,
        sites,
    })
}

fn file_view(index: usize, entry: &FileEntry, trace: &TraceModel) -> Result<FileView, ServeError> {
    // A file without devices (no segments, no events) shows as empty, not as an error.
    let device = busiest_device(&trace.snapshot, &trace.device_ids());
    let summary = trace
        .summary
        .devices
        .iter()
        .find(|d| Some(d.device) == device);
    let first_us = trace
        .device(device)
        .and_then(|d| d.state_time_us.first().copied())
        .unwrap_or(0);
    let none = Peak::default();
    let peak = |of: fn(&DeviceSummary) -> &Peak| {
        let peak = summary.map_or(&none, of);
        peak_view(trace, device.unwrap_or(0), first_us, peak)
    };
    Ok(FileView {
        file: index,
        label: entry.label.clone(),
        rank: entry.rank,
        path: entry.path.display().to_string(),
        format: trace.format,
        devices: trace
            .summary
            .devices
            .iter()
            .map(|d| DeviceBrief {
                device: d.device,
                events: d.events,
                peak_allocated: d.peak_allocated.bytes,
                peak_reserved: d.peak_reserved.bytes,
            })
            .collect(),
        device: device.unwrap_or(0),
        events: summary.map_or(0, |s| s.events),
        first_us,
        span_us: summary.map_or(0, |s| s.span_us),
        extent: 0,
        peak_allocated: peak(|s| &s.peak_allocated),
        peak_reserved: peak(|s| &s.peak_reserved),
        peak_requested: peak(|s| &s.peak_requested),
        top_sites: summary.map(|s| s.top_sites.clone()).unwrap_or_default(),
        out_of_memory: summary.map_or(0, |s| s.out_of_memory.len()),
        out_of_memory_elsewhere: trace.summary.out_of_memory_elsewhere(device),
    })
}

fn peak_view(trace: &TraceModel, device: u32, first_us: u64, peak: &Peak) -> PeakView {
    // The device's events are its walker's: the event is looked up, not counted to.
    let event = peak
        .index
        .checked_sub(1)
        .and_then(|i| {
            let model = trace.device(Some(device))?;
            super::tables::lock(model).events().get(i).copied()
        })
        .map(|e| PeakEvent {
            action: e.action.as_str(),
            size: e.size,
            site: trace.context_text(e.context).site.clone(),
        });
    PeakView {
        bytes: peak.bytes,
        index: peak.index,
        after_event: peak.after_event,
        after_start_us: peak.time_us.saturating_sub(first_us),
        event,
    }
}

/// The spread of `peaks` (at least one).
fn sites_compared(
    a: &TraceModel,
    b: &TraceModel,
    devices: (u32, u32),
) -> Result<SitesCompared, ServeError> {
    let report = diff(
        &a.snapshot,
        &b.snapshot,
        (Some(devices.0), Some(devices.1)),
        FrameView::User,
    )?;
    let total = report.sites.len();
    let mut changed: Vec<SiteDiff> = report
        .sites
        .into_iter()
        .filter(|s| s.peak_change() != 0 || s.end_change() != 0)
        .collect();
    let changed_count = changed.len();
    changed.truncate(MAX_SITE_CHANGES);
    Ok(SitesCompared {
        a: 0,
        b: 1,
        peak_a: report.peak_a,
        peak_b: report.peak_b,
        changed,
        changed_count,
        unchanged_count: total - changed_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_names_the_file_farthest_from_the_mean() {
        let s = spread(&[32, 36, 52]);
        assert_eq!(
            s,
            Spread {
                max: 52,
                max_file: 2,
                min: 32,
                min_file: 0,
                mean: 40.0,
                max_over_min: Some(1.625),
                max_minus_mean: 12.0,
                outlier: 2,
            }
        );
        // One rank far below the others is the outlier, not the highest.
        let low = spread(&[100, 101, 102, 10]);
        assert_eq!((low.outlier, low.max_file, low.min_file), (3, 2, 3));
        let zero = spread(&[0, 8]);
        assert_eq!((zero.max_over_min, zero.mean), (None, 4.0));
    }
}
