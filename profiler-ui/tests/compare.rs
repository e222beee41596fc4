//! `memtrace serve` of several files: the comparison routes with exact values on rank traces
//! written here, and bad file lists refused with one line. (The server's bounds on
//! connections are `connections.rs`.)

mod common;

use common::scratch;
use common::server::{self, serve};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// A blockpool JSON Lines trace written event by event: every allocation gets a segment of
/// exactly its size (so reserved bytes are known without the allocator's rounding), freed
/// blocks stay cached, and events are 10 µs apart (or all at time 0).
struct TraceText {
    lines: Vec<String>,
    contexts: HashMap<String, u32>,
    events: usize,
    time_us: u64,
    timed: bool,
    next_addr: u64,
}

impl TraceText {
    fn new(timed: bool) -> TraceText {
        TraceText {
            lines: vec![
                r#"{"blockpool_trace":1,"created_by":"compare test","time_origin_unix_us":0,"allocator_config":""}"#
                    .to_string(),
            ],
            contexts: HashMap::new(),
            events: 0,
            time_us: 1_000,
            timed,
            next_addr: 0x7f00_0000_0000,
        }
    }

    fn context(&mut self, tag: &str) -> u32 {
        if let Some(&id) = self.contexts.get(tag) {
            return id;
        }
        let id = self.contexts.len() as u32 + 1;
        self.lines.push(format!(
            r#"{{"context":{id},"tags":["{tag}"],"frames":[]}}"#
        ));
        self.contexts.insert(tag.to_string(), id);
        id
    }

    fn event(&mut self, action: &str, addr: u64, size: u64, requested: u64, context: u32) {
        let time = if self.timed { self.time_us } else { 0 };
        self.lines.push(format!(
            r#"{{"event":"{action}","device":0,"addr":{addr},"size":{size},"requested":{requested},"time_us":{time},"context":{context}}}"#
        ));
        self.events += 1;
        self.time_us += 10;
    }

    /// A segment of `size` bytes and a block filling it, `requested` asked for, under `tag`:
    /// two events. Returns the address.
    fn alloc(&mut self, tag: &str, size: u64, requested: u64) -> u64 {
        let context = self.context(tag);
        let addr = self.next_addr;
        self.next_addr += size;
        self.event("segment_alloc", addr, size, 0, context);
        self.event("alloc", addr, size, requested, context);
        addr
    }

    /// The block at `addr` freed (two events); its segment stays cached.
    fn free(&mut self, addr: u64, size: u64) {
        self.event("free_requested", addr, size, size, 0);
        self.event("free_completed", addr, size, size, 0);
    }

    fn write(mut self, path: &Path) -> PathBuf {
        let events = self.events;
        self.lines.push(format!(
            r#"{{"end":{{"events":{events},"segments":0,"dropped_events":0}}}}"#
        ));
        let mut text = self.lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).expect("trace written");
        path.to_path_buf()
    }
}

/// One rank of a job: 16 MiB of `weights` (100 bytes fewer asked for), 8 MiB of `scratch`
/// allocated and freed (cached), then `activations` MiB of `activations` kept to the end:
/// 8 events. Allocated bytes peak at event 8 at 16 + `activations` MiB; reserved bytes at
/// event 7 (the activations' segment) at 24 + `activations` MiB.
fn rank_trace(path: &Path, activations: u64, timed: bool) -> PathBuf {
    let mut t = TraceText::new(timed);
    t.alloc("weights", 16 * MIB, 16 * MIB - 100);
    let scratch = t.alloc("scratch", 8 * MIB, 8 * MIB);
    t.free(scratch, 8 * MIB);
    t.alloc("activations", activations * MIB, activations * MIB);
    t.write(path)
}

/// Three ranks in one folder, `rank-{rank}.jsonl`: activations of 16, 20 and 36 MiB, so
/// allocated peaks of 32, 36 and 52 MiB (mean 40) and reserved peaks of 40, 44 and 60 MiB
/// (mean 48). Made once per test process.
fn ranks() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("ranks");
        std::fs::create_dir_all(&dir).expect("folder");
        for (rank, activations) in [(0, 16), (1, 20), (2, 36)] {
            rank_trace(&dir.join(format!("rank-{rank}.jsonl")), activations, true);
        }
        // Not a trace: a folder's other files are left alone.
        std::fs::write(dir.join("notes.txt"), "not a trace").expect("written");
        dir
    })
    .clone()
}

/// The status and body of `raw` sent on a fresh connection, read to its end.
fn send(port: u16, raw: &[u8]) -> (u16, Vec<u8>) {
    let reply = server::send(port, raw);
    (reply.status, reply.body)
}

/// The status and JSON body of `GET target`.
fn get(port: u16, target: &str) -> (u16, Value) {
    let reply = server::get(port, target);
    (reply.status, reply.json())
}

fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The figures of one peak: bytes, state index, microseconds after the first event, and the
/// event that reached it (action, size, site).
fn peak(view: &Value) -> (u64, u64, u64, String, u64, String) {
    let e = &view["event"];
    (
        view["bytes"].as_u64().expect("bytes"),
        view["index"].as_u64().expect("index"),
        view["after_start_us"].as_u64().expect("after_start_us"),
        e["action"].as_str().expect("action").to_string(),
        e["size"].as_u64().expect("size"),
        e["site"].as_str().expect("site").to_string(),
    )
}

#[test]
fn three_ranks_side_by_side_with_their_peaks_and_imbalance() {
    let dir = ranks();
    let pattern = dir.join("rank-{rank}.jsonl");
    let server = serve(&[&path_text(&pattern)]);
    for rank in 0..3 {
        let line = format!(
            "  rank {rank}: {} (8 events)\n",
            dir.join(format!("rank-{rank}.jsonl")).display()
        );
        assert!(
            server.banner.contains(&line),
            "{line:?} in {}",
            server.banner
        );
    }
    assert!(
        server
            .banner
            .contains("serving 3 files side by side at http://127.0.0.1:"),
        "{}",
        server.banner
    );
    let (status, c) = get(server.port, "/api/compare");
    assert_eq!(status, 200);
    assert_eq!(c["ranks"], true);
    assert_eq!(
        c["scale"],
        serde_json::json!({"axis": "time", "extent": 71, "bytes": 60 * MIB})
    );
    let files = c["files"].as_array().expect("files");
    assert_eq!(files.len(), 3);
    for (i, (file, activations)) in files.iter().zip([16, 20, 36]).enumerate() {
        let a = activations * MIB;
        assert_eq!(file["file"], i);
        assert_eq!(file["label"], format!("rank {i}"));
        assert_eq!(file["rank"], i);
        assert_eq!(file["format"], "jsonl");
        assert_eq!(
            (file["device"].as_u64(), file["events"].as_u64()),
            (Some(0), Some(8))
        );
        assert_eq!(
            (file["first_us"].as_u64(), file["span_us"].as_u64()),
            (Some(1000), Some(70))
        );
        assert_eq!(file["extent"], 71);
        assert_eq!(
            peak(&file["peak_allocated"]),
            (16 * MIB + a, 8, 70, "alloc".into(), a, "activations".into()),
            "rank {i}"
        );
        assert_eq!(
            peak(&file["peak_reserved"]),
            (
                24 * MIB + a,
                7,
                60,
                "segment_alloc".into(),
                a,
                "activations".into()
            ),
            "rank {i}: the activations' segment, before their block"
        );
        assert_eq!(
            peak(&file["peak_requested"]),
            (
                16 * MIB - 100 + a,
                8,
                70,
                "alloc".into(),
                a,
                "activations".into()
            ),
            "rank {i}"
        );
        let sites: Vec<(&str, u64, u64)> = file["top_sites"]
            .as_array()
            .expect("sites")
            .iter()
            .map(|s| {
                (
                    s["site"].as_str().expect("site"),
                    s["bytes"].as_u64().expect("bytes"),
                    s["requested_bytes"].as_u64().expect("requested"),
                )
            })
            .collect();
        // Largest first; rank 0's tie (16 MiB each) goes by name.
        assert_eq!(
            sites,
            [("activations", a, a), ("weights", 16 * MIB, 16 * MIB - 100)],
            "rank {i}: the scratch block was freed before the peak"
        );
        assert_eq!(
            file["devices"],
            serde_json::json!([{"device": 0, "events": 8, "peak_allocated": 16 * MIB + a,
                                "peak_reserved": 24 * MIB + a}])
        );
        assert_eq!(file["out_of_memory"], 0);
    }
    let spread = |peaks: [u64; 3]| {
        let mean = peaks.iter().sum::<u64>() / 3;
        serde_json::json!({
            "max": peaks[2] * MIB, "max_file": 2, "min": peaks[0] * MIB, "min_file": 0,
            "mean": (mean * MIB) as f64,
            "max_over_min": peaks[2] as f64 / peaks[0] as f64,
            "max_minus_mean": ((peaks[2] - mean) * MIB) as f64, "outlier": 2,
        })
    };
    assert_eq!(c["imbalance"]["allocated"], spread([32, 36, 52]));
    assert_eq!(c["imbalance"]["reserved"], spread([40, 44, 60]));
    assert_eq!(c["imbalance"]["allocated"]["max_over_min"], 1.625);
    assert_eq!(
        c["sites"],
        Value::Null,
        "sites are compared for two files only"
    );

    // Every route of the one-file viewer answers for any file.
    let (_, meta) = get(server.port, "/api/meta?file=1");
    assert_eq!(meta["file"], path_text(&dir.join("rank-1.jsonl")));
    let (_, curves) = get(
        server.port,
        "/api/curves?file=2&device=0&axis=time&from=1000&to=1071&width=71",
    );
    let allocated: Vec<u64> = serde_json::from_value(curves["allocated"].clone()).expect("curve");
    assert_eq!(allocated.iter().max(), Some(&(52 * MIB)));
    assert_eq!(allocated.last(), Some(&(52 * MIB)));
    assert_eq!(
        allocated[0], 0,
        "before the first event completes its 10 µs"
    );
    let (status, missing) = get(server.port, "/api/meta?file=3");
    assert_eq!(
        (status, missing["error"].as_str()),
        (404, Some("no file 3 in this page (files 0 to 2)"))
    );
    let (status, bad) = get(server.port, "/api/state?file=x");
    assert_eq!(status, 400, "{bad}");

    // `/` is the comparison page; the one-file page stays where it was.
    let (status, page) = send(server.port, b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    let page = String::from_utf8_lossy(&page);
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/compare.js\""), "{page}");
    let (_, index) = send(
        server.port,
        b"GET /index.html HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
    );
    assert!(String::from_utf8_lossy(&index).contains("<canvas id=\"timeline\""));
    for asset in ["/compare.js", "/compare.css"] {
        let (status, body) = send(
            server.port,
            format!("GET {asset} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes(),
        );
        assert_eq!((status, body.is_empty()), (200, false), "{asset}");
    }
}

#[test]
fn two_files_compare_their_sites_and_share_an_event_scale_without_times() {
    let dir = ranks();
    let after = rank_trace(&scratch("after.jsonl"), 36, false);
    let before = dir.join("rank-0.jsonl");
    let server = serve(&[&path_text(&before), &path_text(&after)]);
    let (_, c) = get(server.port, "/api/compare");
    assert_eq!(c["ranks"], false, "two runs, not ranks");
    let labels: Vec<&str> = c["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["rank-0.jsonl", "after.jsonl"]);
    assert_eq!(c["files"][1]["span_us"], 0);
    assert_eq!(
        c["scale"],
        serde_json::json!({"axis": "event", "extent": 9, "bytes": 60 * MIB}),
        "one file has no times: both on events (8 events, 9 states)"
    );
    assert_eq!(c["files"][1]["peak_allocated"]["after_start_us"], 0);
    assert_eq!(
        c["sites"],
        serde_json::json!({
            "a": 0, "b": 1, "peak_a": 32 * MIB, "peak_b": 52 * MIB,
            "changed": [{"site": "activations", "peak_a": 16 * MIB, "peak_b": 36 * MIB,
                         "end_a": 16 * MIB, "end_b": 36 * MIB}],
            "changed_count": 1, "unchanged_count": 1,
        }),
        "weights are the same in both; scratch holds nothing at either peak or end"
    );
    assert_eq!(c["imbalance"]["allocated"]["outlier"], 0, "tie: the first");
}

#[test]
fn a_file_without_events_shows_empty_beside_the_others() {
    let empty = scratch("empty.jsonl");
    // A header and a last line cut short (dropped on reading): no devices at all.
    std::fs::write(&empty, "{\"blockpool_trace\":1}\n{\"oops\"").expect("file");
    let server = serve(&[
        &path_text(&ranks().join("rank-2.jsonl")),
        &path_text(&empty),
    ]);
    let (status, c) = get(server.port, "/api/compare");
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["files"][1]["events"], 0);
    assert_eq!(c["files"][1]["devices"], serde_json::json!([]));
    assert_eq!(c["files"][1]["peak_allocated"]["bytes"], 0);
    assert_eq!(c["files"][1]["peak_allocated"]["event"], Value::Null);
    assert_eq!(
        c["imbalance"]["allocated"]["max_over_min"],
        Value::Null,
        "the lowest is 0"
    );
    assert_eq!(c["sites"], Value::Null, "no device to compare sites on");
}

#[test]
fn one_file_keeps_the_viewer_page() {
    let server = serve(&[&path_text(&ranks().join("rank-1.jsonl"))]);
    assert!(server.banner.starts_with("serving "), "{}", server.banner);
    let (status, page) = send(server.port, b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&page).contains("<canvas id=\"timeline\""));
    let (_, c) = get(server.port, "/api/compare");
    assert_eq!(
        (c["ranks"].as_bool(), c["imbalance"].is_null()),
        (Some(false), true)
    );
    assert_eq!(c["files"][0]["label"], "rank-1.jsonl");
}

#[test]
fn bad_file_lists_exit_2_with_one_line_naming_the_problem() {
    let dir = ranks();
    let rank0 = path_text(&dir.join("rank-0.jsonl"));
    let other = scratch("other");
    std::fs::create_dir_all(&other).expect("folder");
    let twin = rank_trace(&other.join("rank-0.jsonl"), 16, true);
    let many = scratch("many");
    std::fs::create_dir_all(&many).expect("folder");
    for i in 0..65 {
        std::fs::write(many.join(format!("t{i:02}.jsonl")), "never read").expect("file");
    }
    let broken = scratch("broken");
    std::fs::create_dir_all(&broken).expect("folder");
    rank_trace(&broken.join("rank0.jsonl"), 16, true);
    std::fs::write(
        broken.join("rank1.jsonl"),
        "{\"blockpool_trace\":1}\n{\"event\":\"malloc\"}\n",
    )
    .expect("file");
    let missing = path_text(&dir.join("rank-9.jsonl"));
    let cases: [(Vec<String>, String); 6] = [
        (
            vec![rank0.clone(), missing.clone()],
            format!("memtrace: {missing}: no such file or folder"),
        ),
        (
            vec![rank0.clone(), path_text(&twin)],
            format!(
                "memtrace: two files are named rank-0.jsonl ({rank0} and {}); the page labels \
                 each file by its name: rename or link one of them",
                twin.display()
            ),
        ),
        (
            vec![rank0.clone(), rank0.clone()],
            format!("memtrace: {rank0} is given twice"),
        ),
        (
            vec![path_text(&many)],
            "memtrace: 65 files given; one page shows at most 64 side by side".into(),
        ),
        (
            vec![path_text(&dir.join("step-{rank}.jsonl"))],
            format!(
                "memtrace: no file matches {} ({{rank}} stands for the rank's digits, e.g. \
                 run-0.pickle)",
                dir.join("step-{rank}.jsonl").display()
            ),
        ),
        (
            vec![path_text(&broken)],
            "memtrace: cannot read the trace of rank 1: ".into(),
        ),
    ];
    for (args, message) in cases {
        let mut all: Vec<&str> = vec!["serve"];
        all.extend(args.iter().map(String::as_str));
        all.extend(["--port", "0"]);
        let output = common::memtrace(&all);
        let stderr = common::stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&message),
            "{args:?}:\n{stderr}\nexpected {message}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    }
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--idle-timeout", "0"),
        ("--idle-timeout", "soon"),
    ] {
        let output = common::memtrace(&["serve", &rank0, flag, value]);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        assert!(
            common::stderr(&output).contains(value),
            "{}",
            common::stderr(&output)
        );
    }
}

#[test]
fn serve_help_documents_several_files_and_the_bounds() {
    let help = common::stdout(&common::memtrace(&["serve", "--help"]));
    for words in [
        "<FILE>...",
        "rank pattern (`run-{rank}.pickle`",
        "side by side",
        "--max-connections <N>",
        "[default: 32]",
        "--idle-timeout <SECONDS>",
        "[default: 30]",
    ] {
        assert!(help.contains(words), "{words:?} in\n{help}");
    }
}

#[test]
fn summary_of_a_rank_series_gives_each_rank_the_spread_and_the_outliers() {
    let dir = ranks();
    let pattern = path_text(&dir.join("rank-{rank}.jsonl"));
    let output = common::memtrace(&["summary", &pattern, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let report: Value = serde_json::from_str(&common::stdout(&output)).expect("JSON");
    assert_eq!(report["ranks"], true);
    let files = report["files"].as_array().expect("files");
    let lines: Vec<(String, u64, u64, u64)> = files
        .iter()
        .map(|f| {
            (
                f["label"].as_str().expect("label").to_string(),
                f["events"].as_u64().expect("events"),
                f["peak_allocated"].as_u64().expect("allocated"),
                f["peak_reserved"].as_u64().expect("reserved"),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("rank 0".to_string(), 8, 32 * MIB, 40 * MIB),
            ("rank 1".to_string(), 8, 36 * MIB, 44 * MIB),
            ("rank 2".to_string(), 8, 52 * MIB, 60 * MIB),
        ]
    );
    assert_eq!(report["allocated"]["mean"], Value::from((40 * MIB) as f64));
    assert_eq!(report["reserved"]["outlier"], 2);
    assert_eq!(
        report["outliers"],
        serde_json::json!([2]),
        "52 MiB > 1.1 x 40 MiB"
    );

    // The folder reads the same ranks (its other file left alone), as text.
    let output = common::memtrace(&["summary", &path_text(&dir)]);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let text = common::stdout(&output);
    assert!(text.starts_with("3 ranks\n"), "{text}");
    assert!(
        text.contains("allocated peaks: highest 52.00 MiB (rank 2), lowest 32.00 MiB (rank 0), mean 40.00 MiB, max / min 1.625x, max - mean 12.00 MiB; farthest from the mean: rank 2"),
        "{text}"
    );
    assert!(
        text.ends_with("outliers (a peak more than 10% above the mean): rank 2\n"),
        "{text}"
    );

    // A folder without traces is refused in one line.
    let empty = scratch("no-traces");
    std::fs::create_dir_all(&empty).expect("folder");
    let output = common::memtrace(&["summary", &path_text(&empty)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        common::stderr(&output).contains("no trace files in this folder"),
        "{}",
        common::stderr(&output)
    );
}

#[test]
fn sixty_four_ranks_are_served_and_summarized_with_the_outlier() {
    // 64 ranks of 16 MiB of activations but rank 41, with 48: allocated peaks of 32 MiB and
    // one of 64 MiB (mean 32.5 MiB), reserved 40 and 72 MiB.
    let dir = scratch("sixty-four");
    std::fs::create_dir_all(&dir).expect("folder");
    for rank in 0..64 {
        let activations = if rank == 41 { 48 } else { 16 };
        rank_trace(&dir.join(format!("rank-{rank}.jsonl")), activations, true);
    }
    let pattern = path_text(&dir.join("rank-{rank}.jsonl"));
    let server = serve(&[&pattern]);
    let (status, c) = get(server.port, "/api/compare");
    assert_eq!(status, 200);
    let files = c["files"].as_array().expect("files");
    assert_eq!(files.len(), 64);
    let peaks: Vec<u64> = files
        .iter()
        .map(|f| f["peak_allocated"]["bytes"].as_u64().expect("peak"))
        .collect();
    let mut expected = vec![32 * MIB; 64];
    expected[41] = 64 * MIB;
    assert_eq!(peaks, expected);
    let allocated = &c["imbalance"]["allocated"];
    assert_eq!(allocated["max_file"], 41);
    assert_eq!(allocated["outlier"], 41);
    assert_eq!(allocated["max_over_min"], 2.0);
    assert_eq!(allocated["mean"], Value::from((32 * MIB + MIB / 2) as f64));

    let output = common::memtrace(&["summary", &pattern, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", common::stderr(&output));
    let report: Value = serde_json::from_str(&common::stdout(&output)).expect("JSON");
    assert_eq!(report["files"].as_array().map(Vec::len), Some(64));
    assert_eq!(report["outliers"], serde_json::json!([41]));
    assert_eq!(report["reserved"]["max"], 72 * MIB);
}
