//! One numbering of events across memtrace: an event read from a PyTorch file is named by its
//! index in that device's `device_traces` list, annotations inserted from
//! `external_annotations` have no number, a state is "after event N", and `--at N` is that
//! state. Checked on the made file `made_oom_private_pool.pickle`, whose `external_annotations`
//! range opens before every trace entry, so each of its entries sits one place later in our
//! event list than in PyTorch's: its `oom` is `device_traces[0][7]` and our event 8.

mod common;

use common::server::{self, Server};
use common::{fixture, memtrace, scratch, stderr, stdout};
use serde_json::Value;

const MADE_OOM: &str = "made_oom_private_pool.pickle";

fn json(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn summary_names_the_oom_by_its_index_in_device_traces() {
    let path = fixture(MADE_OOM);
    let report = json(&["summary", &path, "--json"]);
    let device = &report["devices"][0];
    assert_eq!(device["events"], 10, "8 trace entries and 2 annotations");
    assert_eq!(device["inserted_annotations"], 2);
    let oom = &device["out_of_memory"][0];
    assert_eq!(
        oom["event"], 7,
        "PyTorch's device_traces[0][7], not our 8th"
    );
    assert_eq!(oom["label"], "event 7");
    // segment_alloc 20 MiB (0), alloc 8 MiB (1), alloc 6 MiB (2), segment_alloc 2 MiB (3),
    // alloc 1000 bytes (4): allocated peaks after 4, reserved after 3.
    assert_eq!(device["peak_allocated"]["after_event"], 4);
    assert_eq!(device["peak_reserved"]["after_event"], 3);
    let text = stdout(&memtrace(&["summary", &path]));
    assert!(
        text.contains("  out of memory at event 7 (0.000017 s): 30.00 MiB requested"),
        "{text}"
    );
    assert!(
        text.contains("  peak reserved   22.00 MiB after event 3 (0.000013 s)"),
        "{text}"
    );
    assert!(
        text.contains("2 annotations from external_annotations are among them without a number"),
        "{text}"
    );
}

#[test]
fn at_n_is_the_state_after_pytorchs_event_n() {
    let path = fixture(MADE_OOM);
    let allocated =
        |at: &str| json(&["top", &path, "--at", at, "--json"])["allocated_bytes"].clone();
    assert_eq!(allocated("start"), 0, "before event 0");
    assert_eq!(allocated("0"), 0, "after the 20 MiB segment_alloc");
    assert_eq!(
        allocated("1"),
        8 << 20,
        "after device_traces[0][1], alloc 8 MiB"
    );
    assert_eq!(
        allocated("2"),
        14 << 20,
        "after device_traces[0][2], alloc 6 MiB"
    );
    let report = json(&["top", &path, "--at", "2", "--json"]);
    assert_eq!(report["after_event"], 2);
    let text = stdout(&memtrace(&["top", &path, "--at", "2"]));
    assert!(
        text.starts_with("device 0 after event 2: 14.00 MiB allocated\n"),
        "{text}"
    );
    let segments = stdout(&memtrace(&["segments", &path, "--at", "start"]));
    assert!(
        segments.starts_with("device 0 before event 0: 0 segments"),
        "{segments}"
    );
    // Event 7 is the last entry; 8 is past the end, and the message says what --at means.
    let output = memtrace(&["top", &path, "--at", "8"]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output).trim(),
        "memtrace: --at 8 is past the end: device 0 has events 0 to 7 (--at N is the state \
         after event N, --at start the one before event 0)"
    );
    let output = memtrace(&["top", &path, "--at", "last"]);
    assert!(
        stderr(&output).contains("expected an event number"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn pickle_to_json_lines_and_back_keeps_the_numbers() {
    let lines = scratch("numbering-round-trip.jsonl");
    let back = scratch("numbering-round-trip.pickle");
    let (lines, back) = (lines.to_str().unwrap(), back.to_str().unwrap());
    let path = fixture(MADE_OOM);
    for (from, to) in [(path.as_str(), lines), (lines, back)] {
        let output = memtrace(&["convert", from, to]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    for file in [lines, back] {
        let device = &json(&["summary", file, "--json"])["devices"][0];
        assert_eq!(device["out_of_memory"][0]["event"], 7, "{file}");
        assert_eq!(device["inserted_annotations"], 2, "{file}");
    }
    // The annotations went back to external_annotations: device_traces holds the 8 entries.
    let bytes = std::fs::read(back).expect("reads");
    let value = blockpool::trace::pickle::read(&bytes, &Default::default()).expect("pickle");
    let typed = blockpool::trace::pytorch::snapshot_from_value(&value).expect("typed");
    assert_eq!(typed.device_traces[0].len(), 8);
    let actions: Vec<&str> = typed.device_traces[0]
        .iter()
        .map(|e| e.action.pytorch_name())
        .collect();
    assert_eq!(actions[7], "oom");
}

fn serve(file: &str) -> Server {
    server::serve(&[file])
}

/// The body of `GET target` as JSON.
fn get(server: &Server, target: &str) -> Value {
    server::get(server.port, target).json()
}

#[test]
fn the_viewer_api_names_events_by_pytorchs_index() {
    let server = serve(&fixture(MADE_OOM));
    let ooms = get(&server, "/api/ooms?device=0");
    let oom = &ooms[0];
    assert_eq!(oom["event"], 7, "{ooms}");
    assert_eq!(oom["label"], "event 7");
    assert_eq!(
        oom["index"], 9,
        "the state index the API takes: 9 events applied"
    );
    let page = get(&server, "/api/events?device=0&limit=100");
    let rows = page["rows"].as_array().expect("rows");
    let named: Vec<(Value, Value)> = rows
        .iter()
        .map(|r| (r["event"].clone(), r["label"].clone()))
        .collect();
    assert_eq!(named[0], (Value::Null, "annotation before event 0".into()));
    assert_eq!(named[1], (0.into(), "event 0".into()));
    assert_eq!(named[8], (7.into(), "event 7".into()));
    assert_eq!(named[9], (Value::Null, "annotation after event 7".into()));
    let state = get(&server, "/api/state?device=0&index=9");
    assert_eq!(state["after_event"], 7);
    assert_eq!(state["label"], "after event 7");
    // The page labels bands and hovers from these positions (app.js mirrors EventNumbers).
    let meta = get(&server, "/api/meta");
    assert_eq!(
        meta["devices"][0]["inserted_events"],
        serde_json::json!([0, 9])
    );
}
