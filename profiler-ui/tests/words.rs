//! Words and numbers a user can trust (issue 23, 4): every command says when another device of
//! the trace ran out of memory and the one it reports did not; replay names the release events
//! the trace has, says when there was nothing to place, and counts in the singular for one;
//! `info` and `summary` give a device's span the same way; `info` sets requests beside the
//! allocated blocks they are for, with blocks pending free apart.

mod common;

use common::{memtrace, scratch, stderr, stdout};
use serde_json::Value;

/// Device 1 does the work; the idle device 0 runs out of memory at the end.
const OOM_ON_DEVICE_0: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":1,"addr":139637976727552,"size":2097152,"time_us":1}
{"event":"alloc","device":1,"addr":139637976727552,"size":512,"requested":500,"time_us":2}
{"event":"alloc","device":1,"addr":139637976728064,"size":1024,"requested":1000,"time_us":3}
{"event":"segment_alloc","device":1,"addr":139637978824704,"size":2097152,"time_us":4}
{"event":"alloc","device":1,"addr":139637978824704,"size":1048576,"requested":1048576,"time_us":5}
{"event":"oom","device":0,"addr":1048576,"size":33554432,"time_us":6}
{"segment":139637976727552,"device":1,"size":2097152,"pool":"small","blocks":[[139637976727552,512,500,"active_allocated",0],[139637976728064,1024,1000,"active_allocated",0],[139637976729088,2095616,0,"inactive",0]]}
{"segment":139637978824704,"device":1,"size":2097152,"pool":"small","blocks":[[139637978824704,1048576,1048576,"active_allocated",0],[139637979873280,1048576,0,"inactive",0]]}
{"segment":139637000000000,"device":0,"size":20971520,"pool":"large","blocks":[[139637000000000,20971520,0,"inactive",0]]}
{"end":{"events":6,"segments":3}}
"#;

/// Two devices that begin at different times (device 0 at 1 s, device 1 at 3 s); device 1
/// ends with one block allocated (512 bytes for a request of 500) and one pending free (1 MiB).
const STAGGERED: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":0,"addr":1048576,"size":2097152,"time_us":1000000}
{"event":"alloc","device":0,"addr":1048576,"size":1024,"requested":1000,"time_us":1500000}
{"event":"segment_alloc","device":1,"addr":139637978824704,"size":2097152,"time_us":3000000}
{"event":"alloc","device":1,"addr":139637978824704,"size":512,"requested":500,"time_us":3100000}
{"event":"alloc","device":1,"addr":139637978825216,"size":1048576,"requested":1048576,"time_us":3250000}
{"event":"free_requested","device":1,"addr":139637978825216,"size":1048576,"requested":1048576,"time_us":3500000}
{"segment":1048576,"device":0,"size":2097152,"pool":"small","blocks":[[1048576,1024,1000,"active_allocated",0],[1049600,2096128,0,"inactive",0]]}
{"segment":139637978824704,"device":1,"size":2097152,"pool":"small","blocks":[[139637978824704,512,500,"active_allocated",0],[139637978825216,1048576,1048576,"active_pending_free",0],[139637979873792,1048064,0,"inactive",0]]}
{"end":{"events":6,"segments":2}}
"#;

/// Expandable segments: one range mapped, used once and unmapped.
const UNMAPPED: &str = r#"{"blockpool_trace":1,"allocator_config":"expandable_segments:True"}
{"event":"segment_map","device":0,"addr":1048576,"size":2097152,"time_us":1}
{"event":"alloc","device":0,"addr":1048576,"size":1048576,"requested":1048576,"time_us":2}
{"event":"free_requested","device":0,"addr":1048576,"size":1048576,"requested":1048576,"time_us":3}
{"event":"free_completed","device":0,"addr":1048576,"size":1048576,"requested":1048576,"time_us":4}
{"event":"segment_unmap","device":0,"addr":1048576,"size":2097152,"time_us":5}
{"end":{"events":5,"segments":0}}
"#;

/// A segment allocated and freed, with no allocation in it.
const NO_ALLOCATIONS: &str = r#"{"blockpool_trace":1}
{"event":"segment_alloc","device":0,"addr":1048576,"size":2097152,"time_us":1}
{"event":"segment_free","device":0,"addr":1048576,"size":2097152,"time_us":2}
{"end":{"events":2,"segments":0}}
"#;

/// Writes `text` to a scratch file named `name` and gives its path.
fn trace(name: &str, text: &str) -> String {
    let path = scratch(name);
    std::fs::write(&path, text).expect("scratch file");
    path.to_string_lossy().into_owned()
}

/// Runs `memtrace` with `args`, which must succeed: its stdout and stderr.
fn run(args: &[&str]) -> (String, String) {
    let output = memtrace(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    (stdout(&output), stderr(&output))
}

/// Runs `memtrace` with `args` and `--json`, which must succeed: the report.
fn json(args: &[&str]) -> Value {
    let (out, _) = run(&[args, &["--json"]].concat());
    serde_json::from_str(&out).expect("JSON")
}

/// The note `top`, `segments`, `timeline` and `leaks --device 1` print on standard error.
const NOTE: &str =
    "memtrace: out of memory on device 0 (1 event), not on device 1: --device 0 shows it\n";

#[test]
fn leaks_on_one_device_says_another_ran_out_of_memory() {
    let path = trace("oom-on-0-leaks.jsonl", OOM_ON_DEVICE_0);
    let (_, err) = run(&["leaks", &path, "--device", "1"]);
    assert_eq!(err, NOTE);
    // Every device is reported without --device, the one that ran out too: nothing to say.
    let (out, err) = run(&["leaks", &path]);
    assert_eq!(err, "", "{out}");
    let (_, err) = run(&["leaks", &path, "--device", "0"]);
    assert_eq!(err, "", "device 0 is the one that ran out of memory");
}

#[test]
fn diff_says_it_for_each_trace_with_the_option_that_reaches_the_device() {
    let path = trace("oom-on-0-diff.jsonl", OOM_ON_DEVICE_0);
    let (_, err) = run(&["diff", &path, &path, "--device", "1"]);
    assert_eq!(
        err,
        "memtrace: first trace: out of memory on device 0 (1 event), not on device 1: \
         --device-a 0 shows it\n\
         memtrace: second trace: out of memory on device 0 (1 event), not on device 1: \
         --device-b 0 shows it\n"
    );
    let report = json(&["diff", &path, &path, "--device-a", "0", "--device-b", "1"]);
    assert_eq!(
        report["notes"],
        serde_json::json!([
            "second trace: out of memory on device 0 (1 event), not on device 1: --device-b 0 \
             shows it"
        ]),
        "only B's device did not run out of memory"
    );
    let report = json(&["diff", &path, &path]);
    assert_eq!(
        report["notes"],
        serde_json::json!([]),
        "both open device 0, which ran out"
    );
}

#[test]
fn replay_says_why_the_capacity_is_not_known_when_another_device_ran_out() {
    let path = trace("oom-on-0-replay.jsonl", OOM_ON_DEVICE_0);
    let note = "out of memory on device 0 (1 event), not on device 1: --device 0 replays that \
                device, within the memory its out-of-memory events tell";
    let (out, err) = run(&["replay", &path, "--device", "1"]);
    assert_eq!(err, "", "the report says it");
    assert!(
        out.contains(
            "capacity:  1024.00 GiB (default: device 1 recorded no out-of-memory event to tell \
             its memory)\n"
        ),
        "{out}"
    );
    assert!(out.contains(&format!("\nnote:      {note}\n")), "{out}");
    let report = json(&["replay", &path, "--device", "1"]);
    assert_eq!(report["notes"], serde_json::json!([note]));
    assert_eq!(
        report["out_of_memory_elsewhere"],
        serde_json::json!({"0": 1})
    );
    assert_eq!(report["capacity_source"], "default");
    // With --config the assumed capacity's note names the device too.
    let report = json(&[
        "replay",
        &path,
        "--device",
        "1",
        "--config",
        "max_split_size_mb:64",
    ]);
    assert_eq!(
        report["notes"][0],
        "the capacity of 1024.00 GiB is assumed (device 1 recorded no out-of-memory event, so \
         the trace does not tell its memory) and the replay never ran short of it, so what the \
         config does under memory pressure (freeing cached blocks, retrying) never happened; \
         give --capacity, e.g. the GPU's memory, to see it"
    );
    // A one-device trace without an out-of-memory event says it as before.
    let (out, _) = run(&["replay", &trace("no-oom.jsonl", NO_ALLOCATIONS)]);
    assert!(
        out.contains(
            "capacity:  1024.00 GiB (default: the trace does not tell the device's memory)\n"
        ),
        "{out}"
    );
    let report = json(&["replay", &path, "--device", "0"]);
    assert_eq!(report["out_of_memory_elsewhere"], serde_json::json!({}));
}

#[test]
fn tune_says_another_device_ran_out_of_memory() {
    let path = trace("oom-on-0-tune.jsonl", OOM_ON_DEVICE_0);
    let report = json(&["tune", &path, "--device", "1", "--jobs", "1"]);
    assert_eq!(
        report["out_of_memory_elsewhere"],
        serde_json::json!({"0": 1})
    );
    assert_eq!(
        report["notes"][0],
        "device 1 recorded no out-of-memory event, so the trace does not tell its memory: every \
         setting replays on an unbounded device, out-of-memory cannot be judged and \
         garbage_collection_threshold is not tried; give --capacity (the GPU's memory) to rank \
         them within it"
    );
    assert_eq!(
        report["notes"][1],
        "out of memory on device 0 (1 event), not on device 1: --device 0 tunes that device, \
         within the memory its out-of-memory events tell"
    );
    let (out, _) = run(&["tune", &path, "--device", "1", "--jobs", "1"]);
    assert!(
        out.contains(
            "capacity:   1024.00 GiB (default: device 1 recorded no out-of-memory event to tell \
             its memory)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("\nnote:       out of memory on device 0 (1 event), not on device 1: "),
        "{out}"
    );
}

#[test]
fn summary_points_a_device_without_out_of_memory_to_the_one_that_ran_out() {
    let path = trace("oom-on-0-summary.jsonl", OOM_ON_DEVICE_0);
    let (out, _) = run(&["summary", &path]);
    assert!(
        out.contains(
            "  out of memory: no out-of-memory event was recorded on this device; out of memory \
             on device 0 (1 event): see its section above\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("  out of memory at event 0: 32.00 MiB requested"),
        "{out}"
    );
    // Device 1 ran out instead: device 0's section comes first.
    let on_1 = OOM_ON_DEVICE_0.replace(
        r#"{"event":"oom","device":0"#,
        r#"{"event":"oom","device":1"#,
    );
    let (out, _) = run(&["summary", &trace("oom-on-1-summary.jsonl", &on_1)]);
    assert!(
        out.contains(
            "  out of memory: no out-of-memory event was recorded on this device; out of memory \
             on device 1 (1 event): see its section below\n"
        ),
        "{out}"
    );
    // A trace where no device ran out keeps the line as it was.
    let (out, _) = run(&["summary", &trace("staggered-summary.jsonl", STAGGERED)]);
    assert_eq!(
        out.matches("  out of memory: no out-of-memory event was recorded on this device\n")
            .count(),
        2,
        "{out}"
    );
}

#[test]
fn replay_names_segment_unmap_and_counts_one_in_the_singular() {
    let path = trace("unmapped.jsonl", UNMAPPED);
    let (out, _) = run(&["replay", &path]);
    for line in [
        "replay of {path}, device 0: 5 events (1 allocation, 1 free)\n",
        "start:     0 segments adopted (0 bytes, 0 live blocks), 0 blocks allocated afresh\n",
        "empty_cache calls                  1  (one per run of segment_unmap in the trace)\n",
    ] {
        let line = line.replace("{path}", &path);
        assert!(out.contains(&line), "missing {line:?} in:\n{out}");
    }
    assert_eq!(
        json(&["replay", &path])["segment_releases"],
        serde_json::json!(["segment_unmap"])
    );
    let (out, _) = run(&["replay", &path, "--exact"]);
    assert!(
        out.contains(
            "exact addresses:      0 of 1 allocation (0.00 %); 0 segments placed as recorded, \
             0 not\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("expandable segments (1 segment_map event)"),
        "{out}"
    );
}

#[test]
fn replay_without_allocations_says_there_were_none() {
    let path = trace("no-allocations.jsonl", NO_ALLOCATIONS);
    let (out, _) = run(&["replay", &path, "--exact"]);
    assert!(
        out.contains(
            "exact addresses:      none: the replay made no allocation; 0 segments placed as \
             recorded, 0 not\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "empty_cache calls                  1  (one per run of segment_free in the trace)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(", device 0: 2 events (0 allocations, 0 frees)\n"),
        "{out}"
    );
}

#[test]
fn info_and_summary_span_a_device_from_its_own_first_event_to_its_last() {
    let path = trace("staggered.jsonl", STAGGERED);
    let (info, _) = run(&["info", &path]);
    let (summary, _) = run(&["summary", &path]);
    for (device, events, span) in [
        (0, 2, "over 0.500000 s (1.000000 s to 1.500000 s)"),
        (1, 4, "over 0.500000 s (3.000000 s to 3.500000 s)"),
    ] {
        let numbered = format!(
            "device {device}\n  events:    {events} {span}, numbered 0 to {}\n",
            events - 1
        );
        assert!(info.contains(&numbered), "missing {numbered:?} in:\n{info}");
        let line = format!("device {device}\n  events:    {events} {span}\n");
        assert!(summary.contains(&line), "missing {line:?} in:\n{summary}");
    }
    // The peaks' times are on the same clock, within the device's span.
    assert!(
        summary.contains("  peak allocated   1.00 MiB after event 2 (3.250000 s) (block sizes)\n"),
        "{summary}"
    );
    let info = json(&["info", &path]);
    let summary = json(&["summary", &path]);
    for (i, (first, last)) in [(1_000_000, 1_500_000), (3_000_000, 3_500_000)]
        .into_iter()
        .enumerate()
    {
        for report in [&info, &summary] {
            let d = &report["devices"][i];
            assert_eq!(
                (&d["first_time_us"], &d["last_time_us"], &d["span_us"]),
                (&first.into(), &last.into(), &500_000.into()),
                "device {i}"
            );
        }
    }
}

#[test]
fn info_sets_requests_beside_the_allocated_blocks_and_pending_free_apart() {
    let path = trace("pending.jsonl", STAGGERED);
    let (out, _) = run(&["info", &path]);
    assert!(
        out.contains(
            "device 1\n  events:    4 over 0.500000 s (3.000000 s to 3.500000 s), numbered 0 to 3\n             \
             alloc 2, free_requested 1, segment_alloc 1\n  segments:  1 (3 blocks), 2.00 MiB \
             reserved, 512 bytes allocated (500 bytes requested), 1024.00 KiB pending free\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "  segments:  1 (2 blocks), 2.00 MiB reserved, 1024 bytes allocated (1000 bytes \
             requested), 0 bytes pending free\n"
        ),
        "{out}"
    );
    let device = &json(&["info", &path])["devices"][1];
    assert_eq!(device["allocated_bytes"], 512);
    assert_eq!(device["allocated_requested_bytes"], 500);
    assert_eq!(device["pending_free_bytes"], 1_048_576);
    assert_eq!(
        device["requested_bytes"], 1_049_076,
        "requested_bytes keeps its meaning: allocated and pending free blocks' requests"
    );
}

#[test]
fn one_is_singular_in_every_report() {
    let path = trace("singular.jsonl", STAGGERED);
    let (out, _) = run(&["segments", &path, "--device", "0"]);
    assert!(
        out.starts_with("device 0 after event 1: 1 segment (2.00 MiB); legend: "),
        "{out}"
    );
    let (out, _) = run(&["top", &path, "--device", "0", "--tree", "--depth", "1"]);
    assert!(
        out.starts_with("device 0 after event 1: 1024 bytes allocated in 1 block, by call stack"),
        "{out}"
    );
    assert!(out.contains(" folded, 1 level at most)\n"), "{out}");
    let (out, _) = run(&["leaks", &path, "--device", "0"]);
    assert!(
        out.contains(
            "(persistent sites apart): 1024 bytes in 1 block\n    1024 bytes        1 block  \
             <no stack recorded>\n"
        ),
        "{out}"
    );
    let (out, _) = run(&["leaks", &path, "--device", "0", "--warmup-steps", "0"]);
    assert!(
        out.contains("  persistent (unchanged since the first measurement): none\n"),
        "{out}"
    );
}
