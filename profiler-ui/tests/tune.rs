//! `memtrace tune` as a user runs it: on a trace whose recording fragmented it recommends a
//! setting whose replayed peak is lower, on one that ran out of memory a setting that avoids
//! it, and every figure it prints is the one `memtrace replay --config` gives for the same
//! settings (on hand-written traces, the project's PyTorch fixtures and the external suite's);
//! bad arguments get one line and exit status 2.

mod common;

use common::{
    assert_bad_input, external_snapshot_names, fixture, memtrace, project_snapshot_names, stderr,
};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn scratch(name: &str, contents: &str) -> String {
    let path = common::scratch(name);
    std::fs::write(&path, contents).expect("scratch file");
    path.to_string_lossy().into_owned()
}

/// Runs `memtrace COMMAND PATH ARGS --json` and parses the report.
fn json(command: &str, path: &str, args: &[&str]) -> Value {
    let mut all = vec![command, path];
    all.extend_from_slice(args);
    all.push("--json");
    let output = memtrace(&all);
    assert!(
        output.status.success(),
        "{command} {path} {args:?}: {:?} {}",
        output.status,
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints JSON")
}

/// Requests of 20, 22, ... 40 MiB, each freed before the next, recorded as PyTorch's defaults
/// serve them: none fits the block cached before it, so each gets a segment of its own and
/// the recording reserves 330 MiB for at most 40 MiB live.
fn growing_requests() -> String {
    let mut lines = vec![r#"{"blockpool_trace":1}"#.to_string()];
    let mut time = 0;
    let mut address = 0x7f00_0000_0000u64;
    for size in (20..=40).step_by(2).map(|mib| mib * MIB) {
        for event in ["segment_alloc", "alloc", "free_requested", "free_completed"] {
            time += 1;
            let requested = if event == "segment_alloc" {
                String::new()
            } else {
                format!(r#","requested":{size}"#)
            };
            lines.push(format!(
                r#"{{"event":"{event}","device":0,"addr":{address},"size":{size}{requested},"time_us":{time}}}"#
            ));
        }
        address += size;
    }
    lines.join("\n") + "\n"
}

/// A 100 MiB block cached whole, then split by a 30 MiB request that stays live: the 90 MiB
/// request after it finds 70 MiB cached and 50 MiB free on a 150 MiB device, and fails.
const SPLIT_THEN_OOM: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":0,"addr":139637976727552,"size":104857600,"time_us":1}
{"event":"alloc","device":0,"addr":139637976727552,"size":104857600,"requested":104857600,"time_us":2}
{"event":"free_requested","device":0,"addr":139637976727552,"size":104857600,"requested":104857600,"time_us":3}
{"event":"free_completed","device":0,"addr":139637976727552,"size":104857600,"requested":104857600,"time_us":4}
{"event":"alloc","device":0,"addr":139637976727552,"size":31457280,"requested":31457280,"time_us":5}
{"event":"oom","device":0,"addr":52428800,"size":94371840,"time_us":6}
"#;

/// The row of `report`'s ranking that made `change`.
fn row<'a>(report: &'a Value, change: &str) -> &'a Value {
    report["ranked"]
        .as_array()
        .expect("ranked")
        .iter()
        .find(|t| t["change"] == change)
        .unwrap_or_else(|| panic!("no row {change}: {report}"))
}

/// `memtrace replay PATH --config CONFIG`'s peak reserved bytes (the defaults for "").
fn replayed_peak(path: &str, config: &str, extra: &[&str]) -> u64 {
    // PyTorch's defaults, spelled out: an empty --config is not a setting.
    let config = if config.is_empty() {
        "expandable_segments:False"
    } else {
        config
    };
    let mut args = vec!["--config", config];
    args.extend_from_slice(extra);
    json("replay", path, &args)["blockpool"]["peak_reserved_bytes"]
        .as_u64()
        .expect("peak")
}

#[test]
fn a_fragmented_recording_gets_a_setting_that_reserves_less() {
    let path = scratch("growing.jsonl", &growing_requests());
    let report = json("tune", &path, &["--jobs", "2"]);
    assert_eq!(report["recorded_peak_reserved_bytes"], 330 * MIB);
    assert_eq!(report["confidence"]["level"], "exact");
    assert_eq!(
        report["confidence"]["replayed_peak_reserved_bytes"],
        330 * MIB
    );
    assert_eq!(report["capacity_source"], "default");
    // No out-of-memory event: no capacity, so no garbage-collection candidates.
    assert_eq!(report["ranked"].as_array().map(Vec::len), Some(10));
    let best = &report["ranked"][0];
    assert_eq!(best["change"], "expandable_segments:True");
    assert_eq!(best["rank"], 1);
    assert_eq!(best["peak_reserved_bytes"], 40 * MIB);
    // Rounding to quarters of powers of two lets 24, 28, 32 and 40 MiB blocks serve later
    // requests: segments of 20, 24, 28, 32 and 40 MiB.
    assert_eq!(
        row(&report, "roundup_power2_divisions:4")["peak_reserved_bytes"],
        144 * MIB
    );
    let recorded = row(&report, "recorded");
    assert_eq!(recorded["peak_reserved_bytes"], 330 * MIB);
    assert_eq!(recorded["segment_allocs"], 11);
    assert_eq!(
        row(&report, "max_split_size_mb:256")["peak_reserved_change"],
        0.0
    );
    let recommended = &report["recommended"];
    assert_eq!(recommended["config"], "expandable_segments:True");
    assert_eq!(recommended["peak_reserved_bytes"], 40 * MIB);
    assert_eq!(recommended["saved_bytes"], 290 * MIB);
    assert_eq!(recommended["avoids_recorded_oom"], Value::Null);
    // The figure is replay's for the same settings.
    assert_eq!(
        replayed_peak(&path, "expandable_segments:True", &[]),
        40 * MIB
    );

    let output = memtrace(&["tune", &path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(
            "\nuse:        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n            \
             peak reserved 40.00 MiB instead of 330.00 MiB (-290.00 MiB)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "   1      40.00 MiB   -87.9 %              0               2  \
             expandable_segments:True\n"
        ),
        "{text}"
    );
    assert!(text.contains("confidence: exact: "), "{text}");
}

#[test]
fn a_recorded_out_of_memory_error_is_avoided() {
    let path = scratch("split-oom.jsonl", SPLIT_THEN_OOM);
    let report = json("tune", &path, &[]);
    assert_eq!(report["capacity_source"], "trace");
    assert_eq!(report["capacity_bytes"], 150 * MIB);
    assert_eq!(report["ranked"].as_array().map(Vec::len), Some(12));
    let recorded = row(&report, "recorded");
    assert_eq!(recorded["out_of_memory"], 1);
    assert_eq!(recorded["avoids_recorded_oom"], false);
    assert_eq!(recorded["peak_reserved_bytes"], 100 * MIB);
    // The 90 MiB request grows the expandable segment past the free 70 MiB by one 20 MiB unit.
    let expandable = row(&report, "expandable_segments:True");
    assert_eq!(expandable["rank"], 1);
    assert_eq!(expandable["out_of_memory"], 0);
    assert_eq!(expandable["avoids_recorded_oom"], true);
    assert_eq!(expandable["peak_reserved_bytes"], 120 * MIB);
    // With 64 MiB blocks kept whole, the 30 MiB request gets its own segment and the 100 MiB
    // one is released for the 90 MiB request.
    let split = row(&report, "max_split_size_mb:64");
    assert_eq!(split["out_of_memory"], 0);
    assert_eq!(split["peak_reserved_bytes"], 130 * MIB);
    let recommended = &report["recommended"];
    assert_eq!(recommended["config"], "expandable_segments:True");
    assert_eq!(recommended["avoids_recorded_oom"], true);
    assert_eq!(recommended["recorded_settings_out_of_memory"], 1);
    assert_eq!(recommended["saved_bytes"], -20 * MIB as i64);
    for (change, config) in [
        ("expandable_segments:True", "expandable_segments:True"),
        ("max_split_size_mb:64", "max_split_size_mb:64"),
        (
            "garbage_collection_threshold:0.8,max_split_size_mb:256,\
             per_process_memory_fraction:1.0",
            "max_split_size_mb:256,garbage_collection_threshold:0.8,\
             per_process_memory_fraction:1",
        ),
    ] {
        let tried = row(&report, change);
        assert_eq!(tried["config"], config);
        assert_eq!(
            tried["peak_reserved_bytes"].as_u64(),
            Some(replayed_peak(&path, config, &[])),
            "{change}"
        );
    }
    let output = memtrace(&["tune", &path]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(
            "peak reserved 120.00 MiB instead of 100.00 MiB (+20.00 MiB); the recorded \
             out-of-memory error does not happen\n"
        ),
        "{text}"
    );
}

#[test]
fn the_ranking_does_not_depend_on_how_many_replays_run_at_once() {
    let path = scratch("split-oom-jobs.jsonl", SPLIT_THEN_OOM);
    let mut one = json("tune", &path, &["--jobs", "1"]);
    let mut many = json("tune", &path, &["--jobs", "5"]);
    assert_eq!(one["jobs"], 1);
    assert_eq!(many["jobs"], 5);
    one["jobs"] = Value::Null;
    many["jobs"] = Value::Null;
    assert_eq!(one, many);
}

#[test]
fn settings_given_are_the_yardstick_and_tries_are_ranked_with_the_rest() {
    let path = scratch("growing-config.jsonl", &growing_requests());
    let report = json(
        "tune",
        &path,
        &[
            "--config",
            "roundup_power2_divisions:4",
            "--try",
            "roundup_power2_divisions:16",
            "--capacity",
            "1G",
        ],
    );
    assert_eq!(report["recorded_config"], "roundup_power2_divisions:4");
    assert_eq!(report["recorded_config_source"], "--config");
    assert_eq!(report["capacity_source"], "--capacity");
    // The recording reserved 330 MiB; under the settings given the replay reserves 144 MiB.
    assert_eq!(report["confidence"]["level"], "rough");
    assert_eq!(row(&report, "recorded")["peak_reserved_bytes"], 144 * MIB);
    let tried = row(&report, "--try roundup_power2_divisions:16");
    assert_eq!(tried["config"], "roundup_power2_divisions:16");
    assert_eq!(
        tried["peak_reserved_bytes"].as_u64(),
        Some(replayed_peak(&path, "roundup_power2_divisions:16", &[]))
    );
    // Expandable segments on top of the settings given keep them.
    assert_eq!(
        row(&report, "expandable_segments:True")["config"],
        "roundup_power2_divisions:4,expandable_segments:True"
    );
}

#[test]
fn bad_arguments_are_refused_with_one_line() {
    let path = scratch("split-oom-bad.jsonl", SPLIT_THEN_OOM);
    assert_bad_input(
        &memtrace(&["tune", &path, "--jobs", "0"]),
        "not a whole number of 1 or more",
    );
    assert_bad_input(
        &memtrace(&["tune", &path, "--try", "max_split_size_mb:5"]),
        "--try",
    );
    assert_bad_input(
        &memtrace(&["tune", &path, "--config", "nonsense:1"]),
        "--config",
    );
    assert_bad_input(
        &memtrace(&["tune", &path, "--device", "3"]),
        "device 3 has no events or segments in this trace (it has: 0)",
    );
    let missing = common::scratch("no-such-trace.jsonl");
    assert_bad_input(
        &memtrace(&["tune", missing.to_str().unwrap()]),
        "cannot read the trace",
    );
}

/// On each snapshot: the replay under the recorded settings is `replay`'s, and the recommended
/// settings' (else the runner-up's) peak is `replay --config`'s with them.
fn check_against_replay(names: &[String]) {
    for name in names {
        let path = fixture(name);
        let report = json("tune", &path, &[]);
        assert_eq!(
            report["confidence"]["replayed_peak_reserved_bytes"],
            json("replay", &path, &[])["blockpool"]["peak_reserved_bytes"],
            "{name}"
        );
        let other = report["ranked"]
            .as_array()
            .and_then(|ranked| ranked.iter().find(|t| t["baseline"] == false))
            .unwrap_or_else(|| panic!("{name}: no candidate but the recorded settings"));
        let config = other["config"].as_str().expect("config");
        assert_eq!(
            other["peak_reserved_bytes"].as_u64(),
            Some(replayed_peak(&path, config, &[])),
            "{name}: {config}"
        );
        // Replay reproduces PyTorch's own peaks on these files.
        if report["recorded_peak_reserved_bytes"].is_u64() {
            assert_eq!(report["confidence"]["level"], "exact", "{name}");
        }
    }
}

#[test]
fn tune_agrees_with_replay_on_the_project_fixtures() {
    check_against_replay(&project_snapshot_names());
}

#[test]
#[ignore = "external suite: set BLOCKPOOL_FIXTURES to the folder holding pytorch-snapshots/"]
fn external_tune_agrees_with_replay() {
    check_against_replay(&external_snapshot_names());
}

/// A new stream for each of 5 calls, each allocating 40 MiB and freeing it, recorded as
/// PyTorch serves them: no stream reuses another's cached block, so the recording reserves
/// 200 MiB for 40 MiB live.
fn stream_per_call() -> String {
    let mut lines = vec![r#"{"blockpool_trace":1}"#.to_string()];
    let size = 40 * MIB;
    let mut address = 0x7f00_0000_0000u64;
    for (call, stream) in (1..=5).enumerate() {
        for event in ["segment_alloc", "alloc", "free_requested", "free_completed"] {
            let requested = if event == "segment_alloc" {
                String::new()
            } else {
                format!(r#","requested":{size}"#)
            };
            lines.push(format!(
                r#"{{"event":"{event}","device":0,"addr":{address},"size":{size}{requested},"stream":{stream},"time_us":{}}}"#,
                call + 1
            ));
        }
        address += size;
    }
    lines.join("\n") + "\n"
}

#[test]
fn a_recording_on_many_streams_gets_the_stream_ordered_policy_under_blockpools_variable() {
    let path = scratch("stream_per_call.jsonl", &stream_per_call());
    let report = json("tune", &path, &[]);
    assert_eq!(report["recorded_peak_reserved_bytes"], 200 * MIB);
    assert_eq!(row(&report, "recorded")["peak_reserved_bytes"], 200 * MIB);
    let ordered = row(&report, "stream_reuse:ordered");
    assert_eq!(ordered["peak_reserved_bytes"], 40 * MIB);
    assert_eq!(ordered["segment_allocs"], 1);
    assert_eq!(replayed_peak(&path, "stream_reuse:ordered", &[]), 40 * MIB);
    let recommended = &report["recommended"];
    assert_eq!(recommended["variable"], "BLOCKPOOL_ALLOC_CONF");
    assert_eq!(recommended["config"], "stream_reuse:ordered");
    assert_eq!(recommended["saved_bytes"], 160 * MIB);

    let output = memtrace(&["tune", &path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("use:        BLOCKPOOL_ALLOC_CONF=stream_reuse:ordered\n"),
        "{text}"
    );
    assert!(
        text.contains("PyTorch's allocator has no such key"),
        "{text}"
    );

    // One stream: the policy is not tried.
    let one = json(
        "tune",
        &scratch("growing_1.jsonl", &growing_requests()),
        &[],
    );
    let changes: Vec<&str> = one["ranked"]
        .as_array()
        .expect("ranked")
        .iter()
        .filter_map(|t| t["change"].as_str())
        .collect();
    assert!(
        !changes.iter().any(|c| c.contains("stream_reuse")),
        "{changes:?}"
    );
    assert_eq!(one["recommended"]["variable"], "PYTORCH_CUDA_ALLOC_CONF");
}
