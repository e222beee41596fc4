//! The viewer's routes for the whole trace (issue 12), over real HTTP with exact values: the
//! grey band's contents (`/api/summarized`), the active cached segment timeline
//! (`/api/segments`), the allocator state history (`/api/events`), out-of-memory markers
//! (`/api/ooms`), the default and capped detail of `/api/timeline`, the segment count of
//! `/api/state` and whether a file has times (`/api/meta`).
//!
//! The trace is written here as JSON Lines, event by event, so every number below follows from
//! the list in [`write_trace`].

mod common;

use common::scratch;
use common::server::{self, Server};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// Device 0, stream 0; every event but the segments' under context 1 (tag `step0`, frame
/// `Model.grow model.py:99`). Events, numbered as the viewer numbers them (event n leads to
/// state n):
///
/// | n | event |
/// |---|---|
/// | 1 | segment_alloc 0x1000000, 4 MiB |
/// | 2 | alloc A 0x1000000, 1 MiB |
/// | 3 | alloc B 0x1100000, 2 MiB |
/// | 4 | segment_alloc 0x2000000, 2 MiB |
/// | 5 | alloc C 0x2000000, 512 KiB |
/// | 6 | oom: 8 MiB asked, 1 MiB free on the device |
/// | 7, 8 | free_requested, free_completed B |
/// | 9, 10 | free_requested, free_completed C |
/// | 11 | segment_free 0x2000000 |
///
/// Times are 10 µs per event (`timed`) or all 0.
fn write_trace(name: &str, timed: bool) -> PathBuf {
    let path = scratch(name);
    let t = |n: u64| if timed { 10 * n } else { 0 };
    let event = |n: u64, action: &str, addr: u64, size: u64, context: u32| {
        json!({"event": action, "device": 0, "stream": 0, "addr": addr, "size": size,
               "requested": size, "time_us": t(n), "context": context})
    };
    // The header first, its format key first (json! sorts keys).
    let header = r#"{"blockpool_trace":1,"created_by":"viewer test","time_origin_unix_us":0}"#;
    let mut lines = vec![
        json!({"frame": 1, "name": "Model.grow", "file": "model.py", "line": 99}),
        json!({"context": 1, "tags": ["step0"], "frames": [1]}),
        event(1, "segment_alloc", 0x100_0000, 4 * MIB, 0),
        event(2, "alloc", 0x100_0000, MIB, 1),
        event(3, "alloc", 0x110_0000, 2 * MIB, 1),
        event(4, "segment_alloc", 0x200_0000, 2 * MIB, 0),
        event(5, "alloc", 0x200_0000, 512 * KIB, 1),
        event(6, "oom", MIB, 8 * MIB, 1),
        event(7, "free_requested", 0x110_0000, 2 * MIB, 1),
        event(8, "free_completed", 0x110_0000, 2 * MIB, 1),
        event(9, "free_requested", 0x200_0000, 512 * KIB, 1),
        event(10, "free_completed", 0x200_0000, 512 * KIB, 1),
        event(11, "segment_free", 0x200_0000, 2 * MIB, 0),
    ];
    lines.push(
        json!({"segment": 0x100_0000u64, "device": 0, "size": 4 * MIB, "stream": 0,
        "pool": "large", "context": 0, "blocks": [
            [0x100_0000u64, MIB, MIB, "active_allocated", 1],
            [0x110_0000u64, 3 * MIB, 0, "inactive", 0]]}),
    );
    lines.push(json!({"end": {"events": 11, "segments": 1, "dropped_events": 0}}));
    let text: String = std::iter::once(header.to_owned())
        .chain(lines.iter().map(Value::to_string))
        .map(|l| l + "\n")
        .collect();
    std::fs::write(&path, text).expect("trace written");
    path
}

fn serve(file: &Path) -> Server {
    server::serve(&[&file.to_string_lossy()])
}

/// GETs `target`: the status and the body as JSON.
fn get(server: &Server, target: &str) -> (u16, Value) {
    let reply = server::get(server.port, target);
    (reply.status, reply.json())
}

fn ok(server: &Server, target: &str) -> Value {
    let (status, body) = get(server, target);
    assert_eq!(status, 200, "{target}: {body}");
    body
}

#[test]
fn out_of_memory_events_are_markers_with_the_failing_request() {
    let server = serve(&write_trace("oom.jsonl", true));
    let site = ok(&server, "/api/context?id=1")["site"].clone();
    assert_eq!(
        ok(&server, "/api/ooms?device=0"),
        json!([{
            "index": 6, "event": 5, "label": "event 5", "time_us": 60, "size": 8 * MIB, "stream": 0, "device_free": MIB,
            "allocated_bytes": MIB + 2 * MIB + 512 * KIB, "reserved_bytes": 6 * MIB,
            "site": site, "context": 1,
        }]),
        "one oom, event 5 (state index 6), with A, B and C allocated in both segments"
    );
    let (status, body) = get(&server, "/api/ooms?device=7");
    assert_eq!(
        (status, body["error"].as_str()),
        (404, Some("device 7 is not in this trace"))
    );
}

#[test]
fn the_segment_timeline_stacks_each_reserved_segment_over_its_lifetime() {
    let server = serve(&write_trace("segments.jsonl", true));
    let t = ok(&server, "/api/segments?device=0&axis=event&width=12");
    assert_eq!(t["states"], json!([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]));
    let m = |n: u64| n * MIB;
    assert_eq!(
        t["total"],
        json!([
            0,
            m(4),
            m(4),
            m(4),
            m(6),
            m(6),
            m(6),
            m(6),
            m(6),
            m(6),
            m(6),
            m(4)
        ]),
        "reserved bytes after each event"
    );
    assert_eq!(t["other"], json!([0u64; 12].to_vec()));
    assert_eq!(t["matched"], 2);
    let bands: Vec<Value> = t["bands"]
        .as_array()
        .expect("bands")
        .iter()
        .map(|b| json!([b["id"], b["size"], b["start"], b["end"], b["runs"]]))
        .collect();
    assert_eq!(
        bands,
        [
            json!([0, m(4), 1, 12, [[1, 12, 0]]]),
            json!([1, m(2), 4, 11, [[4, 11, m(4)]]]),
        ],
        "the 4 MiB segment from event 1 to the end, the 2 MiB one on it from 4 until its free at 11"
    );
    let one = ok(
        &server,
        "/api/segments?device=0&axis=event&width=12&limit=1",
    );
    assert_eq!(one["bands"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["bands"][0]["id"], 0, "the larger segment is drawn");
    assert_eq!(one["other"][5], m(2), "the other one is summarized");
}

#[test]
fn the_summarized_band_says_what_it_holds() {
    let server = serve(&write_trace("summarized.jsonl", true));
    let site = ok(&server, "/api/context?id=1")["site"].clone();
    let window = "device=0&axis=event&width=12&limit=1";
    let t = ok(&server, &format!("/api/timeline?{window}"));
    assert_eq!(t["limit"], 1);
    assert_eq!(t["bands"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        t["bands"][0]["size"],
        2 * MIB,
        "B, the largest, is drawn on its own"
    );
    assert_eq!(t["other"][5], MIB + 512 * KIB);
    assert_eq!(
        ok(&server, &format!("/api/summarized?{window}&column=5")),
        json!({
            "column": 5, "state": 5, "allocations": 2, "bytes": MIB + 512 * KIB,
            "sites": [{"site": site, "bytes": MIB + 512 * KIB, "allocations": 2}],
            "more_sites": 0,
        }),
        "after event 5: A and C, both from context 1"
    );
    let nothing = ok(&server, &format!("/api/summarized?{window}&column=0"));
    assert_eq!(
        (&nothing["allocations"], &nothing["bytes"]),
        (&json!(0), &json!(0))
    );
    for (query, message) in [
        (
            "column=12",
            "parameter `column`: 12 is past the window's 12 columns",
        ),
        ("", "parameter `column`: missing"),
        (
            "column=-1",
            "parameter `column`: \"-1\" is not a whole number from 0 to 2^64-1",
        ),
    ] {
        let (status, body) = get(&server, &format!("/api/summarized?{window}&{query}"));
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some(message)),
            "{query}"
        );
    }
}

#[test]
fn the_timeline_draws_15000_bands_unless_asked_otherwise() {
    let server = serve(&write_trace("default.jsonl", true));
    let t = ok(&server, "/api/timeline?device=0&axis=event&width=12");
    assert_eq!(t["limit"], 15_000, "memory_viz's default");
    assert_eq!(t["bands"].as_array().map(Vec::len), Some(3));
    assert_eq!(t["other"], json!([0u64; 12].to_vec()));
    let most = ok(
        &server,
        "/api/timeline?device=0&axis=event&width=12&limit=999999999",
    );
    assert_eq!(most["limit"], 100_000, "the cap");
}

#[test]
fn the_state_history_lists_filters_and_pages_events() {
    let server = serve(&write_trace("history.jsonl", true));
    let site = ok(&server, "/api/context?id=1")["site"].clone();
    let page = ok(&server, "/api/events?device=0&action=oom");
    assert_eq!(
        page,
        json!({"events": 11, "matched": 1, "offset": 0, "rows": [{
            "index": 6, "event": 5, "label": "event 5", "action": "oom", "addr": "0x100000", "size": 8 * MIB,
            "requested": 8 * MIB, "stream": 0, "time_us": 60, "site": site, "context": 1,
        }]})
    );
    let last = ok(&server, "/api/events?device=0&offset=9&limit=5");
    let indices: Vec<&Value> = last["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| &r["index"])
        .collect();
    assert_eq!(indices, [&json!(10), &json!(11)]);
    assert_eq!((&last["matched"], &last["offset"]), (&json!(11), &json!(9)));
    let actions: Vec<Value> = ok(&server, "/api/events?device=0&limit=3")["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["action"].clone())
        .collect();
    assert_eq!(
        actions,
        [json!("segment_alloc"), json!("alloc"), json!("alloc")]
    );
    let frees = ok(
        &server,
        "/api/events?device=0&action=free_requested,free_completed",
    );
    assert_eq!(frees["matched"], 4);
    let tagged = ok(&server, "/api/events?device=0&q=STEP0");
    assert_eq!(
        tagged["matched"], 8,
        "every event but the three segment events"
    );
    let framed = ok(&server, "/api/events?device=0&q=model.py");
    assert_eq!(framed["matched"], 8, "the stack text is searched too");
    let (status, body) = get(&server, "/api/events?device=0&action=malloc");
    assert_eq!(status, 400);
    assert_eq!(
        body["error"].as_str(),
        Some(
            "parameter `action`: \"malloc\" is not one of alloc, free_requested, free_completed, \
             segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot, annotate"
        )
    );
}

#[test]
fn the_state_counts_every_segment_and_meta_says_whether_times_were_recorded() {
    let server = serve(&write_trace("timed.jsonl", true));
    let state = ok(&server, "/api/state?device=0&index=5");
    assert_eq!(state["segments_total"], 2);
    assert_eq!(state["segments"].as_array().map(Vec::len), Some(2));
    assert_eq!(state["truncated"], false);
    assert_eq!(ok(&server, "/api/meta")["devices"][0]["has_times"], true);
    drop(server);
    let untimed = serve(&write_trace("untimed.jsonl", false));
    let meta = ok(&untimed, "/api/meta");
    let device = &meta["devices"][0];
    assert_eq!(
        (
            &device["has_times"],
            &device["first_us"],
            &device["last_us"]
        ),
        (&json!(false), &json!(0), &json!(0)),
        "a file without times: the page offers only the event axis"
    );
}
