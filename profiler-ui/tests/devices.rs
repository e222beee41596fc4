//! Which device a command opens in a trace of several: the one that ran out of memory, else
//! the busiest, and `--device` for any other; and a file whose out-of-memory event is not on
//! its busiest device: the rank summary and the page of several files compare the busiest
//! device, and still say which other device ran out of memory instead of "0".

mod common;

use common::server::serve;
use common::{assert_bad_input, memtrace, scratch, stderr, stdout};
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

/// Device 0 holds one idle 20 MiB segment; device 1 did all the work (two 2 MiB segments,
/// three allocations).
const TWO_DEVICES: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":1,"addr":139637976727552,"size":2097152,"time_us":1}
{"event":"alloc","device":1,"addr":139637976727552,"size":512,"requested":500,"time_us":2}
{"event":"alloc","device":1,"addr":139637976728064,"size":1024,"requested":1000,"time_us":3}
{"event":"segment_alloc","device":1,"addr":139637978824704,"size":2097152,"time_us":4}
{"event":"alloc","device":1,"addr":139637978824704,"size":1048576,"requested":1048576,"time_us":5}
{"segment":139637976727552,"device":1,"size":2097152,"pool":"small","blocks":[[139637976727552,512,500,"active_allocated",0],[139637976728064,1024,1000,"active_allocated",0],[139637976729088,2095616,0,"inactive",0]]}
{"segment":139637978824704,"device":1,"size":2097152,"pool":"small","blocks":[[139637978824704,1048576,1048576,"active_allocated",0],[139637979873280,1048576,0,"inactive",0]]}
{"segment":139637000000000,"device":0,"size":20971520,"pool":"large","blocks":[[139637000000000,20971520,0,"inactive",0]]}
{"end":{"events":5,"segments":3}}
"#;

#[test]
fn commands_default_to_the_device_that_ran_out_of_memory() {
    // The same trace, with an out-of-memory event on the idle device 0 at the end.
    let oom = r#"{"event":"oom","device":0,"addr":1048576,"size":33554432,"time_us":6}"#;
    let trace = TWO_DEVICES
        .replace(
            "\n{\"segment\":139637976727552",
            &format!("\n{oom}\n{{\"segment\":139637976727552"),
        )
        .replace(
            r#"{"end":{"events":5,"segments":3}}"#,
            r#"{"end":{"events":6,"segments":3}}"#,
        );
    let path = scratch("two-devices-oom.jsonl");
    std::fs::write(&path, trace).unwrap();
    let path = path.to_str().unwrap();
    let output = memtrace(&["top", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("device 0 "),
        "{}",
        stdout(&output)
    );
    assert_eq!(stderr(&output), "");
    // `--device 1` still reaches the busiest, and each command says where memory ran out.
    let note = "memtrace: out of memory on device 0 (1 event), not on device 1: \
                --device 0 shows it\n";
    let svg = scratch("two-devices-oom.svg");
    let svg = svg.to_str().unwrap();
    let streams = ["streams", "--no-replay"];
    for command in [
        &["top"][..],
        &["segments"],
        &streams,
        &["timeline", "-o", svg],
    ] {
        let output = memtrace(&[command, &[path, "--device", "1"]].concat());
        assert!(output.status.success(), "{command:?}: {}", stderr(&output));
        assert_eq!(stderr(&output), note, "{command:?}");
    }
    let output = memtrace(&["top", path, "--device", "1"]);
    assert!(
        stdout(&output).starts_with("device 1 "),
        "{}",
        stdout(&output)
    );
}

#[test]
fn commands_default_to_the_busiest_device() {
    let path = scratch("two-devices.jsonl");
    std::fs::write(&path, TWO_DEVICES).unwrap();
    let path = path.to_str().unwrap();
    // Device 1, where the events are, though device 0 comes first.
    let output = memtrace(&["top", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("device 1 after event 4: 1.00 MiB allocated\n"),
        "{}",
        stdout(&output)
    );
    // `diff` picks the busiest of each side too, or a device per side.
    let output = memtrace(&["diff", path, path, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        (&report["device_a"], &report["device_b"]),
        (&1.into(), &1.into())
    );
    let output = memtrace(&[
        "diff",
        path,
        path,
        "--device-a",
        "1",
        "--device-b",
        "0",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        (&report["device_a"], &report["device_b"]),
        (&1.into(), &0.into())
    );
    // 512 + 1,024 + 1 MiB live on device 1 at its peak, nothing on device 0.
    assert_eq!(
        (&report["peak_a"], &report["peak_b"]),
        (&1_050_112.into(), &0.into())
    );
    let output = memtrace(&["diff", path, path, "--device-a", "1", "--device-b", "0"]);
    assert!(
        stdout(&output).starts_with("device 1 of A against device 0 of B\n"),
        "{}",
        stdout(&output)
    );
    assert_bad_input(
        &memtrace(&["diff", path, path, "--device-b", "7"]),
        "device 7 has no segments or events",
    );
    // `--device 0` still reaches the idle device.
    let output = memtrace(&["top", path, "--device", "0"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).starts_with("device 0 before event 0: 0 bytes allocated\n"),
        "{}",
        stdout(&output)
    );
}
