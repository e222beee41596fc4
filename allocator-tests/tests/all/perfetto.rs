//! Perfetto / Chrome trace-event JSON export: exact output for a hand-built snapshot, for a
//! scripted `CachingAllocator` run with annotations, and for an RMM log.
//!
//! Tests that annotate hold [`annotating`](crate::history::annotating) (see `history.rs`).

use blockpool::event::TraceEvent;
use blockpool::introspect::PoolKind;
use blockpool::trace::perfetto::{annotation_intervals, write_perfetto, AnnotationInterval};
use blockpool::trace::rmm::{read_rmm_csv, snapshot_from_rmm};
use blockpool::trace::snapshot::{Block, Segment};
use blockpool::trace::{Action, BlockState, Context, ContextId, Snapshot};
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};

fn json(snapshot: &Snapshot) -> String {
    let mut out = Vec::new();
    write_perfetto(snapshot, &mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn event(action: Action, device: u32, time_us: u64, sizes: (u64, u64, u64)) -> TraceEvent {
    TraceEvent {
        action,
        device,
        stream: StreamId::DEFAULT,
        addr: sizes.0,
        size: sizes.1,
        requested: sizes.2,
        time_us,
        context: ContextId::NONE,
    }
}

/// Device 0: a segment with one live block at the end; an annotated step with an out of memory
/// failure inside. Device 1: a failure and nothing else.
fn hand_built() -> Snapshot {
    let mut snapshot = Snapshot {
        allocator_config: Some("max_split_size_mb:64".into()),
        time_origin_unix_us: Some(1_700_000_000_000_000),
        ..Snapshot::default()
    };
    let mut stack = |tags: &[&str]| {
        snapshot.contexts.intern(Context {
            tags: tags.iter().map(|&t| t.into()).collect(),
            frames: Vec::new(),
        })
    };
    let (step, attn, empty) = (stack(&["step"]), stack(&["step", "attn \"q\""]), stack(&[]));
    let annotation = |time_us, context| TraceEvent {
        context,
        ..event(Action::Annotate, 0, time_us, (0, 0, 0))
    };
    use Action::{Alloc, FreeCompleted, FreeRequested, Oom, SegmentAlloc};
    snapshot.events = vec![
        annotation(0, step),
        event(SegmentAlloc, 0, 5, (0x1000, 4096, 0)),
        event(Alloc, 0, 6, (0x1000, 1024, 1000)),
        annotation(7, attn),
        TraceEvent {
            stream: StreamId::from_raw(7),
            ..event(Oom, 0, 9, (2048, 8192, 0))
        },
        event(Oom, 1, 9, (0, 1 << 40, 0)),
        annotation(10, step),
        event(Alloc, 0, 12, (0x1400, 512, 512)),
        event(FreeRequested, 0, 13, (0x1400, 512, 512)),
        event(FreeCompleted, 0, 14, (0x1400, 512, 512)),
        annotation(20, empty),
    ];
    let block = |address, size, requested, state| Block {
        address,
        size,
        requested,
        state,
        context: ContextId::NONE,
    };
    snapshot.segments = vec![Segment {
        device: 0,
        address: 0x1000,
        size: 4096,
        stream: StreamId::DEFAULT,
        pool: PoolKind::Small,
        expandable: false,
        context: ContextId::NONE,
        blocks: vec![
            block(0x1000, 1024, 1000, BlockState::ActiveAllocated),
            block(0x1400, 3072, 0, BlockState::Inactive),
        ],
    }];
    snapshot
}

#[test]
fn a_hand_built_snapshot_exports_to_exact_trace_event_json() {
    let snapshot = hand_built();
    assert_eq!(snapshot.validate(), Ok(()));
    let expected = r#"{"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"GPU 0"}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"annotations"}},
{"name":"allocated","ph":"C","ts":0,"pid":1,"args":{"bytes":0}},
{"name":"reserved","ph":"C","ts":0,"pid":1,"args":{"bytes":0}},
{"name":"requested","ph":"C","ts":0,"pid":1,"args":{"bytes":0}},
{"name":"reserved","ph":"C","ts":5,"pid":1,"args":{"bytes":4096}},
{"name":"allocated","ph":"C","ts":6,"pid":1,"args":{"bytes":1024}},
{"name":"requested","ph":"C","ts":6,"pid":1,"args":{"bytes":1000}},
{"name":"allocated","ph":"C","ts":12,"pid":1,"args":{"bytes":1536}},
{"name":"requested","ph":"C","ts":12,"pid":1,"args":{"bytes":1512}},
{"name":"allocated","ph":"C","ts":14,"pid":1,"args":{"bytes":1024}},
{"name":"requested","ph":"C","ts":14,"pid":1,"args":{"bytes":1000}},
{"name":"oom","ph":"i","ts":9,"pid":1,"s":"p","args":{"requested_bytes":8192,"device_free_bytes":2048,"stream":7}},
{"name":"step","ph":"X","ts":0,"dur":20,"pid":1,"tid":1},
{"name":"attn \"q\"","ph":"X","ts":7,"dur":3,"pid":1,"tid":1},
{"name":"process_name","ph":"M","pid":2,"args":{"name":"GPU 1"}},
{"name":"allocated","ph":"C","ts":9,"pid":2,"args":{"bytes":0}},
{"name":"requested","ph":"C","ts":9,"pid":2,"args":{"bytes":0}},
{"name":"oom","ph":"i","ts":9,"pid":2,"s":"p","args":{"requested_bytes":1099511627776,"device_free_bytes":0,"stream":0}}
],"displayTimeUnit":"ms","otherData":{"time_origin_unix_us":1700000000000000,"allocator_config":"max_split_size_mb:64"}}
"#;
    assert_eq!(json(&snapshot), expected);
}

#[test]
fn an_empty_snapshot_is_an_empty_trace() {
    assert_eq!(
        json(&Snapshot::default()),
        "{\"traceEvents\":[\n],\"displayTimeUnit\":\"ms\",\"otherData\":{}}\n"
    );
}

#[test]
fn a_recorded_run_with_annotations_exports_its_counters_and_slices() {
    let _serial = crate::history::annotating();
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    let before = alloc.allocate(0, 1 << 20, StreamId::DEFAULT).unwrap();
    alloc
        .record_memory_history(HistorySettings::default())
        .unwrap();
    {
        let _step = annotate("perfetto-step");
        let a = alloc.allocate(0, 3 << 20, StreamId::DEFAULT).unwrap();
        {
            let _forward = annotate("perfetto-forward");
            drop(alloc.allocate(0, 1000, StreamId::DEFAULT).unwrap());
        }
        drop(a);
    }
    alloc.empty_cache().unwrap();
    let mut snapshot = alloc.snapshot();
    // Real times vary from run to run: number the events 0, 10, 20, ... instead.
    for (index, event) in snapshot.events.iter_mut().enumerate() {
        event.time_us = index as u64 * 10;
    }
    snapshot.time_origin_unix_us = None;
    let actions: Vec<Action> = snapshot.events.iter().map(|e| e.action).collect();
    use Action::{Alloc, Annotate, FreeCompleted, FreeRequested, SegmentAlloc, SegmentFree};
    assert_eq!(
        actions,
        [
            Annotate,
            SegmentAlloc,
            Alloc,
            Annotate,
            Alloc,
            FreeRequested,
            FreeCompleted,
            Annotate,
            FreeRequested,
            FreeCompleted,
            Annotate,
            SegmentFree,
            Action::Snapshot,
        ]
    );
    let interval = |tag: &str, depth, start_us, end_us| AnnotationInterval {
        tag: tag.into(),
        depth,
        start_us,
        end_us,
    };
    assert_eq!(
        annotation_intervals(&snapshot, 0),
        [
            interval("perfetto-step", 0, 0, 100),
            interval("perfetto-forward", 1, 30, 70),
        ]
    );
    let expected = format!(
        r#"{{"traceEvents":[
{{"name":"process_name","ph":"M","pid":1,"args":{{"name":"GPU 0"}}}},
{{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{{"name":"annotations"}}}},
{{"name":"allocated","ph":"C","ts":0,"pid":1,"args":{{"bytes":1048576}}}},
{{"name":"reserved","ph":"C","ts":0,"pid":1,"args":{{"bytes":2097152}}}},
{{"name":"requested","ph":"C","ts":0,"pid":1,"args":{{"bytes":1048576}}}},
{{"name":"reserved","ph":"C","ts":10,"pid":1,"args":{{"bytes":23068672}}}},
{{"name":"allocated","ph":"C","ts":20,"pid":1,"args":{{"bytes":4194304}}}},
{{"name":"requested","ph":"C","ts":20,"pid":1,"args":{{"bytes":4194304}}}},
{{"name":"allocated","ph":"C","ts":40,"pid":1,"args":{{"bytes":4195328}}}},
{{"name":"requested","ph":"C","ts":40,"pid":1,"args":{{"bytes":4195304}}}},
{{"name":"allocated","ph":"C","ts":60,"pid":1,"args":{{"bytes":4194304}}}},
{{"name":"requested","ph":"C","ts":60,"pid":1,"args":{{"bytes":4194304}}}},
{{"name":"allocated","ph":"C","ts":90,"pid":1,"args":{{"bytes":1048576}}}},
{{"name":"requested","ph":"C","ts":90,"pid":1,"args":{{"bytes":1048576}}}},
{{"name":"reserved","ph":"C","ts":110,"pid":1,"args":{{"bytes":2097152}}}},
{{"name":"perfetto-step","ph":"X","ts":0,"dur":100,"pid":1,"tid":1}},
{{"name":"perfetto-forward","ph":"X","ts":30,"dur":40,"pid":1,"tid":1}}
],"displayTimeUnit":"ms","otherData":{{"allocator_config":"{}"}}}}
"#,
        AllocatorConfig::default()
    );
    assert_eq!(json(&snapshot), expected);
    drop(before);
}

#[test]
fn an_rmm_log_exports_without_a_reserved_track() {
    let log = "Thread,Time,Action,Pointer,Size,Stream\n\
               7,10:00:00.000000,free,0x7f0000000000,4096,0\n\
               7,10:00:00.000020,allocate,0x7f0000100000,256,0x2\n\
               8,10:00:00.000030,allocate failure,(nil),1073741824,0x2\n";
    let snapshot = snapshot_from_rmm(&read_rmm_csv(log.as_bytes()).unwrap());
    let expected = r#"{"traceEvents":[
{"name":"process_name","ph":"M","pid":1,"args":{"name":"GPU 0"}},
{"name":"allocated","ph":"C","ts":0,"pid":1,"args":{"bytes":4096}},
{"name":"requested","ph":"C","ts":0,"pid":1,"args":{"bytes":4096}},
{"name":"allocated","ph":"C","ts":0,"pid":1,"args":{"bytes":0}},
{"name":"requested","ph":"C","ts":0,"pid":1,"args":{"bytes":0}},
{"name":"allocated","ph":"C","ts":20,"pid":1,"args":{"bytes":256}},
{"name":"requested","ph":"C","ts":20,"pid":1,"args":{"bytes":256}},
{"name":"oom","ph":"i","ts":30,"pid":1,"s":"p","args":{"requested_bytes":1073741824,"device_free_bytes":0,"stream":2}}
],"displayTimeUnit":"ms","otherData":{"time_origin_unix_us":36000000000}}
"#;
    assert_eq!(
        json(&snapshot),
        expected,
        "the free of memory allocated before the log began starts the counters at 4096"
    );
}
