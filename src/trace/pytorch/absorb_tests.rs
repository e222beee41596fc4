//! The streaming read of PyTorch pickles ([`read_pytorch_pickle`]) against the plain one
//! (the whole tree, then the import): on every file it takes, the same snapshot; on every file
//! it cannot take the same way (shared or changed dicts, entries out of place, malformed
//! entries), `None`, so the caller reads it the plain way.

use std::sync::Arc;

use super::interop_tests::{dict, int, list, pytorch_file, s, sample};
use super::{
    read_pytorch_pickle, snapshot_from_owned_pytorch_value, snapshot_to_pytorch_value,
    taken_by_stream, Streamed,
};
use crate::trace::limits::ImportLimits;
use crate::trace::pickle::{read, write, PickleError, ReadLimits, Value};
use crate::trace::Snapshot;

/// The streaming read of `bytes`: `None` when it leaves the file to the whole read.
fn streamed(bytes: &[u8]) -> Option<Snapshot> {
    let limits = (ReadLimits::default(), ImportLimits::default());
    match read_pytorch_pickle(&mut &bytes[..], &limits.0, &limits.1) {
        Streamed::Read(snapshot) => Some(snapshot),
        Streamed::Again => None,
        Streamed::Failed(e) => panic!("the streaming read failed: {e}"),
    }
}

/// The plain read of `bytes`.
fn plain(bytes: &[u8]) -> Result<Snapshot, String> {
    let value = read(bytes, &ReadLimits::default()).map_err(|e| e.to_string())?;
    snapshot_from_owned_pytorch_value(value, &ImportLimits::default()).map_err(|e| e.to_string())
}

/// `value` pickled as Python and our exporter write it.
fn pickled(value: &Value) -> Vec<u8> {
    write(value)
}

/// Asserts that the streaming read takes `bytes` and gives what the plain read gives.
fn assert_same(bytes: &[u8]) -> Snapshot {
    let expected = plain(bytes).expect("the plain read takes it");
    let got = streamed(bytes).expect("the streaming read takes it");
    assert_eq!(got, expected);
    got
}

#[test]
fn the_projects_pytorch_fixtures_read_the_same_both_ways() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/allocator-tests/fixtures/pytorch-snapshots"
    );
    let mut read = 0;
    for entry in std::fs::read_dir(dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "pickle") {
            let bytes = std::fs::read(&path).expect("reads");
            let snapshot = assert_same(&bytes);
            assert!(!snapshot.events.is_empty() || !snapshot.segments.is_empty());
            // Every entry and segment is taken out of the tree, but the segments of the one
            // legacy file (blocks with a `history` and no address), which the tree keeps.
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let legacy = name.starts_with("Yiyi_");
            let entries = snapshot.events.len() - snapshot.pytorch.inserted_events.len();
            let segments = if legacy { 0 } else { snapshot.segments.len() };
            assert_eq!(taken_by_stream(&bytes), Some((entries, segments)), "{name}");
            read += 1;
        }
    }
    assert_eq!(read, 3);
}

#[test]
fn pytorchs_keys_and_ours_read_the_same_both_ways() {
    // user_metadata, annotations, two devices and settings.
    let snapshot = assert_same(&pickled(&pytorch_file()));
    assert_eq!(snapshot.events.len(), 5);
    // blockpool's own keys: contexts by table, block sizes, requests, tags.
    let exported = snapshot_to_pytorch_value(&sample()).expect("exports");
    assert_eq!(assert_same(&pickled(&exported)), sample());
}

#[test]
fn entries_with_compile_context_device_free_and_no_time_read_the_same() {
    let frame = dict(vec![
        ("filename", s("a.py")),
        ("line", int(-1)),
        ("name", s("f")),
    ]);
    let entry = |action: &str, extra: Vec<(&str, Value)>| {
        let mut pairs = vec![
            ("action", s(action)),
            ("size", int(512)),
            ("stream", int(7)),
        ];
        pairs.extend(extra);
        dict(pairs)
    };
    let file = dict(vec![
        ("segments", list(vec![])),
        (
            "device_traces",
            list(vec![
                list(vec![]),
                list(vec![
                    entry(
                        "alloc",
                        vec![
                            ("addr", int(4096)),
                            ("frames", list(vec![frame.clone(), frame])),
                            ("compile_context", s("N/A")),
                        ],
                    ),
                    entry("oom", vec![("device_free", int(1 << 40))]),
                    entry(
                        "free_completed",
                        vec![("addr", int(4096)), ("other", int(1))],
                    ),
                ]),
            ]),
        ),
    ]);
    let snapshot = assert_same(&pickled(&file));
    assert_eq!(snapshot.events.len(), 3);
    assert_eq!(snapshot.pytorch.compile_contexts, [(0, Arc::from("N/A"))]);
}

#[test]
fn what_the_stream_cannot_take_the_same_way_is_left_to_the_plain_read() {
    let entry = dict(vec![
        ("action", s("alloc")),
        ("addr", int(1)),
        ("size", int(2)),
        ("stream", int(0)),
    ]);
    let file = |traces: Value| dict(vec![("segments", list(vec![])), ("device_traces", traces)]);
    // One entry dict twice: the plain read refuses it; the stream gives up.
    let twice = pickled(&file(list(vec![list(vec![entry.clone(), entry.clone()])])));
    assert!(plain(&twice).is_err());
    assert_eq!(streamed(&twice), None);
    // One trace under two devices: the plain read copies it.
    let trace = list(vec![entry.clone()]);
    let shared = pickled(&file(list(vec![trace.clone(), trace])));
    assert_eq!(plain(&shared).expect("reads").events.len(), 2);
    assert_eq!(streamed(&shared), None);
    // An entry and something else in one trace.
    let mixed = pickled(&file(list(vec![list(vec![entry.clone(), int(3)])])));
    assert!(plain(&mixed).is_err());
    assert_eq!(streamed(&mixed), None);
    // An unknown action.
    let bad = dict(vec![
        ("action", s("teleport")),
        ("addr", int(1)),
        ("size", int(2)),
        ("stream", int(0)),
    ]);
    let unknown = pickled(&file(list(vec![list(vec![bad])])));
    assert!(plain(&unknown).is_err());
    assert_eq!(streamed(&unknown), None);
    // Entries somewhere else than device_traces.
    let elsewhere = pickled(&dict(vec![
        ("segments", list(vec![])),
        ("device_traces", list(vec![])),
        ("log", list(vec![entry])),
    ]));
    assert_eq!(plain(&elsewhere).expect("reads").events.len(), 0);
    assert_eq!(streamed(&elsewhere), None);
}

/// Pickle opcodes for hand-made files.
const PROTO_4: &[u8] = b"\x80\x04";
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const MARK: u8 = b'(';
const SETITEMS: u8 = b'u';
const APPENDS: u8 = b'e';
const MEMOIZE: u8 = 0x94;
const BINGET: u8 = b'h';
const STOP: u8 = b'.';

/// A `SHORT_BINUNICODE`.
fn text(out: &mut Vec<u8>, text: &str) {
    out.push(0x8c);
    out.push(u8::try_from(text.len()).expect("short"));
    out.extend_from_slice(text.as_bytes());
}

/// A `BININT1`.
fn small(out: &mut Vec<u8>, n: u8) {
    out.extend_from_slice(&[b'K', n]);
}

/// A file whose one entry's frame dict (memo 4) is changed after the entry used it:
/// `extra` runs inside the root dict's last `SETITEMS`, after `device_traces`.
fn file_with_frame_then(extra: &[u8]) -> Vec<u8> {
    let mut out = PROTO_4.to_vec();
    out.extend_from_slice(&[EMPTY_DICT, MEMOIZE, MARK]); // root: memo 0
    text(&mut out, "segments");
    out.push(EMPTY_LIST);
    text(&mut out, "device_traces");
    out.extend_from_slice(&[EMPTY_LIST, MEMOIZE, MARK, EMPTY_LIST, MEMOIZE, MARK]); // 1, 2
    out.extend_from_slice(&[EMPTY_DICT, MEMOIZE, MARK]); // the entry: memo 3
    for (key, value) in [("action", None), ("addr", Some(1)), ("size", Some(2))] {
        text(&mut out, key);
        match value {
            Some(n) => small(&mut out, n),
            None => text(&mut out, "alloc"),
        }
    }
    text(&mut out, "stream");
    small(&mut out, 0);
    text(&mut out, "frames");
    out.extend_from_slice(&[EMPTY_LIST, MARK, EMPTY_DICT, MEMOIZE, MARK]); // the frame: memo 4
    text(&mut out, "filename");
    text(&mut out, "a.py");
    text(&mut out, "line");
    small(&mut out, 7);
    text(&mut out, "name");
    text(&mut out, "f");
    out.extend_from_slice(&[SETITEMS, APPENDS, SETITEMS, APPENDS, APPENDS]);
    out.extend_from_slice(extra);
    out.extend_from_slice(&[SETITEMS, STOP]);
    out
}

#[test]
fn a_pickle_that_fails_either_way_fails_streaming_without_a_second_read() {
    let limits = ReadLimits {
        max_items: 10,
        ..ReadLimits::default()
    };
    let bytes = pickled(&pytorch_file());
    let streamed = read_pytorch_pickle(&mut &bytes[..], &limits, &ImportLimits::default());
    assert!(
        matches!(
            streamed,
            Streamed::Failed(PickleError::TooManyItems { limit: 10, .. })
        ),
        "{streamed:?}"
    );
    // Cut short: truncated however it is read.
    let cut = &bytes[..bytes.len() / 2];
    let streamed = read_pytorch_pickle(
        &mut &cut[..],
        &ReadLimits::default(),
        &ImportLimits::default(),
    );
    assert!(matches!(streamed, Streamed::Failed(_)), "{streamed:?}");
    assert!(plain(cut).is_err());
}

#[test]
fn a_frame_changed_after_its_entry_is_read_as_the_file_leaves_it() {
    // Unchanged, the stream takes it.
    let same = file_with_frame_then(&[]);
    assert_eq!(assert_same(&same).contexts.len(), 1);
    // "x": the frame again, its line set to 9.
    let mut change = Vec::new();
    text(&mut change, "x");
    change.extend_from_slice(&[BINGET, 4, MARK]);
    text(&mut change, "line");
    small(&mut change, 9);
    change.push(SETITEMS);
    let changed = file_with_frame_then(&change);
    let expected = plain(&changed).expect("reads");
    let context = expected
        .contexts
        .get(expected.events[0].context)
        .expect("context");
    assert_eq!(context.frames[0].line, 9);
    assert_eq!(streamed(&changed), None);
    // "x": the entry again, which the stream let go of.
    let mut again = Vec::new();
    text(&mut again, "x");
    again.extend_from_slice(&[BINGET, 3]);
    let again = file_with_frame_then(&again);
    assert!(plain(&again).is_ok());
    assert_eq!(streamed(&again), None);
}

/// A block dict at `address`, with `frames` when given.
fn block(address: i64, size: i64, state: &str, frames: Option<Value>) -> Value {
    let mut pairs = vec![
        ("address", int(address)),
        ("size", int(size)),
        ("state", s(state)),
    ];
    pairs.extend(frames.map(|frames| ("frames", frames)));
    dict(pairs)
}

/// A segment dict at `address` with `blocks`, and `extra` keys.
fn segment(address: i64, blocks: Value, extra: Vec<(&str, Value)>) -> Value {
    let mut pairs = vec![
        ("device", int(0)),
        ("address", int(address)),
        ("total_size", int(4096)),
        ("stream", int(0)),
        ("segment_type", s("small")),
        ("allocated_size", int(1024)),
        ("active_size", int(1024)),
        ("requested_size", int(1000)),
        ("blocks", blocks),
    ];
    pairs.extend(extra);
    dict(pairs)
}

/// A snapshot of `segments` and one trace of `entries`.
fn file_of(segments: Value, entries: Vec<Value>) -> Vec<u8> {
    pickled(&dict(vec![
        ("segments", segments),
        ("device_traces", list(vec![list(entries)])),
    ]))
}

#[test]
fn segments_and_their_blocks_are_taken_and_read_the_same() {
    let frame = dict(vec![
        ("filename", s("a.py")),
        ("line", int(3)),
        ("name", s("f")),
    ]);
    let frames = list(vec![frame.clone()]);
    let first = segment(
        4096,
        list(vec![
            block(4096, 1024, "active_allocated", Some(frames.clone())),
            block(5120, 3072, "inactive", Some(list(vec![]))),
        ]),
        vec![("frames", list(vec![frame.clone(), frame]))],
    );
    let pool = Value::Tuple(Arc::new(vec![int(1), int(2)]));
    let second = segment(
        1 << 20,
        list(vec![dict(vec![
            ("address", int(1 << 20)),
            ("size", int(4096)),
            ("requested_size", int(4000)),
            ("state", s("active_pending_free")),
        ])]),
        vec![
            ("is_expandable", Value::Bool(true)),
            ("segment_pool_id", pool),
            ("segment_type", s("large")),
        ],
    );
    let entry = dict(vec![
        ("action", s("alloc")),
        ("addr", int(4096)),
        ("size", int(1000)),
        ("stream", int(0)),
        ("frames", frames),
    ]);
    let bytes = file_of(list(vec![second, first]), vec![entry]);
    let snapshot = assert_same(&bytes);
    assert_eq!(taken_by_stream(&bytes), Some((1, 2)));
    assert_eq!(snapshot.segments.len(), 2);
    assert_eq!(snapshot.segments[0].blocks.len(), 2);
    assert_eq!(snapshot.pytorch.segment_pools.len(), 1);
    // The allocated block and the entry share one context.
    assert_eq!(
        snapshot.segments[0].blocks[0].context,
        snapshot.events[0].context
    );
    // A segment without blocks.
    let empty = file_of(list(vec![segment(4096, list(vec![]), vec![])]), vec![]);
    assert_eq!(assert_same(&empty).segments[0].blocks.len(), 0);
    assert_eq!(taken_by_stream(&empty), Some((0, 1)));
    // blockpool's own export: contexts by its table, for segments and blocks alike.
    let exported = pickled(&snapshot_to_pytorch_value(&sample()).expect("exports"));
    assert_eq!(assert_same(&exported), sample());
    let taken = taken_by_stream(&exported).expect("taken");
    assert_eq!(taken.1, sample().segments.len());
}

#[test]
fn segments_the_stream_cannot_take_the_same_way_are_left_to_the_plain_read() {
    let a_block = block(4096, 4096, "inactive", None);
    // One block dict in two segments: the plain read refuses it.
    let shared_block = file_of(
        list(vec![
            segment(4096, list(vec![a_block.clone()]), vec![]),
            segment(8192, list(vec![a_block.clone()]), vec![]),
        ]),
        vec![],
    );
    assert!(plain(&shared_block).is_err());
    assert_eq!(streamed(&shared_block), None);
    // One blocks list in two segments: the plain read copies it.
    let blocks = list(vec![a_block.clone()]);
    let shared_list = file_of(
        list(vec![
            segment(4096, blocks.clone(), vec![]),
            segment(8192, blocks, vec![]),
        ]),
        vec![],
    );
    assert_eq!(plain(&shared_list).expect("reads").segments.len(), 2);
    assert_eq!(streamed(&shared_list), None);
    // Blocks that no segment holds.
    let loose = pickled(&dict(vec![
        ("segments", list(vec![])),
        ("device_traces", list(vec![])),
        ("log", list(vec![a_block.clone()])),
    ]));
    assert!(plain(&loose).is_ok());
    assert_eq!(streamed(&loose), None);
    // The segments list held twice: the plain read reads one of them.
    let segments = list(vec![segment(4096, list(vec![a_block.clone()]), vec![])]);
    let twice = pickled(&dict(vec![
        ("segments", segments.clone()),
        ("device_traces", list(vec![])),
        ("copy", segments),
    ]));
    assert_eq!(plain(&twice).expect("reads").segments.len(), 1);
    assert_eq!(streamed(&twice), None);
    // An unknown segment type or block state, a device past u32.
    for (key, value) in [
        ("segment_type", s("huge")),
        ("device", int(1 << 40)),
        ("segment_pool_id", list(vec![int(1)])),
        ("is_expandable", int(1)),
    ] {
        let bad = segment(4096, list(vec![a_block.clone()]), vec![(key, value)]);
        let bytes = file_of(list(vec![bad]), vec![]);
        assert!(plain(&bytes).is_err(), "{key}");
        assert_eq!(streamed(&bytes), None, "{key}");
    }
    let bad_state = block(4096, 4096, "lost", None);
    let bytes = file_of(
        list(vec![segment(4096, list(vec![bad_state]), vec![])]),
        vec![],
    );
    assert!(plain(&bytes).is_err());
    assert_eq!(streamed(&bytes), None);
    // A legacy block (no address) after a segment taken: the list mixes the two.
    let legacy = dict(vec![("size", int(4096)), ("state", s("inactive"))]);
    let mixed = file_of(
        list(vec![
            segment(4096, list(vec![a_block]), vec![]),
            segment(8192, list(vec![legacy]), vec![]),
        ]),
        vec![],
    );
    assert_eq!(plain(&mixed).expect("reads").segments.len(), 2);
    assert_eq!(streamed(&mixed), None);
}
