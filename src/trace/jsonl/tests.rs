//! Tests of the trace file: exact text, round trips (plain and gzip), exact error messages
//! with their lines, torn and cut files, and hostile mutations that must never panic.

use super::*;
use crate::backend::StreamId;
use crate::pool::PoolKind;
use crate::trace::snapshot::{Block, Contexts, Segment, Snapshot};
use crate::trace::{Action, BlockState, Context, ContextId, Frame, TraceEvent};
use proptest::prelude::*;
use std::io::Write;
use std::path::PathBuf;

fn event(action: Action, device: u32, addr: u64, size: u64, time_us: u64) -> TraceEvent {
    TraceEvent {
        action,
        device,
        stream: StreamId::DEFAULT,
        addr,
        size,
        requested: 0,
        time_us,
        context: ContextId::NONE,
    }
}

fn block(address: u64, size: u64, requested: u64, state: BlockState, context: u32) -> Block {
    Block {
        address,
        size,
        requested,
        state,
        context: ContextId(context),
    }
}

/// Two devices, three contexts (tags, frames shared between two contexts, a name needing
/// escapes), every block state, a non-default stream.
fn sample() -> Snapshot {
    let frame = |name: &str, line| Frame {
        name: name.into(),
        filename: "src/train.rs".into(),
        line,
    };
    let contexts: Contexts = [
        Context {
            tags: vec!["layer3".into(), "attn".into()],
            frames: Vec::new(),
        },
        Context {
            tags: vec!["step \"1\"\n".into()],
            frames: vec![frame("train::step", 42), frame("main", 7)],
        },
        Context {
            tags: Vec::new(),
            frames: vec![frame("train::eval", 9), frame("main", 7)],
        },
    ]
    .into_iter()
    .collect();
    let base = 0x7f00_0000_0000;
    let mut events = vec![
        event(Action::SegmentAlloc, 0, base, 2 << 20, 1),
        TraceEvent {
            requested: 1000,
            context: ContextId(1),
            ..event(Action::Alloc, 0, base, 1024, 2)
        },
        TraceEvent {
            stream: StreamId::from_raw(7),
            requested: 3 << 20,
            context: ContextId(2),
            ..event(Action::Alloc, 1, base, 3 << 20, 3)
        },
        TraceEvent {
            context: ContextId(3),
            ..event(Action::Annotate, 1, 0, 0, 4)
        },
    ];
    events.push(event(Action::Oom, 1, 123, 1 << 40, 5));
    Snapshot {
        segments: vec![
            Segment {
                device: 0,
                address: base,
                size: 2 << 20,
                stream: StreamId::DEFAULT,
                pool: PoolKind::Small,
                expandable: false,
                context: ContextId::NONE,
                blocks: vec![
                    block(base, 1024, 1000, BlockState::ActiveAllocated, 1),
                    block(base + 1024, 512, 512, BlockState::ActivePendingFree, 3),
                    block(base + 1536, (2 << 20) - 1536, 0, BlockState::Inactive, 0),
                ],
            },
            Segment {
                device: 1,
                address: base,
                size: 20 << 20,
                stream: StreamId::from_raw(7),
                pool: PoolKind::Large,
                expandable: true,
                context: ContextId(2),
                blocks: vec![
                    block(base, 3 << 20, 3 << 20, BlockState::ActiveAllocated, 2),
                    block(base + (3 << 20), 17 << 20, 0, BlockState::Inactive, 0),
                ],
            },
        ],
        events,
        contexts,
        allocator_config: Some("max_split_size_mb:512".into()),
        time_origin_unix_us: Some(1_700_000_000_000_000),
        pytorch: Default::default(),
    }
}

fn to_text(snapshot: &Snapshot) -> String {
    let mut out = Vec::new();
    write_snapshot(snapshot, &mut out).expect("writing to memory works");
    String::from_utf8(out).expect("trace files are UTF-8")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("in memory");
    encoder.finish().expect("in memory")
}

fn read_err(text: &str) -> String {
    match read_snapshot(text.as_bytes()) {
        Ok((snapshot, report)) => panic!("expected an error, read {snapshot:?} {report:?}"),
        Err(e) => e.to_string(),
    }
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("blockpool-jsonl-{}-{name}", std::process::id()))
}

const HEADER: &str = "{\"blockpool_trace\":1}\n";

#[test]
fn writes_the_documented_lines() {
    let text = to_text(&sample());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        r#"{"blockpool_trace":1,"created_by":"blockpool 0.1.0","time_origin_unix_us":1700000000000000,"allocator_config":"max_split_size_mb:512"}"#
    );
    assert_eq!(
        lines[1],
        r#"{"context":1,"tags":["layer3","attn"],"frames":[]}"#
    );
    assert_eq!(
        lines[2],
        r#"{"frame":1,"name":"train::step","file":"src/train.rs","line":42}"#
    );
    assert_eq!(
        lines[4],
        r#"{"context":2,"tags":["step \"1\"\n"],"frames":[1,2]}"#
    );
    assert_eq!(
        lines[6], r#"{"context":3,"tags":[],"frames":[3,2]}"#,
        "frame 2 is shared"
    );
    assert_eq!(
        lines[9],
        r#"{"event":"alloc","device":1,"stream":7,"addr":139637976727552,"size":3145728,"requested":3145728,"time_us":3,"context":2}"#
    );
    assert_eq!(
        lines[12],
        r#"{"segment":139637976727552,"device":0,"size":2097152,"pool":"small","blocks":[[139637976727552,1024,1000,"active_allocated",1],[139637976728576,512,512,"active_pending_free",3],[139637976729088,2095616,0,"inactive",0]]}"#
    );
    assert_eq!(lines[14], r#"{"end":{"events":5,"segments":2}}"#);
    assert_eq!(lines.len(), 15);
}

#[test]
fn snapshot_round_trips_plain_and_gzip() {
    let snapshot = sample();
    let text = to_text(&snapshot);
    let (read, report) = read_snapshot(text.as_bytes()).expect("our own file reads");
    assert_eq!(read, snapshot, "plain round trip");
    assert_eq!(
        report,
        ReadReport {
            lines: 15,
            events: 5,
            segments: 2,
            complete: true,
            ..ReadReport::default()
        }
    );
    let (read, _) = read_snapshot(gzip(text.as_bytes()).as_slice()).expect("gzip reads");
    assert_eq!(read, snapshot, "gzip is recognised by its magic bytes");

    for name in ["round-trip.jsonl", "round-trip.jsonl.gz"] {
        let path = temp_path(name);
        save(&snapshot, &path).expect("the temp dir is writable");
        let bytes = std::fs::read(&path).expect("just written");
        assert_eq!(
            bytes.starts_with(&[0x1f, 0x8b]),
            name.ends_with(".gz"),
            "{name}: gzip exactly when the name ends in .gz"
        );
        let (read, report) = load(&path).expect("saved file loads");
        std::fs::remove_file(&path).expect("just written");
        assert_eq!(read, snapshot, "{name}");
        assert!(report.complete, "{name}");
    }
}

#[test]
fn empty_snapshot_round_trips() {
    let text = to_text(&Snapshot::default());
    assert_eq!(
        text,
        "{\"blockpool_trace\":1,\"created_by\":\"blockpool 0.1.0\"}\n{\"end\":{\"events\":0,\"segments\":0}}\n"
    );
    let (read, _) = read_snapshot(text.as_bytes()).expect("reads");
    assert_eq!(read, Snapshot::default());
}

#[test]
fn keys_in_any_order_and_unknown_keys_are_accepted() {
    let text = concat!(
        "{\"future\":[1,{}],\"blockpool_trace\":1}\n",
        "{\"tags\":[\"a\"],\"context\":4,\"colour\":\"red\"}\n",
        "\n",
        "{\"time_us\":9,\"size\":512,\"addr\":4096,\"device\":2,\"event\":\"user_defined\",",
        "\"context\":4,\"extra\":null}\r\n"
    );
    let (read, report) = read_snapshot(text.as_bytes()).expect("reads");
    assert_eq!(
        read.events,
        [TraceEvent {
            context: ContextId(1),
            ..event(Action::Annotate, 2, 4096, 512, 9)
        }],
        "file id 4 becomes snapshot context 1; PyTorch's action name is accepted"
    );
    assert_eq!(read.contexts.tag_path(ContextId(1)), "a");
    assert!(!report.complete, "no end line");
}

#[test]
fn errors_name_the_line_and_the_problem() {
    let event = r#"{"event":"alloc","device":0,"addr":0,"size":512,"time_us":1}"#;
    let cases = [
        ("", "the trace is empty: expected a header line like {\"blockpool_trace\":1,...}".to_string()),
        ("{\"event\":\"alloc\"}\n", "line 1: not a blockpool trace: the first line must be a header like {\"blockpool_trace\":1,...}".into()),
        ("{\"blockpool_trace\":2}\n", "line 1: trace format version 2 is not supported: this blockpool reads version 1; read it with the blockpool that wrote it or a newer one".into()),
        (&format!("{HEADER}{event}\n{{\"event\":\"alloc\",\"device\":0,\"addr\":0,\"size\":512}}\n"), "line 3: event line has no `time_us` field".into()),
        (&format!("{HEADER}{{\"event\":\"malloc\",\"device\":0,\"addr\":0,\"size\":1,\"time_us\":1}}\n"), "line 2: `event` is \"malloc\"; expected an event action (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot, annotate)".into()),
        (&format!("{HEADER}{{\"event\":\"alloc\",\"device\":-1}}\n"), "line 2: invalid value: integer `-1`, expected u32 (column 28)".into()),
        (&format!("{HEADER}{event}\n{{\"event\":\"alloc\",,}}\n"), "line 3: key must be a string (column 18)".into()),
        (&format!("{HEADER}{{\"event\":\"alloc\",\"event\":\"alloc\"}}\n"), "line 2: duplicate field `event` (column 24)".into()),
        (&format!("{HEADER}[1,2]\n"), "line 2: expected a JSON object `{...}`, found `[` (column 1)".into()),
        (&format!("{HEADER}{{\"frames\":[1]}}\n"), "line 2: not a trace line: expected one of the keys `frame`, `context`, `event`, `segment` or `end`".into()),
        (&format!("{HEADER}{{\"context\":1,\"frames\":[5]}}\n"), "line 2: frame 5 is not defined by an earlier line".into()),
        (&format!("{HEADER}{{\"context\":1}}\n{{\"context\":1}}\n"), "line 3: context 1 is defined again (first on line 2)".into()),
        (&format!("{HEADER}{{\"frame\":0,\"name\":\"f\"}}\n"), "line 2: `frame` is \"0\"; expected an id of 1 or more (0 means none)".into()),
        (&format!("{HEADER}{{\"frame\":1}}\n"), "line 2: frame line has no `name` field".into()),
        (&format!("{HEADER}{{\"blockpool_trace\":1}}\n"), "line 2: `blockpool_trace` is \"1\"; expected a header only on line 1".into()),
        (&format!("{HEADER}{{\"end\":{{}}}}\n{event}\n"), "line 3: the trace ended on line 2, but more follows".into()),
        (&format!("{HEADER}{event}\n{{\"end\":{{\"events\":2}}}}\n"), "line 3: the end line counts 2 events but the trace holds 1; lines are missing".into()),
        (&format!("{HEADER}{{\"segment\":4096,\"device\":0,\"size\":1024,\"pool\":\"large\",\"blocks\":[[4096,512,0,\"inactive\",0]]}}\n"), "line 2: segment at 0x1000 on device 0: its blocks end at 0x1200 but the segment is 1024 bytes; its blocks must tile it exactly, lowest address first".into()),
        (&format!("{HEADER}{{\"segment\":4096,\"device\":0,\"size\":512,\"pool\":\"huge\",\"blocks\":[]}}\n"), "line 2: `pool` is \"huge\"; expected small or large".into()),
        (&format!("{HEADER}{{\"segment\":4096,\"device\":0,\"size\":512,\"pool\":\"small\",\"blocks\":[[4096,512,0,\"free\",0]]}}\n"), "line 2: `blocks` is \"free\"; expected active_allocated, active_pending_free or inactive".into()),
        (&format!("{HEADER}{{\"segment\":4096,\"device\":0,\"size\":512,\"pool\":\"small\",\"blocks\":[[4096,512,0,\"inactive\",3]]}}\n"), "line 2: context 3 is not defined by an earlier line".into()),
        (&format!("{HEADER}{{\"segment\":8192,\"device\":0,\"size\":512,\"pool\":\"small\",\"blocks\":[[8192,512,0,\"inactive\",0]]}}\n{{\"segment\":7680,\"device\":0,\"size\":1024,\"pool\":\"small\",\"blocks\":[[7680,1024,0,\"inactive\",0]]}}\n"), "line 2: segments at 0x1e00 and 0x2000 on device 0 overlap or are out of order".into()),
    ];
    for (text, expected) in cases {
        assert_eq!(read_err(text), expected, "reading {text:?}");
    }
}

#[test]
fn a_line_past_the_limit_is_refused_with_its_number() {
    let mut text = format!("{HEADER}{{\"context\":1,\"tags\":[\"").into_bytes();
    text.resize(text.len() + MAX_LINE_BYTES, b'a');
    text.extend_from_slice(b"\"]}\n");
    let err = read_snapshot(text.as_slice()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: longer than 16777216 bytes, the most a trace line may hold"
    );
    assert_eq!(err.line(), Some(2));
}

#[test]
fn a_torn_last_line_is_dropped_and_reported() {
    let text = to_text(&sample());
    let cut = text.rfind("{\"segment\"").expect("has segments") + 20;
    let (read, report) = read_snapshot(&text.as_bytes()[..cut]).expect("a torn line is no error");
    assert_eq!(read.segments.len(), 1, "the complete segment line is kept");
    assert_eq!(read.events, sample().events);
    assert_eq!((report.torn_line, report.complete), (Some(14), false));

    let whole = text.trim_end_matches('\n');
    let (read, report) = read_snapshot(whole.as_bytes()).expect("a last line without \\n reads");
    assert_eq!((read, report.torn_line), (sample(), None));

    let bad_inside = format!("{HEADER}{{\"event\":}}\n{{\"eve");
    assert_eq!(
        read_err(&bad_inside),
        "line 2: expected value (column 10)",
        "only the last line may be torn"
    );
}

/// Every prefix of a file reads (keeping exactly the complete lines) or fails with a typed
/// error on line 1; the same for gzip cut anywhere.
#[test]
fn a_file_cut_anywhere_reads_its_complete_lines() {
    let snapshot = sample();
    let text = to_text(&snapshot);
    let header_end = text.find('\n').expect("has lines") + 1;
    for cut in 0..text.len() {
        let prefix = &text.as_bytes()[..cut];
        match read_snapshot(prefix) {
            Ok((read, _)) => {
                let complete = text[..cut].rfind('\n').map_or(0, |i| i + 1);
                let expected = text[..complete].matches("\"event\"").count();
                assert!(
                    cut >= header_end - 1,
                    "cut {cut}: header incomplete but read"
                );
                assert!(
                    read.events.len() >= expected && read.events.len() <= expected + 1,
                    "cut {cut}: {} events read, {expected} complete",
                    read.events.len()
                );
                assert_eq!(read.events[..], snapshot.events[..read.events.len()]);
            }
            Err(e) => assert_eq!(e.line().unwrap_or(1), 1, "cut {cut}: {e}"),
        }
    }
    let compressed = gzip(text.as_bytes());
    for cut in 0..compressed.len() {
        match read_snapshot(&compressed[..cut]) {
            Ok((read, report)) => {
                assert_eq!(
                    read.events[..],
                    snapshot.events[..read.events.len()],
                    "cut {cut}"
                );
                if report.complete {
                    assert_eq!(read, snapshot, "cut {cut}: complete means all of it");
                } else {
                    assert!(report.gzip_cut_short, "cut {cut}: {report:?}");
                }
            }
            Err(e) => assert!(
                e.line().is_some() || matches!(e, JsonlError::Empty),
                "cut {cut}: {e}"
            ),
        }
    }
}

#[test]
fn gzip_cut_short_keeps_the_complete_lines() {
    let text = to_text(&sample());
    let compressed = gzip(text.as_bytes());
    // Cut off the trailer (CRC and length) and a little of the last block.
    let (read, report) = read_snapshot(&compressed[..compressed.len() - 12]).expect("reads");
    assert!(
        report.gzip_cut_short || report.torn_line.is_some(),
        "{report:?}"
    );
    assert!(!report.complete);
    assert_eq!(read.events, sample().events);
}

#[test]
fn the_writer_refuses_a_context_it_has_not_written() {
    let mut writer = TraceWriter::new(Vec::new(), &Header::new(None, None)).expect("in memory");
    let err = writer
        .event(&TraceEvent {
            context: ContextId(1),
            ..event(Action::Alloc, 0, 0, 512, 0)
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "context 1 was not written to this trace yet"
    );
    let again = writer.context(&Context::default()).expect("in memory");
    assert_eq!(
        (
            again,
            writer.context(&Context::default()).expect("in memory")
        ),
        (ContextId(1), ContextId(1))
    );
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let byte_like = prop_oneof![
        Just(b'\n'),
        Just(b'"'),
        Just(b'{'),
        Just(b'}'),
        Just(b','),
        Just(b'9'),
        any::<u8>()
    ];
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, bit)| Mutation::Flip(at, 1 << (bit % 8))),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), proptest::collection::vec(byte_like, 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<usize>(), 1..40usize).prop_map(|(at, len)| Mutation::Remove(at, len)),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    match mutation {
        Mutation::Flip(at, bit) => {
            let at = at % bytes.len();
            bytes[at] ^= bit;
        }
        Mutation::Truncate(at) => bytes.truncate(at % bytes.len()),
        Mutation::Insert(at, new) => {
            let at = at % bytes.len();
            bytes.splice(at..at, new.iter().copied());
        }
        Mutation::Remove(at, len) => {
            let at = at % bytes.len();
            let end = (at + len).min(bytes.len());
            bytes.drain(at..end);
        }
    }
}

proptest! {
    /// Hostile input never panics: every mutated file reads or fails with an error that
    /// names a line (or says the input is empty).
    #[test]
    fn mutated_files_never_panic(mutations in proptest::collection::vec(mutation(), 1..6), zip in any::<bool>()) {
        let mut bytes = to_text(&sample()).into_bytes();
        if zip {
            bytes = gzip(&bytes);
        }
        for m in &mutations {
            apply(&mut bytes, m);
        }
        if let Err(e) = read_snapshot(bytes.as_slice()) {
            prop_assert!(
                e.line().is_some() || matches!(e, JsonlError::Empty),
                "untyped failure: {e}"
            );
            prop_assert!(!e.to_string().is_empty());
        }
    }
}
