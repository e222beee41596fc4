//! `memtrace serve` over real HTTP: every route on a trace recorded here with exact values,
//! malformed and hostile requests (bad parameters, path traversal, other methods, a foreign
//! `Host`), loopback-only listening, and hostile files and busy ports refused with exit 2.

use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
mod common;

use common::scratch;
use common::server::{get, send, start, Server};
use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A trace: in `step0`, 1000 bytes (a 1024-byte block) and 3 MiB allocated and freed; then a
/// 4096-byte block under `leak` that is never freed. Made once per test process: the tests run
/// in parallel, and annotations reach every recording allocator of the process, so two traces
/// made at once would mix (and would race on the file).
fn recorded_trace() -> PathBuf {
    static TRACE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TRACE.get_or_init(make_recorded_trace).clone()
}

fn make_recorded_trace() -> PathBuf {
    let path = scratch("recorded.jsonl");
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("recording starts");
    {
        let _step = annotate("step0");
        let a = alloc.allocate(0, 1000, StreamId::DEFAULT).expect("fits");
        let b = alloc.allocate(0, 3 << 20, StreamId::DEFAULT).expect("fits");
        drop(a);
        drop(b);
    }
    let _leak_tag = annotate("leak");
    let leak = alloc.allocate(0, 4096, StreamId::DEFAULT).expect("fits");
    alloc.dump_snapshot(&path).expect("trace written");
    drop(leak);
    path
}

fn serve(file: &Path) -> Server {
    common::server::serve(&[&file.to_string_lossy()])
}

#[test]
fn every_route_answers_with_exact_values() {
    let server = serve(&recorded_trace());
    let port = server.port;
    assert!(server.banner.starts_with("serving "), "{}", server.banner);
    assert_eq!(server.banner.lines().count(), 1, "{}", server.banner);

    let page = get(port, "/");
    assert_eq!(page.status, 200);
    assert!(page.head.contains("text/html"), "{}", page.head);
    assert!(page
        .head
        .contains("Content-Security-Policy: default-src 'self'"));
    assert!(String::from_utf8_lossy(&page.body).contains("<canvas id=\"timeline\""));
    // Every script the page loads is served, and the style sheet.
    let body = String::from_utf8_lossy(&page.body).into_owned();
    let scripts: Vec<&str> = body
        .split("<script src=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert_eq!(
        scripts,
        [
            "/tree.js",
            "/chart.js",
            "/panels.js",
            "/streams.js",
            "/context.js",
            "/app.js"
        ]
    );
    let kinds = scripts.iter().map(|&path| (path, "text/javascript"));
    for (path, kind) in kinds.chain([("/style.css", "text/css")]) {
        let asset = get(port, path);
        assert_eq!(
            (asset.status, asset.head.contains(kind)),
            (200, true),
            "{path}"
        );
    }

    let meta = get(port, "/api/meta").json();
    assert_eq!(meta["format"], "jsonl");
    let device = &meta["devices"][0];
    let events = device["events"].as_u64().expect("events");
    assert_eq!(
        device["allocations"], 3,
        "the two step allocations and the leak"
    );
    assert_eq!(
        meta["summary"]["devices"][0]["peak_allocated"]["bytes"],
        1024 + (3 << 20)
    );
    // The device the page opens: the only one.
    assert_eq!(meta["default_device"], device["device"]);

    // One column per state: every band on its own, nothing summarized.
    let width = events + 1;
    let t = get(port, &format!("/api/timeline?width={width}")).json();
    let mut sizes: Vec<u64> = t["bands"]
        .as_array()
        .expect("bands")
        .iter()
        .map(|b| b["size"].as_u64().expect("size"))
        .collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [1024, 4096, 3 << 20]);
    let total: Vec<u64> = serde_json::from_value(t["total"].clone()).expect("totals");
    assert_eq!(total.iter().max(), Some(&(1024 + (3 << 20))));
    assert_eq!(
        total.last(),
        Some(&4096),
        "only the leak is alive at the end"
    );
    assert!(t["other"].as_array().expect("other").iter().all(|o| o == 0));

    let narrowed = get(port, &format!("/api/timeline?width={width}&q=LEAK")).json();
    assert_eq!(
        narrowed["matched"], 1,
        "the search is case-insensitive on tags"
    );
    assert_eq!(narrowed["bands"][0]["site"], "leak");
    let big = get(port, "/api/timeline?min_size=2000&max_size=4096").json();
    assert_eq!(big["matched"], 1);

    let curves = get(port, "/api/curves?width=1").json();
    assert_eq!(curves["allocated"], serde_json::json!([1024 + (3 << 20)]));

    let first = get(port, "/api/allocation?id=0").json();
    assert_eq!(first["size"], 1024);
    assert_eq!(first["requested"], 1000);
    assert_eq!(first["context"]["tags"], serde_json::json!(["step0"]));
    let leak = get(port, "/api/allocation?id=2").json();
    assert_eq!(leak["end"], Value::Null, "alive at the end");

    let leaks = get(port, "/api/leaks").json();
    assert_eq!(leaks["alive_at_end"][0]["site"], "leak");
    assert_eq!(leaks["alive_at_end"][0]["bytes"], 4096);
    assert_eq!(leaks["steps"], serde_json::json!(["step0", "leak"]));
    assert_eq!(
        leaks["growing"],
        serde_json::json!([]),
        "3 steps flag a site"
    );
    // One stream: its memory, and no replay of a policy that would change nothing.
    let streams = get(port, "/api/streams").json();
    assert_eq!(streams["streams"].as_array().map(Vec::len), Some(1));
    assert_eq!(streams["streams"][0]["allocations"], 3);
    assert_eq!(streams["ordered"], Value::Null);
    assert_eq!(
        streams["ordered_note"],
        "one stream allocates: the stream-ordered policy would change nothing"
    );
    assert_eq!(
        streams["reserved_peak"]["reserved_bytes"],
        meta["summary"]["devices"][0]["peak_reserved"]["bytes"]
    );
    let k1 = get(port, "/api/leaks?growth_steps=1").json();
    assert_eq!(k1["growing"][0]["label"], "leak");
    assert_eq!(k1["growing"][0]["growth_bytes_per_step"], 4096);
    assert_eq!(k1["growing"][0]["since"], "step0");
    let named = get(port, "/api/leaks?step=step&growth_steps=1").json();
    assert_eq!(named["step_rule"]["kind"], "named");
    assert_eq!(named["steps"], serde_json::json!(["step0"]));
    assert_eq!(
        named["growing"],
        serde_json::json!([]),
        "the leak comes after the one step"
    );

    let peak = device["peak_index"].as_u64().expect("peak");
    let breakdown = get(port, "/api/breakdown").json();
    assert_eq!(breakdown["index"], peak);
    assert_eq!(breakdown["sites"][0]["site"], "step0");
    assert_eq!(breakdown["sites"][0]["bytes"], 1024 + (3 << 20));

    let state = get(port, &format!("/api/state?index={events}")).json();
    assert_eq!(state["allocated_bytes"], 4096);
    assert_eq!(state["segments"][0]["expandable"], false);
    let start = get(port, "/api/state?index=0").json();
    assert_eq!(start["allocated_bytes"], 0);
    assert_eq!(start["event"], Value::Null);

    let context = get(port, "/api/context?id=999999").json();
    assert_eq!(
        context["tags"],
        serde_json::json!([]),
        "an unknown context is empty"
    );
    assert_eq!(context["plumbing"], serde_json::json!([]));

    // No out-of-memory event: the reserved peak (a 2 MiB small segment and a 20 MiB large
    // one) where it is fullest, 1000 bytes and 3 MiB live.
    let explained = get(port, "/api/explain").json();
    assert_eq!(explained["moment"], "reserved_peak");
    assert_eq!(explained["request"], Value::Null);
    let e = &explained["explanation"];
    assert_eq!(e["reserved_bytes"], 22 << 20);
    let parts: Vec<(String, u64)> = e["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| {
            (
                p["key"].as_str().unwrap().to_string(),
                p["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("live", 1000 + (3 << 20)),
        ("rounding", 24),
        ("free", (22 << 20) - 1024 - (3 << 20)),
    ];
    let expected: Vec<(String, u64)> = expected.iter().map(|&(k, b)| (k.into(), b)).collect();
    assert_eq!(parts, expected);
}

#[test]
fn malformed_requests_get_a_4xx_and_the_server_goes_on() {
    let server = serve(&recorded_trace());
    let port = server.port;
    let long_step = format!("/api/leaks?step={}", "x".repeat(201));
    for (target, status) in [
        ("/api/timeline?width=abc", 400),
        ("/api/timeline?axis=sideways", 400),
        ("/api/timeline?from=5&to=5", 400),
        ("/api/timeline?from=99999999999999999999", 400),
        ("/api/timeline?q=%zz", 400),
        ("/api/timeline?device=7", 404),
        ("/api/timeline?device=99999999999", 404),
        ("/api/state?index=999999", 400),
        ("/api/allocation", 400),
        ("/api/allocation?id=99999", 404),
        ("/api/breakdown?index=18446744073709551615", 400),
        ("/api/leaks?growth_steps=0", 400),
        ("/api/leaks?growth_steps=4294967296", 400),
        (&long_step, 400),
        ("/api/streams?device=7", 404),
        ("/api/explain?oom=0", 400),
        ("/api/explain?oom=1", 400),
        ("/api/explain?peak=maybe", 400),
        ("/api/explain?oom=1&peak=1", 400),
    ] {
        let reply = get(port, target);
        assert_eq!(
            reply.status,
            status,
            "{target}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        assert!(
            reply.json()["error"].is_string(),
            "{target}: a JSON error message"
        );
    }
    // Huge but valid windows are clamped, not refused.
    let huge = get(
        port,
        "/api/timeline?from=0&to=18446744073709551615&width=999999&limit=999999",
    );
    assert_eq!(huge.status, 200);
    assert_eq!(huge.json()["states"].as_array().map(Vec::len), Some(4000));

    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let raw = format!("{method} / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert_eq!(send(port, raw.as_bytes()).status, 405, "{method}");
    }
    let foreign = send(
        port,
        b"GET /api/meta HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(foreign.status, 403, "a rebinding page's request is refused");

    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"\x00\xff\xfe\r\n\r\n",
        b"GET\r\n\r\n",
        b"",
    ] {
        let reply = send(port, garbage);
        assert!(
            reply.status == 0 || reply.status >= 400,
            "{garbage:?}: {}",
            reply.head
        );
    }
    assert_eq!(
        get(port, "/api/meta").status,
        200,
        "still serving after garbage"
    );
}

#[test]
fn no_path_reaches_a_file() {
    let server = serve(&recorded_trace());
    for target in [
        "/../Cargo.toml",
        "/../../../../../../etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/..%2f..%2f..%2fetc%2fpasswd",
        "/assets/app.js",
        "/api/../app.js",
        "/api/..%2f..%2fCargo.toml",
        "//etc/passwd",
        "/app.js/",
        "/index.html%00",
        "/%5c..%5cCargo.toml",
        "/profiler-ui/Cargo.toml",
        "/api",
        "/api/",
        "/favicon.ico",
    ] {
        let reply = get(server.port, target);
        assert_eq!(reply.status, 404, "{target}");
        let body = String::from_utf8_lossy(&reply.body);
        assert!(
            !body.contains("[package]") && !body.contains("root:"),
            "{target}: {body}"
        );
    }
}

#[test]
fn listens_on_loopback_only() {
    let server = serve(&recorded_trace());
    assert!(server
        .banner
        .contains(&format!("http://127.0.0.1:{}/", server.port)));
    assert!(
        TcpStream::connect(("::1", server.port)).is_err(),
        "nothing listens on IPv6 loopback, let alone other interfaces"
    );
    #[cfg(target_os = "linux")]
    {
        // Every listening IPv4 socket on our port is bound to 127.0.0.1 (0100007F).
        let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        let port = format!(":{:04X}", server.port);
        let listening: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                (fields.get(3) == Some(&"0A") && fields.get(1)?.ends_with(&port)).then(|| fields[1])
            })
            .collect();
        assert_eq!(
            listening,
            [format!("0100007F{port}")],
            "bound to 127.0.0.1 alone"
        );
    }
}

#[test]
fn hostile_files_and_busy_ports_exit_2_with_one_line() {
    let garbage = scratch("garbage.jsonl");
    std::fs::write(
        &garbage,
        b"{\"blockpool_trace\":1}\n{\"event\":\"alloc\",\"device\":0,\"addr\":1}\n\xff\xfe",
    )
    .expect("written");
    let empty = scratch("empty.bin");
    std::fs::write(&empty, b"").expect("written");
    let busy = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("a port");
    let busy_port = busy.local_addr().expect("address").port().to_string();
    let trace = recorded_trace();
    let cases: [(&PathBuf, &str, &str); 4] = [
        (&garbage, "0", "memtrace: "),
        (&empty, "0", "memtrace: "),
        (&scratch("missing.jsonl"), "0", "memtrace: "),
        (&trace, &busy_port, "cannot listen on 127.0.0.1:"),
    ];
    for (file, port, message) in cases {
        let output = Command::new(env!("CARGO_BIN_EXE_memtrace"))
            .args(["serve", &file.to_string_lossy(), "--port", port])
            .output()
            .expect("memtrace runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {stderr}",
            file.display()
        );
        assert!(stderr.contains(message), "{}: {stderr}", file.display());
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    drop(busy);
}

#[test]
fn the_demo_serves_its_trace_when_asked() {
    let trace = scratch("demo-served.jsonl.gz");
    let trace = trace.to_string_lossy();
    let server = start(
        &["demo", "--out", &trace, "--serve", "--port", "0"],
        &[("BLOCKPOOL_BACKEND", "sim")],
    );
    assert!(
        server.banner.contains(&format!("\nwrote {trace}\n")),
        "the demo reports before serving: {}",
        server.banner
    );
    let meta = get(server.port, "/api/meta").json();
    assert_eq!(meta["format"], "jsonl");
    // The demo's workload is deterministic on the simulated device (the README shows it).
    assert_eq!(meta["devices"][0]["events"], 2822, "{meta}");
    assert_eq!(get(server.port, "/").status, 200);
    drop(server);

    // With expandable segments the viewer's segments say so.
    let server = start(
        &["demo", "--out", &trace, "--serve", "--port", "0"],
        &[
            ("BLOCKPOOL_BACKEND", "sim"),
            ("BLOCKPOOL_ALLOC_CONF", "expandable_segments:True"),
        ],
    );
    let meta = get(server.port, "/api/meta").json();
    let events = meta["devices"][0]["events"].as_u64().expect("events");
    let state = get(server.port, &format!("/api/state?index={events}")).json();
    let segments = state["segments"].as_array().expect("segments");
    assert_eq!(segments.len(), 2, "one mapped run per pool: {state}");
    assert!(segments.iter().all(|s| s["expandable"] == true), "{state}");
}
