//! Scripted scenarios with exact expected addresses and statistics.
//!
//! The simulated device hands out deterministic addresses (device 0 starts at `BASE`, segments
//! whose size is a multiple of 2 MiB start on 2 MiB boundaries, lowest free address first), so
//! every placement PyTorch's rules imply can be asserted exactly.

use crate::support::{stat, valid};
use blockpool::pool::BlockState;
use blockpool::{
    Allocation, AllocatorConfig, BackendError, CachingAllocator, Error, SimBackend, SimFault,
    StreamId,
};
use std::sync::{Arc, Mutex};

const BASE: u64 = 0x7f00_0000_0000;
const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId(1);
const S2: StreamId = StreamId(2);

fn setup(capacity: usize, config: AllocatorConfig) -> (SimBackend, CachingAllocator<SimBackend>) {
    let sim = SimBackend::new(1, capacity);
    let alloc = CachingAllocator::new(sim.clone(), config);
    (sim, alloc)
}

#[test]
fn small_requests_are_packed_into_one_2_mib_segment() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    let b = alloc.allocate(0, 1000, S0).unwrap();
    let c = alloc.allocate(0, 1, S0).unwrap();
    assert_eq!((a.ptr(), a.size()), (BASE, 4096));
    assert_eq!(
        (b.ptr(), b.size()),
        (BASE + 4096, 1024),
        "1000 bytes round to 1024"
    );
    assert_eq!(
        (c.ptr(), c.size()),
        (BASE + 5120, 512),
        "1 byte rounds to 512"
    );
    assert_eq!(stat(&alloc, "segment.small_pool.current"), 1);
    assert_eq!(stat(&alloc, "reserved_bytes.small_pool.current"), 2 << 20);
    assert_eq!(stat(&alloc, "allocated_bytes.all.current"), 5632);
    assert_eq!(stat(&alloc, "requested_bytes.all.current"), 5097);
    assert_eq!(
        stat(&alloc, "inactive_split.all.current"),
        1,
        "the tail is an inactive split block"
    );
    assert_eq!(
        stat(&alloc, "inactive_split_bytes.all.current"),
        (2 << 20) - 5632
    );
    assert_eq!(sim.calls(0).segment_allocs, 1);

    drop(b);
    valid(&alloc, &sim);
    assert_eq!(
        stat(&alloc, "inactive_split.all.current"),
        2,
        "a hole between a and c"
    );
    assert_eq!(
        stat(&alloc, "inactive_split_bytes.all.current"),
        (2 << 20) - 5632 + 1024
    );

    // Best fit: the 1024-byte hole serves a 600-byte request (rounded to 1024), not the tail.
    let d = alloc.allocate(0, 600, S0).unwrap();
    assert_eq!(
        d.ptr(),
        BASE + 4096,
        "best fit takes the smallest block that fits"
    );
    drop((a, c, d));
    valid(&alloc, &sim);
    assert_eq!(
        stat(&alloc, "inactive_split.all.current"),
        0,
        "all blocks merged back"
    );
    assert_eq!(stat(&alloc, "active_bytes.all.current"), 0);
    assert_eq!(stat(&alloc, "allocation.all.allocated"), 4);
    assert_eq!(stat(&alloc, "allocation.all.freed"), 4);
    assert_eq!(stat(&alloc, "allocated_bytes.all.peak"), 5632);
    assert_eq!(
        alloc.segments(0).unwrap()[0].blocks.len(),
        1,
        "one free block spans the segment"
    );
}

#[test]
fn medium_requests_split_a_20_mib_segment_and_large_ones_get_their_own() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, MIB + 1, S0).unwrap();
    assert_eq!((a.ptr(), a.size()), (BASE, MIB + 512));
    assert_eq!(stat(&alloc, "reserved_bytes.large_pool.current"), 20 << 20);
    let b = alloc.allocate(0, 8 * MIB, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE + (MIB + 512) as u64,
        "carved from the same 20 MiB segment"
    );
    // 11 MiB - 512 remain in the first segment: too small for 12 MiB.
    let c = alloc.allocate(0, 12 * MIB + 7, S0).unwrap();
    assert_eq!(c.size(), 12 * MIB + 512);
    assert_eq!(
        c.ptr(),
        BASE + (20 << 20),
        "a 14 MiB segment of its own, after the first"
    );
    assert_eq!(
        stat(&alloc, "reserved_bytes.large_pool.current"),
        (20 + 14) << 20
    );
    // 14 MiB segment: the 1.5 MiB tail is more than 1 MiB, so it was split off.
    assert_eq!(stat(&alloc, "inactive_split.large_pool.current"), 2);
    let d = alloc.allocate(0, 1536 * 1024 - 512, S0).unwrap();
    assert_eq!(
        d.ptr(),
        BASE + (20 << 20) + (12 * MIB + 512) as u64,
        "the tail is the best fit"
    );
    assert_eq!(
        d.size(),
        2 * MIB - 512,
        "a 512 KiB rest is not split off in the large pool"
    );
    assert_eq!(sim.calls(0).segment_allocs, 2);
    drop((a, b, c, d));
    valid(&alloc, &sim);
}

#[test]
fn large_pool_keeps_a_remainder_of_1_mib_or_less_inside_the_block() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    // 19 MiB + 512 from a 20 MiB segment leaves 1 MiB - 512: not split.
    let a = alloc.allocate(0, 19 * MIB + 512, S0).unwrap();
    assert_eq!(
        a.size(),
        20 * MIB,
        "the handle reports the usable block size"
    );
    assert_eq!(a.requested_size(), 19 * MIB + 512);
    assert_eq!(
        stat(&alloc, "allocated_bytes.large_pool.current"),
        20 << 20,
        "the block is the segment"
    );
    assert_eq!(stat(&alloc, "inactive_split.all.current"), 0);
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn freed_block_is_not_reused_on_other_stream() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    drop(a);
    let b = alloc.allocate(0, 4096, S1).unwrap();
    assert_eq!(b.ptr(), BASE + (2 << 20), "stream 1 gets its own segment");
    assert_eq!(sim.calls(0).segment_allocs, 2);
    let c = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(c.ptr(), BASE, "stream 0 reuses its cached block");
    assert_eq!(sim.calls(0).segment_allocs, 2);
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
        sim.calls(0).events_recorded,
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

    sim.complete_stream(0, S1).unwrap();
    let c = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(c.ptr(), BASE, "reused once stream 1 finished");
    assert_eq!(stat(&alloc, "active.all.current"), 2);
    drop((b, c));
    valid(&alloc, &sim);
}

#[test]
fn a_hung_stream_does_not_hold_back_frees_on_other_streams() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    sim.inject(0, SimFault::HangStream { stream: S2 }).unwrap();
    let stuck = alloc.allocate(0, 4096, S0).unwrap();
    let ready = alloc.allocate(0, 8192, S0).unwrap();
    stuck.record_stream(S2).unwrap();
    ready.record_stream(S1).unwrap();
    drop(stuck);
    drop(ready);
    sim.complete_stream(0, S1).unwrap();
    sim.complete_stream(0, S2).unwrap();
    let a = alloc.allocate(0, 8192, S0).unwrap();
    assert_eq!(
        a.ptr(),
        BASE + 4096,
        "the block waiting on stream 1 is free again"
    );
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_ne!(
        b.ptr(),
        BASE,
        "the block waiting on the hung stream is never reused"
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
    sim.clear_faults(0).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(sim.allocated_bytes(0), 0);
    valid(&alloc, &sim);
}

#[test]
fn empty_cache_releases_only_wholly_free_segments() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let keep = alloc.allocate(0, 4096, S0).unwrap();
    let big = alloc.allocate(0, 40 * MIB, S0).unwrap();
    let small_free = alloc.allocate(0, 4096, S1).unwrap();
    drop(big);
    drop(small_free);
    assert_eq!(stat(&alloc, "segment.all.current"), 3);
    alloc.empty_cache().unwrap();
    assert_eq!(
        stat(&alloc, "segment.all.current"),
        1,
        "only the segment holding `keep` stays"
    );
    assert_eq!(stat(&alloc, "num_device_free"), 2);
    assert_eq!(stat(&alloc, "num_sync_all_streams"), 1);
    assert_eq!(sim.allocated_bytes(0), 2 << 20);
    drop(keep);
    alloc.empty_cache().unwrap();
    assert_eq!(sim.allocated_bytes(0), 0);
    valid(&alloc, &sim);
}

#[test]
fn dropping_the_allocator_gives_every_cached_segment_back() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let small = alloc.allocate(0, 4096, S0).unwrap();
    let large = alloc.allocate(0, 40 * MIB, S0).unwrap();
    let used_elsewhere = alloc.allocate(0, 8 * MIB, S0).unwrap();
    used_elsewhere.record_stream(S1).unwrap();
    drop((small, large, used_elsewhere));
    let raw = alloc.malloc(0, 1000, S2).unwrap();
    assert_eq!(sim.segment_count(0), 4);
    drop(alloc);
    assert_eq!(
        sim.segment_count(0),
        1,
        "only the raw allocation's segment, never freed, is left to the backend"
    );
    assert_eq!(sim.allocated_bytes(0), 2 * MIB);
    let calls = sim.calls(0);
    assert_eq!(calls.segment_frees, 3);
    assert_eq!(
        calls.event_syncs, 1,
        "the other stream's use was waited for first"
    );
    assert_ne!(raw, 0);
}

/// The case PyTorch users hit: small tensors split a large cached segment, so a later large
/// request finds the memory reserved but unusable, and fails. `max_split_size_mb` relieves it.
#[test]
fn fragmentation_makes_a_large_request_fail_and_max_split_size_relieves_it() {
    let script = |alloc: &CachingAllocator<SimBackend>| -> (
        Allocation<SimBackend>,
        Result<Allocation<SimBackend>, Error>,
    ) {
        drop(alloc.allocate(0, 40 * MIB, S0).unwrap());
        let small = alloc.allocate(0, 2 * MIB, S0).unwrap();
        let large = alloc.allocate(0, 40 * MIB, S0);
        (small, large)
    };

    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    let (small, large) = script(&alloc);
    assert_eq!(
        small.ptr(),
        BASE,
        "the 2 MiB tensor was carved from the cached 40 MiB block"
    );
    let err = large.unwrap_err();
    let oom = err.as_out_of_memory().expect("an out-of-memory error");
    assert!(err.is_retryable());
    assert_eq!(oom.requested_bytes, 40 * MIB);
    assert_eq!(oom.allocation_bytes, 40 * MIB);
    assert_eq!(oom.device_total_bytes, 64 * MIB);
    assert_eq!(oom.device_free_bytes, 24 * MIB);
    assert_eq!(oom.allocated_bytes, 2 * MIB);
    assert_eq!(oom.reserved_bytes, 40 * MIB);
    assert_eq!(oom.reserved_unallocated_bytes(), 38 * MIB);
    assert_eq!(
        err.to_string(),
        "out of memory: tried to allocate 40.00 MiB. Device 0 has a total capacity of 64.00 MiB \
         of which 24.00 MiB is free. Of the allocated memory 2.00 MiB is allocated by blockpool, \
         and 38.00 MiB is reserved by blockpool but unallocated. If reserved but unallocated \
         memory is large try setting max_split_size_mb or expandable_segments:True in \
         BLOCKPOOL_ALLOC_CONF to avoid fragmentation."
    );
    assert_eq!(stat(&alloc, "num_ooms"), 1);
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    assert_eq!(stat(&alloc, "num_sync_all_streams"), 1);
    valid(&alloc, &sim);
    drop(small);

    let config = AllocatorConfig::parse("max_split_size_mb:32").unwrap();
    let (sim, alloc) = setup(64 * MIB, config);
    let (small, large) = script(&alloc);
    assert_eq!(
        small.ptr(),
        BASE + (40 << 20),
        "oversize cached block is not split: new 20 MiB segment"
    );
    let large = large.expect("the cached 40 MiB block serves the large request");
    assert_eq!(large.ptr(), BASE);
    assert_eq!(stat(&alloc, "num_ooms"), 0);
    assert_eq!(stat(&alloc, "oversize_allocations.current"), 1);
    assert_eq!(stat(&alloc, "oversize_segments.current"), 1);
    assert_eq!(stat(&alloc, "max_split_size"), 32 << 20);
    valid(&alloc, &sim);
}

#[test]
fn oversize_requests_take_cached_blocks_only_within_the_rounding_margin() {
    let config = AllocatorConfig::parse("max_split_size_mb:32").unwrap();
    let (sim, alloc) = setup(1 << 30, config);
    drop(alloc.allocate(0, 80 * MIB, S0).unwrap());
    let a = alloc.allocate(0, 40 * MIB, S0).unwrap();
    assert_ne!(
        a.ptr(),
        BASE,
        "80 MiB is more than 40 MiB + 20 MiB: not reused"
    );
    let b = alloc.allocate(0, 62 * MIB, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE,
        "80 MiB is less than 62 MiB + 20 MiB: reused whole"
    );
    assert_eq!(b.size(), 80 * MIB, "an oversize block is never split");
    assert_eq!(
        stat(&alloc, "allocated_bytes.all.current"),
        (80 + 40) << 20,
        "unsplit: the whole block"
    );
    drop((a, b));
    valid(&alloc, &sim);
}

#[test]
fn out_of_memory_releases_cached_blocks_of_other_streams_and_retries() {
    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    drop(alloc.allocate(0, 40 * MIB, S1).unwrap());
    let a = alloc
        .allocate(0, 40 * MIB, S0)
        .expect("cache released, retry succeeds");
    assert_eq!(
        a.ptr(),
        BASE,
        "the released address is reused by the device"
    );
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    assert_eq!(stat(&alloc, "num_device_free"), 1);
    assert_eq!(stat(&alloc, "num_device_alloc"), 2);
    assert_eq!(stat(&alloc, "num_ooms"), 0);
    assert_eq!(sim.calls(0).failed_allocs, 1);
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn oversize_cached_blocks_are_released_before_everything_else() {
    let config = AllocatorConfig::parse("max_split_size_mb:32").unwrap();
    let (sim, alloc) = setup(100 * MIB, config);
    drop(alloc.allocate(0, 60 * MIB, S0).unwrap());
    drop(alloc.allocate(0, 4096, S0).unwrap());
    // 60 MiB is not within 20 MiB of 40 MiB, so it is not reused; the device has only 38 MiB
    // free, and releasing that one oversize block is enough.
    let big = alloc.allocate(0, 40 * MIB, S0).unwrap();
    assert_eq!(
        big.ptr(),
        BASE,
        "the released range is reused by the device"
    );
    assert_eq!(
        stat(&alloc, "num_alloc_retries"),
        0,
        "the oversize block was enough, no full release"
    );
    assert_eq!(stat(&alloc, "num_device_free"), 1);
    assert_eq!(
        stat(&alloc, "segment.small_pool.current"),
        1,
        "the small segment stayed cached"
    );
    drop(big);
    valid(&alloc, &sim);

    // When the oversize blocks together cannot cover the request, they are released anyway
    // and the allocator falls back to releasing everything and retrying.
    let config = AllocatorConfig::parse("max_split_size_mb:32").unwrap();
    let (sim, alloc) = setup(100 * MIB, config);
    drop(alloc.allocate(0, 34 * MIB, S0).unwrap());
    drop(alloc.allocate(0, 4096, S0).unwrap());
    let big = alloc.allocate(0, 90 * MIB, S0).unwrap();
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    assert_eq!(stat(&alloc, "num_device_free"), 2);
    drop(big);
    valid(&alloc, &sim);
}

#[test]
fn memory_fraction_caps_reserved_bytes_and_is_named_in_the_error() {
    let (sim, alloc) = setup(100 * MIB, AllocatorConfig::default());
    alloc.set_per_process_memory_fraction(0.5, 0).unwrap();
    let a = alloc.allocate(0, 40 * MIB, S0).unwrap();
    let err = alloc.allocate(0, 12 * MIB, S0).unwrap_err();
    let oom = err
        .as_out_of_memory()
        .expect("out of memory under the fraction");
    assert_eq!(oom.limit_bytes, Some(50 * MIB));
    assert!(err.to_string().contains("50.00 MiB allowed; "), "{err}");
    assert_eq!(
        sim.calls(0).failed_allocs,
        0,
        "the limit is enforced without asking the device"
    );
    let err = alloc.allocate(0, 60 * MIB, S0).unwrap_err();
    assert!(
        matches!(err, Error::ExceedsCapacity { limited: true, .. }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn garbage_collection_releases_old_cached_blocks_under_a_fraction() {
    let config = AllocatorConfig::parse("garbage_collection_threshold:0.5").unwrap();
    let (sim, alloc) = setup(100 * MIB, config);
    alloc.set_per_process_memory_fraction(1.0, 0).unwrap();
    drop(alloc.allocate(0, 30 * MIB, S0).unwrap());
    drop(alloc.allocate(0, 30 * MIB, S1).unwrap());
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 60 << 20);
    // 60 MiB reserved is over 50% of 100 MiB: the next device allocation collects first.
    let a = alloc.allocate(0, 12 * MIB, S2).unwrap();
    // Ages: the stream-0 block has seen two lookups, the stream-1 block one; only blocks at
    // least as old as the average (1.5) go, and freeing 30 MiB already meets the 10 MiB target.
    assert_eq!(
        stat(&alloc, "num_device_free"),
        1,
        "the oldest 30 MiB block collected"
    );
    let streams: Vec<StreamId> = alloc
        .segments(0)
        .unwrap()
        .iter()
        .map(|s| s.stream)
        .collect();
    assert_eq!(
        streams,
        [S2, S1],
        "the younger block stays; the new one took the freed range"
    );
    assert_eq!(stat(&alloc, "num_alloc_retries"), 0);
    assert_eq!(
        stat(&alloc, "num_sync_all_streams"),
        0,
        "collection does not synchronize"
    );
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn zero_byte_requests_are_valid_and_use_no_memory() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 0, S0).unwrap();
    assert_eq!((a.ptr(), a.size(), a.id()), (0, 0, 0));
    a.record_stream(S1).unwrap();
    drop(a);
    assert_eq!(alloc.malloc(0, 0, S0).unwrap(), 0);
    alloc.free(0, 0).unwrap();
    assert_eq!(sim.calls(0), Default::default(), "no device call at all");
    assert_eq!(stat(&alloc, "allocation.all.allocated"), 0);
    assert!(matches!(
        alloc.allocate(3, 0, S0),
        Err(Error::InvalidDevice {
            device: 3,
            device_count: 1
        })
    ));
}

#[test]
fn sizes_that_cannot_fit_are_refused_without_touching_state() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let err = alloc.allocate(0, usize::MAX, S0).unwrap_err();
    assert_eq!(
        err,
        Error::SizeTooLarge {
            requested_bytes: usize::MAX
        }
    );
    let err = alloc.allocate(0, 1 << 60, S0).unwrap_err();
    assert!(
        matches!(err, Error::ExceedsCapacity { requested_bytes, limit_bytes, limited: false, .. }
        if requested_bytes == 1 << 60 && limit_bytes == 1 << 30),
        "{err:?}"
    );
    assert!(err.to_string().contains("1073741824.00 GiB"), "{err}");
    assert_eq!(sim.calls(0).segment_allocs + sim.calls(0).failed_allocs, 0);
    assert_eq!(stat(&alloc, "num_ooms"), 0);
    valid(&alloc, &sim);
}

#[test]
fn raw_pointer_misuse_is_a_typed_error_that_changes_nothing() {
    let sim = SimBackend::new(2, 1 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    let p = alloc.malloc(0, 4096, S0).unwrap();
    let q = alloc.malloc(1, 4096, S0).unwrap();
    assert_eq!(
        alloc.free(1, p),
        Err(Error::WrongDevice {
            ptr: p,
            given: 1,
            actual: 0
        })
    );
    assert_eq!(
        alloc.record_stream(1, p, S1),
        Err(Error::WrongDevice {
            ptr: p,
            given: 1,
            actual: 0
        })
    );
    assert_eq!(
        alloc.free(0, p + 512),
        Err(Error::UnknownPointer {
            device: 0,
            ptr: p + 512
        })
    );
    assert_eq!(
        alloc.free(0, 12345),
        Err(Error::UnknownPointer {
            device: 0,
            ptr: 12345
        })
    );
    assert_eq!(
        alloc.free(5, p),
        Err(Error::InvalidDevice {
            device: 5,
            device_count: 2
        })
    );
    assert_eq!(
        stat(&alloc, "allocation.all.current"),
        1,
        "nothing was freed"
    );
    alloc.free(0, p).unwrap();
    assert_eq!(
        alloc.free(0, p),
        Err(Error::DoubleFree { device: 0, ptr: p })
    );
    assert_eq!(
        alloc.free(0, q),
        Err(Error::WrongDevice {
            ptr: q,
            given: 0,
            actual: 1
        })
    );
    alloc.free(1, q).unwrap();
    alloc.check_invariants(0).unwrap();
    alloc.check_invariants(1).unwrap();
    // A handle's block is not a raw allocation.
    let h = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(
        alloc.free(0, h.ptr()),
        Err(Error::UnknownPointer {
            device: 0,
            ptr: h.ptr()
        })
    );
    assert!(matches!(
        alloc.segments(0).unwrap()[0].blocks[0].state,
        BlockState::Allocated
    ));
}

#[test]
fn memory_fraction_outside_zero_to_one_is_refused() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    for fraction in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = alloc
            .set_per_process_memory_fraction(fraction, 0)
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidMemoryFraction { .. }),
            "{fraction}: {err:?}"
        );
    }
    assert!(matches!(
        alloc.set_per_process_memory_fraction(0.5, 9),
        Err(Error::InvalidDevice { device: 9, .. })
    ));
    // Still unlimited.
    drop(alloc.allocate(0, 900 * MIB, S0).unwrap());
}

#[test]
fn injected_device_errors_are_typed_and_leave_the_allocator_valid() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    sim.inject(0, SimFault::AllocError { nth: 1 }).unwrap();
    let err = alloc.allocate(0, 4096, S0).unwrap_err();
    assert!(
        matches!(err, Error::Backend(BackendError::InjectedFault { .. })),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    valid(&alloc, &sim);
    let a = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(a.ptr(), BASE);

    // An injected out-of-memory is retried after releasing the cache.
    sim.inject(0, SimFault::AllocOutOfMemory { nth: 1 })
        .unwrap();
    let b = alloc.allocate(0, 12 * MIB, S0).unwrap();
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    drop((a, b));
    valid(&alloc, &sim);
}

#[test]
fn free_memory_callbacks_run_on_a_cache_miss_and_may_free_allocations() {
    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    let hoard: Arc<Mutex<Option<Allocation<SimBackend>>>> =
        Arc::new(Mutex::new(Some(alloc.allocate(0, 40 * MIB, S0).unwrap())));
    let calls = Arc::new(Mutex::new(0));
    {
        let (hoard, calls) = (Arc::clone(&hoard), Arc::clone(&calls));
        alloc.add_free_memory_callback(Box::new(move || {
            *calls.lock().unwrap() += 1;
            hoard.lock().unwrap().take().is_some()
        }));
    }
    let a = alloc
        .allocate(0, 40 * MIB, S0)
        .expect("the callback freed the hoard");
    assert_eq!(
        a.ptr(),
        BASE,
        "the freed block is found in the cache after the callbacks"
    );
    assert_eq!(*calls.lock().unwrap(), 1);
    assert_eq!(
        stat(&alloc, "num_device_alloc"),
        1,
        "no new segment was needed"
    );
    drop(a);
    let _b = alloc.allocate(0, 40 * MIB, S0).unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "a cache hit does not run the callbacks"
    );
    valid(&alloc, &sim);
}

#[test]
fn peak_and_accumulated_stats_reset_as_pytorch_does() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    drop(alloc.allocate(0, 8192, S0).unwrap());
    assert_eq!(stat(&alloc, "allocated_bytes.all.peak"), 12288);
    alloc.reset_peak_memory_stats(0).unwrap();
    assert_eq!(stat(&alloc, "allocated_bytes.all.peak"), 4096);
    assert_eq!(stat(&alloc, "allocated_bytes.all.allocated"), 12288);
    alloc.reset_accumulated_memory_stats(0).unwrap();
    assert_eq!(stat(&alloc, "allocated_bytes.all.allocated"), 0);
    assert_eq!(stat(&alloc, "num_device_alloc"), 0);
    assert_eq!(
        stat(&alloc, "allocated_bytes.all.current"),
        4096,
        "current is kept"
    );
    drop(a);
    assert_eq!(stat(&alloc, "allocated_bytes.all.freed"), 4096);
}

#[test]
fn memory_summary_reports_the_device_table() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let _a = alloc.allocate(0, 4096, S0).unwrap();
    let summary = alloc.memory_summary(0).unwrap();
    let line = summary
        .lines()
        .find(|l| l.starts_with("| Allocated memory"))
        .expect("an Allocated memory row");
    assert_eq!(
        line,
        "| Allocated memory      |   4096 B   |   4096 B   |   4096 B   |      0 B   |"
    );
    assert!(matches!(
        alloc.memory_summary(1),
        Err(Error::InvalidDevice { .. })
    ));
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
    sim.complete_stream(0, S1).unwrap();
    sim.complete_stream(0, S2).unwrap();
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
    sim.inject(0, SimFault::RecordEventError { nth: 1 })
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
    let b = alloc.allocate(0, 4096, S0).unwrap();
    assert_ne!(b.ptr(), BASE, "the stranded block is not handed out again");
    assert_eq!(
        stat(&alloc, "segment.all.current"),
        1,
        "its segment stays reserved"
    );
    valid(&alloc, &sim);
}

#[test]
fn callbacks_may_register_callbacks_and_allocate_without_deadlock() {
    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    let calls = Arc::new(Mutex::new(0));
    {
        let (inner, calls) = (alloc.clone(), Arc::clone(&calls));
        alloc.add_free_memory_callback(Box::new(move || {
            *calls.lock().unwrap() += 1;
            inner.add_free_memory_callback(Box::new(|| false));
            // An allocation from inside a callback does not run the callbacks again.
            drop(inner.allocate(0, 30 * MIB, S1).unwrap());
            false
        }));
    }
    let a = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(*calls.lock().unwrap(), 1);
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn after_callbacks_that_freed_nothing_the_cache_is_not_searched_again() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 30 * MIB, S0).unwrap();
    a.record_stream(S1).unwrap();
    drop(a);
    {
        let sim = sim.clone();
        alloc.add_free_memory_callback(Box::new(move || {
            // The side stream finishes while the callbacks run; as in PyTorch, its deferred
            // free is only noticed at the next allocation.
            sim.complete_stream(0, S1).unwrap();
            false
        }));
    }
    let b = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_ne!(b.ptr(), BASE, "a new segment, as PyTorch would allocate");
    assert_eq!(stat(&alloc, "num_device_alloc"), 2);
    let c = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(
        c.ptr(),
        BASE,
        "the deferred block is reused at the next allocation"
    );
    drop((b, c));
    valid(&alloc, &sim);
}

#[test]
fn invariants_of_a_missing_device_are_an_error() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let err = alloc.check_invariants(4).unwrap_err();
    assert_eq!(err.device, 4);
    assert!(err.message.contains("does not exist"), "{err}");
}

#[test]
fn a_device_allocator_refuses_a_bad_fraction_itself() {
    let sim = SimBackend::new(1, 1 << 30);
    let mut dev: blockpool::pool::DeviceAllocator<blockpool::SimEvent> =
        blockpool::pool::DeviceAllocator::new(0, AllocatorConfig::default());
    for fraction in [-0.5, 2.0, f64::NAN] {
        let err = dev.set_memory_fraction(&sim, fraction).unwrap_err();
        assert!(
            matches!(err, Error::InvalidMemoryFraction { .. }),
            "{fraction}: {err:?}"
        );
    }
    let block = dev.malloc(&sim, 900 * MIB, S0).expect("no limit was set");
    dev.free(&sim, block.id).unwrap();
    dev.check_invariants().unwrap();
}
