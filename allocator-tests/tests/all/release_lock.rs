//! `release_lock_on_cudamalloc:True`: the device lock is released while a segment is
//! allocated, as PyTorch releases its mutex around `cudaMalloc`.
//!
//! The simulated device's allocation hook runs inside the backend's segment allocation, on
//! the allocating thread: from there a second thread tries the device, and whether it gets
//! through says whether the lock is held. A single thread must see exactly what it sees with
//! the lock held: same addresses, errors, statistics and trace.

use crate::support::{stat, valid};
use blockpool::backend::SimFault;
use blockpool::DeviceIndex;
use blockpool::{
    Allocation, AllocatorConfig, CachingAllocator, Error, HistorySettings, SimBackend, StreamId,
};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
/// Device 0's first fake address.
const BASE: u64 = 0x7f00_0000_0000;
/// How long a thread that should get through may take: generous, it is only a bound.
const GETS_THROUGH: Duration = Duration::from_secs(30);
/// How long a thread that must not get through is watched.
const KEPT_OUT: Duration = Duration::from_millis(300);

/// What the thread started inside the hook did, and when.
#[derive(Debug)]
struct Inside {
    /// The cache hit it made while the segment was being allocated, `None` if it was kept out.
    hit: Option<Allocation<SimBackend>>,
    /// `num_device_alloc` it read at that moment.
    device_allocs: Option<i64>,
}

/// An allocator over a 1 GiB device whose hook, on the first 20 MiB segment allocation,
/// starts a thread that takes a cached 4 KiB block and reads the statistics, and waits for it
/// for `wait`. Returns the allocator and what the thread managed while the hook waited.
fn allocate_with_a_visitor(
    release_lock: bool,
    wait: Duration,
) -> (SimBackend, CachingAllocator<SimBackend>, Inside) {
    let sim = SimBackend::new(1, 1 << 30);
    let config = AllocatorConfig::builder()
        .release_lock_on_cudamalloc(release_lock)
        .build()
        .expect("a valid config");
    let alloc = CachingAllocator::new(sim.clone(), config);
    // A cached small block for the visitor to take.
    drop(alloc.allocate(0, 4096, S0).unwrap());

    let inside = Arc::new(Mutex::new(None));
    let late = Arc::new(Mutex::new(None));
    {
        let (alloc, inside, late) = (alloc.clone(), Arc::clone(&inside), Arc::clone(&late));
        sim.set_alloc_hook(Some(Arc::new(move |_, size| {
            if size != 20 * MIB {
                return;
            }
            let (tx, rx) = mpsc::channel();
            let visitor = alloc.clone();
            let handle = thread::spawn(move || {
                let hit = visitor.allocate(0, 4096, S0).unwrap();
                let allocs = visitor.memory_stats(0).unwrap()["num_device_alloc"];
                // The receiver is gone when the hook stopped waiting; the test then asks `late`.
                let _ = tx.send((hit, allocs));
            });
            let seen = match rx.recv_timeout(wait) {
                Ok((hit, allocs)) => Inside {
                    hit: Some(hit),
                    device_allocs: Some(allocs),
                },
                Err(RecvTimeoutError::Timeout) => Inside {
                    hit: None,
                    device_allocs: None,
                },
                Err(RecvTimeoutError::Disconnected) => panic!("the visitor thread failed"),
            };
            *inside.lock().unwrap() = Some(seen);
            *late.lock().unwrap() = Some(handle);
        })));
    }
    let big = alloc.allocate(0, 5 * MIB, S0).unwrap();
    sim.set_alloc_hook(None);
    if let Some(handle) = late.lock().unwrap().take() {
        handle.join().expect("the visitor thread panicked");
    }
    let seen = inside.lock().unwrap().take().expect("the hook ran");
    drop(big);
    (sim, alloc, seen)
}

#[test]
fn with_the_lock_released_a_cache_hit_is_served_while_a_segment_is_allocated() {
    let (sim, alloc, seen) = allocate_with_a_visitor(true, GETS_THROUGH);
    let hit = seen
        .hit
        .expect("the visitor got through while the segment was allocated");
    assert_eq!(
        hit.ptr(),
        BASE,
        "the cached block, at the small segment's start"
    );
    assert_eq!(
        seen.device_allocs,
        Some(1),
        "the segment in flight is not counted until the lock is taken back"
    );
    assert_eq!(stat(&alloc, "num_device_alloc"), 2);
    assert_eq!(
        stat(&alloc, "allocation.all.current"),
        1,
        "the visitor's block"
    );
    assert_eq!(stat(&alloc, "allocation.all.allocated"), 3);
    assert_eq!(
        stat(&alloc, "reserved_bytes.all.current"),
        (22 * MIB) as i64
    );
    valid(&alloc, &sim);
    drop(hit);
    assert_eq!(alloc.empty_cache(), Ok(()));
    assert_eq!(sim.allocated_bytes(DeviceIndex::new(0)), 0);
}

#[test]
fn by_default_the_device_lock_is_held_while_a_segment_is_allocated() {
    let (sim, alloc, seen) = allocate_with_a_visitor(false, KEPT_OUT);
    assert!(
        seen.hit.is_none() && seen.device_allocs.is_none(),
        "another thread got the device while it allocated a segment: {seen:?}"
    );
    // The visitor got through once the allocation finished, and then dropped its block.
    assert_eq!(stat(&alloc, "allocation.all.allocated"), 3);
    assert_eq!(stat(&alloc, "allocation.all.current"), 0);
    assert_eq!(stat(&alloc, "num_device_alloc"), 2);
    valid(&alloc, &sim);
}

#[test]
fn every_rung_of_the_out_of_memory_ladder_asks_the_device_without_the_lock() {
    let sim = SimBackend::new(1, 128 * MIB);
    let config = AllocatorConfig::parse("release_lock_on_cudamalloc:True,max_split_size_mb:20")
        .expect("a valid config");
    let alloc = CachingAllocator::new(sim.clone(), config);
    // Cached oversize blocks: 64 MiB on stream 0 (too large to serve 40 MiB: the rounding
    // margin is 20 MiB), 30 MiB on stream 1.
    drop(alloc.allocate(0, 64 * MIB, S0).unwrap());
    drop(alloc.allocate(0, 30 * MIB, StreamId::from_raw(1)).unwrap());
    let unlocked = Arc::new(Mutex::new(Vec::new()));
    {
        let (visitor, unlocked) = (alloc.clone(), Arc::clone(&unlocked));
        sim.set_alloc_hook(Some(Arc::new(move |_, size| {
            let visitor = visitor.clone();
            let reader = thread::spawn(move || visitor.memory_stats(0).map(|s| s["num_ooms"]));
            let (tx, rx) = mpsc::channel();
            let waiter = thread::spawn(move || {
                let _ = tx.send(reader.join());
            });
            let got_through = rx.recv_timeout(GETS_THROUGH).is_ok();
            unlocked.lock().unwrap().push((size / MIB, got_through));
            drop(waiter);
        })));
    }
    // From now on the device hands out at most 64 MiB. 40 MiB do not fit next to the cached
    // 94 MiB: the device refuses; stream 0's block is released and the device refuses again
    // (stream 1's block still holds 30 MiB); then everything is released and the retry
    // succeeds.
    sim.inject(
        DeviceIndex::new(0),
        SimFault::OutOfMemoryAbove {
            limit_bytes: 64 * MIB,
        },
    )
    .unwrap();
    let a = alloc.allocate(0, 40 * MIB, S0).unwrap();
    sim.set_alloc_hook(None);
    assert_eq!(
        *unlocked.lock().unwrap(),
        [(40, true), (40, true), (40, true)],
        "three device calls, each made with the device lock free"
    );
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    assert_eq!(stat(&alloc, "num_device_free"), 2);
    assert_eq!(stat(&alloc, "num_ooms"), 0);
    assert_eq!(a.ptr(), BASE);
    drop(a);
    valid(&alloc, &sim);
}

/// Allocates `size` bytes on `stream`, logging the address or the error; keeps the handle.
fn step(
    alloc: &CachingAllocator<SimBackend>,
    log: &mut Vec<String>,
    held: &mut Vec<Allocation<SimBackend>>,
    (size, stream): (usize, StreamId),
) {
    match alloc.allocate(0, size, stream) {
        Ok(a) => {
            log.push(format!("{size} on {stream:?}: {:#x}", a.ptr()));
            held.push(a);
        }
        Err(e) => log.push(format!("{size} on {stream:?}: {e}")),
    }
}

/// One thread's operations, each result as text: addresses, errors.
fn script(alloc: &CachingAllocator<SimBackend>, sim: &SimBackend) -> Vec<String> {
    let (mut log, mut held, mut kept) = (Vec::new(), Vec::new(), Vec::new());
    for request in [
        (512, S0),
        (3 * MIB, S0),
        (30 * MIB, S0),
        (25 * MIB, StreamId::from_raw(1)),
        (700 * 1024, StreamId::from_raw(1)),
    ] {
        step(alloc, &mut log, &mut held, request);
    }
    // Free every other one, then fill the device until it refuses.
    for (i, a) in held.drain(..).enumerate() {
        if i % 2 == 1 {
            kept.push(a);
        }
    }
    for size in [22 * MIB, 40 * MIB, 9 * MIB, 60 * MIB, 2 * MIB] {
        step(alloc, &mut log, &mut held, (size, S0));
    }
    sim.inject(DeviceIndex::new(0), SimFault::AllocOutOfMemory { nth: 1 })
        .unwrap();
    step(
        alloc,
        &mut log,
        &mut held,
        (11 * MIB, StreamId::from_raw(2)),
    );
    alloc.set_per_process_memory_fraction(0.5, 0).unwrap();
    step(
        alloc,
        &mut log,
        &mut held,
        (30 * MIB, StreamId::from_raw(2)),
    );
    log.push(format!("{:?}", alloc.empty_cache()));
    drop(kept);
    held.clear();
    step(alloc, &mut log, &mut held, (50 * MIB, S0));
    log
}

#[test]
fn one_thread_sees_the_same_addresses_errors_stats_and_trace_either_way() {
    let run = |release_lock: bool| {
        let sim = SimBackend::new(1, 128 * MIB);
        let config = AllocatorConfig::builder()
            .max_split_size_mb(20)
            .release_lock_on_cudamalloc(release_lock)
            .build()
            .expect("a valid config");
        let alloc = CachingAllocator::new(sim.clone(), config);
        alloc
            .record_memory_history(HistorySettings::default())
            .unwrap();
        let log = script(&alloc, &sim);
        valid(&alloc, &sim);
        let stats = alloc.memory_stats(0).unwrap();
        let trace: Vec<String> = alloc
            .snapshot()
            .events
            .iter()
            .map(|e| format!("{:?} {:#x} {} {:?}", e.action, e.addr, e.size, e.stream))
            .collect();
        (log, stats, trace)
    };
    let (held_log, held_stats, held_trace) = run(false);
    let (released_log, released_stats, released_trace) = run(true);
    assert_eq!(held_log, released_log);
    assert_eq!(held_stats, released_stats);
    assert_eq!(held_trace, released_trace);
    // The script is not trivial: it ran out of memory and retried.
    assert!(
        held_log.iter().any(|l| l.contains("out of memory")),
        "{held_log:#?}"
    );
    assert!(held_stats["num_alloc_retries"] > 0);
    assert!(held_stats["num_ooms"] > 0);
    assert!(held_trace.len() > 20);
}

#[test]
fn a_device_error_while_unlocked_is_typed_and_leaves_the_allocator_valid() {
    let sim = SimBackend::new(1, 1 << 30);
    let config = AllocatorConfig::parse("release_lock_on_cudamalloc:True").unwrap();
    let alloc = CachingAllocator::new(sim.clone(), config);
    sim.inject(DeviceIndex::new(0), SimFault::AllocError { nth: 1 })
        .unwrap();
    let err = alloc.allocate(0, 4096, S0).unwrap_err();
    assert!(
        matches!(err, Error::Backend(_)) && !err.is_retryable(),
        "{err:?}"
    );
    assert_eq!(stat(&alloc, "num_device_alloc"), 0);
    valid(&alloc, &sim);
    let a = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(a.ptr(), BASE);
}

#[test]
fn segments_allocated_at_once_by_two_threads_never_pass_the_memory_fraction() {
    // 64 MiB device, limit 32 MiB; each 17 MiB request needs an 18 MiB segment, so only one
    // fits. Thread A asks the device; inside that call thread B allocates and keeps its block.
    let sim = SimBackend::new(1, 64 * MIB);
    let config = AllocatorConfig::parse("release_lock_on_cudamalloc:True").unwrap();
    let alloc = CachingAllocator::new(sim.clone(), config);
    alloc.set_per_process_memory_fraction(0.5, 0).unwrap();
    let b_block = Arc::new(Mutex::new(None));
    {
        let (visitor, b_block) = (alloc.clone(), Arc::clone(&b_block));
        let first = std::sync::atomic::AtomicBool::new(true);
        sim.set_alloc_hook(Some(Arc::new(move |_, _| {
            if !first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return; // thread B's own allocation
            }
            let visitor = visitor.clone();
            let b = thread::spawn(move || visitor.allocate(0, 17 * MIB, StreamId::from_raw(1)));
            *b_block.lock().unwrap() = Some(b.join().expect("thread B ran"));
        })));
    }
    let a = alloc.allocate(0, 17 * MIB, S0);
    sim.set_alloc_hook(None);
    let b = b_block.lock().unwrap().take().expect("the hook ran");
    let b = b.expect("thread B's segment fits under the limit");
    let Err(Error::OutOfMemory(oom)) = &a else {
        panic!("thread A's segment would pass the limit, yet: {a:?}");
    };
    assert_eq!(oom.limit_bytes, Some(32 * MIB));
    assert_eq!(
        stat(&alloc, "reserved_bytes.all.current"),
        (18 * MIB) as i64
    );
    assert_eq!(
        stat(&alloc, "num_device_alloc"),
        1,
        "only thread B's segment joined"
    );
    assert_eq!(
        sim.calls(DeviceIndex::new(0)).segment_frees,
        1,
        "thread A's segment went back"
    );
    valid(&alloc, &sim);
    drop(b);
}

/// Leak tracking with the lock released: a call that allocates while another waits for its
/// segment sets its own origin, and the waiting call, taking the lock back, sets its own again,
/// so each allocation is recorded under its own name (a call's origin is used once).
#[test]
fn with_the_lock_released_each_allocation_is_tracked_with_its_own_origin() {
    let sim = SimBackend::new(1, 1 << 30);
    let config = AllocatorConfig::builder()
        .release_lock_on_cudamalloc(true)
        .build()
        .expect("a valid config");
    let alloc = CachingAllocator::new(sim.clone(), config);
    drop(alloc.allocate(0, 4096, S0).unwrap());
    let visitor_hit = Arc::new(Mutex::new(None));
    {
        let (visitor, slot) = (alloc.clone(), Arc::clone(&visitor_hit));
        sim.set_alloc_hook(Some(Arc::new(move |_, size| {
            if size == 20 * MIB {
                let visitor = visitor.clone();
                let hit = thread::spawn(move || visitor.allocate_named(0, 4096, S0, "visitor"))
                    .join()
                    .expect("the visitor thread panicked")
                    .expect("a cache hit");
                *slot.lock().unwrap() = Some(hit);
            }
        })));
    }
    let big = alloc.allocate_named(0, 5 * MIB, S0, "big").unwrap();
    sim.set_alloc_hook(None);
    let hit = visitor_hit.lock().unwrap().take().expect("the hook ran");
    let live: Vec<_> = alloc
        .live_allocations(0)
        .unwrap()
        .into_iter()
        .map(|a| (a.id, a.name, a.size, a.raw))
        .collect();
    assert_eq!(
        live,
        [
            (2, Some("visitor".to_string()), 4096, false),
            (3, Some("big".to_string()), (5 * MIB) as u64, false),
        ]
    );
    drop((hit, big));
    assert!(alloc.live_allocations(0).unwrap().is_empty());
    valid(&alloc, &sim);
}
