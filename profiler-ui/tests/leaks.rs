//! `memtrace leaks` on a trace shaped like a PyTorch profiler run: steps are the
//! `ProfilerStep#N` annotation ranges (not the `Optimizer.*` ranges inside them), one buffer
//! kept per step is found with its exact growth, the weights loaded before the loop and the
//! optimizer state made in the first step are persistent, and a warm-up cache, activations and
//! frees deferred on another stream are not growing. The same trace as a PyTorch pickle (its
//! steps then external annotations) gives the same report.

use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
mod common;

use common::{
    external_snapshot_names, fixture, memtrace, project_snapshot_names, scratch, stderr, stdout,
};
use serde_json::{json, Value};
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;
const STEPS: u64 = 6;

/// The trace: `model.to` loads 4 x 64 MiB of weights; then six `ProfilerStep#N` steps, each
/// with an (empty) `Optimizer.zero_grad#SGD.zero_grad` range, three 8 MiB activations under
/// `forward` freed before the step ends, a 16 MiB buffer kept under `history` (the leak), a
/// 4 MiB `cache` entry in the first two steps only, a 2 MiB `comm` buffer used on stream 7 and
/// dropped (its free stays deferred: the stream never advances), and in the first step 2 x 32
/// MiB of optimizer state under `Optimizer.step#SGD.step`. Made once: annotations reach every
/// recording allocator of the process.
fn profiler_trace() -> &'static str {
    static TRACE: OnceLock<String> = OnceLock::new();
    TRACE.get_or_init(|| {
        let path = scratch("profiler-steps.jsonl");
        let alloc = CachingAllocator::new(SimBackend::new(1, 16 << 30), AllocatorConfig::default());
        alloc
            .record_memory_history(HistorySettings::default())
            .expect("records");
        let stream = StreamId::DEFAULT;
        let allocate = |bytes: u64| alloc.allocate(0, bytes as usize, stream).expect("fits");
        let weights: Vec<_> = {
            let _load = annotate("model.to");
            (0..4).map(|_| allocate(64 * MIB)).collect()
        };
        let (mut history, mut cache, mut state) = (Vec::new(), Vec::new(), Vec::new());
        for step in 0..STEPS {
            let _step = annotate(&format!("ProfilerStep#{step}"));
            drop(annotate("Optimizer.zero_grad#SGD.zero_grad"));
            let activations: Vec<_> = {
                let _forward = annotate("forward");
                (0..3).map(|_| allocate(8 * MIB)).collect()
            };
            {
                let _history = annotate("history");
                history.push(allocate(16 * MIB));
            }
            if step < 2 {
                let _cache = annotate("cache");
                cache.push(allocate(4 * MIB));
            }
            {
                let _comm = annotate("comm");
                let buffer = allocate(2 * MIB);
                buffer
                    .record_stream(StreamId::from_raw(7))
                    .expect("records");
                drop(buffer);
            }
            drop(activations);
            let _optimizer = annotate("Optimizer.step#SGD.step");
            if step == 0 {
                state.extend((0..2).map(|_| allocate(32 * MIB)));
            }
        }
        alloc.dump_snapshot(&path).expect("writes the trace");
        drop((weights, history, cache, state));
        path.to_string_lossy().into_owned()
    })
}

fn json_of(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// `(label, bytes, blocks, since)` of the persistent sites.
fn persistent(report: &Value) -> Vec<(String, u64, u64, String)> {
    report["persistent"]
        .as_array()
        .expect("persistent")
        .iter()
        .map(|p| {
            (
                p["label"].as_str().expect("label").to_string(),
                p["bytes"].as_u64().expect("bytes"),
                p["blocks"].as_u64().expect("blocks"),
                p["since"].as_str().expect("since").to_string(),
            )
        })
        .collect()
}

fn kept(label: &str, bytes: u64, blocks: u64, since: &str) -> (String, u64, u64, String) {
    (label.to_string(), bytes, blocks, since.to_string())
}

#[test]
fn profiler_steps_are_the_steps_and_the_kept_buffer_grows_by_16_mib_a_step() {
    let reports = json_of(&["leaks", profiler_trace(), "--json"]);
    let report = &reports[0];
    let steps: Vec<String> = (0..STEPS).map(|n| format!("ProfilerStep#{n}")).collect();
    assert_eq!(report["steps"], json!(steps), "not the Optimizer.* ranges");
    assert_eq!(report["step_rule"]["kind"], "named");
    assert_eq!(report["measured_at"][0], "before ProfilerStep#0");
    let growing = report["growing"].as_array().expect("growing");
    assert_eq!(growing.len(), 1, "only the history grows: {growing:?}");
    let history = &growing[0];
    assert_eq!(history["label"], "history");
    assert_eq!(
        (
            history["growth_bytes_per_step"].as_u64(),
            history["growth_blocks_per_step"].as_u64(),
            history["steps"].as_u64(),
            history["since"].as_str(),
            history["bytes"].as_u64(),
        ),
        (
            Some(16 * MIB),
            Some(1),
            Some(STEPS),
            Some("before ProfilerStep#0"),
            Some(96 * MIB)
        )
    );
    assert_eq!(
        history["bytes_by_step"],
        json!((0..=STEPS).map(|n| 16 * MIB * n).collect::<Vec<_>>())
    );
    assert_eq!(
        persistent(report),
        [
            kept("model.to", 256 * MIB, 4, "before ProfilerStep#0"),
            kept("Optimizer.step#SGD.step", 64 * MIB, 2, "ProfilerStep#0"),
        ],
        "the weights and the optimizer state are kept, not leaks"
    );
    let alive: Vec<(&str, u64)> = report["alive_at_end"]
        .as_array()
        .expect("alive")
        .iter()
        .map(|s| (s["label"].as_str().unwrap(), s["bytes"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        alive,
        [("history", 96 * MIB), ("cache", 8 * MIB)],
        "the weights are persistent, not among the leaks; deferred frees are not alive"
    );

    let text = stdout(&memtrace(&["leaks", profiler_trace()]));
    assert_eq!(
        text,
        "device 0\n  \
         steps: the `ProfilerStep#*` annotation ranges, 6 of them (ProfilerStep#0 .. \
         ProfilerStep#5)\n  \
         measured: before ProfilerStep#0, then at the end of each step\n  \
         growing (3 or more consecutive growing steps): 1 site\n    \
         + 16.00 MiB +1 block per step over 6 steps since before ProfilerStep#0: history  \
         (0 bytes -> 16.00 MiB -> 32.00 MiB -> 48.00 MiB -> 64.00 MiB -> 80.00 MiB -> 96.00 \
         MiB)\n  \
         persistent (unchanged since one of the first 2 measurements): 320.00 MiB in 2 sites\n    \
         256.00 MiB       4 blocks  model.to  (since before ProfilerStep#0)\n     \
         64.00 MiB       2 blocks  Optimizer.step#SGD.step  (since ProfilerStep#0)\n  \
         alive at the end, allocated during the trace (persistent sites apart): 104.00 MiB in \
         8 blocks\n     \
         96.00 MiB       6 blocks  history\n      \
         8.00 MiB       2 blocks  cache\n  \
         alive at the end, allocated before the trace began: 0 bytes\n"
    );
}

#[test]
fn the_same_trace_as_a_pytorch_pickle_gives_the_same_report() {
    let pickle = scratch("profiler-steps.pickle");
    let pickle = pickle.to_string_lossy().into_owned();
    let output = memtrace(&["convert", profiler_trace(), &pickle]);
    assert!(output.status.success(), "{}", stderr(&output));
    let ours = &json_of(&["leaks", profiler_trace(), "--json"])[0];
    let theirs = &json_of(&["leaks", &pickle, "--json"])[0];
    for field in [
        "steps",
        "measured_at",
        "growing",
        "persistent",
        "alive_at_end",
    ] {
        assert_eq!(ours[field], theirs[field], "{field}");
    }
}

#[test]
fn step_names_another_annotation_or_the_outermost_ranges() {
    // The optimizer's step: six ranges, measured from before the first one. Only that tag is
    // a step's own now, so each step's buffer keeps its `ProfilerStep#N` tag: six flat sites.
    let report = &json_of(&[
        "leaks",
        profiler_trace(),
        "--json",
        "--step",
        "Optimizer.step",
    ])[0];
    assert_eq!(report["step_rule"]["kind"], "named");
    assert_eq!(report["steps"].as_array().map(Vec::len), Some(6));
    assert_eq!(report["measured_at"][0], "before Optimizer.step#SGD.step");
    assert_eq!(report["growing"], json!([]));
    assert_eq!(report["alive_at_end"][0]["label"], "ProfilerStep#1/history");
    assert!(
        persistent(report).contains(&kept(
            "ProfilerStep#0/history",
            16 * MIB,
            1,
            "before Optimizer.step#SGD.step"
        )),
        "the first step's buffer is there before the first optimizer step, and stays"
    );
    // Empty: the outermost ranges, `model.to` among them.
    let report = &json_of(&["leaks", profiler_trace(), "--json", "--step", ""])[0];
    assert_eq!(report["step_rule"]["kind"], "outermost");
    assert_eq!(report["steps"][0], "model.to");
    assert_eq!(report["steps"].as_array().map(Vec::len), Some(7));
    assert_eq!(
        persistent(report)[0],
        kept("model.to", 256 * MIB, 4, "model.to")
    );
    // A prefix no annotation has: said, and the outermost ranges instead.
    let text = stdout(&memtrace(&["leaks", profiler_trace(), "--step", "Epoch"]));
    assert!(
        text.contains(
            "  steps: no `Epoch*` annotation (--step names the step's annotation); the outermost \
             annotation ranges instead, 7 of them (model.to .. ProfilerStep#5)\n"
        ),
        "{text}"
    );
}

#[test]
fn zero_growth_steps_is_refused_with_one_line() {
    let output = memtrace(&["leaks", profiler_trace(), "--growth-steps", "0"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--growth-steps") && err.contains("at least 1"),
        "{err}"
    );
}

const BEFORE: &str = "<allocated before _record_memory_history was enabled>";

/// Checks that no device of fixture `name` has a growing site and returns its reports.
fn nothing_grows(name: &str) -> Vec<Value> {
    let reports = json_of(&["leaks", &fixture(name), "--json"]);
    let reports = reports.as_array().expect("a report per device").clone();
    for report in &reports {
        assert_eq!(
            report["growing"],
            json!([]),
            "{name}: device {}",
            report["device"]
        );
    }
    reports
}

#[test]
fn the_project_fixtures_report_kept_memory_as_persistent_and_nothing_growing() {
    for name in project_snapshot_names() {
        nothing_grows(&name);
    }
    let flexgen = &nothing_grows("Yiyi_LLM-inference_oom_snapshot.pickle")[0];
    assert_eq!(
        persistent(flexgen),
        [kept(
            "/home/dingyiran/FlexGen/flexgen/pytorch_backend.py:190:allocate",
            11_840_159_744,
            460,
            "start of the trace"
        )],
        "FlexGen's weights, allocated before recording began"
    );
    assert_eq!(flexgen["alive_at_end"], json!([]));
    let training = &nothing_grows("bcrafton_assignment2-systems_memory_snapshot.pickle")[0];
    assert_eq!(
        persistent(training)[0],
        kept(
            BEFORE,
            1_545_204_736,
            225,
            "before Optimizer.step#AdamW.step"
        )
    );
    // A snapshot without events is measured once: it can tell nothing kept.
    let segments = &nothing_grows("made_segment_list.pickle")[0];
    assert_eq!(segments["measured_at"], json!(["end of the trace"]));
    assert_eq!(segments["persistent"], json!([]));
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_fixtures_report_kept_memory_as_persistent_and_nothing_growing() {
    for name in external_snapshot_names() {
        nothing_grows(&name);
    }
    let forward = &nothing_grows("kkaitlyn111_cs336_memory_ctx128_forward.pickle")[0];
    assert_eq!(
        persistent(forward),
        [kept(BEFORE, 13_763_491_840, 324, "start of the trace")],
        "the model's weights; the forward pass's activations are alive at the end, not kept"
    );
    assert_eq!(forward["alive_at_end"].as_array().map(Vec::len), Some(20));
}

#[test]
fn warmup_steps_set_how_late_persistent_memory_may_appear() {
    // No warm-up: only what was there before the first step (the weights) is persistent; the
    // optimizer state made in step 0 is then memory allocated during the trace.
    let none = &json_of(&["leaks", profiler_trace(), "--warmup-steps", "0", "--json"])[0];
    assert_eq!(none["settings"]["warmup_steps"], 0);
    assert_eq!(
        persistent(none),
        [kept("model.to", 256 * MIB, 4, "before ProfilerStep#0")]
    );
    // Two steps: the cache filled in steps 0 and 1 counts as persistent too.
    let two = &json_of(&["leaks", profiler_trace(), "--warmup-steps", "2", "--json"])[0];
    assert_eq!(
        persistent(two),
        [
            kept("model.to", 256 * MIB, 4, "before ProfilerStep#0"),
            kept("Optimizer.step#SGD.step", 64 * MIB, 2, "ProfilerStep#0"),
            kept("cache", 8 * MIB, 2, "ProfilerStep#1"),
        ]
    );
    assert_eq!(
        two["growing"].as_array().map(Vec::len),
        Some(1),
        "the warm-up does not hide the growing site"
    );
}
