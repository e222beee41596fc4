//! `memtrace tune FILE [--device N] [--config STR] [--capacity BYTES] [--fresh] [--try STR]...
//! [--jobs N] [--json]`: which allocator settings would have served this trace best. The
//! device's allocation stream is replayed (as `memtrace replay` does) under the recording's own
//! settings and under each candidate of `candidates.rs`, several at once, within the recorded
//! device's memory; the candidates are ranked by the out-of-memory errors they meet, then peak
//! reserved memory, then segment allocations (driver calls), and the best one that saves at
//! least [`MIN_SAVING`] of the recording's peak, or avoids its out-of-memory error, is given as
//! the `PYTORCH_CUDA_ALLOC_CONF` line to use, with how far to trust it: the replay under the
//! recording's settings set against the recorded peak.

mod candidates;
mod render;

use super::replay::engine::Outcome;
use super::replay::prepare::{self, Prepared};
use super::replay::{
    no_out_of_memory_event, notes, out_of_memory_elsewhere_note, progress_bar, Asked,
};
use crate::analysis::settings::recorded_config;
use crate::cli::TuneArgs;
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::config::StreamReuse;
use blockpool::trace::file::TraceFormat;
use blockpool::trace::Snapshot;
use blockpool::{AllocatorConfig, StreamId};
use candidates::Candidate;
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The least share of the recorded settings' replayed peak a candidate must save to be
/// recommended (when neither meets an out-of-memory error the other does).
pub const MIN_SAVING: f64 = 0.01;

/// How close the replay under the recorded settings must come to the recorded peak for the
/// confidence to be `close`.
const CLOSE: f64 = 0.02;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct TuneReport {
    /// The file, as given.
    pub file: String,
    /// `jsonl`, `pytorch` or `rmm-csv`.
    pub format: &'static str,
    /// The device replayed.
    pub device: u32,
    /// The events the file numbers on it.
    pub events: u64,
    /// The settings the recording ran under, in config syntax (empty: PyTorch's defaults).
    pub recorded_config: String,
    /// Where they came from: `--config`, `trace` or `default` (the trace does not record them).
    pub recorded_config_source: &'static str,
    /// Why the trace's own settings were not used, when they were not understood.
    pub config_note: Option<String>,
    /// The simulated device's capacity, in bytes, as `replay` chooses it.
    pub capacity_bytes: u64,
    /// Where it came from: `--capacity`, `trace` or `default` (see `memtrace replay`).
    pub capacity_source: &'static str,
    /// The other devices of the trace that ran out of memory when this one did not, with their
    /// out-of-memory events (`{"0": 1}`); empty otherwise (see `memtrace replay`).
    pub out_of_memory_elsewhere: BTreeMap<u32, usize>,
    /// `start` (from the trace's first state) or `fresh` (from its live blocks alone).
    pub mode: &'static str,
    /// Replays run at once.
    pub jobs: usize,
    /// The recording's peak reserved bytes; absent when the trace records no segments.
    pub recorded_peak_reserved_bytes: Option<u64>,
    /// How far to trust the ranking.
    pub confidence: Confidence,
    /// Every setting tried, best first.
    pub ranked: Vec<Tried>,
    /// The settings to use, when some beat the recording's.
    pub recommended: Option<Recommendation>,
    /// What the replays could not tell, in words.
    pub notes: Vec<String>,
}

/// The replay under the recording's own settings set against the recording.
#[derive(Debug, Serialize)]
pub struct Confidence {
    /// `exact` (the same peak reserved bytes), `close` (within 2 %), `rough` (further) or
    /// `unknown` (the trace records no segments to compare with).
    pub level: &'static str,
    /// The replay's peak reserved bytes under the recording's settings.
    pub replayed_peak_reserved_bytes: u64,
    /// Replayed over recorded peak reserved bytes.
    pub ratio: Option<f64>,
}

/// One setting tried.
#[derive(Debug, Serialize)]
pub struct Tried {
    /// Its place in the ranking, 1 for the best.
    pub rank: usize,
    /// What it changes from the recording's settings (`recorded` for those).
    pub change: String,
    /// The whole settings, in config syntax.
    pub config: String,
    /// The variable that takes them (`Recommendation::variable`).
    #[serde(skip)]
    pub variable: &'static str,
    /// The recording's own settings.
    pub baseline: bool,
    /// Highest bytes in segments in its replay.
    pub peak_reserved_bytes: u64,
    /// Against the replay under the recording's settings: -0.25 is a quarter less.
    pub peak_reserved_change: f64,
    /// Out-of-memory errors in its replay (see `memtrace replay`).
    pub out_of_memory: u64,
    /// When the recording ran out of memory: whether none of its failed requests failed here.
    pub avoids_recorded_oom: Option<bool>,
    /// Segments allocated from the device: driver calls.
    pub segment_allocs: u64,
    /// Allocations that released the cache and tried again.
    pub retries: u64,
    /// What the replay could not do under these settings, in words.
    pub notes: Vec<String>,
}

/// The settings to use.
#[derive(Debug, Serialize)]
pub struct Recommendation {
    /// The variable to set: `PYTORCH_CUDA_ALLOC_CONF`, or `BLOCKPOOL_ALLOC_CONF` for settings
    /// only blockpool has (`stream_reuse`), which PyTorch's own allocator would refuse.
    pub variable: &'static str,
    /// Its value.
    pub config: String,
    /// What it changes from the recording's settings.
    pub change: String,
    /// Its replay's peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// The recording's settings' replayed peak less this one's.
    pub saved_bytes: i128,
    /// Whether the recording's out-of-memory error is avoided (absent without one).
    pub avoids_recorded_oom: Option<bool>,
    /// Out-of-memory errors in its replay.
    pub out_of_memory: u64,
    /// Out-of-memory errors in the replay under the recording's settings.
    pub recorded_settings_out_of_memory: u64,
}

/// Runs `memtrace tune`.
pub fn run(args: TuneArgs, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(&args.file).context("cannot read the trace")?;
    let report = tune(&args, &trace.snapshot, trace.format)?;
    out.report(&report, args.json, render::render)
}

/// Replays `snapshot` under every candidate and ranks them.
pub fn tune(
    args: &TuneArgs,
    snapshot: &Snapshot,
    format: TraceFormat,
) -> anyhow::Result<TuneReport> {
    let device = prepare::pick_device(snapshot, args.device)?;
    let (recorded_config, config_source, config_note) =
        recorded_config(args.config.as_ref(), snapshot);
    let prepared = Prepared::new(snapshot, format, device)?;
    let (capacity_bytes, capacity_source) = prepared.capacity(args.capacity);
    let streams: BTreeSet<StreamId> = prepared.events().iter().map(|e| e.stream).collect();
    let candidates = candidates::grid(
        &recorded_config,
        capacity_source != "default",
        streams.len(),
        &args.tries,
    );
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .min(candidates.len());
    let events = prepared.events().len() as u64;
    let progress = progress_bar(events.saturating_mul(candidates.len() as u64));
    let outcomes = replay_all(
        &prepared,
        &candidates,
        capacity_bytes,
        args.fresh,
        jobs,
        &progress,
    )?;
    progress.finish_and_clear();
    let baseline = &outcomes[0];
    let recorded_peak = prepared.recorded.as_ref().map(|r| r.peak_reserved_bytes);
    let confidence = confidence(baseline.peak_reserved_bytes, recorded_peak);
    // The report says once that the capacity is assumed; the candidates do not repeat it.
    let asked = Asked {
        exact: false,
        config: false,
    };
    let mut ranked: Vec<Tried> = candidates
        .iter()
        .zip(&outcomes)
        .map(|(candidate, outcome)| Tried {
            rank: 0,
            change: candidate.change.clone(),
            config: candidate.config.to_string(),
            variable: variable_for(&candidate.config),
            baseline: candidate.baseline,
            peak_reserved_bytes: outcome.peak_reserved_bytes,
            peak_reserved_change: change(outcome.peak_reserved_bytes, baseline.peak_reserved_bytes),
            out_of_memory: outcome.out_of_memory_events(),
            avoids_recorded_oom: (outcome.recorded_oom_requests > 0)
                .then_some(outcome.out_of_memory_events() == 0),
            segment_allocs: outcome.device_allocs,
            retries: outcome.retries,
            notes: notes(
                asked,
                &candidate.config,
                capacity_source,
                &prepared,
                outcome,
            ),
        })
        .collect();
    // Stable: on a tie the simpler change (listed first) wins, the recording's own first of all.
    ranked.sort_by_key(|t| (t.out_of_memory, t.peak_reserved_bytes, t.segment_allocs));
    for (i, tried) in ranked.iter_mut().enumerate() {
        tried.rank = i + 1;
    }
    let recommended = recommend(&ranked);
    let notes = report_notes(
        &prepared,
        args.fresh,
        capacity_source,
        config_source,
        baseline,
    );
    Ok(TuneReport {
        file: args.file.display().to_string(),
        format: format.as_str(),
        device,
        events: prepared.numbered_events(),
        recorded_config: recorded_config.to_string(),
        recorded_config_source: config_source,
        config_note,
        capacity_bytes,
        capacity_source,
        out_of_memory_elsewhere: prepared.out_of_memory_elsewhere.clone(),
        mode: if args.fresh { "fresh" } else { "start" },
        jobs,
        recorded_peak_reserved_bytes: recorded_peak,
        confidence,
        ranked,
        recommended,
        notes,
    })
}

/// Replays `prepared` under every candidate, `jobs` at once; the outcomes in the candidates'
/// order.
fn replay_all(
    prepared: &Prepared,
    candidates: &[Candidate],
    capacity_bytes: u64,
    fresh: bool,
    jobs: usize,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Outcome>> {
    let next = AtomicUsize::new(0);
    let replay = |index: usize, candidate: &Candidate| {
        let outcome = prepared
            .replay(&candidate.config, capacity_bytes, fresh, progress)
            .with_context(|| format!("replay under `{}`", candidate.change));
        (index, outcome)
    };
    // Each thread takes the next candidate not yet taken, so a slow replay holds up no other.
    let done: Vec<(usize, anyhow::Result<Outcome>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..jobs.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(candidate) = candidates.get(index) else {
                            return done;
                        };
                        done.push(replay(index, candidate));
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|thread| thread.join().unwrap_or_default())
            .collect()
    });
    let mut outcomes: Vec<Option<Outcome>> = candidates.iter().map(|_| None).collect();
    for (index, outcome) in done {
        outcomes[index] = Some(outcome?);
    }
    outcomes
        .into_iter()
        .zip(candidates)
        .map(|(outcome, candidate)| {
            outcome.with_context(|| format!("the replay under `{}` stopped", candidate.change))
        })
        .collect()
}

/// `ours` against `theirs` as a share: -0.25 is a quarter less; 0 when `theirs` is 0.
fn change(ours: u64, theirs: u64) -> f64 {
    if theirs == 0 {
        0.0
    } else {
        (ours as f64 - theirs as f64) / theirs as f64
    }
}

/// How well the replay under the recording's settings (`replayed`) reproduced the recording's
/// peak (`recorded`).
fn confidence(replayed: u64, recorded: Option<u64>) -> Confidence {
    let ratio = recorded
        .filter(|&r| r > 0)
        .map(|r| replayed as f64 / r as f64);
    let level = match (recorded, ratio) {
        (Some(recorded), _) if recorded == replayed => "exact",
        (_, Some(ratio)) if (ratio - 1.0).abs() <= CLOSE => "close",
        (_, Some(_)) => "rough",
        _ => "unknown",
    };
    Confidence {
        level,
        replayed_peak_reserved_bytes: replayed,
        ratio,
    }
}

/// The variable to set `config` in: `BLOCKPOOL_ALLOC_CONF` for settings only blockpool has
/// (`stream_reuse`), which PyTorch's own allocator would refuse, else
/// `PYTORCH_CUDA_ALLOC_CONF`.
fn variable_for(config: &AllocatorConfig) -> &'static str {
    if config.stream_reuse() == StreamReuse::Compatible {
        blockpool::config::PYTORCH_ENV_VAR
    } else {
        blockpool::config::ENV_VAR
    }
}

/// The best of `ranked` when it beats the recording's settings: fewer out-of-memory errors, or
/// as few and at least [`MIN_SAVING`] less peak reserved memory.
fn recommend(ranked: &[Tried]) -> Option<Recommendation> {
    let best = ranked.first()?;
    let baseline = ranked.iter().find(|t| t.baseline)?;
    let saves =
        best.peak_reserved_bytes as f64 <= baseline.peak_reserved_bytes as f64 * (1.0 - MIN_SAVING);
    let better = best.out_of_memory < baseline.out_of_memory
        || best.out_of_memory == baseline.out_of_memory && saves;
    (!best.baseline && better).then(|| Recommendation {
        variable: best.variable,
        config: best.config.clone(),
        change: best.change.clone(),
        peak_reserved_bytes: best.peak_reserved_bytes,
        saved_bytes: i128::from(baseline.peak_reserved_bytes)
            - i128::from(best.peak_reserved_bytes),
        avoids_recorded_oom: best.avoids_recorded_oom,
        out_of_memory: best.out_of_memory,
        recorded_settings_out_of_memory: baseline.out_of_memory,
    })
}

/// What the whole ranking cannot tell: an unknown device, assumed settings, and a start state
/// whose segments no setting reshapes.
fn report_notes(
    prepared: &Prepared,
    fresh: bool,
    capacity_source: &str,
    config_source: &str,
    baseline: &Outcome,
) -> Vec<String> {
    let mut notes = Vec::new();
    if capacity_source == "default" {
        notes.push(format!(
            "{}: every setting replays on an unbounded device, out-of-memory cannot be judged \
             and garbage_collection_threshold is not tried; give --capacity (the GPU's memory) \
             to rank them within it",
            no_out_of_memory_event(prepared)
        ));
    }
    notes.extend(out_of_memory_elsewhere_note(prepared, "tunes"));
    if config_source == "default" {
        notes.push(
            "the trace does not record the settings it ran under, so PyTorch's defaults are \
             assumed; give --config with the recording's PYTORCH_CUDA_ALLOC_CONF if it set one"
                .to_string(),
        );
    }
    let start = &baseline.start;
    if !fresh && start.adopted_segments > 0 && prepared.recorded.is_some() {
        notes.push(format!(
            "every replay starts from the {} ({}) the trace began with, which keep their \
             recorded sizes under every setting; --fresh starts from the live blocks \
             alone, where the settings shape every segment (the recording's peak is then no \
             longer the yardstick)",
            crate::format::counted(start.adopted_segments, "segment"),
            crate::format::format_size(start.adopted_bytes)
        ));
    }
    notes
}
