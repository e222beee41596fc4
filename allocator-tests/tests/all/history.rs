//! History recording and contexts: exact event sequences for scripted operations, the ring
//! buffer's bound, which events carry a context at each level, annotations and interning.
//!
//! `annotate` and dropping its guard send an event to every recording allocator in the
//! process, and tests run in parallel, so sequences are compared without `annotate` events,
//! and every test in this binary that annotates holds [`annotating`] while it does: an
//! allocator that records under that lock sees the annotate events of its own test only, in
//! exact sequence.

use blockpool::event::{Backtraces, ContextLevel, TraceEvent};
use blockpool::introspect::Introspect;
use blockpool::trace::{Action, ContextId};
use blockpool::DeviceIndex;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, Error, HistorySettings, SimBackend, StreamId,
};
use std::sync::{Mutex, MutexGuard};

/// Serializes the tests that call `annotate` (see the module docs); a test that failed while
/// holding it does not stop the others.
pub(crate) fn annotating() -> MutexGuard<'static, ()> {
    static ANNOTATING: Mutex<()> = Mutex::new(());
    ANNOTATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const BASE: u64 = 0x7f00_0000_0000;
const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId::from_raw(1);

fn setup(devices: usize, capacity: usize) -> (SimBackend, CachingAllocator<SimBackend>) {
    let sim = SimBackend::new(devices, capacity);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    (sim, alloc)
}

fn settings(context: ContextLevel, max_entries: usize) -> HistorySettings {
    HistorySettings {
        enabled: true,
        context,
        max_entries,
        stacks: Backtraces::None,
    }
}

/// The events of device 0 other than annotations.
fn events(alloc: &CachingAllocator<SimBackend>) -> Vec<TraceEvent> {
    let events = alloc.history(0).expect("device 0 exists");
    let mut last = 0;
    for e in &events {
        assert!(e.time_us >= last, "event times never go back: {events:?}");
        last = e.time_us;
    }
    events
        .into_iter()
        .filter(|e| e.action != Action::Annotate)
        .collect()
}

/// (action, stream, addr, size, requested) of each event.
fn shape(events: &[TraceEvent]) -> Vec<(Action, StreamId, u64, u64, u64)> {
    events
        .iter()
        .map(|e| (e.action, e.stream, e.addr, e.size, e.requested))
        .collect()
}

fn tags(alloc: &CachingAllocator<SimBackend>, id: ContextId) -> Vec<String> {
    match alloc.context(id) {
        Some(context) => context.tags.iter().map(|t| t.to_string()).collect(),
        None => panic!("context {id:?} does not resolve"),
    }
}

#[test]
fn alloc_free_and_empty_cache_record_pytorchs_events() {
    let (_sim, alloc) = setup(1, 1 << 30);
    alloc
        .record_memory_history(settings(ContextLevel::All, 1000))
        .unwrap();
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let b = alloc.allocate(0, 1000, S0).unwrap();
    drop(a);
    drop(b);
    alloc.empty_cache().unwrap();
    use Action::*;
    let seg = 2 * MIB as u64;
    assert_eq!(
        shape(&events(&alloc)),
        [
            (SegmentAlloc, S0, BASE, seg, 0),
            (Alloc, S0, BASE, 4096, 4096),
            (Alloc, S0, BASE + 4096, 1024, 1000),
            (FreeRequested, S0, BASE, 4096, 4096),
            (FreeCompleted, S0, BASE, 4096, 4096),
            (FreeRequested, S0, BASE + 4096, 1024, 1000),
            (FreeCompleted, S0, BASE + 4096, 1024, 1000),
            (SegmentFree, S0, BASE, seg, 0),
        ],
        "segment, block and free events in PyTorch's order with block sizes and requests"
    );
    assert!(events(&alloc).iter().all(|e| e.device == 0));
}

#[test]
fn deferred_free_completes_when_the_other_stream_finishes() {
    let (sim, alloc) = setup(1, 1 << 30);
    alloc
        .record_memory_history(settings(ContextLevel::None, 1000))
        .unwrap();
    let ptr = alloc.malloc(0, 4096, S0).unwrap();
    alloc.record_stream(0, ptr, S1).unwrap();
    alloc.free(0, ptr).unwrap();
    let b = alloc.malloc(0, 4096, S0).unwrap();
    assert_eq!(b, BASE + 4096, "the pending block is not reused");
    sim.complete_stream(DeviceIndex::new(0), S1).unwrap();
    let c = alloc.malloc(0, 4096, S0).unwrap();
    assert_eq!(c, BASE, "the completed block is reused");
    use Action::*;
    assert_eq!(
        shape(&events(&alloc)),
        [
            (SegmentAlloc, S0, BASE, 2 * MIB as u64, 0),
            (Alloc, S0, BASE, 4096, 4096),
            (FreeRequested, S0, BASE, 4096, 4096),
            (Alloc, S0, BASE + 4096, 4096, 4096),
            (FreeCompleted, S0, BASE, 4096, 4096),
            (Alloc, S0, BASE, 4096, 4096),
        ],
        "free_completed comes only at the malloc after the stream finished"
    );
}

#[test]
fn out_of_memory_records_free_bytes_and_the_rounded_request() {
    let (_sim, alloc) = setup(1, 64 * MIB);
    alloc
        .record_memory_history(settings(ContextLevel::All, 1000))
        .unwrap();
    let a = alloc.allocate(0, 40 * MIB, S0).unwrap();
    // 30 MiB + 1 rounds to 30 MiB + 512 and needs a 32 MiB segment; 24 MiB are free.
    let err = alloc.allocate(0, 30 * MIB + 1, S0).unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
    use Action::*;
    let (m40, m24) = (40 * MIB as u64, 24 * MIB as u64);
    assert_eq!(
        shape(&events(&alloc)),
        [
            (SegmentAlloc, S0, BASE, m40, 0),
            (Alloc, S0, BASE, m40, m40),
            (Oom, S0, m24, 30 * MIB as u64 + 512, 0),
        ],
        "oom: addr is the device's free bytes, size the rounded request"
    );
    drop(a);
}

#[test]
fn ring_buffer_keeps_the_newest_events_oldest_first() {
    let (_sim, alloc) = setup(1, 1 << 30);
    alloc
        .record_memory_history(settings(ContextLevel::None, 3))
        .unwrap();
    drop(alloc.allocate(0, 4096, S0).unwrap());
    drop(alloc.allocate(0, 8192, S0).unwrap());
    let kept = alloc.history(0).unwrap();
    use Action::*;
    assert_eq!(
        shape(&kept),
        [
            (Alloc, S0, BASE, 8192, 8192),
            (FreeRequested, S0, BASE, 8192, 8192),
            (FreeCompleted, S0, BASE, 8192, 8192),
        ],
        "7 events into a ring of 3 keep the last 3"
    );
    alloc
        .record_memory_history(settings(ContextLevel::None, 2))
        .unwrap();
    assert_eq!(
        shape(&alloc.history(0).unwrap())[0].0,
        FreeRequested,
        "shrinking the ring keeps the newest 2"
    );
    assert_eq!(alloc.history(0).unwrap().len(), 2);
}

/// Allocates under one tag, frees under another, empties the cache under a third; returns the
/// events without annotations and the context the live block showed.
fn run_levels(level: ContextLevel) -> (CachingAllocator<SimBackend>, Vec<TraceEvent>, ContextId) {
    let _serial = annotating();
    let (_sim, alloc) = setup(1, 1 << 30);
    alloc.record_memory_history(settings(level, 1000)).unwrap();
    let a = {
        let _site = annotate("levels-alloc-site");
        alloc.allocate(0, 4096, S0).unwrap()
    };
    let live = alloc.segments(DeviceIndex::new(0)).unwrap()[0].blocks[0].context;
    {
        let _site = annotate("levels-free-site");
        drop(a);
    }
    {
        let _site = annotate("levels-empty-site");
        alloc.empty_cache().unwrap();
    }
    let events = events(&alloc);
    (alloc, events, live)
}

/// The first tag of each event's context ("" for none).
fn sites(alloc: &CachingAllocator<SimBackend>, events: &[TraceEvent]) -> Vec<(Action, String)> {
    events
        .iter()
        .map(|e| {
            let tag = if e.context == ContextId::NONE {
                String::new()
            } else {
                tags(alloc, e.context).join("/")
            };
            (e.action, tag)
        })
        .collect()
}

#[test]
fn context_levels_decide_which_events_carry_a_context() {
    use Action::*;
    let actions = [
        SegmentAlloc,
        Alloc,
        FreeRequested,
        FreeCompleted,
        SegmentFree,
    ];
    let (a, e, live) = run_levels(ContextLevel::None);
    assert!(
        e.iter().all(|e| e.context == ContextId::NONE),
        "None: {e:?}"
    );
    assert_eq!(live, ContextId::NONE, "None keeps no block context");
    assert_eq!(e.iter().map(|e| e.action).collect::<Vec<_>>(), actions);
    drop(a);

    let (a, e, live) = run_levels(ContextLevel::State);
    assert!(
        e.iter().all(|e| e.context == ContextId::NONE),
        "State: events carry none: {e:?}"
    );
    assert_eq!(
        tags(&a, live),
        ["levels-alloc-site"],
        "State: the live block keeps its allocating call's context"
    );

    let alloc_site = "levels-alloc-site".to_string();
    let (a, e, live) = run_levels(ContextLevel::Alloc);
    assert_eq!(tags(&a, live), ["levels-alloc-site"]);
    assert_eq!(
        sites(&a, &e),
        actions.map(|action| (action, alloc_site.clone())),
        "Alloc: every event carries a context; frees that gathered none carry the allocation's"
    );

    let (a, e, _) = run_levels(ContextLevel::All);
    assert_eq!(
        sites(&a, &e),
        [
            (SegmentAlloc, alloc_site.clone()),
            (Alloc, alloc_site),
            (FreeRequested, "levels-free-site".into()),
            (FreeCompleted, "levels-free-site".into()),
            (SegmentFree, "levels-empty-site".into()),
        ],
        "All: each event carries the context of the call that caused it"
    );
}

/// The tag stacks of the `annotate` events of `device`, oldest first.
fn annotation_stacks(alloc: &CachingAllocator<SimBackend>, device: usize) -> Vec<Vec<String>> {
    alloc
        .history(device)
        .unwrap()
        .iter()
        .filter(|e| e.action == Action::Annotate)
        .map(|e| tags(alloc, e.context))
        .collect()
}

#[test]
fn annotations_nest_intern_and_are_recorded_on_every_device() {
    let _serial = annotating();
    let (_sim, alloc) = setup(2, 1 << 30);
    alloc
        .record_memory_history(settings(ContextLevel::Alloc, 1000))
        .unwrap();
    let outer = annotate("nest-outer");
    let first = alloc.allocate(0, 4096, S0).unwrap();
    let inner = annotate("nest-inner");
    let second = alloc.allocate(0, 4096, S0).unwrap();
    drop(inner);
    let third = alloc.allocate(0, 4096, S0).unwrap();
    drop(outer);
    let fourth = alloc.allocate(0, 4096, S0).unwrap();

    let allocs: Vec<ContextId> = events(&alloc)
        .iter()
        .filter(|e| e.action == Action::Alloc)
        .map(|e| e.context)
        .collect();
    assert_eq!(allocs.len(), 4);
    assert_eq!(tags(&alloc, allocs[0]), ["nest-outer"]);
    assert_eq!(tags(&alloc, allocs[1]), ["nest-outer", "nest-inner"]);
    assert_eq!(
        allocs[2], allocs[0],
        "the same tag stack interns to the same id"
    );
    assert!(
        tags(&alloc, allocs[3]).is_empty(),
        "after every guard dropped the context has no tags"
    );
    assert_ne!(
        allocs[3],
        ContextId::NONE,
        "an empty stack is still a recorded context"
    );

    for device in 0..2 {
        assert_eq!(
            annotation_stacks(&alloc, device),
            [
                vec!["nest-outer"],
                vec!["nest-outer", "nest-inner"],
                vec!["nest-outer"],
                vec![],
            ],
            "device {device}: one annotate event per push and per pop, carrying the new stack"
        );
    }
    drop((first, second, third, fourth));
}

#[test]
fn annotate_events_sit_between_the_allocations_they_enclose() {
    let _serial = annotating();
    let (_sim, alloc) = setup(1, 1 << 30);
    alloc
        .record_memory_history(settings(ContextLevel::None, 1000))
        .unwrap();
    let step = annotate("order-step");
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let forward = annotate("order-forward");
    let backward = annotate("order-backward");
    // Out of order: dropping `forward` pops `backward` too; `backward` then changes nothing.
    drop(forward);
    drop(backward);
    drop(a);
    drop(step);
    let history = alloc.history(0).unwrap();
    let sequence: Vec<(Action, Vec<String>)> = history
        .iter()
        .map(|e| {
            let stack = match e.action {
                Action::Annotate => tags(&alloc, e.context),
                _ => Vec::new(),
            };
            (e.action, stack)
        })
        .collect();
    use Action::*;
    let stack = |tags: &[&str]| tags.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    assert_eq!(
        sequence,
        [
            (Annotate, stack(&["order-step"])),
            (SegmentAlloc, stack(&[])),
            (Alloc, stack(&[])),
            (Annotate, stack(&["order-step", "order-forward"])),
            (
                Annotate,
                stack(&["order-step", "order-forward", "order-backward"])
            ),
            (Annotate, stack(&["order-step"])),
            (FreeRequested, stack(&[])),
            (FreeCompleted, stack(&[])),
            (Annotate, stack(&[])),
        ],
        "every change of the stack, in order with the allocator's events; a guard whose tag \
         an outer guard already removed records nothing"
    );
}

#[test]
fn disabled_recording_records_nothing_and_disabling_clears() {
    let _serial = annotating();
    let (_sim, alloc) = setup(1, 1 << 30);
    drop(alloc.allocate(0, 4096, S0).unwrap());
    assert!(alloc.history(0).unwrap().is_empty(), "off by default");

    alloc
        .record_memory_history(settings(ContextLevel::All, 100))
        .unwrap();
    let live = alloc.allocate(0, 4096, S0).unwrap();
    assert!(!alloc.history(0).unwrap().is_empty());
    alloc
        .record_memory_history(HistorySettings::DISABLED)
        .unwrap();
    assert!(alloc.history(0).unwrap().is_empty(), "disabling clears");
    drop(live);
    {
        let _tag = annotate("disabled-tag");
        drop(alloc.allocate(0, 4096, S0).unwrap());
    }
    assert!(
        alloc.history(0).unwrap().is_empty(),
        "nothing is recorded while off, annotations included"
    );
    assert!(alloc.segments(DeviceIndex::new(0)).unwrap()[0]
        .blocks
        .iter()
        .all(|b| b.context == ContextId::NONE));
}

#[test]
fn bad_settings_and_unknown_devices_are_typed_errors() {
    let (_sim, alloc) = setup(1, 1 << 30);
    assert!(matches!(
        alloc.record_memory_history(settings(ContextLevel::All, 0)),
        Err(Error::InvalidHistorySettings { .. })
    ));
    drop(alloc.allocate(0, 4096, S0).unwrap());
    assert!(
        alloc.history(0).unwrap().is_empty(),
        "a refused setting turns nothing on"
    );
    assert_eq!(
        alloc.history(3),
        Err(Error::InvalidDevice {
            device: DeviceIndex::new(3),
            device_count: 1
        })
    );
    assert_eq!(alloc.context(ContextId::NONE), None);
    assert_eq!(alloc.context(ContextId(u32::MAX)), None);
}

#[test]
fn backtraces_add_the_callers_frames() {
    let _serial = annotating();
    let (_sim, alloc) = setup(1, 1 << 30);
    alloc
        .record_memory_history(HistorySettings {
            stacks: Backtraces::Rust,
            ..settings(ContextLevel::Alloc, 100)
        })
        .unwrap();
    let _tag = annotate("with-frames");
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let event = events(&alloc)
        .into_iter()
        .find(|e| e.action == Action::Alloc)
        .expect("an alloc event");
    let context = alloc.context(event.context).expect("interned");
    assert_eq!(context.tags.len(), 1);
    assert!(!context.frames.is_empty(), "frames were captured");
    assert!(
        !context.frames[0].name.starts_with("blockpool::"),
        "the allocator's own frames are dropped: {:?}",
        context.frames[0]
    );
    drop(a);
}

#[test]
fn a_handle_knows_when_and_where_it_was_allocated_while_history_is_recorded() {
    let _serial = annotating();
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    let unrecorded = {
        let _tag = annotate("before-recording");
        alloc.allocate(0, 4096, S0).unwrap()
    };
    assert_eq!(
        (unrecorded.created_us(), unrecorded.context_id()),
        (None, ContextId::NONE),
        "nothing is gathered while history is off"
    );
    assert!(unrecorded.context().is_none());

    alloc
        .record_memory_history(HistorySettings {
            stacks: Backtraces::Rust,
            ..HistorySettings::default()
        })
        .unwrap();
    let first = alloc.allocate(0, 4096, S0).unwrap();
    let tagged = {
        let _outer = annotate("step3");
        let _inner = annotate("layer7");
        alloc.allocate(0, 1 << 20, S0).unwrap()
    };
    let (t0, t1) = (first.created_us().unwrap(), tagged.created_us().unwrap());
    assert!(t0 <= t1, "creation times follow the calls: {t0} then {t1}");
    let context = tagged.context().expect("recorded with ContextLevel::All");
    let tags: Vec<&str> = context.tags.iter().map(|t| &**t).collect();
    assert_eq!(tags, ["step3", "layer7"], "outermost tag first");
    assert!(
        !context.frames.is_empty(),
        "Backtraces::Rust captures the call stack"
    );
    assert!(
        !context.frames[0].name.starts_with("blockpool::")
            && context.frames.iter().any(|f| f.name.contains("history::")),
        "the stack starts at the caller, the test: {:?}",
        context.frames
    );
    // The id is the one the snapshot gives the live block.
    let snapshot = alloc.snapshot();
    let block = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .find(|b| b.address == tagged.ptr())
        .expect("the live block is in the snapshot");
    assert_eq!(
        snapshot.contexts.tag_path(block.context),
        "step3/layer7",
        "the snapshot names the same context"
    );

    alloc
        .record_memory_history(HistorySettings {
            context: ContextLevel::None,
            ..HistorySettings::default()
        })
        .unwrap();
    let untagged = {
        let _tag = annotate("no-context");
        alloc.allocate(0, 4096, S0).unwrap()
    };
    assert!(
        untagged.created_us().is_some() && untagged.context().is_none(),
        "ContextLevel::None keeps the time only"
    );
}
