//! Multi-thread stress: eight threads share one `CachingAllocator` over two host-backed
//! simulated devices and mix every operation a program does.
//!
//! Each thread writes a tag (its number and a serial) at both ends of every allocation and
//! checks it before freeing, so two threads ever holding overlapping memory shows up as a
//! clobbered tag. At the end every allocation is freed, every stream completed and the cache
//! emptied: the devices must hold nothing and the bookkeeping must be intact.

use crate::support::Rng;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const THREADS: usize = 8;
/// Operations per thread. Unoptimized builds zero the host-backed segments byte by byte, so
/// they run fewer to stay within seconds.
const ITERATIONS: usize = if cfg!(debug_assertions) { 500 } else { 2_000 };
const DEVICES: usize = 2;
const CAPACITY: usize = 256 << 20;
const STREAMS: [StreamId; 3] = [
    StreamId::DEFAULT,
    StreamId::from_raw(1),
    StreamId::from_raw(2),
];
/// Most allocations one thread holds at once.
const MAX_LIVE: usize = 24;
const TAG_BYTES: usize = 16;

// The allocator is shared between threads and handles move between them.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CachingAllocator<SimBackend>>();
    assert_send_sync::<Allocation<SimBackend>>();
};

#[test]
fn allocator_and_allocations_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CachingAllocator<SimBackend>>();
    assert_send_sync::<Allocation<SimBackend>>();
}

/// A size: mostly small, some large, some around 20 MiB (oversize when max_split_size_mb is
/// 20).
fn size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=5 => 2 * TAG_BYTES + rng.below(64 << 10),
        6..=8 => (1 << 20) + rng.below(3 << 20),
        _ => (10 << 20) + rng.below(16 << 20),
    }
}

/// Memory one thread holds, with the tag written into it.
struct Held {
    handle: Option<Allocation<SimBackend>>,
    device: usize,
    ptr: u64,
    /// Bytes the tag may span: the requested size.
    len: usize,
    tag: [u8; TAG_BYTES],
}

fn tag(thread: usize, serial: usize) -> [u8; TAG_BYTES] {
    let mut tag = [0u8; TAG_BYTES];
    tag[..8].copy_from_slice(&(thread as u64).to_le_bytes());
    tag[8..].copy_from_slice(&(serial as u64).to_le_bytes());
    tag
}

fn write_tag(sim: &SimBackend, held: &Held) {
    for at in [held.ptr, held.ptr + (held.len - TAG_BYTES) as u64] {
        sim.write(DeviceIndex::new(held.device), at, &held.tag)
            .unwrap_or_else(|e| panic!("writing a tag at {at:#x} failed: {e}"));
    }
}

fn check_tag(sim: &SimBackend, held: &Held) {
    for at in [held.ptr, held.ptr + (held.len - TAG_BYTES) as u64] {
        let mut found = [0u8; TAG_BYTES];
        sim.read(DeviceIndex::new(held.device), at, &mut found)
            .unwrap_or_else(|e| panic!("reading a tag at {at:#x} failed: {e}"));
        assert_eq!(
            found, held.tag,
            "memory at {at:#x} of device {} was overwritten while allocated: another \
             allocation overlaps it",
            held.device
        );
    }
}

/// Counts of what one thread did.
#[derive(Default)]
struct Counts {
    allocations: usize,
    out_of_memory: usize,
}

fn free(alloc: &CachingAllocator<SimBackend>, sim: &SimBackend, held: Held) {
    check_tag(sim, &held);
    let result = match held.handle {
        Some(handle) => handle.free(),
        None => alloc.free(held.device, held.ptr),
    };
    assert_eq!(result, Ok(()), "freeing a live allocation failed");
}

fn worker(
    thread: usize,
    alloc: CachingAllocator<SimBackend>,
    sim: SimBackend,
) -> (Vec<Held>, Counts) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (thread as u64 + 1).wrapping_mul(0x1000_0001));
    let mut held: Vec<Held> = Vec::new();
    let mut counts = Counts::default();
    for serial in 0..ITERATIONS {
        let device = rng.below(DEVICES);
        let stream = STREAMS[rng.below(STREAMS.len())];
        match rng.below(100) {
            0..=44 if held.len() < MAX_LIVE => {
                let len = size(&mut rng);
                let raw = rng.below(4) == 0;
                let result = if raw {
                    alloc.malloc(device, len, stream).map(|ptr| (ptr, None))
                } else {
                    let a = alloc.allocate(device, len, stream);
                    a.map(|a| (a.ptr(), Some(a)))
                };
                match result {
                    Ok((ptr, handle)) => {
                        let new = Held {
                            handle,
                            device,
                            ptr,
                            len,
                            tag: tag(thread, serial),
                        };
                        write_tag(&sim, &new);
                        held.push(new);
                        counts.allocations += 1;
                    }
                    Err(Error::OutOfMemory(_)) => counts.out_of_memory += 1,
                    Err(e) => panic!("thread {thread}: allocating {len} bytes failed: {e}"),
                }
            }
            0..=74 if !held.is_empty() => {
                let h = held.swap_remove(rng.below(held.len()));
                free(&alloc, &sim, h);
            }
            75..=82 if !held.is_empty() => {
                let h = &held[rng.below(held.len())];
                let result = match &h.handle {
                    Some(handle) => handle.record_stream(stream),
                    None => alloc.record_stream(h.device, h.ptr, stream),
                };
                assert_eq!(result, Ok(()), "thread {thread}: record_stream failed");
            }
            83..=90 => {
                let done =
                    sim.advance_stream(DeviceIndex::new(device), stream, 1 + rng.below(3) as u64);
                assert!(done.is_ok(), "thread {thread}: advancing a stream failed");
            }
            91..=94 => {
                let stats = alloc.memory_stats(device).expect("device exists");
                assert!(
                    stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"],
                    "thread {thread}: more bytes allocated than reserved"
                );
            }
            95..=96 => {
                if let Err(e) = alloc.check_invariants(DeviceIndex::new(device)) {
                    panic!("thread {thread}: invariant broken: {e}");
                }
            }
            97 => {
                let bogus = 0x1234_5600;
                let want = Error::UnknownPointer {
                    device: DeviceIndex::new(device),
                    ptr: bogus,
                };
                assert_eq!(alloc.free(device, bogus), Err(want), "bogus pointer");
            }
            98 if rng.below(4) == 0 => {
                assert_eq!(alloc.empty_cache(), Ok(()), "thread {thread}: empty_cache");
            }
            _ => {}
        }
    }
    (held, counts)
}

#[test]
fn eight_threads_sharing_one_allocator_leave_nothing_behind() {
    stress(AllocatorConfig::default());
}

#[test]
fn eight_threads_with_oversize_blocks_and_garbage_collection_leave_nothing_behind() {
    let config = "max_split_size_mb:20,garbage_collection_threshold:0.6,\
                  per_process_memory_fraction:0.8";
    stress(AllocatorConfig::parse(config).expect("a valid config"));
}

#[test]
fn eight_threads_allocating_segments_without_the_device_lock_leave_nothing_behind() {
    let config = "release_lock_on_cudamalloc:True,max_split_size_mb:20";
    let sim = stress_sim();
    // Each segment allocation takes a while, as `cuMemAlloc` does, with the device unlocked:
    // other threads allocate, free and empty the cache meanwhile.
    sim.set_alloc_hook(Some(Arc::new(|_, _| {
        thread::sleep(Duration::from_micros(200));
    })));
    stress_on(sim, AllocatorConfig::parse(config).expect("a valid config"));
}

fn stress_sim() -> SimBackend {
    SimBackend::builder()
        .devices(DEVICES)
        .capacity(CAPACITY)
        .host_backed(true)
        .build()
}

/// Runs the workers on one allocator, then checks what they hold, frees it all and checks
/// that the devices hold nothing.
fn stress(config: AllocatorConfig) {
    stress_on(stress_sim(), config);
}

fn stress_on(sim: SimBackend, config: AllocatorConfig) {
    let alloc = CachingAllocator::new(sim.clone(), config);

    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (alloc, sim) = (alloc.clone(), sim.clone());
            thread::spawn(move || worker(t, alloc, sim))
        })
        .collect();
    let mut held = Vec::new();
    let mut counts = Counts::default();
    for w in workers {
        let (h, c) = w.join().expect("a worker thread panicked");
        held.extend(h);
        counts.allocations += c.allocations;
        counts.out_of_memory += c.out_of_memory;
    }
    assert!(
        counts.allocations > THREADS * ITERATIONS / 4,
        "only {} allocations succeeded ({} out of memory): the stress did little",
        counts.allocations,
        counts.out_of_memory
    );

    // What the threads still hold: tags intact, no two overlapping, all counted.
    for d in 0..DEVICES {
        if let Err(e) = alloc.check_invariants(DeviceIndex::new(d)) {
            panic!("invariant broken after the threads ran: {e}");
        }
        let mut ranges: Vec<(u64, u64)> = held
            .iter()
            .filter(|h| h.device == d)
            .map(|h| (h.ptr, h.ptr + h.len as u64))
            .collect();
        ranges.sort_unstable();
        for pair in ranges.windows(2) {
            assert!(
                pair[0].1 <= pair[1].0,
                "device {d}: live allocations {:#x?} and {:#x?} overlap",
                pair[0],
                pair[1]
            );
        }
        let stats = alloc.memory_stats(d).expect("device exists");
        assert_eq!(
            stats["allocation.all.current"],
            ranges.len() as i64,
            "device {d}: the allocator counts other allocations than the threads hold"
        );
    }
    for h in held {
        free(&alloc, &sim, h);
    }
    sim.complete_all();
    assert_eq!(alloc.empty_cache(), Ok(()), "empty_cache after the stress");
    for d in 0..DEVICES {
        if let Err(e) = alloc.check_invariants(DeviceIndex::new(d)) {
            panic!("invariant broken after teardown: {e}");
        }
        let stats = alloc.memory_stats(d).expect("device exists");
        assert_eq!(
            stats["reserved_bytes.all.current"], 0,
            "device {d} reserved"
        );
        assert_eq!(stats["active_bytes.all.current"], 0, "device {d} active");
        assert_eq!(
            sim.allocated_bytes(DeviceIndex::new(d)),
            0,
            "device {d} still holds memory"
        );
        assert_eq!(
            sim.segment_count(DeviceIndex::new(d)),
            0,
            "device {d} still has segments"
        );
    }
    let events: u64 = (0..DEVICES)
        .map(|d| sim.calls(DeviceIndex::new(d)).events_recorded)
        .sum();
    assert!(
        events > 0,
        "no deferred free happened: record_stream was not exercised"
    );
}
