//! Unit tests of the pinned host cache on `SimBackend`: sizing, reuse, events, `empty_cache`,
//! out-of-memory recovery, statistics and every error, with exact values.

use super::*;
use crate::backend::DeviceIndex;
use crate::backend::{BackendError, SimBackend, SimFault, SimHostCalls, StreamId};
use crate::stats::Stat;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

const S1: StreamId = StreamId::from_raw(1);
const S2: StreamId = StreamId::from_raw(2);

fn cache() -> (SimBackend, HostCachingAllocator<SimBackend>) {
    cache_with_capacity(1 << 30)
}

fn cache_with_capacity(host_bytes: usize) -> (SimBackend, HostCachingAllocator<SimBackend>) {
    let sim = SimBackend::builder()
        .devices(2)
        .host_capacity(host_bytes)
        .build();
    (sim.clone(), HostCachingAllocator::new(sim))
}

fn stat(current: i64, peak: i64, allocated: i64, freed: i64) -> Stat {
    Stat {
        current,
        peak,
        allocated,
        freed,
    }
}

fn host_calls(allocs: u64, failed_allocs: u64, frees: u64) -> SimHostCalls {
    SimHostCalls {
        host_allocs: allocs,
        failed_host_allocs: failed_allocs,
        host_frees: frees,
        failed_host_frees: 0,
    }
}

#[test]
fn sizes_round_up_to_powers_of_two_from_one_byte() {
    let cases = [
        (0, Some(0)),
        (1, Some(1)),
        (2, Some(2)),
        (3, Some(4)),
        (511, Some(512)),
        (1000, Some(1024)),
        (1025, Some(2048)),
        (1 << 63, Some(1 << 63)),
        ((1 << 63) + 1, None),
        (usize::MAX, None),
    ];
    for (size, rounded) in cases {
        assert_eq!(round_size(size), rounded, "round_size({size})");
    }
    let indices = [
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 2),
        (1024, 10),
        (1025, 11),
        (1 << 63, 63),
    ];
    for (size, index) in indices {
        assert_eq!(size_index(size), index, "size_index({size})");
    }
    let (_, host) = cache();
    let a = host.allocate(3).unwrap();
    assert_eq!(
        (a.size(), a.requested_size()),
        (4, 3),
        "3 bytes take a 4-byte block"
    );
}

#[test]
fn zero_bytes_give_an_empty_handle_without_a_backend_call() {
    let (sim, host) = cache();
    let empty = host.allocate(0).unwrap();
    assert_eq!((empty.ptr(), empty.size(), empty.is_empty()), (0, 0, true));
    empty.record_event(D0, S1).unwrap();
    assert_eq!(host.malloc(0).unwrap(), 0, "malloc(0) is null");
    host.free(0).unwrap();
    drop(empty);
    assert_eq!(sim.host_calls(), SimHostCalls::default(), "no backend call");
    assert_eq!(host.stats(), HostStats::default(), "no statistic moved");
}

#[test]
fn freed_block_is_reused_for_the_same_bucket_without_a_backend_call() {
    let (sim, host) = cache();
    let a = host.allocate(1000).unwrap();
    let ptr = a.ptr();
    assert_eq!(
        ptr % crate::backend::HOST_PAGE as u64,
        0,
        "pinned memory is page aligned"
    );
    drop(a);
    let b = host.allocate(513).unwrap();
    assert_eq!(b.ptr(), ptr, "513 bytes share the 1024-byte bucket");
    assert_eq!(
        sim.host_calls(),
        host_calls(1, 0, 0),
        "served from the cache"
    );
    let c = host.allocate(1025).unwrap();
    assert_ne!(c.ptr(), ptr);
    assert_eq!(
        sim.host_calls(),
        host_calls(2, 0, 0),
        "another bucket pins anew"
    );
}

#[test]
fn newest_cached_block_is_reused_first() {
    let (_, host) = cache();
    let a = host.allocate(64).unwrap();
    let b = host.allocate(64).unwrap();
    let (pa, pb) = (a.ptr(), b.ptr());
    drop(a);
    drop(b);
    assert_eq!(
        host.allocate(64).unwrap().ptr(),
        pb,
        "last freed, first reused"
    );
    let first = host.allocate(64).unwrap();
    let second = host.allocate(64).unwrap();
    assert_eq!(
        (first.ptr(), second.ptr()),
        (pb, pa),
        "the dropped temporary went back on top"
    );
}

#[test]
fn recorded_block_is_not_reused_until_its_stream_advances() {
    let (sim, host) = cache();
    let a = host.allocate(4096).unwrap();
    let ptr = a.ptr();
    a.record_event(D0, S1).unwrap();
    drop(a);
    assert_eq!(host.pending_events(), 1);
    assert_eq!(host.cached_bytes(), 0, "waiting blocks are not cached");
    let b = host.allocate(4096).unwrap();
    assert_ne!(b.ptr(), ptr, "the copy on stream 1 may still use the block");
    assert_eq!(sim.host_calls().host_allocs, 2);
    assert_eq!(sim.advance_stream(D0, S1, 1).unwrap(), 1);
    let c = host.allocate(4096).unwrap();
    assert_eq!(c.ptr(), ptr, "reused once the event completed");
    assert_eq!(host.pending_events(), 0);
    assert_eq!(sim.calls(D0).events_released, 1, "the event is given back");
}

#[test]
fn block_waits_for_every_recorded_stream() {
    let (sim, host) = cache();
    let a = host.allocate(256).unwrap();
    let ptr = a.ptr();
    for (device, stream) in [(0, S1), (0, S2), (1, S1), (0, S1)] {
        a.record_event(DeviceIndex::new(device), stream).unwrap();
    }
    drop(a);
    assert_eq!(host.pending_events(), 3, "one event per distinct stream");
    let reused = |host: &HostCachingAllocator<SimBackend>| host.allocate(256).unwrap().ptr() == ptr;
    sim.complete_stream(D0, S1).unwrap();
    assert!(!reused(&host), "streams 2 and device 1 still run");
    sim.complete_stream(D0, S2).unwrap();
    assert!(!reused(&host), "device 1 still runs");
    assert_eq!(host.pending_events(), 1);
    sim.complete_stream(DeviceIndex::new(1), S1).unwrap();
    assert!(reused(&host), "every event completed");
}

#[test]
fn oldest_pending_event_holds_back_newer_ones() {
    let (sim, host) = cache();
    let a = host.allocate(128).unwrap();
    let b = host.allocate(128).unwrap();
    let pb = b.ptr();
    a.record_event(D0, S1).unwrap();
    b.record_event(D0, S2).unwrap();
    drop(a);
    drop(b);
    sim.complete_stream(D0, S2).unwrap();
    let c = host.allocate(128).unwrap();
    assert_ne!(c.ptr(), pb, "PyTorch stops at the first incomplete event");
    assert_eq!(host.pending_events(), 2);
    sim.complete_stream(D0, S1).unwrap();
    assert_eq!(
        host.allocate(128).unwrap().ptr(),
        pb,
        "both complete; newest first"
    );
}

#[test]
fn empty_cache_returns_every_cached_block() {
    let (sim, host) = cache();
    let blocks: Vec<_> = [1, 100, 5000, 5000, 70_000]
        .map(|n| host.allocate(n).unwrap())
        .into();
    drop(blocks);
    assert_eq!(host.cached_bytes(), 1 + 128 + 8192 * 2 + 131_072);
    host.empty_cache().unwrap();
    assert_eq!(sim.host_allocated_bytes(), 0);
    assert_eq!(sim.host_calls(), host_calls(5, 0, 5));
    let stats = host.stats();
    assert_eq!(stats.allocations, stat(0, 5, 5, 5));
    assert_eq!(stats.allocated_bytes, stat(0, 147_585, 147_585, 147_585));
    assert_eq!((stats.num_host_alloc, stats.num_host_free), (5, 5));
    host.check_invariants().unwrap();
}

#[test]
fn empty_cache_keeps_blocks_waiting_for_events() {
    let (sim, host) = cache();
    let a = host.allocate(2048).unwrap();
    a.record_event(DeviceIndex::new(1), S2).unwrap();
    drop(a);
    host.empty_cache().unwrap();
    assert_eq!(
        sim.host_allocated_bytes(),
        2048,
        "the copy may still read it"
    );
    sim.complete_all();
    host.empty_cache().unwrap();
    assert_eq!(sim.host_allocated_bytes(), 0, "processed, then given back");
}

#[test]
fn out_of_memory_releases_the_cache_and_retries() {
    let (sim, host) = cache_with_capacity(8192);
    drop(host.allocate(4096).unwrap());
    let big = host.allocate(8192).unwrap();
    assert_eq!(big.size(), 8192);
    assert_eq!(
        sim.host_calls(),
        host_calls(2, 1, 1),
        "refused, released, retried"
    );
    assert_eq!(host.stats().allocated_bytes, stat(8192, 8192, 12_288, 4096));
}

#[test]
fn out_of_memory_after_the_retry_is_typed_and_leaves_the_cache_empty() {
    let (sim, host) = cache_with_capacity(8192);
    let live = host.allocate(4096).unwrap();
    drop(host.allocate(2048).unwrap());
    let err = host.allocate(5000).unwrap_err();
    assert_eq!(
        err,
        HostError::OutOfMemory {
            requested_bytes: 5000,
            rounded_bytes: 8192,
            released_bytes: 2048,
            active_bytes: 4096,
            source: BackendError::HostOutOfMemory {
                requested_bytes: 8192
            },
        }
    );
    assert!(err.is_retryable());
    assert_eq!(
        err.to_string(),
        "out of pinned host memory: cannot allocate 8.00 KiB (a request of 4.88 KiB rounded up \
         to a power of two) even after releasing 2.00 KiB of cached pinned memory; 4.00 KiB is \
         still in use or waiting for copies to finish: drop pinned buffers that are no longer \
         needed, or wait for their streams"
    );
    assert_eq!(host.cached_bytes(), 0, "the cache was released");
    assert_eq!(
        sim.host_allocated_bytes(),
        4096,
        "only the live block is left"
    );
    host.check_invariants().unwrap();
    drop(live);
    assert_eq!(host.allocate(5000).unwrap().size(), 8192, "fits once freed");
}

#[test]
fn stats_follow_every_step() {
    let (sim, host) = cache();
    let a = host.allocate(1000).unwrap();
    let b = host.allocate(100).unwrap();
    let s = host.stats();
    assert_eq!(s.allocations, stat(2, 2, 2, 0), "two blocks pinned");
    assert_eq!(s.allocated_bytes, stat(1152, 1152, 1152, 0));
    assert_eq!(s.active_requests, stat(2, 2, 2, 0));
    assert_eq!(s.active_bytes, stat(1152, 1152, 1152, 0));
    assert_eq!((s.bucket_allocation[10], s.bucket_allocation[7]), (1, 1));

    a.record_event(D0, S1).unwrap();
    drop(a);
    let s = host.stats();
    assert_eq!(
        s.active_requests,
        stat(2, 2, 2, 0),
        "waiting blocks stay active"
    );
    drop(b);
    let s = host.stats();
    assert_eq!(s.active_requests, stat(1, 2, 2, 1), "b cached at once");
    assert_eq!(s.active_bytes, stat(1024, 1152, 1152, 128));

    sim.complete_stream(D0, S1).unwrap();
    let c = host.allocate(128).unwrap();
    let s = host.stats();
    assert_eq!(
        s.active_requests,
        stat(1, 2, 3, 2),
        "a cached, then b reused"
    );
    assert_eq!(s.active_bytes, stat(128, 1152, 1280, 1152));
    assert_eq!(s.allocations, stat(2, 2, 2, 0), "no new block");

    drop(c);
    host.empty_cache().unwrap();
    let s = host.stats();
    assert_eq!(s.allocations, stat(0, 2, 2, 2));
    assert_eq!(s.allocated_bytes, stat(0, 1152, 1152, 1152));
    assert_eq!(s.active_requests, stat(0, 2, 3, 3));
    assert_eq!((s.num_host_alloc, s.num_host_free), (2, 2));

    host.reset_peak_stats();
    assert_eq!(host.stats().allocated_bytes, stat(0, 0, 1152, 1152));
    host.reset_accumulated_stats();
    assert_eq!(
        host.stats(),
        HostStats::default(),
        "everything back to zero"
    );
}

#[test]
fn flat_stats_use_pytorch_key_names() {
    let (_, host) = cache();
    let _a = host.allocate(10).unwrap();
    let flat = host.stats().to_flat();
    let keys: Vec<_> = flat.keys().map(String::as_str).collect();
    assert_eq!(keys.len(), 18);
    assert_eq!(
        &keys[..4],
        [
            "active_bytes.allocated",
            "active_bytes.current",
            "active_bytes.freed",
            "active_bytes.peak"
        ]
    );
    assert_eq!(&keys[16..], ["num_host_alloc", "num_host_free"]);
    assert_eq!(flat["allocated_bytes.current"], 16);
    assert_eq!(flat["active_requests.peak"], 1);
}

#[test]
fn raw_pointer_misuse_is_typed() {
    let (_, host) = cache();
    let ptr = host.malloc(64).unwrap();
    assert_eq!(
        host.free(ptr + 8),
        Err(HostError::UnknownPointer { ptr: ptr + 8 })
    );
    host.free(ptr).unwrap();
    assert_eq!(host.free(ptr), Err(HostError::DoubleFree { ptr }));
    host.empty_cache().unwrap();
    assert_eq!(
        host.free(ptr),
        Err(HostError::UnknownPointer { ptr }),
        "given back"
    );

    let owned = host.allocate(64).unwrap();
    let p = owned.ptr();
    assert_eq!(host.free(p), Err(HostError::OwnedByHandle { ptr: p }));
    owned.free().unwrap();
    assert_eq!(
        host.allocate(usize::MAX).unwrap_err(),
        HostError::SizeTooLarge {
            requested_bytes: usize::MAX
        }
    );
    host.check_invariants().unwrap();
}

#[test]
fn recording_events_checks_the_pointer() {
    let (sim, host) = cache();
    let ptr = host.malloc(100).unwrap();
    host.record_event(ptr + 127, D0, S1).unwrap();
    assert_eq!(
        host.record_event(ptr + 128, D0, S1),
        Err(HostError::NotFromThisAllocator { ptr: ptr + 128 }),
        "one past the 128-byte block"
    );
    assert_eq!(
        host.record_event(0x1000, D0, S1),
        Err(HostError::NotFromThisAllocator { ptr: 0x1000 })
    );
    host.free(ptr).unwrap();
    assert_eq!(
        host.record_event(ptr, D0, S2),
        Err(HostError::UseAfterFree { ptr })
    );
    assert_eq!(host.pending_events(), 1, "the interior record counted");
    sim.complete_all();
    assert_eq!(host.malloc(100).unwrap(), ptr);
}

#[test]
fn failed_event_record_keeps_the_block_from_reuse() {
    let (sim, host) = cache();
    let a = host.allocate(512).unwrap();
    let ptr = a.ptr();
    a.record_event(D0, S1).unwrap();
    sim.inject(D0, SimFault::RecordEventError { nth: 1 })
        .unwrap();
    let err = a.free().unwrap_err();
    assert!(
        matches!(
            err,
            HostError::Backend {
                op: "record an event",
                ..
            }
        ),
        "{err}"
    );
    sim.complete_all();
    assert_ne!(
        host.allocate(512).unwrap().ptr(),
        ptr,
        "stream 1 may still use it"
    );
    host.empty_cache().unwrap();
    assert_eq!(
        sim.host_allocated_bytes(),
        512,
        "the stranded block is kept"
    );
    host.check_invariants().unwrap();
}

#[test]
fn dropping_the_allocator_waits_for_events_and_gives_everything_back() {
    let (sim, host) = cache();
    let a = host.allocate(300).unwrap();
    a.record_event(D0, S1).unwrap();
    drop(host.allocate(40).unwrap());
    drop(a);
    drop(host);
    assert_eq!(sim.host_allocated_bytes(), 0);
    assert_eq!(sim.calls(D0).event_syncs, 1, "waited for the copy");
}

#[test]
fn bytes_written_to_a_block_are_read_back_from_its_reuse() {
    let (_, host) = cache();
    let mut a = host.allocate(6).unwrap();
    // SAFETY: SimBackend pins zeroed host memory of the block size; no device copy runs.
    let bytes = unsafe { a.as_mut_slice() };
    assert_eq!(bytes, [0; 8], "fresh simulated pinned memory is zeroed");
    bytes.copy_from_slice(b"pinned!!");
    drop(a);
    let b = host.allocate(8).unwrap();
    // SAFETY: as above.
    let read = unsafe { b.as_slice() };
    assert_eq!(read, b"pinned!!", "the same memory came back");
    let mut empty = host.allocate(0).unwrap();
    // SAFETY: an empty handle reads no memory.
    assert!(unsafe { empty.as_mut_slice() }.is_empty());
}

#[test]
fn allocator_and_handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<HostCachingAllocator<SimBackend>>();
    check::<HostAllocation<SimBackend>>();
}
