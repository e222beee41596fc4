//! The raw-pointer API raced by its callers: `record_stream` by address while another thread
//! frees that address and allocates again, and a free of an address that another thread
//! already freed and got back from `malloc`.
//!
//! A racing caller may get an error, never another allocation's block: the pointer map and
//! the device are read under one lock order (device, then map), so the block a
//! `record_stream` reaches is the one live at its address at that moment.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use blockpool::introspect::Introspect;
use blockpool::trace::BlockState;
use blockpool::{AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};

use crate::support::Rng;
use blockpool::DeviceIndex;

const MIB: usize = 1 << 20;

/// The stream the racing thread records; the freeing thread never uses it.
const RECORDED: StreamId = StreamId::from_raw(7);

/// One thread allocates pairs of neighbouring large blocks, publishes the first, frees both
/// (they merge, so the block slots are given back) and allocates small blocks that take those
/// slots, freeing them on their own stream; another records [`RECORDED`] on whatever address
/// is published. A small block that ends up waiting for [`RECORDED`] got a stream recorded for
/// another allocation; an internal error means a stale block slot was reached.
#[test]
fn record_stream_racing_a_free_and_malloc_never_touches_another_block() {
    let sim = SimBackend::new(1, 1 << 30);
    let alloc = Arc::new(CachingAllocator::new(
        sim.clone(),
        AllocatorConfig::default(),
    ));
    let published = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    // What the recording thread saw: recorded on a live block, refused a freed one.
    let outcomes = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let recorder = {
        let (alloc, published, done) = (alloc.clone(), published.clone(), done.clone());
        let outcomes = outcomes.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let ptr = published.load(Ordering::Acquire);
                let outcome = match alloc.record_stream(0, ptr, RECORDED) {
                    Ok(()) => 0,
                    Err(Error::UnknownPointer { .. } | Error::UseAfterFree { .. }) => 1,
                    Err(other) => panic!("a racing record_stream is the caller's race: {other}"),
                };
                outcomes[outcome].fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut rng = Rng(0x5eed_0021);
    // At least 20,000 rounds, and until both outcomes were seen often: on a loaded machine
    // the recording thread may start late.
    let mut rounds = 0u64;
    while rounds < 20_000 || outcomes.iter().any(|o| o.load(Ordering::Relaxed) < 1_000) {
        assert!(rounds < 20_000_000, "the recording thread never ran");
        rounds += 1;
        let first = alloc.malloc(0, 4 * MIB, StreamId::DEFAULT).unwrap();
        let second = alloc.malloc(0, 4 * MIB, StreamId::DEFAULT).unwrap();
        published.store(first, Ordering::Release);
        alloc.free(0, first).unwrap();
        alloc.free(0, second).unwrap();
        let small: Vec<u64> = (0..1 + rng.next() % 4)
            .map(|_| {
                alloc.malloc(
                    0,
                    512 * (1 + rng.next() % 8) as usize,
                    StreamId::from_raw(1),
                )
            })
            .collect::<Result<_, _>>()
            .unwrap();
        for ptr in small {
            alloc.free(0, ptr).unwrap();
        }
        // Large blocks that waited for RECORDED go back to the cache for the next round.
        sim.complete_stream(DeviceIndex::new(0), RECORDED).unwrap();
    }
    done.store(true, Ordering::Release);
    recorder.join().expect("the recording thread");
    let snapshot = alloc.snapshot();
    let waiting_small: Vec<u64> = snapshot
        .segments
        .iter()
        .filter(|s| s.size <= 2 * MIB as u64)
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActivePendingFree)
        .map(|b| b.address)
        .collect();
    assert!(
        waiting_small.is_empty(),
        "small blocks waiting for a stream only the large ones were recorded on: {waiting_small:x?}"
    );
    sim.complete_all();
    alloc.check_invariants(DeviceIndex::new(0)).unwrap();
}

/// Each thread frees what it allocated twice; in between, another thread may have got the
/// address back from `malloc`, so the stale free frees that thread's allocation and its own
/// free is refused. Each allocation is freed exactly once: the statistics count every free
/// that succeeded and no other, and the block state agrees with them.
#[test]
fn a_cross_thread_double_free_with_the_address_reused_is_counted_once() {
    let alloc = Arc::new(CachingAllocator::new(
        SimBackend::new(1, 1 << 30),
        AllocatorConfig::default(),
    ));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let alloc = alloc.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x0d0b_1e00 + t);
                let (mut frees, mut refused) = (0u64, 0u64);
                for _ in 0..20_000 {
                    let size = 512 * (1 + rng.next() % 4) as usize;
                    let ptr = alloc.malloc(0, size, StreamId::DEFAULT).unwrap();
                    // The second free is stale: the address may be another thread's live
                    // block by then, and that thread's own free then finds it freed.
                    for _ in 0..2 {
                        match alloc.free(0, ptr) {
                            Ok(()) => frees += 1,
                            Err(Error::DoubleFree { .. } | Error::UnknownPointer { .. }) => {
                                refused += 1
                            }
                            Err(other) => panic!("a racing free: {other}"),
                        }
                    }
                }
                (frees, refused)
            })
        })
        .collect();
    let (mut frees, mut refused) = (0, 0);
    for thread in threads {
        let (f, r) = thread.join().expect("a freeing thread");
        frees += f;
        refused += r;
    }
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(
        stats["allocation.all.allocated"], stats["allocation.all.freed"],
        "every allocation freed: {stats:?}"
    );
    assert_eq!(stats["allocation.all.current"], 0);
    assert_eq!(
        stats["allocation.all.freed"] as u64, frees,
        "each free that succeeded freed one allocation"
    );
    assert_eq!(frees + refused, 2 * 4 * 20_000);
    alloc.check_invariants(DeviceIndex::new(0)).unwrap();
}
