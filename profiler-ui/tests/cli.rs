//! `memtrace` as a user runs it: exit codes, one-line errors, exact reports on the PyTorch
//! fixtures, and conversions between every format. The `external_` tests read third-party
//! files the project may not copy (see `allocator_tests::fixtures`).

mod common;

use common::{
    assert_bad_input, external_snapshot_names, fixture, memtrace, memtrace_with_env,
    project_snapshot_names, scratch, stderr, stdout,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `memtrace info --json` and parses the report.
fn info_json(path: &str) -> Value {
    let output = memtrace(&["info", path, "--json"]);
    assert!(
        output.status.success(),
        "info {path}: {:?} {}",
        output.status,
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("info --json prints JSON")
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_info_reports_exact_counts_of_a_pytorch_snapshot() {
    let report = info_json(&fixture("kkaitlyn111_cs336_memory_ctx128_forward.pickle"));
    assert_eq!(report["format"], "pytorch");
    assert_eq!(report["gzip"], false);
    let devices = report["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1);
    let device = &devices[0];
    assert_eq!(device["device"], 0);
    assert_eq!(device["events"], 4_657);
    assert_eq!(device["events_by_action"]["alloc"], 2_058);
    assert_eq!(device["events_by_action"]["free_requested"], 1_155);
    assert_eq!(device["events_by_action"]["free_completed"], 1_155);
    assert_eq!(device["events_by_action"]["segment_alloc"], 289);
    assert_eq!(device["segments"], 516);
    assert_eq!(device["blocks"], 1_276);
    assert_eq!(device["reserved_bytes"], 19_667_091_456_u64);
    assert_eq!(device["allocated_bytes"], 19_498_420_224_u64);
}

#[test]
fn info_reports_exact_counts_of_a_training_step() {
    let report = info_json(&fixture(
        "notHanmin_assignment2-systems_memory_snapshot.pickle",
    ));
    assert_eq!(report["format"], "pytorch");
    assert_eq!(report["gzip"], false);
    let devices = report["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1);
    let device = &devices[0];
    assert_eq!(device["device"], 0);
    // 19,464 trace entries and the file's 4 external annotations.
    assert_eq!(device["events"], 19_468);
    assert_eq!(device["numbered_events"], 19_464);
    assert_eq!(device["inserted_annotations"], 4);
    assert_eq!(device["events_by_action"]["alloc"], 6_488);
    assert_eq!(device["events_by_action"]["free_requested"], 6_488);
    assert_eq!(device["events_by_action"]["free_completed"], 6_488);
    assert_eq!(device["events_by_action"]["annotate"], 4);
    assert_eq!(device["segments"], 999);
    assert_eq!(device["blocks"], 1_987);
    assert_eq!(device["reserved_bytes"], 23_842_521_088_u64);
    assert_eq!(device["allocated_bytes"], 16_019_091_968_u64);
}

#[test]
fn info_text_names_format_devices_and_actions() {
    let output = memtrace(&[
        "info",
        &fixture("bcrafton_assignment2-systems_memory_snapshot.pickle"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("format:    PyTorch memory snapshot (pickle)\n"),
        "{text}"
    );
    assert!(text.contains("device 0\n"), "{text}");
    // 6,486 trace entries, numbered as PyTorch indexes them, and the file's 2 external
    // annotations, which have no index.
    assert!(
        text.contains(
            "  events:    6,486 over 0.050647 s, numbered 0 to 6,485 as in device_traces[0], \
             and 2 annotations from external_annotations (no numbers)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("alloc 2,162, free_requested 2,162, free_completed 2,162, annotate 2\n"),
        "{text}"
    );
    assert!(text.contains("  segments:  96 (550 blocks)"), "{text}");
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_info_on_a_segment_list_file_reports_its_device() {
    let report = info_json(&fixture("Muduard_LayoutEditing_memory_snapshot.pkl"));
    let devices = report["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["device"], 1);
    assert_eq!(devices[0]["events"], 0);
    assert_eq!(devices[0]["segments"], 255);
    assert_eq!(devices[0]["blocks"], 2_140);
    assert_eq!(devices[0]["reserved_bytes"], 3_649_044_480_u64);
}

#[test]
fn info_on_a_made_segment_list_reports_its_device() {
    let report = info_json(&fixture("made_segment_list.pickle"));
    let devices = report["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["device"], 1);
    assert_eq!(devices[0]["events"], 0);
    assert_eq!(devices[0]["segments"], 3);
    assert_eq!(devices[0]["blocks"], 6);
    assert_eq!(devices[0]["reserved_bytes"], 90_177_536_u64);
    assert_eq!(devices[0]["allocated_bytes"], 79_693_312_u64);
}

#[test]
fn every_project_fixture_converts_through_every_format_and_reads_back() {
    let names = project_snapshot_names();
    assert_eq!(names.len(), 8, "fixtures: {names:?}");
    check_conversions(&names);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_fixtures_convert_through_every_format_and_read_back() {
    check_conversions(&external_snapshot_names());
}

/// Each fixture named converts to JSON Lines, from there to a pickle, and to Perfetto and
/// RMM's CSV; the first two read back with the same devices, events and segments.
fn check_conversions(names: &[String]) {
    for name in names {
        let original = info_json(&fixture(name));
        let jsonl = scratch(&format!("{name}.jsonl.gz"));
        let pickle = scratch(&format!("{name}.again.pickle"));
        let out = memtrace(&["convert", &fixture(name), jsonl.to_str().unwrap()]);
        assert!(out.status.success(), "{name} -> jsonl: {}", stderr(&out));
        assert!(stdout(&out).starts_with("wrote "), "{}", stdout(&out));
        let out = memtrace(&["convert", jsonl.to_str().unwrap(), pickle.to_str().unwrap()]);
        assert!(out.status.success(), "{name} -> pickle: {}", stderr(&out));
        let from_jsonl = info_json(jsonl.to_str().unwrap());
        assert_eq!(from_jsonl["format"], "jsonl");
        assert_eq!(from_jsonl["gzip"], true);
        let from_pickle = info_json(pickle.to_str().unwrap());
        assert_eq!(from_pickle["format"], "pytorch");
        assert_eq!(
            from_jsonl["devices"], original["devices"],
            "{name}: the JSONL copy holds the same devices, events and segments"
        );
        assert_eq!(
            from_pickle["devices"], original["devices"],
            "{name}: fixture -> JSONL -> pickle holds the same devices, events and segments"
        );
        for (to, file) in [("perfetto", "trace.json"), ("rmm-csv", "log.csv")] {
            let path = scratch(&format!("{name}.{file}"));
            let out = memtrace(&[
                "convert",
                &fixture(name),
                path.to_str().unwrap(),
                "--to",
                to,
            ]);
            assert!(out.status.success(), "{name} -> {to}: {}", stderr(&out));
            assert!(std::fs::metadata(&path).expect("written").len() > 0);
        }
    }
}

#[test]
fn bad_files_exit_2_with_one_line() {
    let missing = scratch("does-not-exist.pickle");
    assert_bad_input(
        &memtrace(&["info", missing.to_str().unwrap()]),
        "does-not-exist.pickle",
    );

    let garbage = scratch("garbage.bin");
    std::fs::write(&garbage, b"PK\x03\x04 not a trace").unwrap();
    assert_bad_input(
        &memtrace(&["info", garbage.to_str().unwrap()]),
        "not a trace blockpool reads",
    );

    let empty = scratch("empty.jsonl");
    std::fs::write(&empty, b"").unwrap();
    assert_bad_input(
        &memtrace(&["info", empty.to_str().unwrap()]),
        "the file is empty",
    );

    let bytes = std::fs::read(fixture(
        "notHanmin_assignment2-systems_memory_snapshot.pickle",
    ))
    .unwrap();
    let truncated = scratch("truncated.pickle");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_bad_input(
        &memtrace(&["info", truncated.to_str().unwrap()]),
        "truncated.pickle",
    );

    // A pickle that would run a shell command if unpickled normally.
    let hostile = scratch("hostile.pickle");
    let marker = scratch("hostile-ran");
    let command = format!("touch {}", marker.display());
    let mut pickle = vec![0x80, 0x02];
    pickle.extend_from_slice(b"cposix\nsystem\n");
    pickle.push(b'X');
    pickle.extend_from_slice(&(command.len() as u32).to_le_bytes());
    pickle.extend_from_slice(command.as_bytes());
    pickle.extend_from_slice(&[0x85, b'R', b'.']);
    std::fs::write(&hostile, &pickle).unwrap();
    assert_bad_input(&memtrace(&["info", hostile.to_str().unwrap()]), "GLOBAL");
    assert!(!marker.exists(), "the hostile pickle must not run anything");
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    assert_bad_input(&memtrace(&["frobnicate"]), "frobnicate");
    assert_bad_input(&memtrace(&["info"]), "FILE");
    let out = memtrace(&["convert", "a", "b", "--to", "xml"]);
    assert_bad_input(&out, "xml");
    // A port is for the viewer: without `--serve` or `--open` it is refused, not ignored.
    assert_bad_input(&memtrace(&["demo", "--port", "5"]), "--serve");
    let help = memtrace(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).contains("Usage: memtrace"));
}

#[test]
fn convert_refuses_to_overwrite_its_input() {
    let path = scratch("self.jsonl");
    let out = memtrace(&[
        "convert",
        &fixture("made_expandable_two_devices.pickle"),
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_bad_input(
        &memtrace(&["convert", path.to_str().unwrap(), path.to_str().unwrap()]),
        "overwritten",
    );
    assert!(info_json(path.to_str().unwrap())["format"] == "jsonl");
}

#[test]
fn a_closed_stdout_ends_quietly_with_status_0() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args([
            "info",
            "--json",
            &fixture("notHanmin_assignment2-systems_memory_snapshot.pickle"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace runs");
    // Close our end before memtrace has loaded the file and written its report.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("memtrace exits");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!stderr(&output).contains("panicked"));
}

#[test]
fn demo_writes_a_trace_that_info_reads_back_exactly() {
    let trace = scratch("demo.jsonl.gz");
    // The simulated device, also on a machine with a GPU (tests/fake_driver.rs runs it on one).
    let output = memtrace_with_env(
        &["demo", "--out", trace.to_str().unwrap()],
        &[("BLOCKPOOL_BACKEND", "sim")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains(
            "step 4: seq_len 2048  peak allocated 17.75 GiB  peak reserved 24.90 GiB  \
             device allocs 173\n"
        ),
        "{text}"
    );
    let report = info_json(trace.to_str().unwrap());
    assert_eq!(report["format"], "jsonl");
    assert_eq!(report["gzip"], true);
    let device = &report["devices"][0];
    // 24 layers x (3 weights + 1 bias) + 6 steps x (24 x 3 forward + 1 bucket + 48 grads).
    assert_eq!(device["events_by_action"]["alloc"], 96 + 6 * (72 + 1 + 48));
    assert_eq!(device["events_by_action"]["segment_alloc"], 173);
    assert_eq!(device["events_by_action"]["snapshot"], 1);
    assert_eq!(device["segments"], 173);
    // The weights, moments and biases are live at the end: 72 x 32 MiB + 24 x 8 KiB.
    assert_eq!(device["allocated_bytes"], 72 * (32_u64 << 20) + 24 * 8192);
}

/// A hand-written trace: one 20 MiB segment, three allocations, a free that leaves a 4 MiB
/// hole, then a 6 MiB request that fails with 2 MiB free on the device.
const OOM_TRACE: &str = r#"{"blockpool_trace":1,"time_origin_unix_us":1700000000000000}
{"context":1,"tags":["weights"],"frames":[]}
{"context":2,"tags":["act"],"frames":[]}
{"event":"segment_alloc","device":0,"addr":4294967296,"size":20971520,"time_us":1}
{"event":"alloc","device":0,"addr":4294967296,"size":8388608,"requested":8388608,"time_us":2,"context":1}
{"event":"alloc","device":0,"addr":4303355904,"size":4194304,"requested":4194304,"time_us":3,"context":2}
{"event":"alloc","device":0,"addr":4307550208,"size":8388608,"requested":8388608,"time_us":4,"context":1}
{"event":"free_requested","device":0,"addr":4303355904,"size":4194304,"requested":4194304,"time_us":5,"context":2}
{"event":"free_completed","device":0,"addr":4303355904,"size":4194304,"requested":4194304,"time_us":6,"context":2}
{"event":"oom","device":0,"addr":2097152,"size":6291456,"time_us":7}
{"segment":4294967296,"device":0,"size":20971520,"pool":"large","blocks":[[4294967296,8388608,8388608,"active_allocated",1],[4303355904,4194304,0,"inactive",0],[4307550208,8388608,8388608,"active_allocated",1]]}
{"end":{"events":7,"segments":1}}
"#;

#[test]
fn summary_finds_the_peak_the_sites_and_explains_the_oom() {
    let path = scratch("oom.jsonl");
    std::fs::write(&path, OOM_TRACE).unwrap();
    let output = memtrace(&["summary", path.to_str().unwrap(), "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let device = &report["devices"][0];
    assert_eq!(device["events"], 7);
    assert_eq!(device["peak_allocated"]["bytes"], 20_971_520);
    assert_eq!(device["peak_allocated"]["after_event"], 3);
    assert_eq!(device["peak_allocated"]["time_us"], 4);
    assert_eq!(device["peak_reserved"]["bytes"], 20_971_520);
    assert_eq!(device["peak_reserved"]["after_event"], 0);
    // At the reserved peak where it is fullest: the three blocks fill the segment after event 3.
    assert_eq!(device["fragmentation_at_reserved_peak"], 0.0);
    assert_eq!(device["fragmentation_after_event"], 3);
    assert_eq!(device["free_bytes"], 0);
    assert_eq!(device["top_sites"][0]["site"], "weights");
    assert_eq!(device["top_sites"][0]["bytes"], 16_777_216);
    assert_eq!(device["top_sites"][0]["blocks"], 2);
    assert_eq!(device["top_sites"][1]["site"], "act");
    assert_eq!(device["top_sites"][1]["bytes"], 4_194_304);
    let oom = &device["out_of_memory"][0];
    assert_eq!(oom["event"], 6);
    assert_eq!(oom["label"], "event 6");
    assert_eq!(oom["requested_bytes"], 6_291_456);
    assert_eq!(oom["device_free_bytes"], 2_097_152);
    assert_eq!(oom["cached_free_bytes"], 4_194_304);
    assert_eq!(oom["largest_free_block"], 4_194_304);
    assert_eq!(oom["allocated_bytes"], 16_777_216);
    assert_eq!(
        oom["explanation"],
        "6.00 MiB requested with 2.00 MiB free on the device: 4.00 MiB of the 20.00 MiB \
         reserved were fragmented into free blocks too small for it (the largest free block on \
         its stream and in its pool: 4.00 MiB); expandable_segments or max_split_size_mb can \
         avoid it: `memtrace tune` replays them"
    );

    let text = stdout(&memtrace(&["summary", path.to_str().unwrap()]));
    assert!(
        text.contains("  peak allocated  20.00 MiB after event 3 (0.000004 s) (block sizes)\n"),
        "{text}"
    );
    assert!(
        text.contains("     16.00 MiB       2 blocks  weights\n"),
        "{text}"
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_summary_of_a_pytorch_fixture_names_python_sites() {
    let report = {
        let output = memtrace(&[
            "summary",
            &fixture("kkaitlyn111_cs336_memory_ctx128_forward.pickle"),
            "--json",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    let device = &report["devices"][0];
    assert_eq!(device["events"], 4_657);
    // The end state holds the most: every block allocated in this forward pass is still live.
    assert_eq!(device["peak_allocated"]["bytes"], 19_498_420_224_u64);
    assert_eq!(device["peak_allocated"]["after_event"], 4_656);
    assert_eq!(device["segments_at_peak"], 516);
    let sites = device["top_sites"].as_array().expect("sites");
    assert!(
        sites
            .iter()
            .filter(|s| s["site"] != "<allocated before _record_memory_history was enabled>")
            .all(|s| s["site"].as_str().unwrap().contains(".py:")),
        "sites are Python frames: {sites:?}"
    );
    assert_eq!(device["out_of_memory"].as_array().map(Vec::len), Some(0));
}

#[test]
fn every_reading_subcommand_refuses_corrupt_and_hostile_files_with_exit_2() {
    let bytes = std::fs::read(fixture(
        "bcrafton_assignment2-systems_memory_snapshot.pickle",
    ))
    .unwrap();
    let truncated = scratch("every-truncated.pickle");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let garbage = scratch("every-garbage.jsonl");
    std::fs::write(
        &garbage,
        b"{\"blockpool_trace\":1}\n{\"event\":\"alloc\",\"device\":\"x\"}\n",
    )
    .unwrap();
    let hostile = scratch("every-hostile.pickle");
    let command = b"touch /tmp/memtrace-must-not-run";
    let mut pickle = vec![0x80, 0x02];
    pickle.extend_from_slice(b"cposix\nsystem\n");
    pickle.push(b'X');
    pickle.extend_from_slice(&(command.len() as u32).to_le_bytes());
    pickle.extend_from_slice(command);
    pickle.extend_from_slice(&[0x85, b'R', b'.']);
    std::fs::write(&hostile, &pickle).unwrap();
    let svg = scratch("every.svg");
    let out = scratch("every-out.jsonl");
    let good = fixture("made_expandable_two_devices.pickle");
    for bad in [&truncated, &garbage, &hostile] {
        let bad = bad.to_str().unwrap();
        for args in [
            vec!["info", bad],
            vec!["summary", bad],
            vec!["leaks", bad],
            vec!["top", bad],
            vec!["segments", bad, "--peak"],
            vec!["timeline", bad, "--out", svg.to_str().unwrap()],
            vec!["convert", bad, out.to_str().unwrap()],
            vec!["diff", bad, &good],
            vec!["diff", &good, bad],
            vec!["replay", bad],
            vec!["tune", bad],
            vec!["explain", bad],
            vec!["streams", bad],
        ] {
            let output = memtrace(&args);
            assert_eq!(
                output.status.code(),
                Some(2),
                "{args:?}: {}",
                stderr(&output)
            );
            let err = stderr(&output);
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
    assert!(!Path::new("/tmp/memtrace-must-not-run").exists());
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_summary_of_a_file_without_times_says_so_once() {
    let output = memtrace(&[
        "summary",
        &fixture("Maphsge4_select_n_snapshot_1.2M.pickle"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("  events:    4,496 (no times recorded)\n"),
        "{text}"
    );
    assert!(
        text.contains("  peak allocated   2.24 GiB after event 4,487 (block sizes)\n"),
        "{text}"
    );
    assert!(!text.contains("0.000000 s"), "{text}");
}

#[test]
fn summary_of_a_made_file_without_times_says_so_once() {
    let output = memtrace(&[
        "summary",
        &fixture("made_four_device_traces_without_times.pickle"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("  events:    12 (no times recorded)\n"),
        "{text}"
    );
    // 8 MiB + 5,120 bytes live after the tenth event, event 9 (make.py's trace).
    assert!(
        text.contains("  peak allocated   8.00 MiB after event 9 (block sizes)\n"),
        "{text}"
    );
    assert!(!text.contains("0.000000 s"), "{text}");
    assert!(
        text.contains("  out of memory: no out-of-memory event was recorded on this device\n"),
        "a file without an oom event says so: {text}"
    );
    // `info` says it the same way, not "over 0.000000 s".
    let output = memtrace(&[
        "info",
        &fixture("made_four_device_traces_without_times.pickle"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains(
            "  events:    12 (no times recorded), numbered 0 to 11 as in device_traces[0]\n"
        ),
        "{text}"
    );
    assert!(!text.contains("0.000000 s"), "{text}");
    // Converting it to Perfetto says that its samples have no times; a timed trace gets no
    // such note.
    let to_perfetto = |name: &str| {
        let path = scratch(&format!("{name}.perfetto.json"));
        let output = memtrace(&[
            "convert",
            &fixture(name),
            path.to_str().unwrap(),
            "--to",
            "perfetto",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    };
    let untimed = to_perfetto("made_four_device_traces_without_times.pickle");
    assert!(
        untimed.contains("note: the trace records no times, so every "),
        "{untimed}"
    );
    let timed = to_perfetto("bcrafton_assignment2-systems_memory_snapshot.pickle");
    assert!(!timed.contains("note:"), "{timed}");
}

#[test]
fn timeline_of_a_file_without_times_names_its_events_by_their_numbers() {
    let svg = scratch("untimed-timeline.svg");
    let output = memtrace(&[
        "timeline",
        &fixture("made_four_device_traces_without_times.pickle"),
        "--device",
        "0",
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        format!(
            "wrote {} (device 0, 12 events, numbered 0 to 11)\n",
            svg.display()
        )
    );
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    assert!(
        chart.contains(">events in order (no times recorded): 12 events, numbered 0 to 11</text>"),
        "the x axis says it is not time and names the events: {chart}"
    );
    // A file with inserted annotations counts only the events the file numbers.
    let output = memtrace(&[
        "timeline",
        &fixture("notHanmin_assignment2-systems_memory_snapshot.pickle"),
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).ends_with("(device 0, 19,464 events, numbered 0 to 19,463)\n"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn summary_of_a_training_step_finds_its_peak_and_names_python_sites() {
    let report = {
        let output = memtrace(&[
            "summary",
            &fixture("notHanmin_assignment2-systems_memory_snapshot.pickle"),
            "--json",
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        serde_json::from_slice::<Value>(&output.stdout).expect("JSON")
    };
    let device = &report["devices"][0];
    assert_eq!(device["events"], 19_468);
    // CPython, walking the trace's requested sizes forward from the state its end implies.
    assert_eq!(device["peak_requested"]["bytes"], 22_827_925_508_u64);
    assert_eq!(device["segments_at_peak"], 999);
    let sites = device["top_sites"].as_array().expect("sites");
    assert!(
        sites
            .iter()
            .filter(|s| s["site"] != "<allocated before _record_memory_history was enabled>")
            .all(|s| s["site"].as_str().unwrap().contains(".py:")),
        "sites are Python frames: {sites:?}"
    );
    assert_eq!(device["out_of_memory"].as_array().map(Vec::len), Some(0));
}
