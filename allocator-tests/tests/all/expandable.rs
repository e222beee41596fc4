//! Expandable segments (`expandable_segments:True`) on the simulated device, with exact
//! addresses and statistics.
//!
//! With a 64 MiB device, an expandable segment reserves 1 1/8 of the capacity rounded up to
//! its unit: 80 MiB for the large pool (20 MiB units), 72 MiB for the small pool (2 MiB units).
//! The simulator places each reserved range first fit from `BASE` (its reservation window),
//! 2 MiB aligned, with 2 MiB of unused space after it.

use crate::support::{stat, valid};
use blockpool::introspect::BlockState;
use blockpool::introspect::Introspect;
use blockpool::trace::Action;
use blockpool::DeviceIndex;
use blockpool::{AllocatorConfig, CachingAllocator, Error, HistorySettings, SimBackend, StreamId};

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

const BASE: u64 = 0x1000_0000_0000_0000;
const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId::from_raw(1);

fn expandable() -> AllocatorConfig {
    AllocatorConfig::builder()
        .expandable_segments(true)
        .build()
        .expect("valid config")
}

fn setup(capacity: usize) -> (SimBackend, CachingAllocator<SimBackend>) {
    let sim = SimBackend::new(1, capacity);
    let alloc = CachingAllocator::new(sim.clone(), expandable());
    (sim, alloc)
}

/// The mapped runs of device 0 as (offset from BASE in MiB, size in MiB).
fn runs(alloc: &CachingAllocator<SimBackend>) -> Vec<(u64, usize)> {
    let segments = alloc.segments(D0).expect("device 0 exists");
    assert!(segments.iter().all(|s| s.is_expandable), "{segments:?}");
    segments
        .iter()
        .map(|s| ((s.addr - BASE) / MIB as u64, s.size / MIB))
        .collect()
}

#[test]
fn one_segment_grows_across_allocations_at_contiguous_addresses() {
    let (sim, alloc) = setup(64 * MIB);
    let a = alloc.allocate(0, 3 * MIB, S0).unwrap();
    assert_eq!((a.ptr(), a.size()), (BASE, 3 * MIB));
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 20 * MIB as i64);
    let b = alloc.allocate(0, 15 * MIB, S0).unwrap();
    assert_eq!(
        b.ptr(),
        a.ptr() + 3 * MIB as u64,
        "served from the mapped unit"
    );
    assert_eq!(
        sim.calls(D0).maps,
        1,
        "no new mapping for the second request"
    );
    let c = alloc.allocate(0, 10 * MIB, S0).unwrap();
    assert_eq!(
        c.ptr(),
        b.ptr() + 15 * MIB as u64,
        "the free tail grew by one mapped unit"
    );
    valid(&alloc, &sim);
    let calls = sim.calls(D0);
    assert_eq!(
        (calls.address_reservations, calls.maps, calls.segment_allocs),
        (1, 2, 0),
        "one reservation, two 20 MiB units, no fixed segment"
    );
    assert_eq!(runs(&alloc), [(0, 40)]);
    assert_eq!(
        stat(&alloc, "reserved_bytes.large_pool.current"),
        40 * MIB as i64
    );
    assert_eq!(
        stat(&alloc, "num_device_alloc"),
        2,
        "one per map, as PyTorch"
    );
    assert_eq!(
        stat(&alloc, "segment.all.current"),
        0,
        "PyTorch counts no segment"
    );
    assert_eq!(stat(&alloc, "inactive_split.all.current"), 0);
    assert_eq!(stat(&alloc, "allocated_bytes.all.current"), 28 * MIB as i64);

    // Nothing whole is free: empty_cache unmaps nothing.
    alloc.empty_cache().unwrap();
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 40 * MIB as i64);
    drop(b);
    alloc.empty_cache().unwrap();
    assert_eq!(
        stat(&alloc, "reserved_bytes.all.current"),
        40 * MIB as i64,
        "[3, 18) MiB holds no whole unit"
    );
    drop(c);
    alloc.empty_cache().unwrap();
    valid(&alloc, &sim);
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 20 * MIB as i64);
    assert_eq!(runs(&alloc), [(0, 20)], "the partly used first unit stays");
    assert_eq!(stat(&alloc, "num_device_free"), 1);
    drop(a);
    alloc.empty_cache().unwrap();
    valid(&alloc, &sim);
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 0);
    assert_eq!(
        (sim.address_range_count(D0), sim.allocated_bytes(D0)),
        (0, 0),
        "the whole range was released"
    );
    let calls = sim.calls(D0);
    assert_eq!((calls.unmaps, calls.address_releases), (2, 1));
}

#[test]
fn empty_cache_unmaps_only_whole_free_units_and_holes_are_mapped_again() {
    let (sim, alloc) = setup(64 * MIB);
    let a = alloc.allocate(0, 15 * MIB, S0).unwrap();
    let b = alloc.allocate(0, 25 * MIB, S0).unwrap();
    let c = alloc.allocate(0, 15 * MIB, S0).unwrap();
    assert_eq!(
        [a.ptr(), b.ptr(), c.ptr()].map(|p| (p - BASE) / MIB as u64),
        [0, 15, 40]
    );
    assert_eq!(runs(&alloc), [(0, 60)]);
    drop(b);
    alloc.empty_cache().unwrap();
    valid(&alloc, &sim);
    assert_eq!(
        runs(&alloc),
        [(0, 20), (40, 20)],
        "[20, 40) MiB unmapped, [15, 20) stays"
    );
    let views = alloc.segments(D0).unwrap();
    let states: Vec<(u64, usize, BlockState)> = views[0]
        .blocks
        .iter()
        .map(|b| ((b.addr - BASE) / MIB as u64, b.size / MIB, b.state))
        .collect();
    assert_eq!(
        states,
        [(0, 15, BlockState::Allocated), (15, 5, BlockState::Free)]
    );
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 40 * MIB as i64);

    let d = alloc.allocate(0, 20 * MIB, S0).unwrap();
    assert_eq!(
        d.ptr(),
        BASE + 15 * MIB as u64,
        "the hole is mapped again and joined to the free block before it"
    );
    assert_eq!(runs(&alloc), [(0, 60)]);
    assert_eq!(sim.calls(D0).maps, 4);
    valid(&alloc, &sim);
    drop((a, c, d));
    alloc.empty_cache().unwrap();
    valid(&alloc, &sim);
    assert_eq!(sim.address_range_count(D0), 0);
}

#[test]
fn streams_and_pools_get_their_own_segments() {
    let (sim, alloc) = setup(64 * MIB);
    let small = alloc.allocate(0, 4096, S0).unwrap();
    let large = alloc.allocate(0, 3 * MIB, S0).unwrap();
    let other = alloc.allocate(0, 3 * MIB, S1).unwrap();
    assert_eq!(small.ptr(), BASE, "small pool: 72 MiB reserved at BASE");
    assert_eq!(
        large.ptr(),
        BASE + 74 * MIB as u64,
        "large pool: after the small range and its guard"
    );
    assert_eq!(
        other.ptr(),
        BASE + 156 * MIB as u64,
        "stream 1 has its own range"
    );
    assert_eq!(sim.address_range_count(D0), 3);
    assert_eq!(
        stat(&alloc, "reserved_bytes.small_pool.current"),
        2 * MIB as i64
    );
    assert_eq!(
        stat(&alloc, "reserved_bytes.large_pool.current"),
        40 * MIB as i64
    );
    let small2 = alloc.allocate(0, 1000, S0).unwrap();
    assert_eq!(
        small2.ptr(),
        BASE + 4096,
        "small requests pack into the 2 MiB unit"
    );
    valid(&alloc, &sim);
    drop(other);
    let reuse = alloc.allocate(0, 3 * MIB, S0).unwrap();
    assert_eq!(
        reuse.ptr(),
        BASE + 77 * MIB as u64,
        "stream 1's freed block is never handed to stream 0"
    );
    drop((small, large, small2, reuse));
    alloc.empty_cache().unwrap();
    valid(&alloc, &sim);
    assert_eq!(
        (sim.address_range_count(D0), sim.allocated_bytes(D0)),
        (0, 0)
    );
}

#[test]
fn out_of_memory_unmaps_cached_units_retries_then_fails_with_the_numbers() {
    let (sim, alloc) = setup(64 * MIB);
    let x = alloc.allocate(0, 40 * MIB, S1).unwrap();
    drop(x);
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 40 * MIB as i64);
    // Stream 0 needs 40 MiB mapped; only 24 MiB are free until stream 1's units go.
    let y = alloc.allocate(0, 40 * MIB, S0).unwrap();
    valid(&alloc, &sim);
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    assert_eq!(stat(&alloc, "num_ooms"), 0);
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 40 * MIB as i64);
    assert_eq!(
        sim.address_range_count(D0),
        1,
        "stream 1's range was released"
    );
    assert_eq!(y.ptr(), BASE, "the released range's addresses are reused");

    let err = alloc.allocate(0, 30 * MIB, S0).unwrap_err();
    let Error::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(oom.requested_bytes, 30 * MIB);
    assert_eq!(oom.reserved_bytes, 40 * MIB);
    assert_eq!(oom.allocated_bytes, 40 * MIB);
    assert_eq!(stat(&alloc, "num_ooms"), 1);
    assert!(
        err.to_string().contains("expandable_segments"),
        "the message keeps its hint: {err}"
    );
    valid(&alloc, &sim);
    drop(y);
    let z = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(z.ptr(), BASE, "served from the cached mapped units");
    valid(&alloc, &sim);
}

#[test]
fn a_memory_fraction_caps_the_mapped_bytes() {
    let (sim, alloc) = setup(64 * MIB);
    alloc.set_per_process_memory_fraction(0.5, D0).unwrap();
    let a = alloc.allocate(0, 15 * MIB, S0).unwrap();
    let err = alloc.allocate(0, 10 * MIB, S0).unwrap_err();
    let Error::OutOfMemory(oom) = &err else {
        panic!("expected out of memory, got {err}");
    };
    assert_eq!(
        oom.limit_bytes,
        Some(32 * MIB),
        "a second unit would pass 32 MiB"
    );
    assert_eq!(stat(&alloc, "reserved_bytes.all.current"), 20 * MIB as i64);
    let b = alloc.allocate(0, 5 * MIB, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE + 15 * MIB as u64,
        "what is mapped still serves"
    );
    drop((a, b));
    valid(&alloc, &sim);
}

#[test]
fn a_backend_that_cannot_map_falls_back_to_fixed_segments() {
    let sim = SimBackend::builder()
        .capacity(64 * MIB)
        .host_backed(true)
        .build();
    let alloc = CachingAllocator::new(sim.clone(), expandable());
    assert!(
        !alloc.config().expandable_segments(),
        "no device can map, so the allocator reports expandable segments off"
    );
    let a = alloc.allocate(0, 3 * MIB, S0).unwrap();
    assert_eq!(a.size(), 3 * MIB);
    let calls = sim.calls(D0);
    assert_eq!((calls.segment_allocs, calls.maps), (1, 0));
    let segments = alloc.segments(D0).unwrap();
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].size, 20 * MIB, "a fixed 20 MiB segment");
    assert!(!segments[0].is_expandable);
    assert_eq!(stat(&alloc, "segment.all.current"), 1);
    let config = alloc
        .snapshot()
        .allocator_config
        .expect("a snapshot states its allocator configuration");
    assert!(!config.contains("expandable_segments:True"), "{config}");
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn the_trace_says_map_and_unmap() {
    let (sim, alloc) = setup(64 * MIB);
    alloc
        .record_memory_history(HistorySettings::default())
        .unwrap();
    let a = alloc.allocate(0, 25 * MIB, S0).unwrap();
    drop(a);
    alloc.empty_cache().unwrap();
    let snapshot = alloc.snapshot();
    let events: Vec<(Action, u64, u64)> = snapshot
        .events
        .iter()
        .filter(|e| e.action != Action::Snapshot)
        .map(|e| (e.action, (e.addr - BASE) / MIB as u64, e.size / MIB as u64))
        .collect();
    assert_eq!(
        events,
        [
            (Action::SegmentMap, 0, 40),
            (Action::Alloc, 0, 25),
            (Action::FreeRequested, 0, 25),
            (Action::FreeCompleted, 0, 25),
            (Action::SegmentUnmap, 0, 40),
        ]
    );
    assert!(snapshot.segments.is_empty());
    valid(&alloc, &sim);
    let summary = alloc.memory_summary(0).unwrap();
    let reserved_line = summary
        .lines()
        .find(|l| l.contains("GPU reserved memory"))
        .expect("the summary has a GPU reserved memory line");
    assert!(
        reserved_line.contains("40960 KiB"),
        "peak reserved is the mapped 40 MiB: {summary}"
    );
}

#[test]
fn a_request_whose_units_can_never_fit_is_refused_at_once() {
    let (sim, alloc) = setup(64 * MIB);
    alloc.set_per_process_memory_fraction(0.5, D0).unwrap();
    // 25 MiB is under the 32 MiB limit, but the large pool maps 20 MiB units: it needs 40.
    let err = alloc.allocate(0, 25 * MIB, S0).unwrap_err();
    assert_eq!(
        err,
        Error::ExceedsCapacity {
            device: D0,
            requested_bytes: 40 * MIB,
            limit_bytes: 32 * MIB,
            limited: true,
        }
    );
    assert!(!err.is_retryable());
    assert_eq!(
        stat(&alloc, "num_alloc_retries"),
        0,
        "no ladder was climbed"
    );
    assert_eq!(stat(&alloc, "num_ooms"), 1, "counted as PyTorch counts it");
    // 20 MiB (one unit) still fits.
    let a = alloc.allocate(0, 20 * MIB, S0).unwrap();
    assert_eq!(a.size(), 20 * MIB);
    valid(&alloc, &sim);
}
