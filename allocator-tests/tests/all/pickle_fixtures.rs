//! The restricted pickle reader on real PyTorch memory snapshots and on the project's own:
//! every file reads, and what it reads matches facts computed independently with CPython's
//! `pickle` (`fixtures/fingerprint.py`, an `Unpickler` whose `find_class` raises): top-level
//! shape, segment and trace counts, a fingerprint of every distinct container, and the sharing
//! of frames. A missing fixture fails these tests; none is skipped. The `external_` tests read
//! third-party files the project may not copy (see `allocator_tests::fixtures`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use blockpool::trace::pickle::{read, ReadLimits, Value};

use crate::fixtures::{external_snapshot_names, project_snapshot_names, pytorch_snapshot_bytes};

mod fingerprint;
use fingerprint::{expanded_frames, fingerprint, frame_sharing, Fingerprint};

/// Reads and parses one fixture; fails with the path if it is missing or does not parse.
fn load(name: &str) -> Value {
    let bytes = pytorch_snapshot_bytes(name);
    read(&bytes, &ReadLimits::default())
        .unwrap_or_else(|error| panic!("{name} should read as plain data: {error}"))
}

/// The value of `key` in `dict`.
#[track_caller]
fn get<'a>(dict: &'a Value, key: &str) -> &'a Value {
    let Value::Dict(pairs) = dict else {
        panic!("looking up {key:?} in a non-dict: {dict:?}")
    };
    pairs
        .iter()
        .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
        .map(|(_, value)| value)
        .unwrap_or_else(|| panic!("no key {key:?}"))
}

#[track_caller]
fn items(value: &Value) -> &[Value] {
    match value {
        Value::List(items) | Value::Tuple(items) => items,
        other => panic!("expected a list or tuple, got {other:?}"),
    }
}

#[track_caller]
fn keys(dict: &Value) -> Vec<&str> {
    let Value::Dict(pairs) = dict else {
        panic!("not a dict: {dict:?}")
    };
    pairs
        .iter()
        .map(|(key, _)| match key {
            Value::Str(s) => &**s,
            other => panic!("non-str key {other:?}"),
        })
        .collect()
}

/// Trace entries per device.
fn trace_lengths(snapshot: &Value) -> Vec<usize> {
    items(get(snapshot, "device_traces"))
        .iter()
        .map(|trace| items(trace).len())
        .collect()
}

/// How many events of each `action` the trace of device 0 has.
fn actions(snapshot: &Value) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for event in items(&items(get(snapshot, "device_traces"))[0]) {
        let Value::Str(action) = get(event, "action") else {
            panic!("action is not a str")
        };
        *counts.entry(action.to_string()).or_default() += 1;
    }
    counts
}

/// The PyTorch snapshots in the project: third-party files whose license allows it, then the
/// ones the project makes itself (`fixtures/made/make.py`).
const PROJECT_FIXTURES: [&str; 8] = [
    "Yiyi_LLM-inference_oom_snapshot.pickle",
    "bcrafton_assignment2-systems_memory_snapshot.pickle",
    "notHanmin_assignment2-systems_memory_snapshot.pickle",
    "made_empty_snapshot.pickle",
    "made_expandable_two_devices.pickle",
    "made_four_device_traces_without_times.pickle",
    "made_oom_private_pool.pickle",
    "made_segment_list.pickle",
];

/// The external suite's files: every snapshot in `$BLOCKPOOL_FIXTURES/pytorch-snapshots/`.
const EXTERNAL_FIXTURES: [&str; 8] = [
    "Maphsge4_select_n_snapshot_1.2M.pickle",
    "Muduard_LayoutEditing_memory_snapshot.pkl",
    "SunnySood80_dump_snapshot_517.pickle",
    "Yiyi_LLM-inference_oom_snapshot.pickle",
    "albi2_thesis_dump_snapshot_1064.pickle",
    "bcrafton_assignment2-systems_memory_snapshot.pickle",
    "kkaitlyn111_cs336_memory_ctx128_forward.pickle",
    "notHanmin_assignment2-systems_memory_snapshot.pickle",
];

const NEW_SCHEMA_KEYS: [&str; 4] = [
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
];

#[test]
fn the_project_holds_the_eight_snapshots() {
    assert_eq!(project_snapshot_names(), PROJECT_FIXTURES);
}

#[test]
fn every_project_fixture_reads_as_plain_data() {
    for name in PROJECT_FIXTURES {
        load(name);
    }
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_folder_holds_the_eight_snapshots_and_each_reads() {
    assert_eq!(external_snapshot_names(), EXTERNAL_FIXTURES);
    for name in EXTERNAL_FIXTURES {
        load(name);
    }
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_maphsge4_has_four_device_traces_and_shares_its_frames() {
    let snapshot = load("Maphsge4_select_n_snapshot_1.2M.pickle");
    assert_eq!(keys(&snapshot), ["segments", "device_traces"]);
    assert_eq!(items(get(&snapshot, "segments")).len(), 82);
    assert_eq!(trace_lengths(&snapshot), [4_496, 0, 0, 0]);
    assert_eq!(
        actions(&snapshot),
        BTreeMap::from([
            ("alloc".into(), 1_497),
            ("free_completed".into(), 1_493),
            ("free_requested".into(), 1_493),
            ("segment_alloc".into(), 13),
        ])
    );
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 5_404,
            lists: 3_079,
            tuples: 82,
            sets: 0,
            edges: 434_135,
            ints: 15_881,
            int_sum: 702_226_042_982_041_608,
            strs: 32_584,
            str_bytes: 271_737,
            trues: 0,
            falses: 82,
            nones: 0,
            floats: 0,
        }
    );
    // Python: trace[0]['frames'][0] is trace[1]['frames'][0].
    let trace = items(&items(get(&snapshot, "device_traces"))[0]);
    let (Value::Dict(first), Value::Dict(second)) = (
        &items(get(&trace[0], "frames"))[0],
        &items(get(&trace[1], "frames"))[0],
    ) else {
        panic!("frames are not dicts")
    };
    assert!(
        Arc::ptr_eq(first, second),
        "the memoized frame must be one Arc, not a copy"
    );
    assert_eq!(
        frame_sharing(&snapshot),
        (375_432, 410),
        "(frame references from distinct containers, distinct frames)"
    );
    assert_eq!(
        expanded_frames(&snapshot, &mut HashMap::new()),
        550_525,
        "frames a deep copy would hold"
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_muduard_is_a_bare_list_of_segments() {
    let value = load("Muduard_LayoutEditing_memory_snapshot.pkl");
    assert!(matches!(value, Value::List(_)), "the oldest form is a list");
    let segments = items(&value);
    assert_eq!(segments.len(), 255);
    assert!(
        segments.iter().all(|s| get(s, "device") == &Value::Int(1)),
        "every segment is on device 1"
    );
    let blocks: usize = segments.iter().map(|s| items(get(s, "blocks")).len()).sum();
    assert_eq!(blocks, 2_140);
    let total: i64 = segments
        .iter()
        .map(|s| match get(s, "total_size") {
            Value::Int(size) => *size,
            other => panic!("total_size {other:?}"),
        })
        .sum();
    assert_eq!(total, 3_649_044_480);
    assert_eq!(
        fingerprint(&value),
        Fingerprint {
            dicts: 2_429,
            lists: 1_063,
            tuples: 255,
            sets: 0,
            edges: 45_870,
            ints: 8_749,
            int_sum: 335_277_032_704_131_690,
            strs: 16_325,
            str_bytes: 145_310,
            trues: 0,
            falses: 255,
            nones: 0,
            floats: 0,
        }
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_sunnysood80_is_an_empty_snapshot_with_settings() {
    let snapshot = load("SunnySood80_dump_snapshot_517.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    assert_eq!(items(get(&snapshot, "segments")).len(), 0);
    assert_eq!(trace_lengths(&snapshot), [0, 0, 0, 0]);
    let settings = get(&snapshot, "allocator_settings");
    assert_eq!(
        get(settings, "PYTORCH_CUDA_ALLOC_CONF"),
        &Value::Str("expandable_segments:True,max_split_size_mb:64".into())
    );
    assert_eq!(get(settings, "max_split_size"), &Value::Int(67_108_864));
    assert_eq!(
        get(settings, "garbage_collection_threshold"),
        &Value::Float(0.0)
    );
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 3,
            lists: 7,
            edges: 60,
            ints: 18,
            int_sum: 67_108_865,
            strs: 29,
            str_bytes: 339,
            trues: 1,
            falses: 2,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn yiyi_has_legacy_history_blocks_and_one_snapshot_event() {
    let snapshot = load("Yiyi_LLM-inference_oom_snapshot.pickle");
    assert_eq!(keys(&snapshot), ["segments", "device_traces"]);
    let segments = items(get(&snapshot, "segments"));
    assert_eq!(segments.len(), 176);
    let blocks: Vec<&Value> = segments
        .iter()
        .flat_map(|s| items(get(s, "blocks")))
        .collect();
    assert_eq!(blocks.len(), 463);
    assert_eq!(
        keys(blocks[0]),
        ["size", "requested_size", "state", "history"]
    );
    assert_eq!(trace_lengths(&snapshot), [1]);
    let event = &items(&items(get(&snapshot, "device_traces"))[0])[0];
    assert_eq!(get(event, "action"), &Value::Str("snapshot".into()));
    assert_eq!(get(event, "size"), &Value::Int(11_840_159_744));
    assert_eq!(
        frame_sharing(&snapshot),
        (4_600, 4_600),
        "this file shares no frames"
    );
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 5_701,
            lists: 1_099,
            edges: 42_939,
            ints: 7_681,
            int_sum: 89_069_294_477_127_284,
            strs: 28_459,
            str_bytes: 388_298,
            ..Fingerprint::default()
        }
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_albi2_has_expandable_segments() {
    let snapshot = load("albi2_thesis_dump_snapshot_1064.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    let segments = items(get(&snapshot, "segments"));
    assert_eq!(segments.len(), 2);
    assert!(segments
        .iter()
        .all(|s| get(s, "is_expandable") == &Value::Bool(true)));
    assert!(segments.iter().all(|s| get(s, "device") == &Value::Int(0)));
    let blocks: usize = segments.iter().map(|s| items(get(s, "blocks")).len()).sum();
    assert_eq!(blocks, 7);
    assert_eq!(trace_lengths(&snapshot), [0]);
    // A 16-entry dict: past the reader's linear key scan.
    let divisions = get(
        get(&snapshot, "allocator_settings"),
        "roundup_power2_divisions",
    );
    assert_eq!(keys(divisions).len(), 16);
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 12,
            lists: 7,
            tuples: 2,
            edges: 188,
            ints: 57,
            int_sum: 296_349_992_161,
            strs: 97,
            str_bytes: 922,
            trues: 3,
            falses: 2,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn bcrafton_has_the_newest_schema() {
    let snapshot = load("bcrafton_assignment2-systems_memory_snapshot.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    assert_eq!(items(get(&snapshot, "segments")).len(), 96);
    assert_eq!(trace_lengths(&snapshot), [6_486]);
    assert_eq!(
        actions(&snapshot),
        BTreeMap::from([
            ("alloc".into(), 2_162),
            ("free_completed".into(), 2_162),
            ("free_requested".into(), 2_162),
        ])
    );
    let event = &items(&items(get(&snapshot, "device_traces"))[0])[0];
    let mut event_keys = keys(event);
    event_keys.sort_unstable();
    assert_eq!(
        event_keys,
        [
            "action",
            "addr",
            "compile_context",
            "frames",
            "size",
            "stream",
            "time_us",
            "user_metadata"
        ]
    );
    assert_eq!(items(get(&snapshot, "external_annotations")).len(), 2);
    assert_eq!(frame_sharing(&snapshot), (203_461, 677));
    assert_eq!(expanded_frames(&snapshot, &mut HashMap::new()), 289_778);
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 7_814,
            lists: 4_425,
            tuples: 96,
            edges: 326_504,
            ints: 29_157,
            int_sum: 12_410_535_399_608_663_067,
            strs: 79_321,
            str_bytes: 626_452,
            falses: 100,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_kkaitlyn111_has_segment_alloc_events_with_time() {
    let snapshot = load("kkaitlyn111_cs336_memory_ctx128_forward.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    assert_eq!(items(get(&snapshot, "segments")).len(), 516);
    assert_eq!(trace_lengths(&snapshot), [4_657]);
    assert_eq!(
        actions(&snapshot),
        BTreeMap::from([
            ("alloc".into(), 2_058),
            ("free_completed".into(), 1_155),
            ("free_requested".into(), 1_155),
            ("segment_alloc".into(), 289),
        ])
    );
    let event = &items(&items(get(&snapshot, "device_traces"))[0])[0];
    assert!(matches!(get(event, "time_us"), Value::Int(_)));
    assert_eq!(frame_sharing(&snapshot), (235_962, 409));
    assert_eq!(expanded_frames(&snapshot, &mut HashMap::new()), 412_692);
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 6_861,
            lists: 3_734,
            tuples: 516,
            edges: 326_982,
            ints: 27_527,
            int_sum: 9_049_971_045_125_570_602,
            strs: 49_037,
            str_bytes: 405_625,
            falses: 519,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn nothanmin_is_a_training_step_with_every_setting() {
    let snapshot = load("notHanmin_assignment2-systems_memory_snapshot.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    assert_eq!(items(get(&snapshot, "segments")).len(), 999);
    assert_eq!(trace_lengths(&snapshot), [19_464]);
    assert_eq!(
        actions(&snapshot),
        BTreeMap::from([
            ("alloc".into(), 6_488),
            ("free_completed".into(), 6_488),
            ("free_requested".into(), 6_488),
        ])
    );
    assert_eq!(keys(get(&snapshot, "allocator_settings")).len(), 8);
    assert_eq!(items(get(&snapshot, "external_annotations")).len(), 4);
    assert_eq!(frame_sharing(&snapshot), (566_610, 658));
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 23_115,
            lists: 14_847,
            tuples: 999,
            edges: 872_513,
            ints: 93_492,
            int_sum: 420_325_403_588_452_309,
            strs: 164_500,
            str_bytes: 1_212_034,
            falses: 1_002,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

/// The made files' numbers follow from `fixtures/made/make.py`; the fingerprints are
/// `fixtures/fingerprint.py`'s.
#[test]
fn made_four_device_traces_have_no_times_and_share_frame_lists() {
    let snapshot = load("made_four_device_traces_without_times.pickle");
    assert_eq!(keys(&snapshot), ["segments", "device_traces"]);
    assert_eq!(items(get(&snapshot, "segments")).len(), 2);
    assert_eq!(trace_lengths(&snapshot), [12, 0, 0, 0]);
    assert_eq!(
        actions(&snapshot),
        BTreeMap::from([
            ("alloc".into(), 6),
            ("free_completed".into(), 2),
            ("free_requested".into(), 2),
            ("segment_alloc".into(), 2),
        ])
    );
    let trace = items(&items(get(&snapshot, "device_traces"))[0]);
    assert!(
        trace.iter().all(|event| !keys(event).contains(&"time_us")),
        "the 2023 schema has no times"
    );
    // Python: trace[0]['frames'] is trace[1]['frames'].
    let (Value::List(first), Value::List(second)) =
        (get(&trace[0], "frames"), get(&trace[1], "frames"))
    else {
        panic!("frames are not lists")
    };
    assert!(
        Arc::ptr_eq(first, second),
        "the memoized frame list must be one Arc, not a copy"
    );
    assert_eq!(frame_sharing(&snapshot), (6, 6));
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 29,
            lists: 16,
            tuples: 1,
            edges: 322,
            ints: 82,
            int_sum: 3_072_036_211_566_643,
            strs: 178,
            str_bytes: 1_417,
            falses: 2,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn made_segment_list_is_a_bare_list_on_device_1() {
    let value = load("made_segment_list.pickle");
    assert!(matches!(value, Value::List(_)), "the oldest form is a list");
    let segments = items(&value);
    assert_eq!(segments.len(), 3);
    assert!(
        segments.iter().all(|s| get(s, "device") == &Value::Int(1)),
        "every segment is on device 1"
    );
    let blocks: usize = segments.iter().map(|s| items(get(s, "blocks")).len()).sum();
    assert_eq!(blocks, 6);
    assert_eq!(
        fingerprint(&value),
        Fingerprint {
            dicts: 15,
            lists: 11,
            tuples: 1,
            edges: 185,
            ints: 47,
            int_sum: 1_257_361_054_377_254,
            strs: 105,
            str_bytes: 1_009,
            falses: 3,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn made_empty_snapshot_has_settings_and_four_empty_traces() {
    let snapshot = load("made_empty_snapshot.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    assert_eq!(items(get(&snapshot, "segments")).len(), 0);
    assert_eq!(trace_lengths(&snapshot), [0, 0, 0, 0]);
    let settings = get(&snapshot, "allocator_settings");
    assert_eq!(
        get(settings, "PYTORCH_CUDA_ALLOC_CONF"),
        &Value::Str("expandable_segments:True,max_split_size_mb:64".into())
    );
    assert_eq!(get(settings, "max_split_size"), &Value::Int(67_108_864));
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 3,
            lists: 7,
            edges: 60,
            ints: 18,
            int_sum: 67_108_865,
            strs: 29,
            str_bytes: 339,
            trues: 1,
            falses: 2,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}

#[test]
fn made_expandable_segments_span_two_devices() {
    let snapshot = load("made_expandable_two_devices.pickle");
    assert_eq!(keys(&snapshot), NEW_SCHEMA_KEYS);
    let segments = items(get(&snapshot, "segments"));
    assert_eq!(segments.len(), 3);
    assert!(segments
        .iter()
        .all(|s| get(s, "is_expandable") == &Value::Bool(true)));
    let devices: Vec<&Value> = segments.iter().map(|s| get(s, "device")).collect();
    assert_eq!(devices, [&Value::Int(0), &Value::Int(0), &Value::Int(1)]);
    assert_eq!(trace_lengths(&snapshot), [0, 0]);
    // A 16-entry dict: past the reader's linear key scan.
    let divisions = get(
        get(&snapshot, "allocator_settings"),
        "roundup_power2_divisions",
    );
    assert_eq!(keys(divisions).len(), 16);
    assert_eq!(
        fingerprint(&snapshot),
        Fingerprint {
            dicts: 13,
            lists: 18,
            tuples: 1,
            edges: 212,
            ints: 62,
            int_sum: 464_150_084_082,
            strs: 110,
            str_bytes: 1_047,
            trues: 4,
            falses: 2,
            floats: 1,
            ..Fingerprint::default()
        }
    );
}
