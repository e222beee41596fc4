//! Sizes and pools: packing small requests, splitting 20 MiB segments, what large blocks
//! keep, sizes that cannot fit.

use super::*;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;

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
    assert_eq!(sim.calls(DeviceIndex::new(0)).segment_allocs, 1);

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
        alloc.segments(DeviceIndex::new(0)).unwrap()[0].blocks.len(),
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
    assert_eq!(sim.calls(DeviceIndex::new(0)).segment_allocs, 2);
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
fn zero_byte_requests_are_valid_and_use_no_memory() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 0, S0).unwrap();
    assert_eq!((a.ptr(), a.size(), a.id()), (0, 0, 0));
    a.record_stream(S1).unwrap();
    drop(a);
    assert_eq!(alloc.malloc(0, 0, S0).unwrap(), 0);
    alloc.free(0, 0).unwrap();
    assert_eq!(
        sim.calls(DeviceIndex::new(0)),
        Default::default(),
        "no device call at all"
    );
    assert_eq!(stat(&alloc, "allocation.all.allocated"), 0);
    assert!(matches!(
        alloc.allocate(3, 0, S0),
        Err(Error::InvalidDevice {
            device,
            device_count: 1
        }) if device == DeviceIndex::new(3)
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
    assert_eq!(
        sim.calls(DeviceIndex::new(0)).segment_allocs
            + sim.calls(DeviceIndex::new(0)).failed_allocs,
        0
    );
    // As PyTorch counts a request its device can never provide: one out-of-memory (the size
    // that overflows when rounded is refused before that, and is not counted).
    assert_eq!(stat(&alloc, "num_ooms"), 1);
    valid(&alloc, &sim);
}

#[test]
fn a_request_that_never_fits_is_traced_as_pytorch_traces_its_out_of_memory() {
    use blockpool::trace::Action;
    use blockpool::HistorySettings;
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings {
            enabled: true,
            max_entries: 16,
            ..HistorySettings::default()
        })
        .expect("valid history settings");
    let kept = alloc.allocate(0, 4096, S0).expect("fits");
    let err = alloc.allocate(0, 3 << 30, S0).unwrap_err();
    assert!(
        matches!(err, Error::ExceedsCapacity { .. }) && !err.is_retryable(),
        "never fits, and says so: {err:?}"
    );
    assert_eq!(stat(&alloc, "num_ooms"), 1, "counted as an out-of-memory");
    let events = alloc.history(0).expect("device 0");
    let oom = events.last().expect("events recorded");
    // As PyTorch: `addr` holds the device's free bytes, `size` the rounded request.
    assert_eq!(
        (oom.action, oom.addr, oom.size, oom.stream),
        (Action::Oom, (1 << 30) - (2 << 20), 3 << 30, S0),
        "the last event is the out-of-memory: {events:?}"
    );
    drop(kept);
    valid(&alloc, &sim);
}
