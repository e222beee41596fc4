//! Answers a PyTorch user can trust (issue 12): the out-of-memory event explained with the
//! failing request's size, stream, site and stack; replay what-ifs that say what they did
//! (the capacity and where it came from, a setting the start state leaves nothing to change,
//! the recorded out-of-memory request honoured, `--exact` on expandable segments); one
//! definition of fragmentation; peaks that say what kind of size they add up. Exact values
//! on `made_oom_private_pool.pickle` (`fixtures/made/make.py` says what it holds) and on the
//! licensed real snapshots.

mod common;

use common::{fixture, memtrace, stderr, stdout};
use serde_json::Value;

const OOM: &str = "made_oom_private_pool.pickle";
const NOT_HANMIN: &str = "notHanmin_assignment2-systems_memory_snapshot.pickle";

/// Runs `memtrace ARGS` and asserts it succeeded; returns stdout.
fn run_ok(args: &[&str]) -> String {
    let output = memtrace(args);
    assert!(
        output.status.success(),
        "memtrace {args:?}: {:?} {}",
        output.status,
        stderr(&output)
    );
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    stdout(&output)
}

/// Runs `memtrace ARGS --json` and parses it.
fn run_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&run_ok(&all)).expect("--json prints JSON")
}

/// The `oom` entry's stack as the fixture writes it, innermost first.
const OOM_STACK: [&str; 4] = [
    "CUDACachingAllocator.cpp:0:c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
    "/usr/lib/python3/site-packages/torch/nn/modules/linear.py:125:linear",
    "/home/user/model.py:77:forward",
    "/home/user/train.py:12:<module>",
];

#[test]
fn summary_json_explains_the_failing_request_with_stream_stack_and_site() {
    let path = fixture(OOM);
    let report = run_json(&["summary", &path]);
    let ooms = report["devices"][0]["out_of_memory"]
        .as_array()
        .expect("out_of_memory is a list");
    assert_eq!(ooms.len(), 1, "one oom entry in the file: {ooms:?}");
    let oom = &ooms[0];
    assert_eq!(oom["requested_bytes"], 30 << 20, "the failing request");
    assert_eq!(oom["stream"], 7, "the request's stream");
    assert_eq!(
        oom["device_free_bytes"],
        10 << 20,
        "device_free as recorded"
    );
    assert_eq!(
        oom["reserved_bytes"],
        22 << 20,
        "20 MiB + 2 MiB segments then"
    );
    assert_eq!(oom["device_memory_bytes"], 32 << 20, "free + reserved");
    assert_eq!(oom["allocated_bytes"], (6 << 20) + 1024);
    let stack: Vec<&str> = oom["stack"]
        .as_array()
        .expect("stack is a list")
        .iter()
        .map(|f| f.as_str().expect("a frame is a string"))
        .collect();
    assert_eq!(
        stack, OOM_STACK,
        "the failing request's stack, innermost first"
    );
    // The site is named by analysis::sites (whose rules another change refines): it is one
    // of the request's own frames, never the allocator's.
    let site = oom["site"].as_str().expect("site is a string");
    assert!(
        stack[1..].contains(&site),
        "site {site:?} is a Python frame of the request"
    );
}

#[test]
fn summary_text_shows_the_failing_request_its_device_and_stack() {
    let text = run_ok(&["summary", &fixture(OOM)]);
    assert!(
        text.contains("30.00 MiB requested on stream 7 at "),
        "request, stream and site on the event's line:\n{text}"
    );
    assert!(
        text.contains(
            "    device: 10.00 MiB free + 22.00 MiB reserved by this allocator = 32.00 MiB"
        ),
        "{text}"
    );
    let stack = format!(
        "    stack of the request (innermost first):\n{}",
        OOM_STACK.map(|f| format!("      {f}\n")).concat()
    );
    assert!(text.contains(&stack), "the stack, innermost first:\n{text}");
}
