//! Inputs found in review to crash or exhaust memtrace: a call stack deeper than any thread's
//! stack under `top --tree`, hostile HTTP heads sent to `memtrace serve`, and output names the
//! commands took wrongly.

mod common;

use common::server::{send, serve};
use common::{memtrace, scratch, stderr};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A trace of one 1 MiB block whose call stack is `frames` user frames deep.
fn deep_stack_trace(name: &str, frames: usize) -> String {
    let stack = vec!["1"; frames].join(",");
    let trace = format!(
        "{{\"blockpool_trace\":1}}\n\
         {{\"frame\":1,\"name\":\"forward\",\"file\":\"/home/me/model.py\",\"line\":42}}\n\
         {{\"context\":1,\"tags\":[],\"frames\":[{stack}]}}\n\
         {{\"event\":\"alloc\",\"device\":0,\"addr\":268435456,\"size\":1048576,\
         \"requested\":1048576,\"time_us\":1,\"context\":1}}\n"
    );
    let path = scratch(name);
    std::fs::write(&path, trace).expect("writes the trace");
    path.to_string_lossy().into_owned()
}

/// Levels below the root of a `top --tree --json` tree.
fn levels(node: &Value) -> usize {
    let mut depth = 0;
    let mut node = node;
    while let Some(child) = node["children"].as_array().and_then(|c| c.first()) {
        depth += 1;
        node = child;
    }
    depth
}

#[test]
fn a_stack_deeper_than_the_tree_is_cut_without_overflowing() {
    // 300,000 frames once made as many nested nodes before the depth cut, and building or
    // dropping them recursed past the main thread's stack (SIGSEGV, not even a panic).
    let path = deep_stack_trace("review-deep-stack.jsonl", 300_000);
    let output = memtrace(&["top", &path, "--tree", "--json", "--depth", "40"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["tree"]["bytes"], 1 << 20, "the root holds the block");
    assert_eq!(levels(&report["tree"]), 40, "cut at --depth");
    let output = memtrace(&["top", &path, "--tree", "--depth", "100000"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a depth past the most is refused"
    );
    assert!(
        stderr(&output).contains("1 to 256"),
        "the refusal names the range: {}",
        stderr(&output)
    );
}

#[test]
fn hostile_heads_get_their_status_at_once_and_a_bare_lf_head_is_served() {
    let path = deep_stack_trace("review-heads.jsonl", 3);
    let server = serve(&[&path, "--idle-timeout", "20"]);
    let port = server.port;
    let started = Instant::now();
    // A header line that never ends: refused once past the bound, not at the timeout.
    let mut huge = b"GET /api/meta HTTP/1.1\r\nX: ".to_vec();
    huge.resize(64 * 1024, b'a');
    assert_eq!(send(port, &huge).status, 431);
    // As many headers as fit: still bounded as a whole.
    let many = format!("GET /api/meta HTTP/1.1\r\n{}", "A: b\r\n".repeat(10_000));
    assert_eq!(send(port, many.as_bytes()).status, 431);
    assert_eq!(send(port, b"\x00\x01\x02\r\n\r\n").status, 400);
    assert_eq!(send(port, b"GET /api/meta HTTP/9.9\r\n\r\n").status, 400);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refusals waited for the idle timeout: {:?}",
        started.elapsed()
    );
    // A bare LF ends lines too (RFC 9112, 2.2): no waiting for a CR that never comes.
    let reply = send(port, b"GET /api/meta HTTP/1.0\nHost: localhost\n\n");
    assert_eq!(reply.status, 200, "{}", reply.head);
    assert_eq!(reply.json()["format"], "jsonl");
    // A body announced with a length that is not one: answered, then closed (where the next
    // request would start is unknown).
    let reply = send(
        port,
        b"GET /api/meta HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    );
    assert_eq!(reply.status, 200);
    assert!(reply.head.contains("Connection: close"), "{}", reply.head);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn outputs_take_o_and_an_unknown_extension_is_refused_with_the_formats() {
    let trace = deep_stack_trace("review-convert.jsonl", 1);
    let svg = scratch("review-timeline.svg");
    let output = memtrace(&["timeline", &trace, "-o", &svg.to_string_lossy()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let drawn = std::fs::read_to_string(&svg).expect("the SVG was written");
    assert!(drawn.starts_with("<svg"), "{drawn:.80}");

    let unknown = scratch("review-out.arrow");
    let output = memtrace(&["convert", &trace, &unknown.to_string_lossy()]);
    assert_eq!(output.status.code(), Some(2));
    let message = stderr(&output);
    assert!(
        message.contains("memtrace writes no format with this extension")
            && message.contains(
                ".jsonl (blockpool), .pickle or .pkl (PyTorch), .json (Perfetto), .csv (RMM)"
            )
            && message.contains("or .parquet for a Parquet dataset")
            && message.contains("--to"),
        "{message}"
    );
    assert!(
        !unknown.exists(),
        "nothing is written under a name that lies"
    );

    let plain = scratch("review-out");
    let output = memtrace(&["convert", &trace, &plain.to_string_lossy()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = std::fs::read_to_string(&plain).expect("written");
    assert!(text.starts_with("{\"blockpool_trace\":1"), "{text:.80}");
}
