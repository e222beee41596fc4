//! `memtrace replay` as a user runs it: exact numbers on a hand-written trace and on the
//! PyTorch fixtures (`external_` tests: files the project may not copy), addresses reproduced with
//! `--exact`, out-of-memory reported under a small capacity, the capacity search, and one-line
//! errors with exit status 2 on bad arguments and files.

mod common;

use common::{
    assert_bad_input, external_snapshot_names, fixture, memtrace, project_snapshot_names, stderr,
};
use serde_json::Value;
use std::path::Path;

fn scratch(name: &str, contents: &str) -> String {
    let path = common::scratch(name);
    std::fs::write(&path, contents).expect("scratch file");
    path.to_string_lossy().into_owned()
}

/// Runs `memtrace replay FILE ARGS --json` and parses the report.
fn replay_json(path: &str, args: &[&str]) -> Value {
    let mut all = vec!["replay", path];
    all.extend_from_slice(args);
    all.push("--json");
    let output = memtrace(&all);
    assert!(
        output.status.success(),
        "replay {path} {args:?}: {:?} {}",
        output.status,
        stderr(&output)
    );
    assert!(!stderr(&output).contains("panicked"));
    serde_json::from_slice(&output.stdout).expect("replay --json prints JSON")
}

/// Two 20 MiB segments; S0 at 0x7f00_0000_0000 holds an 8 MiB block alive before the trace
/// began (freed by events 0-1) and a 12 MiB block alive throughout. Then: 4 MiB from the
/// cached 8 MiB (split), a 6 MiB request that needs the new segment S1, 2 MiB from the 4 MiB
/// left in S0, the 6 MiB freed, and 3 MiB from the now wholly free S1.
const TRACE: &str = r#"{"blockpool_trace":1}
{"event":"free_requested","device":0,"addr":139637976727552,"size":8388608,"requested":8388608,"time_us":1}
{"event":"free_completed","device":0,"addr":139637976727552,"size":8388608,"requested":8388608,"time_us":2}
{"event":"alloc","device":0,"addr":139637976727552,"size":4194304,"requested":4194304,"time_us":3}
{"event":"segment_alloc","device":0,"addr":139638010281984,"size":20971520,"time_us":4}
{"event":"alloc","device":0,"addr":139638010281984,"size":6291456,"requested":6291456,"time_us":5}
{"event":"alloc","device":0,"addr":139637980921856,"size":2097152,"requested":2097152,"time_us":6}
{"event":"free_requested","device":0,"addr":139638010281984,"size":6291456,"requested":6291456,"time_us":7}
{"event":"free_completed","device":0,"addr":139638010281984,"size":6291456,"requested":6291456,"time_us":8}
{"event":"alloc","device":0,"addr":139638010281984,"size":3145728,"requested":3145728,"time_us":9}
{"segment":139637976727552,"device":0,"size":20971520,"pool":"large","blocks":[[139637976727552,4194304,4194304,"active_allocated",0],[139637980921856,2097152,2097152,"active_allocated",0],[139637983019008,2097152,0,"inactive",0],[139637985116160,12582912,12582912,"active_allocated",0]]}
{"segment":139638010281984,"device":0,"size":20971520,"pool":"large","blocks":[[139638010281984,3145728,3145728,"active_allocated",0],[139638013427712,17825792,0,"inactive",0]]}
{"end":{"events":9,"segments":2}}
"#;

const MIB: u64 = 1 << 20;

#[test]
fn a_hand_written_trace_replays_as_it_was_recorded() {
    let path = scratch("trace.jsonl", TRACE);
    let report = replay_json(&path, &["--exact"]);
    assert_eq!(report["format"], "jsonl");
    assert_eq!(report["device"], 0);
    assert_eq!(report["events"], 9);
    assert_eq!(report["mode"], "start");
    assert_eq!(report["config_source"], "default");
    assert_eq!(report["capacity_bytes"], 1u64 << 40);
    let ours = &report["blockpool"];
    assert_eq!(ours["start"]["adopted_segments"], 1);
    assert_eq!(ours["start"]["adopted_blocks"], 2);
    assert_eq!(ours["start"]["adopted_bytes"], 20 * MIB);
    assert_eq!(ours["allocations"], 4);
    assert_eq!(ours["frees"], 2);
    assert_eq!(ours["unmatched_frees"], 0);
    assert_eq!(ours["peak_reserved_bytes"], 40 * MIB);
    assert_eq!(ours["peak_allocated_bytes"], 24 * MIB);
    assert_eq!(ours["device_allocs"], 1);
    assert_eq!(ours["device_frees"], 0);
    assert_eq!(ours["retries"], 0);
    assert_eq!(ours["failed_allocations"], 0);
    // Reserved first reached 40 MiB with 4 + 12 + 6 MiB allocated; the 2 MiB after it is the
    // fullest state of the peak (24 MiB allocated).
    assert_eq!(ours["fragmentation_at_peak"], 0.4);
    assert_eq!(ours["reserved_at_end_bytes"], 40 * MIB);
    let exact = &ours["exact"];
    assert_eq!(exact["allocations"], 4);
    assert_eq!(exact["matched"], 4, "every block at the address recorded");
    assert_eq!(exact["share"], 1.0);
    assert_eq!(exact["segments_placed"], 2);
    assert_eq!(exact["segments_missed"], 0);
    let recorded = &report["recorded"];
    assert_eq!(recorded["segment_allocs"], 1);
    assert_eq!(recorded["segment_frees"], 0);
    assert_eq!(recorded["peak_reserved_bytes"], 40 * MIB);
    assert_eq!(recorded["reserved_at_start_bytes"], 20 * MIB);
    assert_eq!(report["peak_reserved_ratio"], 1.0);
    assert_eq!(report["segment_allocs_ratio"], 1.0);
}

#[test]
fn the_text_report_sets_blockpool_beside_the_recording() {
    let path = scratch("text.jsonl", TRACE);
    let output = memtrace(&["replay", &path, "--exact"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8_lossy(&output.stdout);
    for line in [
        ", device 0: 9 events (4 allocations, 2 frees)\n",
        "config:    PyTorch's defaults (default)\n",
        "start:     1 segment adopted (20.00 MiB, 2 live blocks), 0 blocks allocated afresh\n",
        "                           blockpool      recorded    ratio\n",
        "peak reserved              40.00 MiB     40.00 MiB    1.000\n",
        "segment allocations                1             1    1.000\n",
        "fragmentation at peak        40.00 %       40.00 %\n",
        "out-of-memory                      0\n",
        "exact addresses:      4 of 4 allocations (100.00 %); 2 segments placed as recorded, 0 not\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn fresh_starts_from_the_live_blocks_alone() {
    let path = scratch("fresh.jsonl", TRACE);
    let ours = &replay_json(&path, &["--fresh"])["blockpool"];
    assert_eq!(ours["start"]["adopted_segments"], 0);
    assert_eq!(ours["start"]["fresh_blocks"], 2);
    // 8 + 12 MiB fill one 20 MiB segment exactly; the 6 MiB request needs a second.
    assert_eq!(ours["device_allocs"], 2);
    assert_eq!(ours["peak_reserved_bytes"], 40 * MIB);
    assert_eq!(ours["exact"], Value::Null);
}

#[test]
fn a_small_capacity_reports_out_of_memory_and_the_search_finds_the_smallest() {
    let path = scratch("small.jsonl", TRACE);
    let report = replay_json(&path, &["--capacity", "30M"]);
    let ours = &report["blockpool"];
    assert_eq!(report["capacity_bytes"], 30 * MIB);
    // Decimals are read exactly, as a user writes a GPU's size.
    let decimal = replay_json(&path, &["--capacity", "29.5M"]);
    assert_eq!(decimal["capacity_bytes"], 29 * MIB + MIB / 2);
    // The 6 MiB and the 3 MiB request each need a second segment that does not fit; the
    // cache has no wholly free segment to give back, so each fails after one retry.
    assert_eq!(ours["failed_allocations"], 2);
    assert_eq!(ours["allocator_ooms"], 2);
    assert_eq!(ours["retries"], 2);
    assert_eq!(ours["unmatched_frees"], 1, "the failed 6 MiB block's free");
    assert_eq!(ours["peak_reserved_bytes"], 20 * MIB);

    let output = memtrace(&["replay", &path, "--capacity", "30M"]);
    assert!(output.status.success(), "a report, not a failure");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("out-of-memory                      2\n"),
        "{text}"
    );

    let searched = replay_json(&path, &["--capacity", "30M", "--find-capacity"]);
    let search = &searched["capacity_search"];
    assert_eq!(search["min_capacity_bytes"], 40 * MIB);
    assert_eq!(
        search["replays"], 5,
        "a binary search over 20 steps of 2 MiB"
    );
}

#[test]
fn a_capacity_below_the_starting_state_counts_its_segments_as_out_of_memory() {
    let path = scratch("tiny.jsonl", TRACE);
    let ours = &replay_json(&path, &["--capacity", "4M"])["blockpool"];
    assert_eq!(ours["start"]["failed_segments"], 1);
    assert_eq!(ours["start"]["adopted_segments"], 0);
    assert_eq!(ours["peak_reserved_bytes"], 0);
    assert_eq!(ours["failed_allocations"], 4);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_kkaitlyn111_replays_exactly_as_pytorch_ran_it() {
    let report = replay_json(
        &fixture("kkaitlyn111_cs336_memory_ctx128_forward.pickle"),
        &["--exact", "--find-capacity"],
    );
    assert_eq!(report["format"], "pytorch");
    assert_eq!(report["events"], 4657);
    let ours = &report["blockpool"];
    assert_eq!(ours["start"]["adopted_segments"], 227);
    assert_eq!(ours["start"]["adopted_blocks"], 324);
    assert_eq!(ours["start"]["adopted_bytes"], 13_763_608_576u64);
    assert_eq!(ours["start"]["not_adoptable_segments"], 0);
    assert_eq!(ours["allocations"], 2058);
    assert_eq!(ours["frees"], 1155);
    assert_eq!(ours["unmatched_frees"], 0);
    assert_eq!(ours["peak_reserved_bytes"], 19_667_091_456u64);
    assert_eq!(ours["device_allocs"], 289);
    assert_eq!(ours["device_frees"], 0);
    assert_eq!(ours["retries"], 0);
    assert_eq!(ours["failed_allocations"], 0);
    let exact = &ours["exact"];
    assert_eq!(
        exact["matched"], 2058,
        "every allocation at PyTorch's address"
    );
    assert_eq!(exact["segments_placed"], 516);
    assert_eq!(exact["segments_missed"], 0);
    let recorded = &report["recorded"];
    assert_eq!(recorded["segment_allocs"], 289);
    assert_eq!(recorded["peak_reserved_bytes"], 19_667_091_456u64);
    assert_eq!(report["peak_reserved_ratio"], 1.0);
    assert_eq!(report["segment_allocs_ratio"], 1.0);
    // Nothing is freed that a new segment could reuse: the peak is the least that suffices.
    assert_eq!(
        report["capacity_search"]["min_capacity_bytes"],
        19_667_091_456u64.div_ceil(2 * MIB) * 2 * MIB
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_another_policy_reaches_the_same_peak_on_other_addresses() {
    let report = replay_json(
        &fixture("kkaitlyn111_cs336_memory_ctx128_forward.pickle"),
        &["--exact", "--config", "max_split_size_mb:20"],
    );
    assert_eq!(report["config_source"], "--config");
    let ours = &report["blockpool"];
    assert_eq!(ours["peak_reserved_bytes"], 19_667_091_456u64);
    assert_eq!(ours["device_allocs"], 289);
    assert_eq!(
        ours["exact"]["matched"], 1873,
        "oversize blocks are no longer split, so addresses differ"
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_maphsge4_reproduces_every_address() {
    let maph = replay_json(
        &fixture("Maphsge4_select_n_snapshot_1.2M.pickle"),
        &["--exact"],
    );
    assert_eq!(maph["blockpool"]["device_allocs"], 13);
    assert_eq!(maph["blockpool"]["peak_reserved_bytes"], 2_776_629_248u64);
    assert_eq!(maph["recorded"]["peak_reserved_bytes"], 2_776_629_248u64);
    assert_eq!(maph["blockpool"]["exact"]["matched"], 1497);
    assert_eq!(maph["blockpool"]["exact"]["allocations"], 1497);
}

#[test]
fn bcrafton_nothanmin_and_a_made_trace_reproduce_every_address() {
    let bcrafton = replay_json(
        &fixture("bcrafton_assignment2-systems_memory_snapshot.pickle"),
        &["--exact"],
    );
    assert_eq!(bcrafton["blockpool"]["device_allocs"], 0);
    assert_eq!(bcrafton["blockpool"]["exact"]["matched"], 2162);
    assert_eq!(bcrafton["blockpool"]["exact"]["allocations"], 2162);
    // A training step with no segment allocations: reserved never moves from its 999
    // segments, 23,842,521,088 bytes (CPython's sum).
    let step = replay_json(
        &fixture("notHanmin_assignment2-systems_memory_snapshot.pickle"),
        &["--exact"],
    );
    assert_eq!(step["blockpool"]["device_allocs"], 0);
    assert_eq!(step["blockpool"]["peak_reserved_bytes"], 23_842_521_088u64);
    assert_eq!(step["recorded"]["peak_reserved_bytes"], 23_842_521_088u64);
    assert_eq!(step["blockpool"]["exact"]["matched"], 6488);
    assert_eq!(step["blockpool"]["exact"]["allocations"], 6488);
    assert_eq!(step["blockpool"]["exact"]["segments_placed"], 999);
    // make.py's trace: two segments allocated and six allocations, at the addresses PyTorch's
    // rules give (best fit, split of a freed block).
    let made = replay_json(
        &fixture("made_four_device_traces_without_times.pickle"),
        &["--exact"],
    );
    assert_eq!(made["blockpool"]["device_allocs"], 2);
    assert_eq!(made["recorded"]["segment_allocs"], 2);
    assert_eq!(made["blockpool"]["peak_reserved_bytes"], 23_068_672u64);
    assert_eq!(made["blockpool"]["peak_allocated_bytes"], 8_393_728u64);
    assert_eq!(made["blockpool"]["exact"]["matched"], 6);
    assert_eq!(made["blockpool"]["exact"]["allocations"], 6);
    assert_eq!(made["blockpool"]["exact"]["segments_missed"], 0);
}

#[test]
fn every_project_fixture_replays_in_every_mode() {
    let names = project_snapshot_names();
    assert_eq!(names.len(), 8, "{names:?}");
    check_replays(&names);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_fixtures_replay_in_every_mode() {
    check_replays(&external_snapshot_names());
}

/// Each fixture named replays in every mode; from the recorded start, the compatible policy
/// reaches the recorded peak.
fn check_replays(names: &[String]) {
    for name in names {
        let path = fixture(name);
        for mode in [&[][..], &["--exact"], &["--fresh"], &["--capacity", "64M"]] {
            let report = replay_json(&path, mode);
            let ours = &report["blockpool"];
            if mode.len() < 2 {
                assert_eq!(ours["unmatched_frees"], 0, "{path} {mode:?}");
            }
            if mode.is_empty() {
                assert_eq!(
                    report["peak_reserved_ratio"].as_f64().unwrap_or(1.0),
                    1.0,
                    "{path}: the compatible policy from the recorded start reaches PyTorch's peak"
                );
            }
        }
    }
}

#[test]
fn bad_arguments_and_files_exit_2_with_one_line() {
    let path = scratch("args.jsonl", TRACE);
    assert_bad_input(
        &memtrace(&["replay", &path, "--config", "max_split_size_mb:abc"]),
        "`abc` is not a number",
    );
    assert_bad_input(
        &memtrace(&["replay", &path, "--config", "no_such_key:1"]),
        "--config",
    );
    assert_bad_input(
        &memtrace(&["replay", &path, "--capacity", "12 parsecs"]),
        "is not a byte count",
    );
    assert_bad_input(
        &memtrace(&["replay", &path, "--device", "3"]),
        "device 3 has no events or segments in this trace (it has: 0)",
    );
    let missing = Path::new(&path).with_file_name("missing.jsonl");
    assert_bad_input(
        &memtrace(&["replay", &missing.to_string_lossy()]),
        "cannot read the trace",
    );
    let contradiction = TRACE.replace(
        r#"{"event":"alloc","device":0,"addr":139637976727552,"size":4194304"#,
        r#"{"event":"alloc","device":0,"addr":139637985116160,"size":4194304"#,
    );
    let bad = scratch("contradiction.jsonl", &contradiction);
    assert_bad_input(
        &memtrace(&["replay", &bad]),
        "cannot rebuild the memory of device 0",
    );
}

#[test]
fn hostile_traces_never_panic() {
    let lines: Vec<&str> = TRACE.lines().collect();
    let mut cases = vec![
        String::new(),
        "{\"blockpool_trace\":1}\n".to_string(),
        TRACE.replace("20971520", "18446744073709551615"),
        TRACE.replace("4194304", "1000"),
        TRACE.replace("6291456", "0"),
        TRACE.replace("139637976727552", "1"),
    ];
    for cut in 1..lines.len() {
        cases.push(lines[..cut].join("\n"));
    }
    for (i, case) in cases.iter().enumerate() {
        let path = scratch(&format!("hostile-{i}.jsonl"), case);
        for mode in [&["--exact"][..], &["--fresh", "--find-capacity"]] {
            let mut args = vec!["replay", path.as_str()];
            args.extend_from_slice(mode);
            let output = memtrace(&args);
            let err = stderr(&output);
            assert!(
                matches!(output.status.code(), Some(0 | 2)),
                "case {i} {mode:?}: {:?} {err}",
                output.status
            );
            assert!(!err.contains("panicked"), "case {i}: {err}");
            if output.status.code() == Some(2) {
                assert_eq!(err.lines().count(), 1, "case {i}: {err}");
            }
        }
    }
}

/// A segment emptied by `empty_cache` (its `segment_free`) and a new one allocated after.
const EMPTIED_TRACE: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":0,"addr":139637976727552,"size":20971520,"time_us":1}
{"event":"alloc","device":0,"addr":139637976727552,"size":6291456,"requested":6291456,"time_us":2}
{"event":"free_requested","device":0,"addr":139637976727552,"size":6291456,"requested":6291456,"time_us":3}
{"event":"free_completed","device":0,"addr":139637976727552,"size":6291456,"requested":6291456,"time_us":4}
{"event":"segment_free","device":0,"addr":139637976727552,"size":20971520,"time_us":5}
{"event":"segment_alloc","device":0,"addr":139638010281984,"size":20971520,"time_us":6}
{"event":"alloc","device":0,"addr":139638010281984,"size":6291456,"requested":6291456,"time_us":7}
{"segment":139638010281984,"device":0,"size":20971520,"pool":"large","blocks":[[139638010281984,6291456,6291456,"active_allocated",0],[139638016573440,14680064,0,"inactive",0]]}
{"end":{"events":7,"segments":1}}
"#;

#[test]
fn a_segment_free_in_the_trace_empties_the_replayed_cache() {
    let path = scratch("emptied.jsonl", EMPTIED_TRACE);
    let report = replay_json(&path, &[]);
    let ours = &report["blockpool"];
    assert_eq!(ours["empty_cache_calls"], 1);
    // Without emptying the cache, the second allocation would reuse the first segment.
    assert_eq!(ours["device_allocs"], 2);
    assert_eq!(ours["device_frees"], 1);
    assert_eq!(ours["reserved_at_end_bytes"], 20 * MIB);
    let recorded = &report["recorded"];
    assert_eq!(recorded["segment_allocs"], 2);
    assert_eq!(recorded["segment_frees"], 1);
    assert_eq!(report["segment_allocs_ratio"], 1.0);
    let text = String::from_utf8_lossy(&memtrace(&["replay", &path]).stdout).into_owned();
    assert!(
        text.contains(
            "empty_cache calls                  1  (one per run of segment_free in the trace)\n"
        ),
        "{text}"
    );
}

#[test]
fn an_expandable_segments_trace_replays_map_for_map() {
    // The demo on the simulated device with expandable segments: one segment per pool that
    // is mapped 173 times (20 MiB and 2 MiB units) and never unmapped.
    let trace = common::scratch("replay-expandable.jsonl.gz");
    let trace = trace.to_str().expect("UTF-8 temp path");
    let output = common::memtrace_with_env(
        &["demo", "--out", trace],
        &[
            ("BLOCKPOOL_BACKEND", "sim"),
            ("BLOCKPOOL_ALLOC_CONF", "expandable_segments:True"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let report = replay_json(trace, &[]);
    assert_eq!(report["config"], "expandable_segments:True", "{report}");
    let recorded = &report["recorded"];
    assert_eq!(recorded["segment_allocs"], 173, "segment_map events");
    assert_eq!(recorded["segment_frees"], 0);
    assert_eq!(
        report["blockpool"]["device_allocs"], 173,
        "one map per unit, as recorded"
    );
    assert_eq!(report["segment_allocs_ratio"], 1.0);
    assert_eq!(report["peak_reserved_ratio"], 1.0);
    // 18,222 MiB (17.79 GiB), the peak the demo itself printed.
    assert_eq!(recorded["peak_reserved_bytes"], 18_222_u64 << 20);
    assert_eq!(
        report["blockpool"]["peak_reserved_bytes"],
        recorded["peak_reserved_bytes"]
    );

    // `info` counts the mapped runs as expandable segments.
    let output = common::memtrace(&["info", trace, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let info: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(info["devices"][0]["segments"], 2, "{info}");
    assert_eq!(info["devices"][0]["expandable_segments"], 2, "{info}");
    let output = common::memtrace(&["info", trace]);
    assert!(
        common::stdout(&output).contains(" blocks, all expandable), "),
        "{}",
        common::stdout(&output)
    );

    // `segments` marks the mapped runs as expandable memory.
    let output = common::memtrace(&["segments", trace, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let maps: serde_json::Value = serde_json::from_str(&common::stdout(&output)).expect("JSON");
    let maps = maps.as_array().expect("a list of segments");
    assert_eq!(maps.len(), 2, "one mapped run per pool: {maps:?}");
    assert!(maps.iter().all(|m| m["expandable"] == true), "{maps:?}");
    let output = common::memtrace(&["segments", trace]);
    assert_eq!(
        common::stdout(&output).matches(" (expandable)\n").count(),
        2,
        "{}",
        common::stdout(&output)
    );
}
