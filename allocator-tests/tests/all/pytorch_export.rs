//! `Snapshot` to PyTorch's snapshot pickle and back (`blockpool::trace::pytorch`): a recorded
//! run of the caching allocator round-trips exactly, every real PyTorch file survives
//! PyTorch → `Snapshot` → pickle with its segments, blocks and trace intact, and CPython loads
//! our file under an unpickler that refuses every global, finding PyTorch's keys and values.

use std::io::Write;
use std::process::{Command, Stdio};

use blockpool::event::{Backtraces, ContextLevel};
use blockpool::trace::pytorch::{
    load_pytorch_snapshot, load_pytorch_snapshot_as_snapshot, snapshot_to_pytorch_value,
    write_pytorch_snapshot, BlockState as PtState, PytorchSnapshot, TAG_FILENAME,
};
use blockpool::trace::{Action, BlockState, ContextId, Snapshot};
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};

use crate::fixtures::pytorch_snapshot_bytes;

const BASE: u64 = 0x7f00_0000_0000;
const S1: StreamId = StreamId::from_raw(1);

fn settings(stacks: Backtraces) -> HistorySettings {
    HistorySettings {
        enabled: true,
        context: ContextLevel::All,
        max_entries: 10_000,
        stacks,
    }
}

/// A recorded run on two devices and two streams, with nested annotations and one block left
/// pending free on the other stream, snapshotted while recording.
/// Tags are `{prefix}-model` and `{prefix}-layer`: annotations reach every recording allocator
/// of the process, so each test looks only for its own.
fn recorded_run(stacks: Backtraces, prefix: &str) -> Snapshot {
    let sim = SimBackend::new(2, 1 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    alloc.record_memory_history(settings(stacks)).unwrap();
    let kept = {
        let _model = annotate(&format!("{prefix}-model"));
        let a = alloc.allocate(0, 1000, StreamId::DEFAULT).unwrap();
        let _layer = annotate(&format!("{prefix}-layer"));
        let b = alloc.allocate(1, 3 << 20, S1).unwrap();
        let c = alloc.allocate(0, 5000, S1).unwrap();
        drop(b);
        (a, c)
    };
    let pending = alloc.malloc(1, 4096, StreamId::DEFAULT).unwrap();
    alloc.record_stream(1, pending, S1).unwrap();
    alloc.free(1, pending).unwrap();
    let snapshot = alloc.snapshot();
    drop(kept);
    snapshot
}

fn export(snapshot: &Snapshot) -> Vec<u8> {
    let mut bytes = Vec::new();
    write_pytorch_snapshot(snapshot, &mut bytes).expect("writing to memory succeeds");
    bytes
}

#[test]
fn a_recorded_run_round_trips_exactly_through_pytorchs_format() {
    // Annotations reach every recording allocator: no other test may annotate meanwhile.
    let _serial = crate::history::annotating();
    let snapshot = recorded_run(Backtraces::None, "roundtrip");
    assert_eq!(snapshot.validate(), Ok(()));
    assert_eq!(snapshot.devices(), [0, 1]);
    assert!(
        snapshot.events.iter().any(|e| e.action == Action::Annotate),
        "annotations were recorded"
    );
    assert!(
        snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .any(|b| b.state == BlockState::ActivePendingFree),
        "a block is pending free"
    );
    let bytes = export(&snapshot);
    let back = load_pytorch_snapshot_as_snapshot(&bytes).expect("our file reads back");
    assert_eq!(back, snapshot, "ours → pickle → ours changes nothing");
    assert_eq!(back.validate(), Ok(()));

    // PyTorch's view of the same file: one trace list per device, request sizes for allocs.
    let pytorch = load_pytorch_snapshot(&bytes).expect("the typed import reads it");
    assert_eq!(pytorch.device_traces.len(), 2);
    for device in [0u32, 1] {
        let ours: Vec<_> = snapshot.device_events(device).collect();
        let theirs = &pytorch.device_traces[device as usize];
        assert_eq!(ours.len(), theirs.len(), "device {device}: entry count");
        for (e, t) in ours.iter().zip(theirs) {
            let size = if matches!(
                e.action,
                Action::Alloc | Action::FreeRequested | Action::FreeCompleted
            ) {
                e.requested
            } else {
                e.size
            };
            let origin = snapshot
                .time_origin_unix_us
                .expect("recording has an origin");
            assert_eq!(
                (t.action, t.addr, t.size, t.stream, t.time_us),
                (
                    e.action,
                    e.addr,
                    size,
                    e.stream.raw(),
                    Some(origin + e.time_us)
                ),
                "device {device}: entry of {e:?}"
            );
        }
    }
    let allocs: Vec<(u64, u64)> = pytorch.device_traces[0]
        .iter()
        .filter(|t| t.action == Action::Alloc)
        .map(|t| (t.addr, t.size))
        .collect();
    assert_eq!(
        allocs,
        [(BASE, 1000), (BASE + (2 << 20), 5000)],
        "PyTorch's alloc size is the request (1000 bytes in a 1024-byte block); stream 1 has \
         its own segment"
    );
}

#[test]
fn call_stacks_and_tags_round_trip_and_show_as_frames() {
    // Annotations reach every recording allocator: no other test may annotate meanwhile.
    let _serial = crate::history::annotating();
    let snapshot = recorded_run(Backtraces::Rust, "stacks");
    let with_frames = snapshot
        .contexts
        .iter()
        .filter(|(_, c)| !c.frames.is_empty())
        .count();
    assert!(with_frames > 0, "call stacks were captured");
    let bytes = export(&snapshot);
    assert_eq!(
        load_pytorch_snapshot_as_snapshot(&bytes),
        Ok(snapshot.clone())
    );

    let pytorch = load_pytorch_snapshot(&bytes).expect("the typed import reads it");
    let alloc = snapshot
        .device_events(1)
        .position(|e| e.action == Action::Alloc)
        .expect("device 1 allocated");
    let event = snapshot.device_events(1).nth(alloc).expect("present");
    let context = snapshot.contexts.get(event.context).expect("has a context");
    let frames = &pytorch.device_traces[1][alloc].frames;
    assert_eq!(frames.len(), context.frames.len() + 2, "two tag frames");
    let tail: Vec<(&str, &str)> = frames[context.frames.len()..]
        .iter()
        .map(|f| (&*f.name, &*f.filename))
        .collect();
    assert_eq!(
        tail,
        [
            ("stacks-layer", TAG_FILENAME),
            ("stacks-model", TAG_FILENAME)
        ],
        "tags follow the frames, innermost first"
    );
}

/// What each fixture holds, counted with CPython (an unpickler whose `find_class` raises).
struct Fixture {
    name: &'static str,
    segments: usize,
    blocks: usize,
    active_blocks: usize,
    /// Trace entries of each device; external annotations are not among them.
    entries: &'static [usize],
    external_annotations: usize,
    /// Trace lists of the exported file: one per device index up to the highest in use.
    exported_devices: usize,
    time_origin: Option<u64>,
}

/// The project's fixtures: third-party files whose license allows it, then the made ones
/// (their numbers follow from `fixtures/made/make.py`).
const PROJECT_FIXTURES: &[Fixture] = &[
    Fixture {
        name: "Yiyi_LLM-inference_oom_snapshot.pickle",
        segments: 176,
        blocks: 463,
        active_blocks: 460,
        entries: &[1],
        external_annotations: 0,
        exported_devices: 1,
        time_origin: None,
    },
    Fixture {
        name: "bcrafton_assignment2-systems_memory_snapshot.pickle",
        segments: 96,
        blocks: 550,
        active_blocks: 447,
        entries: &[6486],
        external_annotations: 2,
        exported_devices: 1,
        time_origin: Some(1_773_270_053_858_957),
    },
    Fixture {
        name: "notHanmin_assignment2-systems_memory_snapshot.pickle",
        segments: 999,
        blocks: 1987,
        active_blocks: 1313,
        entries: &[19_464],
        external_annotations: 4,
        exported_devices: 1,
        time_origin: Some(1_754_641_328_380_304),
    },
    Fixture {
        name: "made_empty_snapshot.pickle",
        segments: 0,
        blocks: 0,
        active_blocks: 0,
        entries: &[0, 0, 0, 0],
        external_annotations: 0,
        exported_devices: 0,
        time_origin: None,
    },
    Fixture {
        name: "made_expandable_two_devices.pickle",
        segments: 3,
        blocks: 7,
        active_blocks: 3,
        entries: &[0, 0],
        external_annotations: 0,
        exported_devices: 2,
        time_origin: None,
    },
    Fixture {
        name: "made_four_device_traces_without_times.pickle",
        segments: 2,
        blocks: 8,
        active_blocks: 4,
        entries: &[12, 0, 0, 0],
        external_annotations: 0,
        exported_devices: 1,
        time_origin: None,
    },
    Fixture {
        name: "made_segment_list.pickle",
        segments: 3,
        blocks: 6,
        active_blocks: 4,
        entries: &[],
        external_annotations: 0,
        exported_devices: 2,
        time_origin: None,
    },
];

/// The external suite's files the project may not copy.
const EXTERNAL_FIXTURES: &[Fixture] = &[
    Fixture {
        name: "Maphsge4_select_n_snapshot_1.2M.pickle",
        segments: 82,
        blocks: 415,
        active_blocks: 400,
        entries: &[4496, 0, 0, 0],
        external_annotations: 0,
        exported_devices: 1,
        time_origin: None,
    },
    Fixture {
        name: "Muduard_LayoutEditing_memory_snapshot.pkl",
        segments: 255,
        blocks: 2140,
        active_blocks: 1938,
        entries: &[],
        external_annotations: 0,
        exported_devices: 2,
        time_origin: None,
    },
    Fixture {
        name: "SunnySood80_dump_snapshot_517.pickle",
        segments: 0,
        blocks: 0,
        active_blocks: 0,
        entries: &[0, 0, 0, 0],
        external_annotations: 0,
        exported_devices: 0,
        time_origin: None,
    },
    Fixture {
        name: "albi2_thesis_dump_snapshot_1064.pickle",
        segments: 2,
        blocks: 7,
        active_blocks: 3,
        entries: &[0],
        external_annotations: 0,
        exported_devices: 1,
        time_origin: None,
    },
    Fixture {
        name: "kkaitlyn111_cs336_memory_ctx128_forward.pickle",
        segments: 516,
        blocks: 1276,
        active_blocks: 1227,
        entries: &[4657],
        external_annotations: 0,
        exported_devices: 1,
        time_origin: Some(1_748_729_097_138_624),
    },
];

/// Checks that `exported` (PyTorch's view of our file) keeps what `original` had.
fn assert_same_memory(name: &str, original: &PytorchSnapshot, exported: &PytorchSnapshot) {
    let mut theirs: Vec<_> = original.segments.iter().collect();
    theirs.sort_by_key(|s| (s.device, s.address));
    assert_eq!(exported.segments.len(), theirs.len(), "{name}: segments");
    for (ours, theirs) in exported.segments.iter().zip(theirs) {
        let at = format!("{name}: segment {:#x}", theirs.address);
        assert_eq!(
            (ours.device, ours.address, ours.total_size, ours.stream),
            (
                theirs.device,
                theirs.address,
                theirs.total_size,
                theirs.stream
            ),
            "{at}"
        );
        assert_eq!(ours.segment_type, theirs.segment_type, "{at}");
        assert_eq!(
            (ours.allocated_size, ours.active_size),
            (theirs.allocated_size, theirs.active_size),
            "{at}: byte totals"
        );
        assert_eq!(ours.frames, theirs.frames, "{at}: frames");
        assert_eq!(ours.blocks.len(), theirs.blocks.len(), "{at}: blocks");
        for (b, t) in ours.blocks.iter().zip(&theirs.blocks) {
            assert_eq!(
                (b.address, b.size, b.state),
                (t.address, t.size, t.state),
                "{at}: block"
            );
            if t.state != PtState::Inactive {
                assert_eq!(b.requested_size, t.requested_size, "{at}: block request");
                assert_eq!(b.frames, t.frames, "{at}: block frames");
            }
        }
    }
    for (device, theirs) in original.device_traces.iter().enumerate() {
        let ours: Vec<_> = exported
            .device_traces
            .get(device)
            .map(|t| t.iter().filter(|e| e.action != Action::Annotate).collect())
            .unwrap_or_default();
        assert_eq!(ours.len(), theirs.len(), "{name}: device {device} entries");
        for (o, t) in ours.iter().zip(theirs) {
            assert_eq!(
                (o.action, o.addr, o.size, o.stream, &o.frames),
                (t.action, t.addr, t.size, t.stream, &t.frames),
                "{name}: device {device} entry"
            );
            if t.time_us.is_some() {
                assert_eq!(o.time_us, t.time_us, "{name}: time_us since the epoch");
            }
        }
    }
}

#[test]
fn every_project_fixture_survives_pytorch_to_snapshot_to_pickle() {
    check_round_trips(PROJECT_FIXTURES);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_fixtures_survive_pytorch_to_snapshot_to_pickle() {
    check_round_trips(EXTERNAL_FIXTURES);
}

/// Each fixture imports with the counts it lists, exports to PyTorch's format, and reads back
/// with the same memory.
fn check_round_trips(fixtures: &[Fixture]) {
    for want in fixtures {
        let name = want.name;
        let bytes = pytorch_snapshot_bytes(name);
        let original = load_pytorch_snapshot(&bytes).expect("fixture imports");
        let snapshot = load_pytorch_snapshot_as_snapshot(&bytes).expect("fixture converts");
        assert_eq!(snapshot.validate(), Ok(()), "{name}: valid");
        assert_eq!(snapshot.segments.len(), want.segments, "{name}: segments");
        let blocks: Vec<_> = snapshot.segments.iter().flat_map(|s| &s.blocks).collect();
        assert_eq!(blocks.len(), want.blocks, "{name}: blocks");
        let active = blocks.iter().filter(|b| b.state.is_active()).count();
        assert_eq!(active, want.active_blocks, "{name}: active blocks");
        assert!(
            blocks
                .iter()
                .all(|b| b.state.is_active() || (b.requested, b.context) == (0, ContextId::NONE)),
            "{name}: inactive blocks have no request and no context"
        );
        let annotations = snapshot
            .events
            .iter()
            .filter(|e| e.action == Action::Annotate)
            .count();
        assert_eq!(
            snapshot.events.len(),
            want.entries.iter().sum::<usize>() + want.external_annotations,
            "{name}: events"
        );
        assert_eq!(
            annotations, want.external_annotations,
            "{name}: annotations"
        );
        assert_eq!(
            snapshot.time_origin_unix_us, want.time_origin,
            "{name}: origin"
        );
        assert!(
            snapshot
                .events
                .windows(2)
                .all(|w| w[0].time_us <= w[1].time_us),
            "{name}: events in time order"
        );

        let exported = export(&snapshot);
        let again = load_pytorch_snapshot_as_snapshot(&exported).expect("our file reads back");
        assert_eq!(
            again, snapshot,
            "{name}: Snapshot → pickle → Snapshot is exact"
        );
        let pytorch = load_pytorch_snapshot(&exported).expect("typed import of our file");
        assert_eq!(
            pytorch.device_traces.len(),
            want.exported_devices,
            "{name}: trace lists"
        );
        let user_defined = pytorch
            .device_traces
            .iter()
            .flatten()
            .filter(|e| e.action == Action::Annotate)
            .count();
        // The annotations the import inserted from `external_annotations` go back there, so
        // that `device_traces` keeps PyTorch's indices; none becomes a `user_defined` entry.
        assert_eq!(user_defined, 0, "{name}: user_defined");
        let external = match &pytorch.external_annotations {
            Some(blockpool::trace::pickle::Value::List(entries)) => entries.len(),
            _ => 0,
        };
        assert_eq!(
            external, want.external_annotations,
            "{name}: external_annotations"
        );
        assert_same_memory(name, &original, &pytorch);
    }
}

#[test]
fn an_exported_value_validates_on_re_import() {
    let snapshot = recorded_run(Backtraces::None, "validate");
    let value = snapshot_to_pytorch_value(&snapshot).expect("two devices export");
    let back = blockpool::trace::pytorch::snapshot_from_pytorch_value(&value).expect("imports");
    assert_eq!(back.validate(), Ok(()));
    assert_eq!(back.contexts.len(), snapshot.contexts.len());
}

/// Loads stdin with an unpickler whose `find_class` raises and checks PyTorch's keys and the
/// values passed on the command line.
const CPYTHON_CHECK: &str = r#"
import io, pickle, sys

class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

base, origin, alloc_time, tag_file = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
snap = Restricted(io.BytesIO(sys.stdin.buffer.read())).load()
assert list(snap)[:4] == ['segments', 'device_traces', 'allocator_settings', 'external_annotations'], list(snap)
seg = snap['segments'][0]
want = ['device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size',
        'stream', 'segment_type', 'segment_pool_id', 'is_expandable', 'frames', 'blocks']
assert list(seg)[:12] == want, list(seg)
assert (seg['device'], seg['address'], seg['total_size'], seg['segment_type']) == (0, base, 2 << 20, 'small'), seg
assert seg['segment_pool_id'] == (0, 0) and seg['is_expandable'] is False
block = seg['blocks'][0]
assert list(block)[:5] == ['address', 'size', 'requested_size', 'state', 'frames'], list(block)
assert (block['address'], block['size'], block['requested_size'], block['state']) == (base, 1024, 1000, 'active_allocated'), block
assert len(snap['device_traces']) == 2
d0 = snap['device_traces'][0]
allocs = [e for e in d0 if e['action'] == 'alloc']
first = allocs[0]
for key in ['action', 'addr', 'size', 'stream', 'time_us', 'frames', 'user_metadata']:
    assert key in first, key
assert (first['addr'], first['size'], first['stream'], first['time_us']) == (base, 1000, 0, alloc_time), first
assert first['user_metadata'] == 'cpython-model', first['user_metadata']
assert [(f['name'], f['filename'], f['line']) for f in first['frames']] == [('cpython-model', tag_file, 0)]
for trace in snap['device_traces']:
    marks = [e['user_metadata'] for e in trace if e['action'] == 'user_defined'
             and e['user_metadata'].startswith('cpython-')]
    assert marks == ['cpython-model', 'cpython-model/cpython-layer', 'cpython-model'], marks
snapshots = [e for t in snap['device_traces'] for e in t if e['action'] == 'snapshot']
assert len(snapshots) == 2, snapshots
assert snap['allocator_settings']['PYTORCH_CUDA_ALLOC_CONF'] == sys.argv[5]
refs = [e['frames'] for t in snap['device_traces'] for e in t if e['frames']]
assert len({id(f) for f in refs}) < len(refs), "frame lists are shared, not copied"
assert all(e['time_us'] >= origin for t in snap['device_traces'] for e in t)
print('ok')
"#;

#[test]
fn cpython_loads_our_file_without_any_class_and_finds_pytorchs_keys() {
    let snapshot = recorded_run(Backtraces::None, "cpython");
    let origin = snapshot
        .time_origin_unix_us
        .expect("recording has an origin");
    let alloc = snapshot
        .events
        .iter()
        .find(|e| e.action == Action::Alloc && e.device == 0)
        .expect("device 0 allocated");
    let config = snapshot.allocator_config.clone().expect("config is known");
    let args = [
        BASE.to_string(),
        origin.to_string(),
        (origin + alloc.time_us).to_string(),
        TAG_FILENAME.to_string(),
        config,
    ];
    let bytes = export(&snapshot);
    let child = Command::new("python3")
        .arg("-c")
        .arg(CPYTHON_CHECK)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    // Not a skip when python3 is missing: the check is part of the suite (CI has CPython).
    let mut child = child.unwrap_or_else(|error| {
        panic!("cannot start python3 ({error}); this test needs CPython 3 on PATH")
    });
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let feeder = std::thread::spawn(move || stdin.write_all(&bytes));
    let output = child.wait_with_output().expect("python3 ran");
    feeder
        .join()
        .expect("stdin feeder did not panic")
        .expect("python3 read the whole file");
    assert!(
        output.status.success(),
        "CPython's check failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ok");
}
