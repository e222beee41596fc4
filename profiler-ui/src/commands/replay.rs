//! `memtrace replay FILE [--config STR] [--capacity BYTES] [--fresh] [--find-capacity]
//! [--exact] [--device N] [--json]`: what-if analysis. One device's allocation stream runs
//! through blockpool's allocator on a simulated device, from the state rebuilt at the trace's
//! first event (or, with `--fresh`, from its live blocks alone), and the report sets what
//! blockpool did beside what the trace's own allocator did.
//!
//! `prepare.rs` picks the device and settings and readies its events, `start.rs` turns the
//! starting state into segments to adopt, `engine.rs` runs one replay,
//! `recorded.rs` rebuilds the trace allocator's own figures, `capacity.rs` holds the default
//! capacity and searches the smallest capacity that suffices. The arguments are
//! [`ReplayArgs`], defined with the rest of the command line in `cli.rs`.

mod capacity;
pub(crate) mod engine;
pub(crate) mod prepare;
pub(crate) mod recorded;
mod start;

use crate::analysis::fragmentation::DEFINITION as FRAGMENTATION;
use crate::analysis::settings::recorded_config;
use crate::analysis::timeline::devices_and_events;
use crate::cli::ReplayArgs;
use crate::format::{count, counted, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::file::TraceFormat;
use blockpool::trace::{Action, Snapshot};
use blockpool::AllocatorConfig;
use capacity::{CapacitySearch, DEFAULT_CAPACITY};
use engine::{Outcome, Settings};
use indicatif::{ProgressBar, ProgressStyle};
use prepare::Prepared;
use recorded::Recorded;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;

/// Events below which a replay is too short for a progress bar.
const PROGRESS_MIN_EVENTS: u64 = 200_000;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct ReplayReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The device replayed.
    pub device: u32,
    /// Its events, inserted annotations included.
    pub events: u64,
    /// Of them, the events the file numbers (see `memtrace --help`, Event numbers).
    pub numbered_events: u64,
    /// The allocator settings replayed with, in config syntax (empty: the defaults).
    pub config: String,
    /// Where they came from: `--config`, `trace` or `default`.
    pub config_source: &'static str,
    /// Why the trace's own settings were not used, when they were not understood.
    pub config_note: Option<String>,
    /// The simulated device's capacity, in bytes.
    pub capacity_bytes: u64,
    /// Where it came from: `--capacity`, `trace` (the recording's out-of-memory events:
    /// `device_free` plus the bytes reserved then) or `default` (1 TiB: the trace does not tell
    /// the device's memory, so nothing runs out of it).
    pub capacity_source: &'static str,
    /// The other devices of the trace that ran out of memory when this one did not, with their
    /// out-of-memory events (`{"0": 1}`); empty otherwise. Their memory is not this device's,
    /// so it does not set the capacity.
    pub out_of_memory_elsewhere: BTreeMap<u32, usize>,
    /// What the settings could not do in this replay, and what to try instead, in words.
    pub notes: Vec<String>,
    /// The trace's events that release segments, whose runs are replayed as `empty_cache`
    /// calls: `segment_free`, `segment_unmap` (expandable segments), both, or none.
    pub segment_releases: Vec<&'static str>,
    /// `start` (the trace's first state) or `fresh` (its live blocks alone).
    pub mode: &'static str,
    /// What blockpool did.
    pub blockpool: Outcome,
    /// What the trace's allocator did; absent when the trace records no segments (RMM logs).
    pub recorded: Option<Recorded>,
    /// blockpool's peak reserved over the recorded one.
    pub peak_reserved_ratio: Option<f64>,
    /// blockpool's segment allocations over the recorded ones.
    pub segment_allocs_ratio: Option<f64>,
    /// The capacity search, with `--find-capacity`.
    pub capacity_search: Option<CapacitySearch>,
}

/// Runs `memtrace replay`.
pub fn run(args: ReplayArgs, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(&args.file).context("cannot read the trace")?;
    let report = replay(&args, &trace.snapshot, trace.format)?;
    out.report(&report, args.json, render)
}

/// Replays `snapshot` as `args` say.
pub fn replay(
    args: &ReplayArgs,
    snapshot: &Snapshot,
    format: TraceFormat,
) -> anyhow::Result<ReplayReport> {
    let device = prepare::pick_device(snapshot, args.device)?;
    let (config, config_source, config_note) = recorded_config(args.config.as_ref(), snapshot);
    let prepared = Prepared::new(snapshot, format, device)?;
    let workload = prepared.workload(&config, args.fresh);
    let (capacity_bytes, capacity_source) = prepared.capacity(args.capacity);
    let settings = Settings {
        config: config.clone(),
        capacity_bytes,
        exact: args.exact,
    };
    let event_count = workload.events.len() as u64;
    // A search runs about 20 replays more.
    let replays = if args.find_capacity { 21 } else { 1 };
    let progress = progress_bar(event_count.saturating_mul(replays));
    let outcome = engine::run(&workload, &settings, &progress)?;
    let capacity_search = if args.find_capacity {
        let unconstrained = if settings.capacity_bytes == DEFAULT_CAPACITY {
            outcome.clone()
        } else {
            let default = Settings {
                capacity_bytes: DEFAULT_CAPACITY,
                ..settings.clone()
            };
            engine::run(&workload, &default, &progress)?
        };
        // Now the search's length is known: one replay per halving of the peak's steps.
        let steps = unconstrained
            .peak_reserved_bytes
            .div_ceil(capacity::SEARCH_STEP);
        let probes = u64::from(u64::BITS - steps.leading_zeros());
        progress.set_length(progress.position() + event_count.saturating_mul(probes));
        Some(capacity::search(
            &workload,
            &settings,
            &unconstrained,
            &progress,
        )?)
    } else {
        None
    };
    progress.finish_and_clear();
    let asked = Asked {
        exact: args.exact,
        config: args.config.is_some(),
    };
    let mut notes = notes(asked, &config, capacity_source, &prepared, &outcome);
    notes.extend(out_of_memory_elsewhere_note(&prepared, "replays"));
    let recorded = prepared.recorded.clone();
    let ratio = |ours: u64, theirs: u64| (theirs > 0).then(|| ours as f64 / theirs as f64);
    Ok(ReplayReport {
        file: args.file.display().to_string(),
        format: format.as_str(),
        device,
        events: event_count,
        numbered_events: workload.numbers.count() as u64,
        config: config.to_string(),
        config_source,
        config_note,
        capacity_bytes: settings.capacity_bytes,
        capacity_source,
        out_of_memory_elsewhere: prepared.out_of_memory_elsewhere.clone(),
        notes,
        segment_releases: prepared.segment_releases(),
        mode: if args.fresh { "fresh" } else { "start" },
        peak_reserved_ratio: recorded
            .as_ref()
            .and_then(|r| ratio(outcome.peak_reserved_bytes, r.peak_reserved_bytes)),
        segment_allocs_ratio: recorded
            .as_ref()
            .and_then(|r| ratio(outcome.device_allocs, r.segment_allocs)),
        blockpool: outcome,
        recorded,
        capacity_search,
    })
}

/// Why the trace does not tell the prepared device's memory, for a note: `the trace records
/// no out-of-memory event, so it does not tell the device's memory`, or, when another device
/// has one, that this device has none.
pub(crate) fn no_out_of_memory_event(prepared: &Prepared) -> String {
    if prepared.out_of_memory_elsewhere.is_empty() {
        "the trace records no out-of-memory event, so it does not tell the device's memory"
            .to_string()
    } else {
        format!(
            "device {} recorded no out-of-memory event, so the trace does not tell its memory",
            prepared.device
        )
    }
}

/// What the command line asked of a replay, for its notes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    /// `--exact`.
    pub exact: bool,
    /// The settings came from `--config` (or a candidate of `tune`), not the trace.
    pub config: bool,
}

/// What the replay's settings could not act on: expandable segments on a start state of
/// adopted fixed-size segments, `--exact` on mapped ranges of expandable segments, a garbage
/// collection threshold without a memory fraction, and an assumed capacity the replay never
/// came near.
pub(crate) fn notes(
    asked: Asked,
    config: &AllocatorConfig,
    capacity_source: &str,
    prepared: &Prepared,
    outcome: &Outcome,
) -> Vec<String> {
    let (start_state, events) = (prepared.start_state(), prepared.events());
    let mut notes = Vec::new();
    if config.garbage_collection_threshold() > 0.0 && config.per_process_memory_fraction().is_none()
    {
        notes.push(format!(
            "garbage_collection_threshold:{}: as in PyTorch, it acts only under a memory \
             fraction (it frees cached blocks once reserved memory passes that share of the \
             fraction's limit), and the config sets none, so it changed nothing; add \
             per_process_memory_fraction:F to --config",
            config.garbage_collection_threshold()
        ));
    }

    let start = &outcome.start;
    if config.expandable_segments() && start.adopted_segments > 0 {
        let adopted = format!(
            "expandable_segments: the {} adopted from the start state ({}) keep their recorded \
             sizes",
            counted(start.adopted_segments, "segment"),
            format_size(start.adopted_bytes)
        );
        let what = if outcome.device_allocs == 0 {
            "and the replay created no segment of its own, so the setting had nothing to \
             change"
                .to_string()
        } else {
            format!(
                "and it acts only on the {} the replay created",
                counted(outcome.device_allocs, "segment")
            )
        };
        notes.push(format!(
            "{adopted}, {what}; rerun with --fresh to start from the live blocks alone, where \
             it shapes every segment"
        ));
    }
    let maps = events
        .iter()
        .filter(|e| e.action == Action::SegmentMap)
        .count();
    let expandable_start = start_state.segments.iter().any(|s| s.expandable);
    if asked.exact && (maps > 0 || expandable_start) {
        notes.push(format!(
            "--exact: the trace was recorded with expandable segments ({}{}): \
             PyTorch maps pages into one reserved address range per stream and pool, which the \
             simulated device does not reproduce, so allocations there cannot get their recorded \
             addresses; only segments of segment_alloc events are placed as recorded",
            counted(maps as u64, "segment_map event"),
            if expandable_start {
                ", expandable segments at the start"
            } else {
                ""
            }
        ));
    }
    if outcome.recorded_oom_requests > 0 {
        let times = match outcome.recorded_oom_requests {
            1 => "once".to_string(),
            n => format!("{} times", count(n)),
        };
        notes.push(format!(
            "the recording ran out of memory {times}; each failed request is replayed as an \
             allocation freed at once (what the program did next is not in the trace), and {} \
             of them failed here too",
            count(outcome.recorded_oom_failed)
        ));
    }
    if asked.config && capacity_source == "default" && outcome.out_of_memory_events() == 0 {
        notes.push(format!(
            "the capacity of {} is assumed ({}) and the replay never ran short of it, so what \
             the config does under memory pressure (freeing cached blocks, retrying) never \
             happened; give --capacity, e.g. the GPU's memory, to see it",
            format_size(DEFAULT_CAPACITY),
            no_out_of_memory_event(prepared)
        ));
    }
    notes
}

/// When another device of the trace ran out of memory and the prepared one did not: which,
/// and that `--device` takes the command (`what` it does: `replays`, `tunes`) to the first
/// of them, where its out-of-memory events tell the device's memory.
pub(crate) fn out_of_memory_elsewhere_note(prepared: &Prepared, what: &str) -> Option<String> {
    let elsewhere = &prepared.out_of_memory_elsewhere;
    let first = elsewhere.keys().next()?;
    Some(format!(
        "out of memory on {}, not on device {}: --device {first} {what} that device, within \
         the memory its out-of-memory events tell",
        devices_and_events(elsewhere),
        prepared.device
    ))
}

/// A bar on stderr for replays of `work` events in all, when that is long enough to wait for;
/// hidden when stderr is not a terminal.
pub(crate) fn progress_bar(work: u64) -> ProgressBar {
    if work < PROGRESS_MIN_EVENTS || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(work);
    if let Ok(style) =
        ProgressStyle::with_template("replaying {bar:40} {human_pos}/{human_len} events ({eta})")
    {
        bar.set_style(style);
    }
    bar
}

/// The report as text.
pub fn render(report: &ReplayReport) -> String {
    let mut text = String::new();
    let outcome = &report.blockpool;
    let _ = writeln!(
        text,
        "replay of {}, device {}: {} ({}, {})",
        report.file,
        report.device,
        counted(report.numbered_events, "event"),
        counted(outcome.allocations, "allocation"),
        counted(outcome.frees, "free")
    );
    let config = match report.config.as_str() {
        "" => "PyTorch's defaults".to_string(),
        config => config.to_string(),
    };
    let _ = writeln!(text, "config:    {config} ({})", report.config_source);
    if let Some(note) = &report.config_note {
        let _ = writeln!(text, "           {note}");
    }
    let source = prepare::capacity_words(
        report.capacity_source,
        report.device,
        &report.out_of_memory_elsewhere,
    );
    let _ = writeln!(
        text,
        "capacity:  {} ({source})",
        format_size(report.capacity_bytes)
    );
    let start = &outcome.start;
    let _ = write!(
        text,
        "start:     {} adopted ({}, {})",
        counted(start.adopted_segments, "segment"),
        format_size(start.adopted_bytes),
        counted(start.adopted_blocks, "live block")
    );
    let _ = writeln!(
        text,
        ", {} allocated afresh",
        counted(start.fresh_blocks, "block")
    );
    if start.not_adoptable_segments > 0 {
        let _ = writeln!(
            text,
            "           {} could not be adopted (layout off blockpool's 512-byte grid)",
            counted(start.not_adoptable_segments, "segment")
        );
    }
    for note in &report.notes {
        let _ = writeln!(text, "note:      {note}");
    }
    text.push('\n');
    render_table(&mut text, report);
    if let Some(exact) = &outcome.exact {
        let allocations = match exact.allocations {
            0 => "none: the replay made no allocation".to_string(),
            n => format!(
                "{} of {} ({:.2} %)",
                count(exact.matched),
                counted(n, "allocation"),
                exact.share * 100.0
            ),
        };
        let _ = writeln!(
            text,
            "exact addresses:      {allocations}; {} placed as recorded, {} not",
            counted(exact.segments_placed, "segment"),
            count(exact.segments_missed)
        );
    }
    if let Some(search) = &report.capacity_search {
        let _ = match search.min_capacity_bytes {
            Some(bytes) => writeln!(
                text,
                "smallest capacity:    {} ({} bytes) replays without out-of-memory ({})",
                format_size(bytes),
                bytes,
                counted(search.replays, "replay")
            ),
            None => writeln!(
                text,
                "smallest capacity:    none up to {} replays without out-of-memory",
                format_size(DEFAULT_CAPACITY)
            ),
        };
    }
    text
}

fn render_table(text: &mut String, report: &ReplayReport) {
    let ours = &report.blockpool;
    let recorded = report.recorded.as_ref();
    let ratio = |r: Option<f64>| r.map_or_else(String::new, |r| format!("{r:.3}"));
    let theirs = |f: &dyn Fn(&Recorded) -> String| recorded.map_or_else(String::new, f);
    let _ = writeln!(
        text,
        "{:<22}{:>14}{:>14}{:>9}",
        "", "blockpool", "recorded", "ratio"
    );
    let rows: [(&str, String, String, String); 5] = [
        (
            "peak reserved",
            format_size(ours.peak_reserved_bytes),
            theirs(&|r| format_size(r.peak_reserved_bytes)),
            ratio(report.peak_reserved_ratio),
        ),
        (
            "segment allocations",
            count(ours.device_allocs),
            theirs(&|r| count(r.segment_allocs)),
            ratio(report.segment_allocs_ratio),
        ),
        (
            "segment frees",
            count(ours.device_frees),
            theirs(&|r| count(r.segment_frees)),
            String::new(),
        ),
        (
            "fragmentation at peak",
            format!("{:.2} %", ours.fragmentation_at_peak * 100.0),
            theirs(&|r| format!("{:.2} %", r.fragmentation_at_peak * 100.0)),
            String::new(),
        ),
        (
            "peak allocated",
            format_size(ours.peak_allocated_bytes),
            theirs(&|r| format_size(r.peak_allocated_bytes)),
            String::new(),
        ),
    ];
    for (name, ours, theirs, ratio) in rows {
        let row = format!("{name:<22}{ours:>14}{theirs:>14}{ratio:>9}");
        let _ = writeln!(text, "{}", row.trim_end());
    }
    let _ = writeln!(
        text,
        "{:<22}{} (as summary reports it)",
        "  fragmentation:", FRAGMENTATION
    );
    let _ = writeln!(
        text,
        "{:<22}block sizes; the recording's blocks known only by request at the request \
         rounded, the least they took",
        "  peak allocated:"
    );
    let _ = writeln!(text, "{:<22}{:>14}", "retries", count(ours.retries));
    if ours.empty_cache_calls > 0 {
        let _ = writeln!(
            text,
            "{:<22}{:>14}  (one per run of {} in the trace)",
            "empty_cache calls",
            count(ours.empty_cache_calls),
            report.segment_releases.join(" or ")
        );
    }
    let _ = writeln!(
        text,
        "{:<22}{:>14}",
        "out-of-memory",
        count(ours.out_of_memory_events())
    );
    if ours.unmatched_frees > 0 {
        let _ = writeln!(
            text,
            "{:<22}{:>14}  (frees of blocks not live in the replay)",
            "unmatched frees",
            count(ours.unmatched_frees)
        );
    }
}
