//! A file whose out-of-memory event is not on its busiest device: the rank summary and the
//! page of several files compare the busiest device, and still say which other device ran
//! out of memory instead of "0".

mod common;

use common::server::serve;
use common::{memtrace, scratch, stderr, stdout};
use serde_json::Value;

/// Device 1 allocates (three events); device 0 reserves one segment and runs out of memory.
const BUSY_ONE_OOM_ZERO: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":1,"addr":139637976727552,"size":2097152,"time_us":1}
{"event":"alloc","device":1,"addr":139637976727552,"size":512,"requested":500,"time_us":2}
{"event":"alloc","device":1,"addr":139637976728064,"size":1024,"requested":1000,"time_us":3}
{"event":"segment_alloc","device":0,"addr":139637000000000,"size":20971520,"time_us":4}
{"event":"oom","device":0,"addr":1048576,"size":33554432,"time_us":5}
"#;

/// A file like [`BUSY_ONE_OOM_ZERO`] without the out-of-memory event.
fn without_oom() -> String {
    BUSY_ONE_OOM_ZERO
        .lines()
        .filter(|l| !l.contains("\"oom\""))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Two rank files: rank 0 ran out of memory on its idle device, rank 1 did not.
fn two_ranks() -> (String, String) {
    let dir = scratch("oom-devices");
    std::fs::create_dir_all(&dir).expect("folder");
    let rank0 = dir.join("run-rank0.jsonl");
    let rank1 = dir.join("run-rank1.jsonl");
    std::fs::write(&rank0, BUSY_ONE_OOM_ZERO).expect("rank 0");
    std::fs::write(&rank1, without_oom()).expect("rank 1");
    (
        rank0.to_string_lossy().into_owned(),
        rank1.to_string_lossy().into_owned(),
    )
}

#[test]
fn the_rank_summary_names_the_device_that_ran_out() {
    let (rank0, rank1) = two_ranks();
    let output = memtrace(&["summary", &rank0, &rank1, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    let first = &report["files"][0];
    assert_eq!(first["device"], 1, "the busiest device is compared");
    assert_eq!(first["out_of_memory"], 0);
    assert_eq!(
        first["out_of_memory_elsewhere"],
        serde_json::json!([{ "device": 0, "events": 1 }])
    );
    assert_eq!(
        report["files"][1]["out_of_memory_elsewhere"],
        serde_json::json!([])
    );
    let text = stdout(&memtrace(&["summary", &rank0, &rank1]));
    let row = text
        .lines()
        .find(|l| l.starts_with("rank 0"))
        .unwrap_or_else(|| panic!("no rank 0 row:\n{text}"));
    assert!(row.ends_with(" 0 (device 0: 1)"), "{row:?}");
    let row = text
        .lines()
        .find(|l| l.starts_with("rank 1"))
        .expect("rank 1");
    assert!(row.ends_with(" 0"), "{row:?}");
}

#[test]
fn the_page_of_several_files_names_the_device_that_ran_out() {
    let (rank0, rank1) = two_ranks();
    let server = serve(&[&rank0, &rank1]);
    let comparison = common::server::get(server.port, "/api/compare").json();
    let files = comparison["files"].as_array().expect("files");
    assert_eq!(files[0]["device"], 1);
    assert_eq!(files[0]["out_of_memory"], 0);
    assert_eq!(
        files[0]["out_of_memory_elsewhere"],
        serde_json::json!([{ "device": 0, "events": 1 }])
    );
    assert_eq!(files[1]["out_of_memory_elsewhere"], serde_json::json!([]));
}
