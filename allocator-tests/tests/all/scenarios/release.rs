//! Giving memory back: `empty_cache`, the out-of-memory ladder, oversize blocks, the memory
//! fraction and garbage collection.

use super::*;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

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
    assert_eq!(sim.allocated_bytes(D0), 2 << 20);
    drop(keep);
    alloc.empty_cache().unwrap();
    assert_eq!(sim.allocated_bytes(D0), 0);
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
    assert_eq!(sim.segment_count(D0), 4);
    drop(alloc);
    assert_eq!(
        sim.segment_count(D0),
        1,
        "only the raw allocation's segment, never freed, is left to the backend"
    );
    assert_eq!(sim.allocated_bytes(D0), 2 * MIB);
    let calls = sim.calls(D0);
    assert_eq!(calls.segment_frees, 3);
    assert_eq!(
        calls.event_syncs, 1,
        "the other stream's use was waited for first"
    );
    assert_eq!(
        raw,
        BASE + ((2 + 40 + 20) << 20),
        "stream 2 had no cached block: the raw allocation got a new 2 MiB segment after the \
         2 MiB, 40 MiB and 20 MiB ones"
    );
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
    assert_eq!(
        a.ptr(),
        BASE + (80 << 20),
        "80 MiB is more than 40 MiB + 20 MiB: not reused, a new segment after it"
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
    assert_eq!(sim.calls(D0).failed_allocs, 1);
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
    alloc.set_per_process_memory_fraction(0.5, D0).unwrap();
    let a = alloc.allocate(0, 40 * MIB, S0).unwrap();
    let err = alloc.allocate(0, 12 * MIB, S0).unwrap_err();
    let oom = err
        .as_out_of_memory()
        .expect("out of memory under the fraction");
    assert_eq!(oom.limit_bytes, Some(50 * MIB));
    assert!(err.to_string().contains("50.00 MiB allowed; "), "{err}");
    assert_eq!(
        sim.calls(D0).failed_allocs,
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
    alloc.set_per_process_memory_fraction(1.0, D0).unwrap();
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
        .segments(D0)
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
fn memory_fraction_outside_zero_to_one_is_refused() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    for fraction in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = alloc
            .set_per_process_memory_fraction(fraction, D0)
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidMemoryFraction { .. }),
            "{fraction}: {err:?}"
        );
    }
    assert!(matches!(
        alloc.set_per_process_memory_fraction(0.5, 9),
        Err(Error::InvalidDevice { device, .. }) if device == DeviceIndex::new(9)
    ));
    // Still unlimited.
    drop(alloc.allocate(0, 900 * MIB, S0).unwrap());
}
