//! `memtrace streams FILE [--device N] [--config STR] [--no-replay] [--json]`: memory by
//! stream (`analysis/streams.rs`): what each stream reserved and cached, the cache stranded
//! on streams that never allocate again, the frees that waited for other streams
//! (`record_stream`), and what the stream-ordered policy (`stream_reuse:ordered`) would have
//! reserved instead, from two replays of the trace (as `memtrace replay` runs them): under the
//! recording's settings, and under them with the policy.

use crate::analysis::settings::recorded_config;
use crate::analysis::streams::{
    several_streams_allocate, streams_report_taking, Moment, StreamUsage, StreamsReport, ONE_STREAM,
};
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device};
use crate::commands::replay::prepare::Prepared;
use crate::commands::replay::progress_bar;
use crate::format::{count, counted, format_size, signed_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::config::{AllocatorConfigBuilder, StreamReuse};
use blockpool::trace::file::TraceFormat;
use blockpool::trace::Snapshot;
use blockpool::AllocatorConfig;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Streams listed one per line in the text report, at most (`--json` lists every one).
const LISTED_STREAMS: usize = 16;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The file, as given.
    pub file: String,
    /// The device's memory by stream.
    #[serde(flatten)]
    pub streams: StreamsReport,
    /// What the stream-ordered policy would have reserved; absent with `--no-replay`, or when
    /// the device allocates on one stream only (the policy then changes nothing).
    pub ordered: Option<WhatIf>,
    /// Why there is no `ordered`, in words.
    pub ordered_note: Option<String>,
}

/// Peak reserved bytes of two replays: under the recording's settings, and with
/// `stream_reuse:ordered` added.
#[derive(Clone, Debug, Serialize)]
pub struct WhatIf {
    /// The settings of the first replay, in config syntax (empty: the defaults).
    pub config: String,
    /// Where they came from: `--config`, `trace` or `default`.
    pub config_source: &'static str,
    /// The settings of the second: the first's with `stream_reuse:ordered`.
    pub ordered_config: String,
    /// The simulated device's capacity, in bytes, and where it came from (as `memtrace
    /// replay` says).
    pub capacity_bytes: u64,
    /// `--capacity` is not taken here: `trace` or `default`.
    pub capacity_source: &'static str,
    /// The trace allocator's own peak reserved bytes; absent when the trace records no
    /// segments.
    pub recorded_peak_reserved_bytes: Option<u64>,
    /// The first replay's peak reserved bytes.
    pub replayed_peak_reserved_bytes: u64,
    /// The second replay's.
    pub ordered_peak_reserved_bytes: u64,
    /// The first less the second.
    pub saved_bytes: i128,
    /// Out-of-memory errors in the first replay.
    pub replayed_out_of_memory: u64,
    /// In the second.
    pub ordered_out_of_memory: u64,
}

/// Runs `memtrace streams`.
pub fn run(
    file: &Path,
    device: Option<u32>,
    config: Option<&AllocatorConfig>,
    replay: bool,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    let mut trace = load_trace(file).context("cannot read the trace")?;
    let device = pick_device(&trace.snapshot, device)?;
    note_other_devices_out_of_memory(&trace.snapshot, device);
    // The replays first: the walk then takes the trace's events instead of copying them.
    let (ordered, ordered_note) = if !replay {
        (None, Some("not replayed (--no-replay)".to_string()))
    } else if !several_streams_allocate(trace.snapshot.device_events(device)) {
        (None, Some(ONE_STREAM.to_string()))
    } else {
        let what_if = ordered_what_if(&trace.snapshot, trace.format, device, config)?;
        (Some(what_if), None)
    };
    let streams = streams_report_taking(&mut trace.snapshot, device)?;
    let report = Report {
        file: file.display().to_string(),
        streams,
        ordered,
        ordered_note,
    };
    out.report(&report, json, render)
}

/// Replays `device` of `snapshot` under the recording's settings (or `given`), then under them
/// with `stream_reuse:ordered`.
pub fn ordered_what_if(
    snapshot: &Snapshot,
    format: TraceFormat,
    device: u32,
    given: Option<&AllocatorConfig>,
) -> anyhow::Result<WhatIf> {
    let (config, config_source, _) = recorded_config(given, snapshot);
    let ordered = AllocatorConfigBuilder::from(config.clone())
        .stream_reuse(StreamReuse::Ordered)
        .build()
        .context("cannot add stream_reuse:ordered to the settings")?;
    let prepared = Prepared::new(snapshot, format, device)?;
    let (capacity_bytes, capacity_source) = prepared.capacity(None);
    let progress = progress_bar((prepared.events().len() as u64).saturating_mul(2));
    let first = prepared.replay(&config, capacity_bytes, false, &progress)?;
    let second = prepared.replay(&ordered, capacity_bytes, false, &progress)?;
    progress.finish_and_clear();
    Ok(WhatIf {
        config: config.to_string(),
        config_source,
        ordered_config: ordered.to_string(),
        capacity_bytes,
        capacity_source,
        recorded_peak_reserved_bytes: prepared.recorded.as_ref().map(|r| r.peak_reserved_bytes),
        replayed_peak_reserved_bytes: first.peak_reserved_bytes,
        ordered_peak_reserved_bytes: second.peak_reserved_bytes,
        saved_bytes: i128::from(first.peak_reserved_bytes) - i128::from(second.peak_reserved_bytes),
        replayed_out_of_memory: first.out_of_memory_events(),
        ordered_out_of_memory: second.out_of_memory_events(),
    })
}

/// The report as text.
pub fn render(report: &Report) -> String {
    let streams = &report.streams;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "memory by stream of {}, device {}: {}",
        report.file,
        streams.device,
        counted(streams.streams.len() as u64, "stream")
    );
    render_table(&mut text, &streams.streams);
    let _ = writeln!(text);
    let _ = writeln!(text, "{}", peak_line(&streams.reserved_peak));
    let stranded = &streams.stranded;
    match &stranded.peak {
        Some(peak) => {
            let _ = writeln!(
                text,
                "stranded: up to {} at once ({}), cached on streams that had made their last \
                 allocation while others still allocated; {} stranded memory. {} left cached \
                 at the end on streams that stopped early (empty_cache returns it).",
                format_size(stranded.peak_bytes),
                peak.at,
                counted(stranded.streams, "stream"),
                format_size(stranded.left_at_end_bytes)
            );
        }
        None => {
            let _ = writeln!(
                text,
                "stranded: none (no stream cached memory after its last allocation while others \
                 still allocated)"
            );
        }
    }
    let waiting = &streams.waiting;
    if !streams.completions {
        let _ = writeln!(
            text,
            "waiting: the trace records no free_completed events, so no free is seen waiting \
             for other streams"
        );
    } else if let Some(peak) = &waiting.peak {
        let _ = writeln!(
            text,
            "waiting for other streams (record_stream): {} ({}) waited; up to {} at once \
             ({}); the longest wait was {}{}",
            counted(waiting.frees, "free"),
            format_size(waiting.bytes),
            format_size(waiting.peak_bytes),
            peak.at,
            counted(waiting.longest_events, "event"),
            match waiting.longest_us {
                0 => String::new(),
                us => format!(" ({})", crate::format::duration(us as f64)),
            }
        );
    } else {
        let _ = writeln!(text, "waiting for other streams (record_stream): none");
    }
    let _ = writeln!(text);
    match (&report.ordered, &report.ordered_note) {
        (Some(what_if), _) => render_what_if(&mut text, what_if),
        (None, Some(note)) => {
            let _ = writeln!(text, "stream_reuse:ordered: {note}");
        }
        (None, None) => {}
    }
    text
}

/// The streams, most reserved first.
fn render_table(text: &mut String, streams: &[StreamUsage]) {
    let mut listed: Vec<&StreamUsage> = streams.iter().collect();
    listed.sort_by_key(|s| (std::cmp::Reverse(s.peak_reserved_bytes), s.stream));
    let _ = writeln!(
        text,
        "  {:>18}  {:>11}  {:>13}  {:>11}  {:>11}  {:>11}  {:>11}  last allocation",
        "stream", "allocations", "peak reserved", "peak cached", "stranded", "waited", "end cached"
    );
    for s in listed.iter().take(LISTED_STREAMS) {
        let stream = match s.stream {
            0 => "0 (default)".to_string(),
            handle => format!("{handle:#x}"),
        };
        let _ = writeln!(
            text,
            "  {:>18}  {:>11}  {:>13}  {:>11}  {:>11}  {:>11}  {:>11}  {}",
            stream,
            count(s.allocations),
            format_size(s.peak_reserved_bytes),
            format_size(s.peak_cached_bytes),
            format_size(s.stranded_bytes),
            format_size(s.bytes_waited),
            format_size(s.end_cached_bytes),
            s.last_allocation.as_deref().unwrap_or("none in the trace")
        );
    }
    if listed.len() > LISTED_STREAMS {
        let _ = writeln!(
            text,
            "  ... and {} more (--json lists every stream)",
            counted((listed.len() - LISTED_STREAMS) as u64, "stream")
        );
    }
}

/// The reserved peak, split.
fn peak_line(peak: &Moment) -> String {
    format!(
        "at the reserved peak ({}): {} reserved = {} allocated + {} waiting for other streams + \
         {} cached, of which {} stranded",
        peak.at,
        format_size(peak.reserved_bytes),
        format_size(peak.allocated_bytes),
        format_size(peak.waiting_bytes),
        format_size(peak.cached_bytes),
        format_size(peak.stranded_bytes)
    )
}

/// The two replays.
fn render_what_if(text: &mut String, what_if: &WhatIf) {
    let settings = match (what_if.config.as_str(), what_if.config_source) {
        ("", "trace") => "the trace's settings (PyTorch's defaults)".to_string(),
        ("", _) => "PyTorch's default settings".to_string(),
        (config, "trace") => format!("the trace's settings `{config}`"),
        (config, source) => format!("`{config}` ({source})"),
    };
    let _ = writeln!(
        text,
        "stream_reuse:ordered: replayed on a simulated device of {} ({}), peak reserved would \
         be {} instead of {} under {} ({}{})",
        format_size(what_if.capacity_bytes),
        what_if.capacity_source,
        format_size(what_if.ordered_peak_reserved_bytes),
        format_size(what_if.replayed_peak_reserved_bytes),
        settings,
        signed_size(-what_if.saved_bytes),
        match what_if.recorded_peak_reserved_bytes {
            Some(recorded) => format!("; the recording reserved {}", format_size(recorded)),
            None => String::new(),
        }
    );
    if what_if.replayed_out_of_memory + what_if.ordered_out_of_memory > 0 {
        let _ = writeln!(
            text,
            "out-of-memory errors: {} under the recording's settings, {} with the policy",
            count(what_if.replayed_out_of_memory),
            count(what_if.ordered_out_of_memory)
        );
    }
    let _ = writeln!(
        text,
        "try it: BLOCKPOOL_ALLOC_CONF={} (`memtrace replay FILE --config {}` for the whole replay)",
        what_if.ordered_config, what_if.ordered_config
    );
}
