//! Words and numbers a user can trust (issue 23, 4): replay names the release events the trace
//! has, says when there was nothing to place, and counts in the singular for one, as every
//! report does.

mod common;

use common::{memtrace, scratch, stderr, stdout};
use serde_json::Value;

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
