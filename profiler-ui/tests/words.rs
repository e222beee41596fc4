//! Words and numbers a user can trust (issue 23, 4): every report counts one in the singular.

mod common;

use common::{memtrace, scratch, stderr, stdout};

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
