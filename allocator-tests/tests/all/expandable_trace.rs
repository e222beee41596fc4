//! Traces of a run with expandable segments: the state rebuilt at every checkpoint from the
//! final snapshot equals the live state the allocator showed there, and the snapshot survives
//! our JSON Lines file and PyTorch's pickle unchanged, with PyTorch's `is_expandable` set.

use blockpool::event::{Backtraces, ContextLevel};
use blockpool::trace::pytorch::{load_pytorch_snapshot_as_snapshot, write_pytorch_snapshot};
use blockpool::trace::state::MemoryTotals;
use blockpool::trace::{jsonl, Action, Snapshot};
use blockpool::DeviceIndex;
use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};

const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId::from_raw(1);

struct Checkpoint {
    snapshot: Snapshot,
    events: usize,
    totals: MemoryTotals,
}

fn checkpoint(alloc: &CachingAllocator<SimBackend>) -> Checkpoint {
    let snapshot = alloc.snapshot();
    let events = snapshot.device_events(0).count();
    let stats = alloc.memory_stats(0).expect("device 0");
    let get = |key: &str| stats[key] as u64;
    let totals = MemoryTotals {
        allocated_bytes: get("allocated_bytes.all.current"),
        active_bytes: get("active_bytes.all.current"),
        requested_bytes: get("requested_bytes.all.current"),
        reserved_bytes: get("reserved_bytes.all.current"),
        allocations: get("allocation.all.current"),
        active_blocks: get("active.all.current"),
        // PyTorch counts no segment for expandable memory; the rebuilt state counts runs.
        segments: snapshot.device_segments(0).count() as u64,
    };
    Checkpoint {
        snapshot,
        events,
        totals,
    }
}

/// A run that maps, splits, frees across streams, unmaps holes and maps them again, in both
/// pools, with a checkpoint after each phase; returns the final snapshot and the checkpoints.
fn record_run() -> (Snapshot, Vec<Checkpoint>) {
    let sim = SimBackend::new(1, 128 * MIB);
    let config = AllocatorConfig::parse("expandable_segments:True").expect("parses");
    let alloc = CachingAllocator::new(sim.clone(), config);
    let early = alloc.allocate(0, 3 * MIB, S0).unwrap(); // before the trace
    alloc
        .record_memory_history(HistorySettings {
            enabled: true,
            context: ContextLevel::None,
            max_entries: usize::MAX,
            stacks: Backtraces::None,
        })
        .unwrap();
    let mut points = vec![checkpoint(&alloc)];

    let small: Vec<_> = (0..6)
        .map(|i| alloc.allocate(0, 700 * 1024 + i * 512, S0).unwrap())
        .collect();
    let a = alloc.allocate(0, 15 * MIB, S0).unwrap();
    let b = alloc.allocate(0, 25 * MIB, S0).unwrap();
    let c = alloc.allocate(0, 15 * MIB, S0).unwrap();
    let other = alloc.allocate(0, 5 * MIB, S1).unwrap();
    points.push(checkpoint(&alloc));

    b.record_stream(S1).unwrap();
    drop(b);
    drop(small);
    points.push(checkpoint(&alloc));

    sim.complete_stream(DeviceIndex::new(0), S1).unwrap();
    alloc.empty_cache().unwrap();
    points.push(checkpoint(&alloc));

    let d = alloc.allocate(0, 20 * MIB, S0).unwrap();
    let e = alloc.allocate(0, 4096, S0).unwrap();
    drop(early);
    points.push(checkpoint(&alloc));

    drop((a, other));
    alloc.empty_cache().unwrap();
    points.push(checkpoint(&alloc));
    let last = alloc.snapshot();
    drop((c, d, e));
    (last, points)
}

#[test]
fn rebuilt_state_at_every_checkpoint_equals_the_live_state() {
    let _serial = crate::history::annotating();
    let (last, points) = record_run();
    let actions: Vec<Action> = last.device_events(0).map(|e| e.action).collect();
    assert!(actions.contains(&Action::SegmentMap) && actions.contains(&Action::SegmentUnmap));
    assert!(
        !actions.contains(&Action::SegmentAlloc) && !actions.contains(&Action::SegmentFree),
        "expandable memory is mapped, not allocated: {actions:?}"
    );
    for (n, point) in points.iter().enumerate() {
        let want: Vec<_> = point.snapshot.device_segments(0).cloned().collect();
        let state = last
            .state_at(0, point.events)
            .unwrap_or_else(|e| panic!("checkpoint {n} rebuilds: {e}"));
        assert_eq!(state.segments, want, "checkpoint {n}");
        assert!(state.unsegmented.is_empty(), "checkpoint {n}");
        assert_eq!(state.totals(), point.totals, "checkpoint {n}: totals");
    }
    let n = last.device_events(0).count();
    assert_eq!(
        last.state_at(0, n).unwrap().segments,
        last.device_segments(0).cloned().collect::<Vec<_>>()
    );
}

#[test]
fn expandable_snapshots_survive_jsonl_and_pytorch_pickle() {
    let _serial = crate::history::annotating();
    let (last, _) = record_run();
    assert!(last.segments.len() >= 2, "holes make several runs");
    assert!(
        last.segments.iter().all(|s| s.expandable),
        "every segment is mapped memory: {:?}",
        last.segments
    );

    let mut bytes = Vec::new();
    jsonl::write_snapshot(&last, &mut bytes).expect("writes jsonl");
    let (from_jsonl, report) = jsonl::read_snapshot(bytes.as_slice()).expect("reads jsonl");
    assert!(report.complete);
    assert_eq!(from_jsonl, last, "JSON Lines round trip");

    let mut pickle = Vec::new();
    write_pytorch_snapshot(&last, &mut pickle).expect("writes pickle");
    let from_pickle = load_pytorch_snapshot_as_snapshot(&pickle).expect("reads pickle");
    assert_eq!(from_pickle, last, "PyTorch pickle round trip");

    let model = blockpool::trace::pytorch::load_pytorch_snapshot(&pickle).expect("model");
    assert_eq!(model.segments.len(), last.segments.len());
    assert!(
        model.segments.iter().all(|s| s.is_expandable),
        "PyTorch's snapshot marks every segment is_expandable"
    );
}
