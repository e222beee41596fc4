//! Streams: no reuse across streams while cached, frees deferred behind events, and their order.

use super::*;
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn freed_block_is_not_reused_on_other_stream() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    drop(a);
    let b = alloc.allocate(0, 4096, S1).unwrap();
    assert_eq!(b.ptr(), BASE + (2 << 20), "stream 1 gets its own segment");
    assert_eq!(sim.calls(D0).segment_allocs, 2);
    let c = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(c.ptr(), BASE, "stream 0 reuses its cached block");
    assert_eq!(sim.calls(D0).segment_allocs, 2);
    drop((b, c));
    valid(&alloc, &sim);
}

#[test]
fn recorded_block_is_reused_only_after_the_other_stream_completes() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    a.record_stream(S1).unwrap();
    a.record_stream(S0).unwrap(); // own stream: nothing to wait for
    drop(a);
    assert_eq!(
        sim.calls(D0).events_recorded,
        1,
        "one event, on stream 1 only"
    );
    assert_eq!(
        stat(&alloc, "allocation.all.current"),
        0,
        "freed for the caller at once"
    );
    assert_eq!(
        stat(&alloc, "active.all.current"),
        1,
        "still active until the event completes"
    );

    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(b.ptr(), BASE + 4096, "the pending block is skipped");
    valid(&alloc, &sim);

    sim.complete_stream(D0, S1).unwrap();
    let c = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(c.ptr(), BASE, "reused once stream 1 finished");
    assert_eq!(stat(&alloc, "active.all.current"), 2);
    drop((b, c));
    valid(&alloc, &sim);
}

#[test]
fn a_hung_stream_does_not_hold_back_frees_on_other_streams() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    sim.inject(D0, SimFault::HangStream { stream: S2 }).unwrap();
    let stuck = alloc.allocate(0, 4096, S0).unwrap();
    let ready = alloc.allocate(0, 8192, S0).unwrap();
    stuck.record_stream(S2).unwrap();
    ready.record_stream(S1).unwrap();
    drop(stuck);
    drop(ready);
    sim.complete_stream(D0, S1).unwrap();
    sim.complete_stream(D0, S2).unwrap();
    let a = alloc.allocate(0, 8192, S0).unwrap();
    assert_eq!(
        a.ptr(),
        BASE + 4096,
        "the block waiting on stream 1 is free again"
    );
    // The 2 MiB segment holds stuck (BASE, 4 KiB, waiting on the hung stream 2), a (8 KiB,
    // where ready was) and the free rest from BASE + 12 KiB: only the rest fits.
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE + 4096 + 8192,
        "the block waiting on the hung stream must not be reused: b goes after a"
    );
    assert_eq!(
        sim.calls(D0).segment_allocs,
        1,
        "the rest of the first segment serves b"
    );
    valid(&alloc, &sim);

    // empty_cache cannot wait for the hung stream: typed error, state still valid.
    let err = alloc.empty_cache().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend(BackendError::EventNeverCompletes { .. })
        ),
        "unexpected error {err:?}"
    );
    valid(&alloc, &sim);
    drop((a, b));
    sim.clear_faults(D0).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(sim.allocated_bytes(D0), 0);
    valid(&alloc, &sim);
}

#[test]
fn deferred_frees_complete_in_stream_order_so_stats_are_reproducible() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 512, S0).unwrap();
    let b = alloc.allocate(0, 512, S0).unwrap();
    let c = alloc.allocate(0, 512, S0).unwrap();
    let _d = alloc.allocate(0, 512, S0).unwrap();
    a.record_stream(S1).unwrap();
    c.record_stream(S1).unwrap();
    b.record_stream(S2).unwrap();
    drop((a, c, b));
    sim.complete_stream(D0, S1).unwrap();
    sim.complete_stream(D0, S2).unwrap();
    let e = alloc.allocate(0, 512, S0).unwrap();
    // Stream 1 first: a and c become two more inactive blocks (3 with the tail), then b
    // merges them into one (2). Stream 2 first would never have reached 3.
    assert_eq!(stat(&alloc, "inactive_split.all.peak"), 3);
    assert_eq!(
        e.ptr(),
        BASE,
        "best fit is the merged 1536-byte block at the segment start"
    );
    valid(&alloc, &sim);
}

#[test]
fn a_failed_event_record_keeps_the_block_out_of_reach_for_good() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    a.record_stream(S1).unwrap();
    sim.inject(D0, SimFault::RecordEventError { nth: 1 })
        .unwrap();
    let err = a.free().unwrap_err();
    assert!(
        matches!(err, Error::Backend(BackendError::InjectedFault { .. })),
        "{err:?}"
    );
    assert_eq!(
        stat(&alloc, "allocation.all.current"),
        0,
        "freed for the caller"
    );
    assert_eq!(stat(&alloc, "active.all.current"), 1, "but never reusable");
    valid(&alloc, &sim);
    sim.complete_all();
    alloc.empty_cache().unwrap();
    // The stranded block keeps its segment from empty_cache, so b is split from that
    // segment's free rest, right after the stranded block.
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE + 4096,
        "the stranded block at BASE must not be handed out again"
    );
    assert_eq!(
        stat(&alloc, "segment.all.current"),
        1,
        "its segment stays reserved"
    );
    valid(&alloc, &sim);
}
