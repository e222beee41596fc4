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
    load_pytorch_snapshot, BlockState, Frame, PytorchSnapshot, Schema, SegmentType,
};
use blockpool::trace::Action;

use crate::fixtures::pytorch_snapshot_bytes;

mod hand_built;

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

// Reading raw values, for the figures the typed import is compared with.

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
