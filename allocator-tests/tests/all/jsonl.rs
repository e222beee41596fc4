//! Native trace files from a running allocator: `dump_snapshot` round trips (plain and gzip,
//! several devices, tags and frames) and `stream_history_to`, whose file read back holds what
//! `history()` holds, reads while still being written, and survives the allocator's drop.
//!
//! `annotate` sends events to every recording allocator in the process and tests run in
//! parallel, so event sequences are compared without `annotate` events.

use blockpool::event::{Backtraces, Context, TraceEvent};
use blockpool::introspect::Introspect;
use blockpool::trace::jsonl::{self, JsonlError};
use blockpool::trace::snapshot::Snapshot;
use blockpool::trace::{Action, BlockState};
use blockpool::DeviceIndex;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const S1: StreamId = StreamId::from_raw(1);

fn path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("blockpool-it-{}-{name}", std::process::id()))
}

fn recording(devices: usize, stacks: Backtraces) -> CachingAllocator<SimBackend> {
    let alloc = CachingAllocator::new(
        SimBackend::new(devices, 1 << 30),
        AllocatorConfig::default(),
    );
    alloc
        .record_memory_history(HistorySettings {
            stacks,
            ..HistorySettings::default()
        })
        .expect("valid settings");
    alloc
}

/// An event compared field by field, its context resolved: action, device, stream, address,
/// size, requested size, context.
type Resolved = (Action, u32, StreamId, u64, u64, u64, Option<Context>);

/// Each event without annotations, its context resolved.
fn resolved<'a>(
    events: impl Iterator<Item = &'a TraceEvent>,
    context: impl Fn(&TraceEvent) -> Option<Context>,
) -> Vec<Resolved> {
    events
        .filter(|e| e.action != Action::Annotate)
        .map(|e| {
            (
                e.action,
                e.device,
                e.stream,
                e.addr,
                e.size,
                e.requested,
                context(e),
            )
        })
        .collect()
}

fn read_history(alloc: &CachingAllocator<SimBackend>, device: usize) -> Vec<Resolved> {
    let history = alloc.history(device).expect("device exists");
    resolved(history.iter(), |e| alloc.context(e.context))
}

fn file_history(snapshot: &Snapshot, device: u32) -> Vec<Resolved> {
    resolved(snapshot.device_events(device), |e| {
        snapshot.contexts.get(e.context).cloned()
    })
}

#[test]
fn dumped_snapshot_reads_back_equal_plain_and_gzip() {
    // Annotations reach every recording allocator: no other test may annotate meanwhile.
    let _serial = crate::history::annotating();
    let alloc = recording(2, Backtraces::Rust);
    let _tag = annotate("jsonl-dump");
    let a = alloc.allocate(0, 1000, StreamId::DEFAULT).expect("fits");
    let b = alloc.allocate(1, 3 << 20, S1).expect("fits");
    let c = alloc.allocate(1, 512, S1).expect("fits");
    drop(c);
    let snapshot = alloc.snapshot();
    assert!(
        snapshot
            .contexts
            .iter()
            .any(|(_, c)| !c.frames.is_empty() && !c.tags.is_empty()),
        "the sample has tags and frames"
    );
    for name in ["dump.jsonl", "dump.jsonl.gz"] {
        let path = path(name);
        jsonl::save(&snapshot, &path).expect("temp dir is writable");
        let (read, report) = jsonl::load(&path).expect("reads back");
        assert_eq!(read, snapshot, "{name}: the snapshot survives the file");
        assert!(
            report.complete && report.torn_line.is_none(),
            "{name}: {report:?}"
        );

        alloc.dump_snapshot(&path).expect("temp dir is writable");
        let (dumped, _) = jsonl::load(&path).expect("reads back");
        std::fs::remove_file(&path).expect("just written");
        assert_eq!(
            dumped.segments, snapshot.segments,
            "{name}: dump_snapshot writes the state"
        );
        assert_eq!(
            dumped.segments[0].blocks[0].state,
            BlockState::ActiveAllocated
        );
    }
    drop((a, b));
}

#[test]
fn streamed_file_holds_the_history_of_every_device() {
    // Annotations reach every recording allocator: no other test may annotate meanwhile.
    let _serial = crate::history::annotating();
    for name in ["stream.jsonl", "stream.jsonl.gz"] {
        let alloc = recording(2, Backtraces::None);
        let early = alloc.allocate(0, 4096, StreamId::DEFAULT).expect("fits");
        let path = path(name);
        let stream = alloc
            .stream_history_to(&path)
            .expect("temp dir is writable");
        {
            let _tag = annotate("jsonl-stream");
            let a = alloc.allocate(1, 5 << 20, S1).expect("fits");
            let b = alloc.allocate(0, 700, StreamId::DEFAULT).expect("fits");
            drop(a);
            drop(early);
            alloc.empty_cache().expect("sim frees");
            std::mem::forget(b);
        }
        let summary = stream.stop().expect("stream closes");
        let (read, report) = jsonl::load(&path).expect("reads back");
        std::fs::remove_file(&path).expect("just written");
        assert!(report.complete, "{name}: stopped cleanly: {report:?}");
        assert_eq!(summary.dropped_events, 0);
        assert_eq!(summary.events, report.events);
        // The stream starts after `early` was allocated: the history from there on.
        let mut history0 = read_history(&alloc, 0);
        history0.drain(..2);
        assert_eq!(file_history(&read, 0), history0, "{name}: device 0");
        assert_eq!(
            file_history(&read, 1),
            read_history(&alloc, 1),
            "{name}: device 1"
        );
        assert_eq!(
            file_history(&read, 1)
                .iter()
                .map(|e| e.0)
                .collect::<Vec<_>>(),
            [
                Action::SegmentAlloc,
                Action::Alloc,
                Action::FreeRequested,
                Action::FreeCompleted,
                Action::SegmentFree
            ]
        );
        let tagged = file_history(&read, 1)[1]
            .6
            .clone()
            .expect("alloc has a context");
        assert_eq!(tagged.tags, ["jsonl-stream".into()]);
        let segments: Vec<(u64, usize)> = read
            .segments
            .iter()
            .map(|s| (s.address, s.blocks.len()))
            .collect();
        let live = alloc.segments(DeviceIndex::new(0)).expect("device 0");
        assert_eq!(
            segments,
            [(live[0].addr, live[0].blocks.len())],
            "{name}: end state"
        );
    }
}

#[test]
fn a_stream_reads_while_it_is_written() {
    let alloc = recording(1, Backtraces::None);
    let path = path("live.jsonl");
    let stream = alloc
        .stream_history_to(&path)
        .expect("temp dir is writable");
    drop(alloc.allocate(0, 4096, StreamId::DEFAULT).expect("fits"));
    // What a crash now would leave: the flushed lines, no end line. Wait for the writer's
    // next flush (every 100 ms), polling so a slow machine only makes the test slower.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (read, report) = loop {
        let (read, report) = jsonl::load(&path).expect("a partial stream reads");
        let allocs = read
            .events
            .iter()
            .filter(|e| e.action != Action::Annotate)
            .count();
        if allocs >= 4 || Instant::now() > deadline {
            break (read, report);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!report.complete, "no end line while running");
    assert_eq!(
        resolved(read.events.iter(), |_| None)
            .iter()
            .map(|e| e.0)
            .collect::<Vec<_>>(),
        [
            Action::SegmentAlloc,
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted
        ]
    );
    stream.stop().expect("closes");
    std::fs::remove_file(&path).expect("just written");
}

#[test]
fn dropping_the_allocator_first_loses_no_event() {
    let alloc = recording(1, Backtraces::None);
    let path = path("orphan.jsonl");
    let stream = alloc
        .stream_history_to(&path)
        .expect("temp dir is writable");
    let a = alloc.allocate(0, 4096, StreamId::DEFAULT).expect("fits");
    let expected = read_history(&alloc, 0);
    drop(a);
    drop(alloc);
    let summary = stream.stop().expect("closes");
    let (read, report) = jsonl::load(&path).expect("reads back");
    std::fs::remove_file(&path).expect("just written");
    assert!(report.complete);
    let actions: Vec<Action> = file_history(&read, 0).iter().map(|e| e.0).collect();
    assert_eq!(
        &file_history(&read, 0)[..2],
        &expected[..],
        "what was recorded before the drop"
    );
    assert_eq!(
        actions,
        [
            Action::SegmentAlloc,
            Action::Alloc,
            Action::FreeRequested,
            Action::FreeCompleted,
            // Dropping the allocator gives its cached segment back.
            Action::SegmentFree
        ]
    );
    assert_eq!(summary.segments, 0, "no allocator, no end state");
}

#[test]
fn streaming_needs_recording_and_one_stream_at_a_time() {
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    let path = path("refused.jsonl");
    let err = alloc.stream_history_to(&path).unwrap_err();
    assert!(matches!(err, JsonlError::RecordingOff), "{err}");
    assert!(!path.exists(), "nothing is created when refused");
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("valid");
    let stream = alloc
        .stream_history_to(&path)
        .expect("temp dir is writable");
    let err = alloc
        .stream_history_to(path.with_extension("2"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "this allocator already streams its history to a file; stop that stream first"
    );
    drop(alloc.allocate(0, 512, StreamId::DEFAULT).expect("fits"));
    alloc
        .record_memory_history(HistorySettings::DISABLED)
        .expect("valid");
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("valid");
    drop(alloc.allocate(0, 512, StreamId::DEFAULT).expect("fits"));
    let summary = stream.stop().expect("closes");
    let (read, _) = jsonl::load(&path).expect("reads back");
    std::fs::remove_file(&path).expect("just written");
    assert_eq!(
        file_history(&read, 0).len(),
        4,
        "turning recording off ends the stream's events: {summary:?}"
    );
    let err = jsonl::load(&path).unwrap_err();
    assert!(
        err.to_string().starts_with("cannot open trace file "),
        "{err}"
    );
}
