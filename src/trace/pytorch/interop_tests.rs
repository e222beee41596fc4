//! Unit tests of the conversion between [`Snapshot`] and PyTorch's schema on hand-built
//! snapshots: exact keys and values written, exact round trips, and what PyTorch's own files
//! turn into.

use std::sync::Arc;

use super::{
    load_pytorch_snapshot_as_snapshot, snapshot_from_pytorch_value, snapshot_from_value,
    snapshot_to_pytorch_value, write_pytorch_snapshot, ExportError, SnapshotError, TAG_FILENAME,
};
use crate::backend::StreamId;
use crate::pool::PoolKind;
use crate::trace::pickle::Value;
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{Action, BlockState, Context, ContextId, Contexts, Frame, Snapshot, TraceEvent};

const BASE: u64 = 0x7f00_0000_0000;
const ORIGIN: u64 = 1_700_000_000_000_000;

/// A `str` value (also for `frame_line_tests.rs`).
pub(super) fn s(text: &str) -> Value {
    Value::Str(text.into())
}

/// An `int` value.
pub(super) fn int(n: i64) -> Value {
    Value::Int(n)
}

/// A `list` value.
pub(super) fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

/// A `dict` with `str` keys.
pub(super) fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(Arc::new(
        pairs.into_iter().map(|(k, v)| (s(k), v)).collect(),
    ))
}

/// The value under `key` of a dict.
fn get<'v>(value: &'v Value, key: &str) -> &'v Value {
    match value {
        Value::Dict(pairs) => pairs
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(name) if &**name == key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no key {key:?} in {value:?}")),
        other => panic!("{other:?} is not a dict"),
    }
}

fn has(value: &Value, key: &str) -> bool {
    matches!(value, Value::Dict(pairs)
        if pairs.iter().any(|(k, _)| matches!(k, Value::Str(name) if &**name == key)))
}

fn items(value: &Value) -> &[Value] {
    match value {
        Value::List(items) => items,
        other => panic!("{other:?} is not a list"),
    }
}

fn keys(value: &Value) -> Vec<String> {
    match value {
        Value::Dict(pairs) => pairs
            .iter()
            .map(|(k, _)| match k {
                Value::Str(k) => k.to_string(),
                other => panic!("key {other:?}"),
            })
            .collect(),
        other => panic!("{other:?} is not a dict"),
    }
}

fn event(action: Action, device: u32, addr: u64, size: u64, requested: u64) -> TraceEvent {
    TraceEvent {
        action,
        device,
        stream: StreamId::from_raw(7),
        addr,
        size,
        requested,
        time_us: 0,
        context: ContextId::NONE,
    }
}

/// Two devices, tags and frames, every kind of size, and a block address past `i64::MAX`.
pub(super) fn sample() -> Snapshot {
    let frame = Frame {
        name: "train_step".into(),
        filename: "train.rs".into(),
        line: 42,
    };
    let contexts: Contexts = [
        Context {
            tags: vec!["layer3".into(), "attn".into()],
            frames: vec![frame.clone()],
        },
        Context::default(),
        Context {
            tags: vec!["opt".into()],
            frames: Vec::new(),
        },
    ]
    .into_iter()
    .collect();
    let high = 0xffff_ffff_ffff_0000_u64;
    let segments = vec![
        Segment {
            device: 0,
            address: BASE,
            size: 2 << 20,
            stream: StreamId::from_raw(7),
            pool: PoolKind::Small,
            expandable: true,
            context: ContextId(1),
            blocks: vec![
                Block {
                    address: BASE,
                    size: 1024,
                    requested: 1000,
                    state: BlockState::ActiveAllocated,
                    context: ContextId(1),
                },
                Block {
                    address: BASE + 1024,
                    size: (2 << 20) - 1024,
                    requested: 0,
                    state: BlockState::Inactive,
                    context: ContextId::NONE,
                },
            ],
        },
        Segment {
            device: 1,
            address: high,
            size: 0x1000,
            stream: StreamId::DEFAULT,
            pool: PoolKind::Large,
            expandable: false,
            context: ContextId::NONE,
            blocks: vec![Block {
                address: high,
                size: 0x1000,
                requested: 0x1000,
                state: BlockState::ActivePendingFree,
                context: ContextId(2),
            }],
        },
    ];
    let mut events = vec![
        event(Action::SegmentAlloc, 0, BASE, 2 << 20, 0),
        event(Action::Annotate, 0, 0, 0, 0),
        event(Action::Alloc, 0, BASE, 1024, 1000),
        event(Action::SegmentAlloc, 1, high, 0x1000, 0),
        event(Action::Alloc, 1, high, 0x1000, 0x1000),
        event(Action::Oom, 0, 24 << 20, 30 << 20, 0),
        event(Action::SegmentMap, 1, high, 0x1000, 5),
    ];
    for (i, e) in events.iter_mut().enumerate() {
        e.time_us = 10 * i as u64;
    }
    events[1].context = ContextId(1);
    events[2].context = ContextId(1);
    events[4].context = ContextId(3);
    Snapshot {
        segments,
        events,
        contexts,
        allocator_config: Some("expandable_segments:True,max_split_size_mb:128".into()),
        time_origin_unix_us: Some(ORIGIN),
        pytorch: Default::default(),
    }
}

#[test]
fn export_writes_pytorchs_keys_and_meanings() {
    let value = snapshot_to_pytorch_value(&sample()).expect("two devices export");
    assert_eq!(
        keys(&value),
        [
            "segments",
            "device_traces",
            "allocator_settings",
            "external_annotations",
            "blockpool"
        ]
    );
    let segment = &items(get(&value, "segments"))[0];
    assert_eq!(
        keys(segment),
        [
            "device",
            "address",
            "total_size",
            "allocated_size",
            "active_size",
            "requested_size",
            "stream",
            "segment_type",
            "segment_pool_id",
            "is_expandable",
            "frames",
            "blocks",
            "blockpool_context"
        ]
    );
    assert_eq!(get(segment, "allocated_size"), &int(1024));
    assert_eq!(get(segment, "requested_size"), &int(1000));
    assert_eq!(get(segment, "segment_type"), &s("small"));
    assert_eq!(get(segment, "is_expandable"), &Value::Bool(true));
    let block = &items(get(segment, "blocks"))[0];
    assert_eq!(
        keys(block),
        [
            "address",
            "size",
            "requested_size",
            "state",
            "frames",
            "blockpool_context"
        ]
    );
    let high_segment = &items(get(&value, "segments"))[1];
    assert_eq!(
        get(high_segment, "is_expandable"),
        &Value::Bool(false),
        "a fixed segment under an expandable configuration (one a replay adopted)"
    );
    let high_block = &items(get(high_segment, "blocks"))[0];
    assert!(
        matches!(get(high_block, "address"), Value::BigInt(bytes) if bytes.len() == 9),
        "an address past i64::MAX is a positive LONG"
    );

    let traces = items(get(&value, "device_traces"));
    assert_eq!(traces.len(), 2, "one trace list per device");
    let device0 = items(&traces[0]);
    let annotate = &device0[1];
    assert_eq!(get(annotate, "action"), &s("user_defined"));
    assert_eq!(get(annotate, "user_metadata"), &s("layer3/attn"));
    let frames = items(get(annotate, "frames"));
    let names: Vec<&Value> = frames.iter().map(|f| get(f, "name")).collect();
    assert_eq!(names, [&s("train_step"), &s("attn"), &s("layer3")]);
    assert_eq!(get(&frames[2], "filename"), &s(TAG_FILENAME));
    let alloc = &device0[2];
    assert_eq!(get(alloc, "size"), &int(1000), "alloc size is the request");
    assert_eq!(get(alloc, "blockpool_block_size"), &int(1024));
    assert_eq!(get(alloc, "time_us"), &int(ORIGIN as i64 + 20));
    assert_eq!(get(alloc, "stream"), &int(7));
    match (get(annotate, "frames"), get(alloc, "frames")) {
        (Value::List(a), Value::List(b)) => {
            assert!(Arc::ptr_eq(a, b), "one context is one shared frame list")
        }
        other => panic!("{other:?}"),
    }
    let oom = &device0[3];
    assert_eq!(get(oom, "device_free"), &int(24 << 20));
    assert_eq!(get(oom, "addr"), &int(24 << 20));
    assert!(!has(oom, "blockpool_requested") && !has(oom, "blockpool_context"));
    let map = &items(&traces[1])[2];
    assert_eq!(get(map, "blockpool_requested"), &int(5));
    assert_eq!(get(&items(&traces[1])[1], "user_metadata"), &s("opt"));
}

#[test]
fn exported_value_reads_back_as_the_same_snapshot() {
    let snapshot = sample();
    let value = snapshot_to_pytorch_value(&snapshot).expect("exports");
    let back = snapshot_from_pytorch_value(&value).expect("reads back");
    assert_eq!(back, snapshot);
    assert_eq!(back.validate(), Ok(()));

    let mut bytes = Vec::new();
    write_pytorch_snapshot(&snapshot, &mut bytes).expect("writes to memory");
    assert_eq!(load_pytorch_snapshot_as_snapshot(&bytes), Ok(snapshot));
}

#[test]
fn a_snapshot_without_time_origin_or_config_round_trips() {
    let mut snapshot = sample();
    snapshot.time_origin_unix_us = None;
    snapshot.allocator_config = None;
    let value = snapshot_to_pytorch_value(&snapshot).expect("exports");
    assert!(!has(&value, "allocator_settings"));
    let alloc = &items(&items(get(&value, "device_traces"))[0])[2];
    assert_eq!(get(alloc, "time_us"), &int(20), "times stay relative");
    assert_eq!(snapshot_from_pytorch_value(&value), Ok(snapshot));

    let empty = Snapshot::default();
    let value = snapshot_to_pytorch_value(&empty).expect("exports");
    assert!(items(get(&value, "device_traces")).is_empty());
    assert_eq!(snapshot_from_pytorch_value(&value), Ok(empty));
}

#[test]
fn a_device_index_past_the_limit_is_refused() {
    let mut snapshot = sample();
    snapshot.events[0].device = 70_000;
    assert_eq!(
        snapshot_to_pytorch_value(&snapshot).unwrap_err(),
        ExportError::DeviceOutOfRange {
            device: 70_000,
            max: 65_535
        }
    );
    let error = write_pytorch_snapshot(&snapshot, Vec::new()).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn a_context_id_past_the_table_names_its_place() {
    let value = snapshot_to_pytorch_value(&sample()).expect("exports");
    // Point the first block's context past the table of three.
    let Value::Dict(root) = &value else { panic!() };
    let mut root = (**root).clone();
    let segments = items(&root[0].1);
    let Value::Dict(segment) = &segments[0] else {
        panic!()
    };
    let mut segment = (**segment).clone();
    let blocks = items(&segment[11].1);
    let Value::Dict(block) = &blocks[0] else {
        panic!()
    };
    let mut block = (**block).clone();
    block[5].1 = int(9);
    let mut blocks = blocks.to_vec();
    blocks[0] = Value::Dict(Arc::new(block));
    segment[11].1 = list(blocks);
    let mut segments = segments.to_vec();
    segments[0] = Value::Dict(Arc::new(segment));
    root[0].1 = list(segments);
    let error = snapshot_from_pytorch_value(&Value::Dict(Arc::new(root))).unwrap_err();
    assert_eq!(
        error.to_string(),
        "segments[0].blocks[0].blockpool_context: expected an id of blockpool's context \
         table, found 9 with 3 contexts"
    );
}

/// A file as PyTorch writes it: shared frames, `user_metadata`, an inactive block with stale
/// frames, an external annotation, and traces on two devices.
pub(super) fn pytorch_file() -> Value {
    let frame = dict(vec![
        ("name", s("forward")),
        ("filename", s("model.py")),
        ("line", int(12)),
    ]);
    let frames = list(vec![frame]);
    let segment = dict(vec![
        ("device", int(0)),
        ("address", int(BASE as i64)),
        ("total_size", int(4096)),
        ("allocated_size", int(512)),
        ("active_size", int(512)),
        ("requested_size", int(500)),
        ("stream", int(0)),
        ("segment_type", s("large")),
        ("frames", frames.clone()),
        (
            "blocks",
            list(vec![
                dict(vec![
                    ("address", int(BASE as i64)),
                    ("size", int(512)),
                    ("requested_size", int(500)),
                    ("state", s("active_allocated")),
                    ("frames", frames.clone()),
                ]),
                dict(vec![
                    ("address", int(BASE as i64 + 512)),
                    ("size", int(3584)),
                    ("requested_size", int(3000)),
                    ("state", s("inactive")),
                    ("frames", frames.clone()),
                ]),
            ]),
        ),
    ]);
    let entry = |action: &str, size: i64, time: i64, metadata: &str| {
        dict(vec![
            ("action", s(action)),
            ("addr", int(BASE as i64)),
            ("size", int(size)),
            ("stream", int(0)),
            ("time_us", int(ORIGIN as i64 + time)),
            ("frames", frames.clone()),
            ("user_metadata", s(metadata)),
        ])
    };
    dict(vec![
        ("segments", list(vec![segment])),
        (
            "device_traces",
            list(vec![
                list(vec![
                    entry("alloc", 500, 5, ""),
                    entry("free_requested", 500, 30, ""),
                ]),
                list(vec![entry("alloc", 100, 0, "warmup")]),
            ]),
        ),
        (
            "allocator_settings",
            dict(vec![("PYTORCH_CUDA_ALLOC_CONF", s("max_split_size_mb:64"))]),
        ),
        (
            "external_annotations",
            list(vec![
                dict(vec![
                    ("stage", s("START")),
                    ("name", s("Optimizer.step")),
                    ("device", int(0)),
                    ("time_us", int(ORIGIN as i64 + 20)),
                ]),
                dict(vec![
                    ("stage", s("END")),
                    ("name", s("Optimizer.step")),
                    ("device", int(0)),
                    ("time_us", int(ORIGIN as i64 + 25)),
                ]),
            ]),
        ),
    ])
}

#[test]
fn pytorchs_file_becomes_a_time_ordered_snapshot() {
    let value = pytorch_file();
    let snapshot = snapshot_from_pytorch_value(&value).expect("imports");
    assert_eq!(snapshot.time_origin_unix_us, Some(ORIGIN));
    assert_eq!(
        snapshot.allocator_config.as_deref(),
        Some("max_split_size_mb:64")
    );
    let shape: Vec<(Action, u32, u64, u64, u64)> = snapshot
        .events
        .iter()
        .map(|e| (e.action, e.device, e.size, e.requested, e.time_us))
        .collect();
    assert_eq!(
        shape,
        [
            (Action::Alloc, 1, 512, 100, 0),
            (Action::Alloc, 0, 512, 500, 5),
            (Action::Annotate, 0, 0, 0, 20),
            (Action::Annotate, 0, 0, 0, 25),
            (Action::FreeRequested, 0, 512, 500, 30),
        ],
        "devices merged by time; block events' requested is PyTorch's request, their size \
         that request rounded to 512 bytes as the allocator rounds it"
    );
    let forward = Frame {
        name: "forward".into(),
        filename: "model.py".into(),
        line: 12,
    };
    let tags = |id: ContextId| snapshot.contexts.get(id).map(|c| c.tags.clone());
    assert_eq!(
        tags(snapshot.events[0].context),
        Some(vec!["warmup".into()])
    );
    assert_eq!(
        tags(snapshot.events[2].context),
        Some(vec!["Optimizer.step".into()]),
        "a START pushes the range's name on the device's tag stack"
    );
    assert_eq!(
        tags(snapshot.events[3].context),
        Some(vec![]),
        "its END pops it"
    );
    let shared = snapshot.events[1].context;
    assert_eq!(snapshot.events[4].context, shared);
    assert_eq!(snapshot.segments[0].context, shared);
    assert_eq!(
        snapshot.contexts.get(shared),
        Some(&Context {
            tags: Vec::new(),
            frames: vec![forward]
        })
    );
    assert_eq!(
        snapshot.contexts.len(),
        4,
        "frames, frames+warmup, the range open, the empty stack after it"
    );
    let blocks = &snapshot.segments[0].blocks;
    assert_eq!((blocks[0].requested, blocks[0].context), (500, shared));
    assert_eq!(
        (blocks[1].requested, blocks[1].context),
        (0, ContextId::NONE),
        "an inactive block keeps no request and no context"
    );
    assert_eq!(snapshot.validate(), Ok(()));

    // The typed model alone cannot see user_metadata.
    let typed = snapshot_from_value(&value).expect("typed import");
    let plain = Snapshot::from(&typed);
    assert_eq!(plain.events.len(), 5);
    assert_eq!(
        plain.contexts.get(plain.events[0].context),
        snapshot.contexts.get(shared)
    );

    // Exported and read back, it is the same Snapshot.
    let again = snapshot_to_pytorch_value(&snapshot).expect("exports");
    assert_eq!(snapshot_from_pytorch_value(&again), Ok(snapshot));
}

#[test]
fn a_wrongly_typed_user_metadata_is_an_error_with_its_path() {
    let value = dict(vec![
        ("segments", list(Vec::new())),
        (
            "device_traces",
            list(vec![list(vec![dict(vec![
                ("action", s("alloc")),
                ("addr", int(0)),
                ("size", int(1)),
                ("stream", int(0)),
                ("user_metadata", int(3)),
            ])])]),
        ),
    ]);
    assert_eq!(
        snapshot_from_pytorch_value(&value),
        Err(SnapshotError::WrongType {
            path: "device_traces[0][0].user_metadata".into(),
            expected: "a str",
            found: "int"
        })
    );
}

#[test]
fn inserted_annotations_take_no_index_and_export_back_to_external_annotations() {
    let snapshot = snapshot_from_pytorch_value(&pytorch_file()).expect("imports");
    assert_eq!(
        snapshot.pytorch.inserted_events,
        [2, 3],
        "the two external annotations, merged between device 0's entries"
    );
    let numbers = snapshot.event_numbers(0);
    let got: Vec<Option<usize>> = (0..numbers.len()).map(|p| numbers.number(p)).collect();
    assert_eq!(
        got,
        [Some(0), None, None, Some(1)],
        "device 0's entries keep their device_traces indices"
    );
    assert_eq!(numbers.label(2), "annotation after event 0");
    assert_eq!(snapshot.event_numbers(1).number(0), Some(0));

    let exported = snapshot_to_pytorch_value(&snapshot).expect("exports");
    let traces = items(get(&exported, "device_traces"));
    assert_eq!(
        items(&traces[0]).len(),
        2,
        "inserted annotations are not written into device_traces, where they would shift the \
         indices"
    );
    let annotations: Vec<(String, String, i64)> = items(get(&exported, "external_annotations"))
        .iter()
        .map(
            |a| match (get(a, "stage"), get(a, "name"), get(a, "time_us")) {
                (Value::Str(stage), Value::Str(name), Value::Int(t)) => {
                    (stage.to_string(), name.to_string(), t - ORIGIN as i64)
                }
                other => panic!("an annotation of strings and a time, got {other:?}"),
            },
        )
        .collect();
    assert_eq!(
        annotations,
        [
            ("START".into(), "Optimizer.step".into(), 20),
            ("END".into(), "Optimizer.step".into(), 25)
        ]
    );

    // Through JSON Lines and back to PyTorch's schema, the numbers stay.
    let mut lines = Vec::new();
    crate::trace::jsonl::write_snapshot(&snapshot, &mut lines).expect("writes JSON Lines");
    let (from_lines, _) = crate::trace::jsonl::read_snapshot(&lines[..]).expect("reads back");
    assert_eq!(from_lines.pytorch.inserted_events, [2, 3]);
    let again = snapshot_to_pytorch_value(&from_lines).expect("exports again");
    let reread = snapshot_from_pytorch_value(&again).expect("imports again");
    assert_eq!(reread.event_numbers(0), numbers);
    assert_eq!(reread, snapshot);
}
