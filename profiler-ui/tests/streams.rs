//! `memtrace streams`: memory by stream on a trace with a new stream per call (the vLLM
//! pattern), in text and JSON, the same as a PyTorch pickle; the frees that waited for other
//! streams in a trace blockpool recorded with `record_stream`; the summary's line on streams;
//! the one-stream fixtures, whose figures must add up to `memtrace summary`'s; and bad input.

mod common;

use blockpool::DeviceIndex;
use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
use common::{
    assert_bad_input, external_snapshot_names, fixture, memtrace, project_snapshot_names, run_json,
    run_ok, scratch,
};
use serde_json::{json, Value};

const MIB: u64 = 1 << 20;
const SIZE: u64 = 40 * MIB;

/// A new stream for each of 5 calls (streams 1 to 5), each with its own 40 MiB segment,
/// allocating 40 MiB and freeing it; the third call's block is used by the fourth call's
/// stream, so its free completes after the fourth call allocated (events 10 and 13). The
/// recording reserves 200 MiB for 40 MiB live.
fn stream_per_call() -> String {
    let mut lines = vec![r#"{"blockpool_trace":1}"#.to_string()];
    let mut event = |action: &str, stream: u64, addr: u64| {
        let time = lines.len();
        lines.push(format!(
            r#"{{"event":"{action}","device":0,"addr":{addr},"size":{SIZE},"requested":{SIZE},"stream":{stream},"time_us":{time}}}"#
        ));
    };
    let mut deferred = None;
    for stream in 1..=5u64 {
        let addr = 0x7f00_0000_0000 + (stream - 1) * SIZE;
        event("segment_alloc", stream, addr);
        event("alloc", stream, addr);
        if let Some(at) = deferred.take() {
            event("free_completed", 3, at);
        }
        event("free_requested", stream, addr);
        if stream == 3 {
            deferred = Some(addr);
        } else {
            event("free_completed", stream, addr);
        }
    }
    lines.join("\n") + "\n"
}

fn written(name: &str, text: &str) -> String {
    let path = scratch(name);
    std::fs::write(&path, text).expect("writes the trace");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_new_stream_per_call_strands_four_segments_and_the_ordered_policy_would_reserve_one() {
    let path = written("stream_per_call.jsonl", &stream_per_call());
    let report = run_json(&["streams", &path]);
    assert_eq!(report["device"], 0);
    assert_eq!(report["streams"].as_array().map(Vec::len), Some(5));
    assert_eq!(report["streams"][2]["stream"], 3);
    assert_eq!(report["streams"][2]["frees_waited"], 1);
    assert_eq!(report["streams"][2]["stranded_bytes"], SIZE);
    assert_eq!(report["streams"][4]["stranded_bytes"], 0);
    assert_eq!(
        report["reserved_peak"],
        json!({"state": 17, "at": "after event 16", "reserved_bytes": 5 * SIZE,
               "allocated_bytes": 0, "waiting_bytes": 0, "cached_bytes": 5 * SIZE,
               "stranded_bytes": 4 * SIZE})
    );
    assert_eq!(report["stranded"]["peak_bytes"], 4 * SIZE);
    assert_eq!(report["stranded"]["streams"], 4);
    assert_eq!(report["stranded"]["left_at_end_bytes"], 4 * SIZE);
    assert_eq!(report["waiting"]["frees"], 1);
    assert_eq!(report["waiting"]["longest_events"], 3);
    let ordered = &report["ordered"];
    assert_eq!(ordered["config"], "");
    assert_eq!(ordered["ordered_config"], "stream_reuse:ordered");
    assert_eq!(ordered["recorded_peak_reserved_bytes"], 5 * SIZE);
    assert_eq!(ordered["replayed_peak_reserved_bytes"], 5 * SIZE);
    assert_eq!(ordered["ordered_peak_reserved_bytes"], SIZE);
    assert_eq!(ordered["saved_bytes"], 4 * SIZE);
    assert_eq!(report["ordered_note"], Value::Null);

    let text = run_ok(&["streams", &path]);
    for line in [
        "memory by stream of ",
        "at the reserved peak (after event 16): 200.00 MiB reserved = 0 bytes allocated + 0 bytes waiting for other streams + 200.00 MiB cached, of which 160.00 MiB stranded\n",
        "stranded: up to 160.00 MiB at once (after event 14)",
        "waiting for other streams (record_stream): 1 free (40.00 MiB) waited; up to 40.00 MiB at once (after event 10); the longest wait was 3 events (3 µs)\n",
        "peak reserved would be 40.00 MiB instead of 200.00 MiB under PyTorch's default settings (-160.00 MiB; the recording reserved 200.00 MiB)\n",
        "try it: BLOCKPOOL_ALLOC_CONF=stream_reuse:ordered",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("0x3 "))
        .expect("stream 3's row");
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>().join(" "),
        "0x3 1 40.00 MiB 40.00 MiB 40.00 MiB 40.00 MiB 40.00 MiB event 9"
    );

    // The summary says it in brief.
    let summary = run_json(&["summary", &path]);
    assert_eq!(
        summary["devices"][0]["streams"],
        json!({"allocating": 5, "stranded_at_reserved_peak_bytes": 4 * SIZE,
               "waiting_at_reserved_peak_bytes": 0, "stranded_peak_bytes": 4 * SIZE,
               "frees_waited": 1})
    );
    let text = run_ok(&["summary", &path]);
    assert!(
        text.contains("  streams:   5 allocate; at the reserved peak 160.00 MiB is cached on streams done allocating (stranded) and 0 bytes waits for other streams; 1 free waited (`memtrace streams` for each stream and what stream_reuse:ordered would reserve)\n"),
        "{text}"
    );

    // Without the replays, and as a PyTorch snapshot: the same figures.
    let skipped = run_json(&["streams", &path, "--no-replay"]);
    assert_eq!(skipped["ordered"], Value::Null);
    assert_eq!(skipped["ordered_note"], "not replayed (--no-replay)");
    let pickle = scratch("stream_per_call.pickle");
    let pickle = pickle.to_string_lossy();
    run_ok(&["convert", &path, &pickle]);
    let converted = run_json(&["streams", &pickle]);
    for key in [
        "streams",
        "reserved_peak",
        "stranded",
        "waiting",
        "chart",
        "ordered",
    ] {
        assert_eq!(converted[key], report[key], "{key}");
    }
}

#[test]
fn record_stream_frees_that_blockpool_recorded_are_seen_waiting() {
    let sim = SimBackend::new(1, 1 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("records");
    let main = StreamId::DEFAULT;
    let side = StreamId::from_raw(7);
    // A 4 MiB buffer used on the side stream and dropped: its free waits for the side stream.
    let used = alloc.allocate(0, (4 * MIB) as usize, main).expect("fits");
    used.record_stream(side).expect("records");
    drop(used);
    // Meanwhile the main stream allocates twice more; then the side stream's work completes.
    let a = alloc.allocate(0, MIB as usize, main).expect("fits");
    let b = alloc.allocate(0, MIB as usize, main).expect("fits");
    sim.complete_stream(DeviceIndex::new(0), side)
        .expect("completes");
    let c = alloc.allocate(0, (4 * MIB) as usize, main).expect("fits");
    let path = scratch("record_stream.jsonl");
    alloc.dump_snapshot(&path).expect("writes the trace");
    drop((a, b, c));
    let report = run_json(&["streams", &path.to_string_lossy()]);
    assert_eq!(report["completions"], true);
    // One stream allocates: nothing to replay, nothing stranded.
    assert_eq!(report["streams"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        report["ordered_note"],
        "one stream allocates: the stream-ordered policy would change nothing"
    );
    let waiting = &report["waiting"];
    assert_eq!(waiting["frees"], 1);
    assert_eq!(waiting["bytes"], 4 * MIB);
    assert_eq!(waiting["peak_bytes"], 4 * MIB);
    assert_eq!(report["streams"][0]["frees_waited"], 1);
    assert_eq!(report["stranded"]["peak_bytes"], 0);
}

/// On each fixture: the reserved peak is `memtrace summary`'s, and its parts add up to it.
fn check_against_summary(names: &[String]) {
    assert!(!names.is_empty());
    for name in names {
        let path = fixture(name);
        let output = memtrace(&["streams", &path, "--json"]);
        if output.status.code() == Some(2) {
            // A trace with no devices (no segments, no events) has nothing to report.
            assert_bad_input(&output, "no devices");
            continue;
        }
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let summary = run_json(&["summary", &path]);
        let device = report["device"].as_u64().expect("device");
        let summarized = summary["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .find(|d| d["device"].as_u64() == Some(device))
            .expect("the device is summarized");
        let peak = &report["reserved_peak"];
        let reserved = peak["reserved_bytes"].as_u64().expect("reserved");
        assert_eq!(
            summarized["peak_reserved"]["bytes"].as_u64(),
            Some(reserved),
            "{name}"
        );
        let parts: u64 = ["allocated_bytes", "waiting_bytes", "cached_bytes"]
            .iter()
            .map(|k| peak[k].as_u64().expect("a part"))
            .sum();
        assert_eq!(parts, reserved, "{name}");
        let allocations: u64 = report["streams"]
            .as_array()
            .expect("streams")
            .iter()
            .map(|s| s["allocations"].as_u64().expect("allocations"))
            .sum();
        assert!(
            report["chart"]["cached"]
                .as_array()
                .is_some_and(|c| !c.is_empty()),
            "{name}"
        );
        // None of these traces allocates on more than one stream.
        assert!(report["ordered"].is_null(), "{name}");
        assert!(summarized["streams"].is_null(), "{name}");
        assert!(
            allocations <= summarized["events"].as_u64().expect("events"),
            "{name}"
        );
    }
}

#[test]
fn the_project_fixtures_reserved_peaks_add_up() {
    check_against_summary(&project_snapshot_names());
}

#[test]
#[ignore = "external suite: set BLOCKPOOL_FIXTURES to the folder holding pytorch-snapshots/"]
fn external_streams_reserved_peaks_add_up() {
    check_against_summary(&external_snapshot_names());
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let path = written("stream_per_call_bad.jsonl", &stream_per_call());
    assert_bad_input(&memtrace(&["streams", &path, "--device", "3"]), "device 3");
    let output = memtrace(&["streams", &path, "--config", "stream_reuse:sideways"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(common::stderr(&output).contains("sideways"));
    assert_bad_input(
        &memtrace(&["streams", "/nonexistent/trace.pickle"]),
        "cannot read the trace",
    );
}
