//! `memtrace info FILE [--json]`: what a trace holds — its format, devices, events per device
//! by action, segments and blocks at the end, and the time span.

use crate::analysis::timeline::widen_span;
use crate::format::{count, counted, format_size, span};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::file::LoadedTrace;
use blockpool::trace::{Action, BlockState};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct InfoReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The format in words.
    pub format_name: String,
    /// Whether the file was gzip-compressed.
    pub gzip: bool,
    /// The allocator configuration the trace records, if any.
    pub allocator_config: Option<String>,
    /// The allocator's settings whole, as a PyTorch file records them (`allocator_settings`:
    /// every key in the file's order, each value as Python prints it); empty for other files.
    pub allocator_settings: Vec<(String, String)>,
    /// When event time 0 was, in microseconds since the Unix epoch, if known.
    pub time_origin_unix_us: Option<u64>,
    /// Distinct contexts (tag stacks, call stacks) the trace refers to.
    pub contexts: usize,
    /// Every device with segments or events, ascending.
    pub devices: Vec<DeviceInfo>,
}

/// One device of an [`InfoReport`].
#[derive(Debug, Serialize)]
pub struct DeviceInfo {
    /// Device index.
    pub device: u32,
    /// Recorded events, inserted annotations included.
    pub events: u64,
    /// Of them, the events the file numbers (for a PyTorch snapshot the entries of
    /// `device_traces[device]`, numbered 0 to `numbered_events - 1`).
    pub numbered_events: u64,
    /// Of them, the annotations the import inserted from PyTorch's `external_annotations`;
    /// they have no number of their own.
    pub inserted_annotations: u64,
    /// Events by action name; actions that never occur are left out.
    pub events_by_action: BTreeMap<&'static str, u64>,
    /// Time of the first event, in microseconds since the origin.
    pub first_time_us: Option<u64>,
    /// Time of the last event.
    pub last_time_us: Option<u64>,
    /// From the device's own first event to its own last, in microseconds, as `summary`
    /// measures it (0 without events or times).
    pub span_us: u64,
    /// Segments at the end of the trace.
    pub segments: u64,
    /// Of them, runs of mapped memory of expandable segments.
    pub expandable_segments: u64,
    /// Blocks at the end of the trace, all states.
    pub blocks: u64,
    /// Bytes in segments at the end (reserved).
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks at the end.
    pub allocated_bytes: u64,
    /// Bytes the callers of the allocated blocks asked for: the requests behind
    /// `allocated_bytes`, never more than it. The text report prints this one.
    pub allocated_requested_bytes: u64,
    /// Bytes in blocks freed but waiting for streams at the end.
    pub pending_free_bytes: u64,
    /// Bytes the callers of active blocks asked for: allocated blocks and blocks pending free
    /// alike, so it can be more than `allocated_bytes`, which leaves out the blocks pending
    /// free (`allocated_requested_bytes` is the allocated blocks' alone).
    pub requested_bytes: u64,
    /// The private memory pools among the segments (PyTorch's `segment_pool_id` other than
    /// `(0, 0)`: CUDA graphs' pools, `torch.cuda.MemPool`s), lowest id first.
    pub private_pools: Vec<PrivatePool>,
}

/// The segments of one private memory pool on a device.
#[derive(Debug, Serialize)]
pub struct PrivatePool {
    /// The pool's id, as `segment_pool_id`.
    pub pool_id: (u64, u64),
    /// Its segments.
    pub segments: u64,
    /// Bytes in them.
    pub reserved_bytes: u64,
}

/// Builds the report of `trace`, read from `file`.
pub fn report(file: &Path, trace: &LoadedTrace) -> InfoReport {
    let snapshot = &trace.snapshot;
    // Split once: a loop over devices filtering every event would take devices times events.
    let devices = snapshot
        .by_device()
        .into_iter()
        .map(|(device, part)| {
            let snapshot = &*part;
            let mut info = DeviceInfo {
                device,
                events: 0,
                numbered_events: 0,
                inserted_annotations: 0,
                events_by_action: BTreeMap::new(),
                first_time_us: None,
                last_time_us: None,
                span_us: 0,
                segments: 0,
                expandable_segments: 0,
                blocks: 0,
                reserved_bytes: 0,
                allocated_bytes: 0,
                allocated_requested_bytes: 0,
                pending_free_bytes: 0,
                requested_bytes: 0,
                private_pools: Vec::new(),
            };
            let mut times = None;
            for event in snapshot.device_events(device) {
                times = widen_span(times, event.time_us);
                info.events = info.events.saturating_add(1);
                *info
                    .events_by_action
                    .entry(event.action.as_str())
                    .or_default() += 1;
            }
            info.first_time_us = times.map(|t| t.0);
            info.last_time_us = times.map(|t| t.1);
            info.span_us = times.map_or(0, |(first, last)| last - first);
            let numbers = snapshot.event_numbers(device);
            info.numbered_events = numbers.count() as u64;
            info.inserted_annotations = numbers.inserted().len() as u64;
            for segment in snapshot.device_segments(device) {
                info.segments = info.segments.saturating_add(1);
                if segment.expandable {
                    info.expandable_segments = info.expandable_segments.saturating_add(1);
                }
                info.blocks = info.blocks.saturating_add(segment.blocks.len() as u64);
                info.reserved_bytes = info.reserved_bytes.saturating_add(segment.size);
                info.allocated_bytes = info
                    .allocated_bytes
                    .saturating_add(segment.bytes_in(BlockState::ActiveAllocated));
                info.allocated_requested_bytes = segment
                    .blocks
                    .iter()
                    .filter(|b| b.state == BlockState::ActiveAllocated)
                    .map(|b| b.requested)
                    .fold(info.allocated_requested_bytes, u64::saturating_add);
                info.pending_free_bytes = info
                    .pending_free_bytes
                    .saturating_add(segment.bytes_in(BlockState::ActivePendingFree));
                info.requested_bytes = info
                    .requested_bytes
                    .saturating_add(segment.requested_bytes());
                let id = snapshot.pytorch.pool_of(device, segment.address);
                if id != (0, 0) {
                    match info.private_pools.iter_mut().find(|p| p.pool_id == id) {
                        Some(pool) => {
                            pool.segments += 1;
                            pool.reserved_bytes = pool.reserved_bytes.saturating_add(segment.size);
                        }
                        None => info.private_pools.push(PrivatePool {
                            pool_id: id,
                            segments: 1,
                            reserved_bytes: segment.size,
                        }),
                    }
                }
            }
            info.private_pools.sort_by_key(|p| p.pool_id);
            info
        })
        .collect();
    InfoReport {
        file: file.display().to_string(),
        format: trace.format.as_str(),
        format_name: trace.format.to_string(),
        gzip: trace.gzip,
        allocator_config: snapshot.allocator_config.clone(),
        allocator_settings: snapshot
            .pytorch
            .allocator_settings
            .iter()
            .map(|(key, value)| (key.clone(), value.to_string()))
            .collect(),
        time_origin_unix_us: snapshot.time_origin_unix_us,
        contexts: snapshot.contexts.len(),
        devices,
    }
}

/// The report as text.
pub fn render(report: &InfoReport) -> String {
    let mut text = String::new();
    let gz = if report.gzip { ", gzip-compressed" } else { "" };
    let _ = writeln!(text, "file:      {}", report.file);
    let _ = writeln!(text, "format:    {}{gz}", report.format_name);
    if let Some(config) = report.allocator_config.as_deref().filter(|c| !c.is_empty()) {
        let _ = writeln!(text, "config:    {config}");
    }
    if !report.allocator_settings.is_empty() {
        let _ = writeln!(
            text,
            "settings:  (allocator_settings, as the file records them)"
        );
        let width = report
            .allocator_settings
            .iter()
            .map(|(key, _)| key.len())
            .max()
            .unwrap_or(0);
        for (key, value) in &report.allocator_settings {
            let _ = writeln!(text, "  {key:<width$}  {value}");
        }
    }
    let _ = writeln!(text, "contexts:  {}", count(report.contexts as u64));
    if report.devices.is_empty() {
        let _ = writeln!(text, "devices:   none (no segments, no events)");
    }
    for device in &report.devices {
        let _ = writeln!(text, "device {}", device.device);
        // As `summary` says it, from the device's own first event to its own last.
        let span = match span(device.first_time_us.zip(device.last_time_us)) {
            words if words.is_empty() => words,
            words => format!(" {words}"),
        };
        let _ = writeln!(
            text,
            "  events:    {}",
            event_count(report.format, device, &span)
        );
        let by_action: Vec<String> = Action::ALL
            .iter()
            .filter_map(|a| {
                let n = device.events_by_action.get(a.as_str())?;
                Some(format!("{} {}", a.as_str(), count(*n)))
            })
            .collect();
        if !by_action.is_empty() {
            let _ = writeln!(text, "             {}", by_action.join(", "));
        }
        let expandable = match device.expandable_segments {
            0 => String::new(),
            n if n == device.segments => ", all expandable".to_owned(),
            n => format!(", {} expandable", count(n)),
        };
        let _ = writeln!(
            text,
            "  segments:  {} ({}{expandable}), {} reserved, {} allocated ({} requested), {} \
             pending free",
            count(device.segments),
            counted(device.blocks, "block"),
            format_size(device.reserved_bytes),
            format_size(device.allocated_bytes),
            format_size(device.allocated_requested_bytes),
            format_size(device.pending_free_bytes),
        );
        for pool in &device.private_pools {
            let _ = writeln!(
                text,
                "  private pool ({}, {}): {}, {} reserved",
                pool.pool_id.0,
                pool.pool_id.1,
                counted(pool.segments, "segment"),
                format_size(pool.reserved_bytes)
            );
        }
    }
    text
}

/// A device's events with the numbers they go by: "12 over 0.5 s, numbered 0 to 11", and the
/// annotations the import inserted, which have none.
fn event_count(format: &str, device: &DeviceInfo, span: &str) -> String {
    let numbered = device.numbered_events;
    let mut text = format!("{}{span}", count(numbered));
    match numbered {
        0 => {}
        1 => text.push_str(", numbered 0"),
        n => {
            let _ = write!(text, ", numbered 0 to {}", count(n - 1));
        }
    }
    if format == "pytorch" && numbered > 0 {
        let _ = write!(text, " as in device_traces[{}]", device.device);
    }
    match device.inserted_annotations {
        0 => {}
        1 => text.push_str(", and 1 annotation from external_annotations (no number)"),
        n => {
            let _ = write!(
                text,
                ", and {} annotations from external_annotations (no numbers)",
                count(n)
            );
        }
    }
    text
}

/// Runs `memtrace info`.
pub fn run(file: &Path, json: bool, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(file).with_context(|| "cannot read the trace".to_string())?;
    let report = report(file, &trace);
    out.report(&report, json, render)
}
