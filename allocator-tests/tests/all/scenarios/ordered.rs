//! The stream-ordered policy (`stream_reuse:ordered`): memory cached for one stream serves
//! another after a device-side wait, `record_stream` frees are ordered instead of deferred,
//! and segments holding several streams' blocks are still released whole.

use super::*;
use blockpool::config::StreamReuse;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

fn ordered() -> AllocatorConfig {
    AllocatorConfig::builder()
        .stream_reuse(StreamReuse::Ordered)
        .build()
        .unwrap()
}

#[test]
fn a_block_cached_for_one_stream_serves_another_after_a_wait() {
    let (sim, alloc) = setup(1 << 30, ordered());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let used_at = sim.stream_position(D0, S0).unwrap();
    drop(a);
    assert!(!sim.is_ordered(D0, S0, used_at, S1).unwrap());
    let b = alloc.allocate(0, 4096, S1).unwrap();
    assert_eq!(b.ptr(), BASE, "stream 1 takes stream 0's cached block");
    let calls = sim.calls(D0);
    assert_eq!(
        (
            calls.segment_allocs,
            calls.events_recorded,
            calls.stream_waits
        ),
        (1, 1, 1),
        "no second segment: one event on stream 0, one wait on stream 1"
    );
    assert_eq!(calls.event_syncs, 0, "no host synchronization");
    assert!(sim.is_ordered(D0, S0, used_at, S1).unwrap());
    assert_eq!(stat(&alloc, "num_sync_all_streams"), 0);
    drop(b);
    valid(&alloc, &sim);

    // The whole segment moved to stream 1 (its rest merged back): stream 0 now waits on 1.
    let c = alloc.allocate(0, 8192, S0).unwrap();
    assert_eq!(c.ptr(), BASE);
    assert_eq!(sim.calls(D0).stream_waits, 2);
    drop(c);
    valid(&alloc, &sim);
}

#[test]
fn the_waiting_stream_cannot_run_ahead_of_the_stream_it_took_memory_from() {
    let (sim, alloc) = setup(1 << 30, ordered());
    drop(alloc.allocate(0, 4096, S0).unwrap());
    let _b = alloc.allocate(0, 4096, S1).unwrap();
    // Work recorded on stream 1 after taking the block completes only after stream 0's.
    use blockpool::Backend;
    let after = sim.record_event(D0, S1).unwrap();
    assert_eq!(sim.advance_stream(D0, S1, 1).unwrap(), 0);
    assert!(!sim.query_event(&after).unwrap());
    sim.complete_stream(D0, S0).unwrap();
    assert_eq!(sim.advance_stream(D0, S1, 1).unwrap(), 1);
    assert!(sim.query_event(&after).unwrap());
}

#[test]
fn a_record_stream_free_is_cached_at_once_behind_a_wait() {
    let (sim, alloc) = setup(1 << 30, ordered());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    a.record_stream(S1).unwrap();
    let used_at = sim.stream_position(D0, S1).unwrap();
    drop(a);
    let calls = sim.calls(D0);
    assert_eq!((calls.events_recorded, calls.stream_waits), (1, 1));
    assert_eq!(
        stat(&alloc, "active.all.current"),
        0,
        "not pending: stream 0 waits for stream 1's work instead"
    );
    assert!(sim.is_ordered(D0, S1, used_at, S0).unwrap());
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(b.ptr(), BASE, "reused at once, before stream 1 completes");
    assert_eq!(sim.calls(D0).event_queries, 0, "nothing to poll");
    drop(b);
    valid(&alloc, &sim);
}

#[test]
fn blocks_of_two_streams_in_one_segment_never_merge_but_are_released_whole() {
    let (sim, alloc) = setup(1 << 30, ordered());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!((a.ptr(), b.ptr()), (BASE, BASE + 4096));
    drop(a);
    let c = alloc.allocate(0, 4096, S1).unwrap();
    assert_eq!(c.ptr(), BASE, "the best fit among stream 0's blocks");
    drop(c);
    drop(b);
    valid(&alloc, &sim);
    let segments = alloc.segments(D0).unwrap();
    let streams: Vec<(u64, StreamId)> = segments[0]
        .blocks
        .iter()
        .map(|b| (b.addr, b.stream))
        .collect();
    assert_eq!(
        streams,
        [(BASE, S1), (BASE + 4096, S0)],
        "stream 1's block stays apart from stream 0's, merged with the rest"
    );
    assert_eq!(stat(&alloc, "inactive_split.all.current"), 2);
    alloc.empty_cache().unwrap();
    assert_eq!(
        sim.segment_count(D0),
        0,
        "the segment is released all the same"
    );
    assert_eq!(stat(&alloc, "inactive_split.all.current"), 0);
    valid(&alloc, &sim);
}

#[test]
fn another_streams_cache_is_used_before_the_device_refuses() {
    let (sim, alloc) = setup(64 * MIB, ordered());
    drop(alloc.allocate(0, 40 * MIB, S0).unwrap());
    let b = alloc.allocate(0, 40 * MIB, S1).unwrap();
    assert_eq!(b.ptr(), BASE);
    let calls = sim.calls(D0);
    assert_eq!((calls.segment_allocs, calls.segment_frees), (1, 0));
    assert_eq!(stat(&alloc, "num_alloc_retries"), 0);
    drop(b);
    valid(&alloc, &sim);
}

#[test]
fn an_oversize_block_of_another_stream_is_not_split_for_a_small_request() {
    let config = AllocatorConfig::builder()
        .stream_reuse(StreamReuse::Ordered)
        .max_split_size_mb(20)
        .build()
        .unwrap();
    let (sim, alloc) = setup(1 << 30, config);
    drop(alloc.allocate(0, 30 * MIB, S0).unwrap());
    let b = alloc.allocate(0, 4 * MIB, S1).unwrap();
    assert_ne!(b.ptr(), BASE, "a new 20 MiB segment, as on stream 0 itself");
    assert_eq!(sim.calls(D0).stream_waits, 0);
    drop(b);
    valid(&alloc, &sim);
}

/// Reserved bytes after each of `steps` steps of vLLM's pattern: every call on a new stream
/// allocates 12 MiB and 1 MiB of working memory there, frees it, and leaves a 256 KiB output
/// on the default stream until its step ends.
fn reserved_per_step(config: AllocatorConfig, steps: u64, calls: u64) -> Vec<i64> {
    let (sim, alloc) = setup(80 << 30, config);
    let mut reserved = Vec::new();
    for step in 0..steps {
        let mut outputs = Vec::new();
        for call in 0..calls {
            let stream = StreamId::from_raw(1 + step * calls + call);
            let work = alloc.allocate(0, 12 * MIB, stream).unwrap();
            let scratch = alloc.allocate(0, MIB, stream).unwrap();
            outputs.push(alloc.allocate(0, 256 << 10, S0).unwrap());
            drop((scratch, work));
        }
        drop(outputs);
        reserved.push(stat(&alloc, "reserved_bytes.all.current"));
        valid(&alloc, &sim);
    }
    reserved
}

#[test]
fn a_new_stream_per_call_reuses_the_first_steps_memory_under_the_ordered_policy() {
    let ordered = reserved_per_step(ordered(), 5, 50);
    assert_eq!(
        ordered, [ordered[0]; 5],
        "reserved stays at the first step's: {ordered:?}"
    );
    let mib = MIB as i64;
    assert_eq!(
        ordered[0],
        (12 + 7 * 2) * mib,
        "one 12 MiB segment for the working memory of every call, and seven 2 MiB segments for \
         the 50 outputs of 256 KiB (and the 1 MiB scratch, which fits beside them)"
    );
    let compatible = reserved_per_step(AllocatorConfig::default(), 5, 50);
    assert_eq!(
        compatible,
        (1..=5)
            .map(|step| 50 * step * (12 + 2) * mib + 7 * 2 * mib)
            .collect::<Vec<_>>(),
        "PyTorch's rule: a 12 MiB and a 2 MiB segment for every call's new stream, besides the \
         outputs' seven on the default stream"
    );
}
