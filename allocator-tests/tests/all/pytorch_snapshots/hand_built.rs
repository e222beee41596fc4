//! The import on hand-built values: the shapes real files leave out, and the typed error, named
//! by its path in the file, of each malformed value.

use std::sync::Arc;

use blockpool::trace::pickle::Value;
use blockpool::trace::pytorch::{
    load_pytorch_snapshot, snapshot_from_value, BlockState, Schema, SnapshotError,
};
use blockpool::trace::Action;

fn s(text: &str) -> Value {
    Value::Str(text.into())
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(Arc::new(
        pairs.into_iter().map(|(k, v)| (s(k), v)).collect(),
    ))
}

fn list(values: Vec<Value>) -> Value {
    Value::List(Arc::new(values))
}

fn block(size: Value, state: &str) -> Value {
    dict(vec![
        ("size", size),
        ("requested_size", Value::Int(1)),
        ("state", s(state)),
    ])
}

fn segment(blocks: Vec<Value>) -> Value {
    dict(vec![
        ("device", Value::Int(0)),
        ("address", Value::Int(4096)),
        ("total_size", Value::Int(1024)),
        ("allocated_size", Value::Int(0)),
        ("active_size", Value::Int(0)),
        ("requested_size", Value::Int(0)),
        ("stream", Value::Int(0)),
        ("segment_type", s("large")),
        ("blocks", list(blocks)),
    ])
}

fn snapshot(segments: Vec<Value>, trace: Vec<Value>) -> Value {
    dict(vec![
        ("segments", list(segments)),
        ("device_traces", list(vec![list(trace)])),
        ("some_future_key", Value::None),
    ])
}

fn entry(action: &str) -> Value {
    dict(vec![
        ("action", s(action)),
        ("addr", Value::Int(4096)),
        ("size", Value::Int(512)),
        ("stream", Value::Int(0)),
    ])
}

#[track_caller]
fn error_of(value: &Value) -> String {
    snapshot_from_value(value)
        .expect_err("a malformed snapshot must be refused")
        .to_string()
}

#[test]
fn an_oom_entry_with_device_free_instead_of_addr_imports() {
    // PyTorch writes `device_free` (the device's free bytes) for `oom` entries, not `addr`.
    let oom = dict(vec![
        ("action", s("oom")),
        ("device_free", Value::Int(1_048_576)),
        ("size", Value::Int(2_097_152)),
        ("stream", Value::Int(0)),
    ]);
    let imported = snapshot_from_value(&snapshot(vec![], vec![oom])).expect("imports");
    let entry = &imported.device_traces[0][0];
    assert_eq!(
        (entry.action, entry.addr, entry.size),
        (Action::Oom, 1_048_576, 2_097_152)
    );
    let no_free = dict(vec![
        ("action", s("oom")),
        ("size", Value::Int(2_097_152)),
        ("stream", Value::Int(0)),
    ]);
    assert_eq!(
        error_of(&snapshot(vec![], vec![no_free])),
        "device_traces[0][0]: missing key \"addr\""
    );
}

#[test]
fn a_well_formed_hand_built_snapshot_imports_with_computed_addresses() {
    let good = snapshot(
        vec![segment(vec![
            block(Value::Int(512), "active_allocated"),
            block(Value::Int(512), "active_pending_free"),
        ])],
        vec![entry("alloc"), entry("user_defined")],
    );
    let imported = snapshot_from_value(&good).expect("imports");
    assert_eq!(
        imported.schema,
        Schema::LegacyBlockHistory,
        "blocks lack addresses"
    );
    let blocks = &imported.segments[0].blocks;
    assert_eq!((blocks[0].address, blocks[1].address), (4096, 4608));
    assert_eq!(blocks[1].state, BlockState::ActivePendingFree);
    let actions: Vec<Action> = imported.device_traces[0].iter().map(|e| e.action).collect();
    assert_eq!(actions, [Action::Alloc, Action::Annotate]);
}

#[test]
fn wrong_types_are_named_by_path() {
    let mut blocks: Vec<Value> = (0..7).map(|_| block(Value::Int(1), "inactive")).collect();
    blocks.push(block(s("big"), "inactive"));
    let mut segments: Vec<Value> = (0..3).map(|_| segment(vec![])).collect();
    segments.push(segment(blocks));
    assert_eq!(
        error_of(&snapshot(segments, vec![])),
        "segments[3].blocks[7].size: expected an int, found str"
    );
    assert_eq!(
        error_of(&Value::Int(3)),
        "the snapshot: expected a dict or a list of segments, found int"
    );
    assert_eq!(
        error_of(&list(vec![segment(vec![Value::None])])),
        "[0].blocks[0]: expected a dict, found NoneType"
    );
    assert_eq!(
        error_of(&dict(vec![
            ("segments", list(vec![])),
            ("device_traces", list(vec![s("x")]))
        ])),
        "device_traces[0]: expected a list, found str"
    );
}

#[test]
fn missing_keys_and_bad_names_are_refused() {
    assert_eq!(
        error_of(&dict(vec![("segments", list(vec![]))])),
        "the snapshot: missing key \"device_traces\""
    );
    let no_state = dict(vec![("size", Value::Int(8))]);
    assert_eq!(
        error_of(&snapshot(vec![segment(vec![no_state])], vec![])),
        "segments[0].blocks[0]: missing key \"state\""
    );
    assert_eq!(
        error_of(&snapshot(vec![], vec![entry("alloc"), entry("malloc")])),
        "device_traces[0][1].action: unknown action \"malloc\""
    );
    assert_eq!(
        error_of(&snapshot(
            vec![segment(vec![block(Value::Int(1), "busy")])],
            vec![]
        )),
        "segments[0].blocks[0].state: unknown block state \"busy\" (expected active_allocated, \
         active_pending_free or inactive)"
    );
}

#[test]
fn out_of_range_ints_are_refused_and_unknown_lines_read() {
    assert_eq!(
        error_of(&snapshot(
            vec![segment(vec![block(Value::Int(-1), "inactive")])],
            vec![]
        )),
        "segments[0].blocks[0].size: expected an int in 0..=18446744073709551615, found -1"
    );
    let frame = dict(vec![
        ("filename", s("a.py")),
        ("line", Value::Int(1 << 32)),
        ("name", s("f")),
    ]);
    let mut with_frames = entry("free_completed");
    if let Value::Dict(pairs) = &mut with_frames {
        Arc::make_mut(pairs).push((s("frames"), list(vec![frame])));
    }
    // A line no u32 holds is an unknown line (PyTorch writes C++ frames' as 2^64 - 1), not a
    // refused file.
    let imported = snapshot_from_value(&snapshot(vec![], vec![with_frames])).expect("imports");
    assert_eq!(imported.device_traces[0][0].frames[0].line, 0);
    // A big int that fits in 64 bits is accepted (an address past i64::MAX).
    let mut high = entry("alloc");
    if let Value::Dict(pairs) = &mut high {
        Arc::make_mut(pairs)[1].1 = Value::BigInt(Arc::from(&[0u8, 0, 0, 0, 0, 0, 0, 0x80, 0][..]));
    }
    let imported = snapshot_from_value(&snapshot(vec![], vec![high])).expect("imports");
    assert_eq!(imported.device_traces[0][0].addr, 1 << 63);
}

#[test]
fn non_pickles_are_a_pickle_error() {
    let error = load_pytorch_snapshot(b"cos\nsystem\n(S'x'\ntR.").unwrap_err();
    assert!(matches!(error, SnapshotError::Pickle(_)), "{error:?}");
}
