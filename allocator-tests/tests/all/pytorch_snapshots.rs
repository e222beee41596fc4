//! Typed import of PyTorch memory snapshots (`blockpool::trace::pytorch`) on real files and the
//! project's own (`fixtures/made/`), and its errors on malformed values. The `external_` tests
//! read third-party files the project may not copy (see `allocator_tests::fixtures`).
//!
//! Every figure asserted here was computed independently with CPython (`pickle.Unpickler` with
//! a `find_class` that raises): counts of segments, blocks and trace entries, entries per
//! action, byte totals, distinct frame lists (by `id()`) and frames referenced. A missing
//! fixture fails; none is skipped.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use blockpool::trace::pickle::{read, ReadLimits, Value};
use blockpool::trace::pytorch::{
    load_pytorch_snapshot, snapshot_from_value, BlockState, Frame, PytorchSnapshot, Schema,
    SegmentType, SnapshotError,
};
use blockpool::trace::Action;

use crate::fixtures::pytorch_snapshot_bytes;

fn load(name: &str) -> PytorchSnapshot {
    load_pytorch_snapshot(&pytorch_snapshot_bytes(name))
        .unwrap_or_else(|error| panic!("{name} should import: {error}"))
}

/// What CPython says about one fixture.
struct Expected {
    schema: Schema,
    segments: usize,
    blocks: usize,
    entries_per_device: &'static [usize],
    actions: &'static [(Action, usize)],
    total_size: u64,
    allocated_block_bytes: u64,
    /// Distinct non-empty frame lists (segments, blocks, trace entries), by identity.
    distinct_frame_lists: usize,
    /// Frames referenced, counting a shared list once per reference.
    frames_referenced: usize,
    timed_entries: usize,
}

fn check(name: &str, want: &Expected) -> PytorchSnapshot {
    let snapshot = load(name);
    assert_eq!(snapshot.schema, want.schema, "{name}: schema");
    assert_eq!(snapshot.segments.len(), want.segments, "{name}: segments");
    let blocks: usize = snapshot.segments.iter().map(|s| s.blocks.len()).sum();
    assert_eq!(blocks, want.blocks, "{name}: blocks");
    let per_device: Vec<usize> = snapshot.device_traces.iter().map(Vec::len).collect();
    assert_eq!(
        per_device, want.entries_per_device,
        "{name}: entries per device"
    );
    let mut actions = BTreeMap::new();
    for entry in snapshot.device_traces.iter().flatten() {
        *actions.entry(entry.action).or_insert(0) += 1;
    }
    let want_actions: BTreeMap<Action, usize> = want.actions.iter().copied().collect();
    assert_eq!(actions, want_actions, "{name}: entries per action");
    let total: u64 = snapshot.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(total, want.total_size, "{name}: sum of segment total_size");
    let allocated: u64 = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.size)
        .sum();
    assert_eq!(
        allocated, want.allocated_block_bytes,
        "{name}: allocated block bytes"
    );

    let lists: Vec<&Arc<[Frame]>> = snapshot
        .segments
        .iter()
        .flat_map(|s| std::iter::once(&s.frames).chain(s.blocks.iter().map(|b| &b.frames)))
        .chain(snapshot.device_traces.iter().flatten().map(|e| &e.frames))
        .filter(|frames| !frames.is_empty())
        .collect();
    let distinct: HashSet<*const Frame> = lists.iter().map(|f| f.as_ptr()).collect();
    assert_eq!(
        distinct.len(),
        want.distinct_frame_lists,
        "{name}: distinct frame lists"
    );
    let referenced: usize = lists.iter().map(|f| f.len()).sum();
    assert_eq!(
        referenced, want.frames_referenced,
        "{name}: frames referenced"
    );
    let timed = snapshot
        .device_traces
        .iter()
        .flatten()
        .filter(|e| e.time_us.is_some())
        .count();
    assert_eq!(timed, want.timed_entries, "{name}: entries with time_us");

    for (i, segment) in snapshot.segments.iter().enumerate() {
        let sizes: u64 = segment.blocks.iter().map(|b| b.size).sum();
        assert_eq!(
            sizes, segment.total_size,
            "{name}: segments[{i}] blocks fill it"
        );
        let mut next = segment.address;
        for (j, block) in segment.blocks.iter().enumerate() {
            assert_eq!(
                block.address, next,
                "{name}: segments[{i}].blocks[{j}] address"
            );
            next += block.size;
        }
    }
    snapshot
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_maphsge4_imports_without_times_and_shares_frames() {
    let snapshot = check(
        "Maphsge4_select_n_snapshot_1.2M.pickle",
        &Expected {
            schema: Schema::DeviceTraces,
            segments: 82,
            blocks: 415,
            entries_per_device: &[4_496, 0, 0, 0],
            actions: &[
                (Action::Alloc, 1_497),
                (Action::FreeRequested, 1_493),
                (Action::FreeCompleted, 1_493),
                (Action::SegmentAlloc, 13),
            ],
            total_size: 2_776_629_248,
            allocated_block_bytes: 1_875_182_080,
            distinct_frame_lists: 2_990,
            frames_referenced: 550_525,
            timed_entries: 0,
        },
    );
    assert!(snapshot.allocator_settings.is_none(), "no settings in 2023");
    // 4,509 references to 2,990 lists hold 550,525 frames; converted once per list, 375,432
    // frames are stored (CPython: the sum of len() over distinct lists).
    let mut seen = HashSet::new();
    let stored: usize = snapshot
        .segments
        .iter()
        .flat_map(|s| std::iter::once(&s.frames).chain(s.blocks.iter().map(|b| &b.frames)))
        .chain(snapshot.device_traces[0].iter().map(|e| &e.frames))
        .filter(|f| seen.insert(f.as_ptr()))
        .map(|f| f.len())
        .sum();
    assert_eq!(stored, 375_432, "frames stored once per distinct list");
    // CPython: segments[0].blocks[0] and trace entry 4,485 hold the same list object (4 blocks
    // share a list with a trace entry; segments[6].blocks[0] with entry 57).
    let trace = &snapshot.device_traces[0];
    for (segment, block, entry) in [(0, 0, 4_485), (6, 0, 57)] {
        assert!(
            Arc::ptr_eq(
                &snapshot.segments[segment].blocks[block].frames,
                &trace[entry].frames
            ),
            "segments[{segment}].blocks[{block}] and entry {entry} must share one Arc<[Frame]>"
        );
    }
    let sharing_blocks = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| !b.frames.is_empty() && trace.iter().any(|e| Arc::ptr_eq(&e.frames, &b.frames)))
        .count();
    assert_eq!(
        sharing_blocks, 4,
        "blocks sharing a frame list with a trace entry"
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_muduard_bare_segment_list_imports() {
    let snapshot = check(
        "Muduard_LayoutEditing_memory_snapshot.pkl",
        &Expected {
            schema: Schema::SegmentList,
            segments: 255,
            blocks: 2_140,
            entries_per_device: &[],
            actions: &[],
            total_size: 3_649_044_480,
            allocated_block_bytes: 3_353_639_424,
            distinct_frame_lists: 805,
            frames_referenced: 15_241,
            timed_entries: 0,
        },
    );
    assert!(
        snapshot.segments.iter().all(|s| s.device == 1),
        "all on device 1"
    );
    let small = snapshot
        .segments
        .iter()
        .filter(|s| s.segment_type == SegmentType::Small)
        .count();
    assert_eq!(small, 132, "small segments");
}

#[test]
fn yiyi_legacy_blocks_get_computed_addresses_and_history_frames() {
    let name = "Yiyi_LLM-inference_oom_snapshot.pickle";
    let snapshot = check(
        name,
        &Expected {
            schema: Schema::LegacyBlockHistory,
            segments: 176,
            blocks: 463,
            entries_per_device: &[1],
            actions: &[(Action::Snapshot, 1)],
            total_size: 11_844_714_496,
            allocated_block_bytes: 11_840_159_744,
            distinct_frame_lists: 460,
            frames_referenced: 4_600,
            timed_entries: 0,
        },
    );
    let entry = &snapshot.device_traces[0][0];
    assert_eq!(
        (entry.addr, entry.size),
        (0, 11_840_159_744),
        "the snapshot event"
    );
    assert_eq!(entry.time_us, None);
    let segment = &snapshot.segments[174];
    let addresses: Vec<u64> = segment.blocks.iter().take(3).map(|b| b.address).collect();
    let base = 140_049_249_206_272;
    assert_eq!(
        addresses,
        [base, base + 8_192, base + 16_384],
        "computed addresses"
    );
    // The computed addresses agree with the `addr` of each block's first history entry.
    let value = read(&pytorch_snapshot_bytes(name), &ReadLimits::default()).expect("reads");
    let segments = field(&value, "segments");
    let mut checked = 0;
    for (segment, raw) in snapshot.segments.iter().zip(items(segments)) {
        for (block, raw) in segment.blocks.iter().zip(items(field(raw, "blocks"))) {
            if let Some(Value::List(history)) = try_field(raw, "history") {
                assert_eq!(
                    field(&history[0], "addr"),
                    &Value::Int(block.address as i64)
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 460, "blocks with history");
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_albi2_expandable_segments_import() {
    let snapshot = check(
        "albi2_thesis_dump_snapshot_1064.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 2,
            blocks: 7,
            entries_per_device: &[0],
            actions: &[],
            total_size: 23_068_672,
            allocated_block_bytes: 8_525_824,
            distinct_frame_lists: 0,
            frames_referenced: 0,
            timed_entries: 0,
        },
    );
    assert!(
        snapshot.segments.iter().all(|s| s.is_expandable),
        "expandable"
    );
    let settings = snapshot.allocator_settings.as_ref().expect("settings");
    assert_eq!(field(settings, "max_split_size"), &Value::Int(134_217_728));
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_sunnysood80_empty_snapshot_imports() {
    let snapshot = check(
        "SunnySood80_dump_snapshot_517.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 0,
            blocks: 0,
            entries_per_device: &[0, 0, 0, 0],
            actions: &[],
            total_size: 0,
            allocated_block_bytes: 0,
            distinct_frame_lists: 0,
            frames_referenced: 0,
            timed_entries: 0,
        },
    );
    assert_eq!(
        snapshot.external_annotations,
        Some(Value::List(Arc::new(vec![])))
    );
}

#[test]
fn bcrafton_newest_schema_imports() {
    let snapshot = check(
        "bcrafton_assignment2-systems_memory_snapshot.pickle",
        &Expected {
            schema: Schema::CompileContext,
            segments: 96,
            blocks: 550,
            entries_per_device: &[6_486],
            actions: &[
                (Action::Alloc, 2_162),
                (Action::FreeRequested, 2_162),
                (Action::FreeCompleted, 2_162),
            ],
            total_size: 4_238_344_192,
            allocated_block_bytes: 3_072_871_424,
            distinct_frame_lists: 4_324,
            frames_referenced: 289_778,
            timed_entries: 6_486,
        },
    );
    assert_eq!(
        snapshot.device_traces[0][0].time_us,
        Some(1_773_270_053_858_957)
    );
    let Some(Value::List(annotations)) = &snapshot.external_annotations else {
        panic!("external_annotations should be a list")
    };
    assert_eq!(annotations.len(), 2);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_kkaitlyn111_imports_segment_allocs_with_times() {
    let snapshot = check(
        "kkaitlyn111_cs336_memory_ctx128_forward.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 516,
            blocks: 1_276,
            entries_per_device: &[4_657],
            actions: &[
                (Action::Alloc, 2_058),
                (Action::FreeRequested, 1_155),
                (Action::FreeCompleted, 1_155),
                (Action::SegmentAlloc, 289),
            ],
            total_size: 19_667_091_456,
            allocated_block_bytes: 19_498_420_224,
            distinct_frame_lists: 3_213,
            frames_referenced: 412_692,
            timed_entries: 4_657,
        },
    );
    assert_eq!(
        snapshot.device_traces[0][0].time_us,
        Some(1_748_729_097_138_624)
    );
}

#[test]
fn nothanmin_training_step_imports() {
    let snapshot = check(
        "notHanmin_assignment2-systems_memory_snapshot.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 999,
            blocks: 1_987,
            entries_per_device: &[19_464],
            actions: &[
                (Action::Alloc, 6_488),
                (Action::FreeRequested, 6_488),
                (Action::FreeCompleted, 6_488),
            ],
            total_size: 23_842_521_088,
            allocated_block_bytes: 16_019_091_968,
            distinct_frame_lists: 13_843,
            frames_referenced: 777_770,
            timed_entries: 19_464,
        },
    );
    let small = snapshot
        .segments
        .iter()
        .filter(|s| s.segment_type == SegmentType::Small)
        .count();
    assert_eq!(small, 16, "small segments");
}

// The project's own files; their numbers follow from `fixtures/made/make.py`.

#[test]
fn made_four_device_traces_import_without_times() {
    let snapshot = check(
        "made_four_device_traces_without_times.pickle",
        &Expected {
            schema: Schema::DeviceTraces,
            segments: 2,
            blocks: 8,
            entries_per_device: &[12, 0, 0, 0],
            actions: &[
                (Action::Alloc, 6),
                (Action::FreeRequested, 2),
                (Action::FreeCompleted, 2),
                (Action::SegmentAlloc, 2),
            ],
            total_size: 23_068_672,
            allocated_block_bytes: 5_248_000,
            distinct_frame_lists: 2,
            frames_referenced: 48,
            timed_entries: 0,
        },
    );
    assert!(snapshot.allocator_settings.is_none(), "no settings in 2023");
    let trace = &snapshot.device_traces[0];
    assert!(
        Arc::ptr_eq(&snapshot.segments[0].blocks[0].frames, &trace[0].frames),
        "a block and the event that allocated it share one Arc<[Frame]>"
    );
}

#[test]
fn made_segment_list_imports() {
    let snapshot = check(
        "made_segment_list.pickle",
        &Expected {
            schema: Schema::SegmentList,
            segments: 3,
            blocks: 6,
            entries_per_device: &[],
            actions: &[],
            total_size: 90_177_536,
            allocated_block_bytes: 79_693_312,
            distinct_frame_lists: 2,
            frames_referenced: 12,
            timed_entries: 0,
        },
    );
    assert!(
        snapshot.segments.iter().all(|s| s.device == 1),
        "all on device 1"
    );
    let types: Vec<SegmentType> = snapshot.segments.iter().map(|s| s.segment_type).collect();
    assert_eq!(
        types,
        [SegmentType::Small, SegmentType::Large, SegmentType::Large]
    );
}

#[test]
fn made_expandable_segments_on_two_devices_import() {
    let snapshot = check(
        "made_expandable_two_devices.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 3,
            blocks: 7,
            entries_per_device: &[0, 0],
            actions: &[],
            total_size: 37_748_736,
            allocated_block_bytes: 16_780_288,
            distinct_frame_lists: 0,
            frames_referenced: 0,
            timed_entries: 0,
        },
    );
    assert!(
        snapshot.segments.iter().all(|s| s.is_expandable),
        "expandable"
    );
    let devices: Vec<_> = snapshot.segments.iter().map(|s| s.device).collect();
    assert_eq!(devices, [0, 0, 1]);
    let settings = snapshot.allocator_settings.as_ref().expect("settings");
    assert_eq!(field(settings, "max_split_size"), &Value::Int(134_217_728));
}

#[test]
fn made_empty_snapshot_imports() {
    let snapshot = check(
        "made_empty_snapshot.pickle",
        &Expected {
            schema: Schema::AllocatorSettings,
            segments: 0,
            blocks: 0,
            entries_per_device: &[0, 0, 0, 0],
            actions: &[],
            total_size: 0,
            allocated_block_bytes: 0,
            distinct_frame_lists: 0,
            frames_referenced: 0,
            timed_entries: 0,
        },
    );
    assert_eq!(
        snapshot.external_annotations,
        Some(Value::List(Arc::new(vec![])))
    );
}

// Hand-built values for the error paths.

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

fn try_field<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Dict(pairs) = value else {
        return None;
    };
    pairs
        .iter()
        .find(|(k, _)| matches!(k, Value::Str(name) if &**name == key))
        .map(|(_, v)| v)
}

#[track_caller]
fn field<'a>(value: &'a Value, key: &str) -> &'a Value {
    try_field(value, key).unwrap_or_else(|| panic!("no key {key:?}"))
}

#[track_caller]
fn items(value: &Value) -> &[Value] {
    match value {
        Value::List(items) => items,
        other => panic!("not a list: {other:?}"),
    }
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
