//! Criterion benchmarks of the caching allocator on the simulated device, each group measured
//! beside the system allocator (`malloc`/`free` of the same sizes through `Vec::with_capacity`)
//! as the floor, so that the ratios in `benches/README.md` come from one run.
//!
//! * `cache_hit_pair`: one allocate + free of a block already in the cache, through the owning
//!   handle and through the raw `malloc`/`free` API. 4 KiB comes from the small pool and is
//!   split off a cached 2 MiB block and merged back each time; 32 MiB has a segment of its own
//!   and is a pure free-list hit.
//! * `random_allocations`: the shape of RMM's `random_allocations` benchmark, a fixed list of
//!   10 000 operations, 73% allocations of a size uniform in `[1, max]`, the rest frees of a
//!   random live allocation; heavy on best fit, split and merge.
//! * `multi_stream`: allocations rotated over four streams, some recorded on another stream so
//!   that their frees wait for events, with streams completing as the loop goes.
//! * `contended`: two threads doing cache-hit pairs on one device (one mutex) or on two.
//! * `slow_device`: one thread's 4 KiB cache-hit pairs while another thread allocates a new
//!   20 MiB segment over and over from a device that takes 100 µs per allocation (as
//!   `cuMemAlloc` can), with `release_lock_on_cudamalloc` off and on, beside the same pairs with
//!   no other thread.
//! * `history`: the 4 KiB cache-hit pair with history recording off, on
//!   (`ContextLevel::State`, no call stacks), on with an annotation active, and on while the
//!   events are also streamed to a file: the cost of recording.
//! * `leak_tracking`: the 4 KiB cache-hit pair with leak tracking off (untracked), at the
//!   default level (sites: id, sizes, stream, source location), and with context capture
//!   (creation time and annotation tags), without and with an annotation active.
//!
//! Run with `cargo bench --bench allocator`; see `benches/README.md` for the numbers.

use blockpool::event::{Backtraces, ContextLevel};
use blockpool::introspect::Introspect;
use blockpool::leak::LeakTracking;
use blockpool::DeviceIndex;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Capacity of the simulated device, in bytes: the whole 1 TiB fake address range, so that no
/// pattern here runs out of memory.
const DEVICE_CAPACITY: usize = 1 << 40;

/// Operations in one `random_allocations` list.
const RANDOM_OPS: usize = 10_000;

/// Share of allocations in `random_allocations`, in percent (RMM's 73%).
const RANDOM_ALLOC_PERCENT: u64 = 73;

/// Seed of the operation lists, so every run measures the same pattern.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

fn new_allocator(devices: usize) -> CachingAllocator<SimBackend> {
    CachingAllocator::new(
        SimBackend::new(devices, DEVICE_CAPACITY),
        AllocatorConfig::default(),
    )
}

/// One system-allocator allocate + free of `size` bytes; `Vec::with_capacity` goes to
/// `malloc` without touching the memory, and `black_box` keeps the pair from being elided.
#[inline]
fn system_pair(size: usize) {
    drop(black_box(Vec::<u8>::with_capacity(black_box(size))));
}

fn cache_hit_pair(c: &mut Criterion) {
    let mut group = c.benchmark_group("cache_hit_pair");
    group.throughput(Throughput::Elements(1));
    for (name, size) in [("small_4KiB", 4usize << 10), ("large_32MiB", 32 << 20)] {
        let alloc = new_allocator(1);
        // Warm the cache: the first request creates the segment, every later one hits.
        drop(
            alloc
                .allocate(0, size, StreamId::DEFAULT)
                .expect("warm-up allocation"),
        );

        group.bench_function(BenchmarkId::new("allocate_drop", name), |b| {
            b.iter(|| {
                let a = alloc
                    .allocate(0, black_box(size), StreamId::DEFAULT)
                    .expect("cache-hit allocation");
                drop(black_box(a));
            })
        });
        group.bench_function(BenchmarkId::new("malloc_free", name), |b| {
            b.iter(|| {
                let ptr = alloc
                    .malloc(0, black_box(size), StreamId::DEFAULT)
                    .expect("cache-hit malloc");
                alloc
                    .free(0, black_box(ptr))
                    .expect("free of a live pointer");
            })
        });
        group.bench_function(BenchmarkId::new("system_malloc_free", name), |b| {
            b.iter(|| system_pair(size))
        });

        let calls = alloc.backend().calls(DeviceIndex::new(0));
        assert_eq!(
            calls.segment_allocs, 1,
            "a cache-hit benchmark went to the device after warm-up"
        );
    }
    group.finish();
}

/// xorshift64*: a few lines of deterministic randomness, enough to draw benchmark patterns.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (the modulo bias is irrelevant at these sizes).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One step of a `random_allocations` list.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Allocate this many bytes and append the allocation to the live list.
    Allocate(usize),
    /// Free the live allocation at this index, moving the last one into its place.
    Free(usize),
}

/// RMM's `random_allocations` pattern: `count` operations, each an allocation of a size
/// uniform in `[1, max_size]` with probability 73%, otherwise a free of a uniformly chosen live
/// allocation (an allocation when none is live).
fn random_ops(count: usize, max_size: usize, seed: u64) -> Vec<Op> {
    let mut rng = XorShift(seed);
    let mut live = 0usize;
    (0..count)
        .map(|_| {
            if live == 0 || rng.below(100) < RANDOM_ALLOC_PERCENT {
                live += 1;
                Op::Allocate(1 + rng.below(max_size as u64) as usize)
            } else {
                live -= 1;
                Op::Free(rng.below(live as u64 + 1) as usize)
            }
        })
        .collect()
}

/// Runs `ops`, allocating with `allocate`; what is still live at the end is freed when the live
/// list drops, inside the measurement, as RMM does.
#[inline]
fn run_ops<T>(ops: &[Op], mut allocate: impl FnMut(usize) -> T) {
    let mut live: Vec<T> = Vec::with_capacity(ops.len());
    for op in ops {
        match *op {
            Op::Allocate(size) => live.push(allocate(size)),
            Op::Free(index) => drop(black_box(live.swap_remove(index))),
        }
    }
    drop(black_box(live));
}

fn random_allocations(c: &mut Criterion) {
    let mut group = c.benchmark_group("random_allocations");
    group.throughput(Throughput::Elements(RANDOM_OPS as u64));
    // One iteration is 10 000 operations (milliseconds with mmap-sized requests): flat
    // sampling with the fewest samples criterion accepts keeps the run short.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for (name, max_size) in [("max_1MiB", 1usize << 20), ("max_64MiB", 64 << 20)] {
        let ops = random_ops(RANDOM_OPS, max_size, SEED);
        let alloc = new_allocator(1);
        group.bench_function(BenchmarkId::new("blockpool", name), |b| {
            b.iter(|| {
                run_ops(&ops, |size| {
                    alloc
                        .allocate(0, size, StreamId::DEFAULT)
                        .expect("random allocation")
                })
            })
        });
        group.bench_function(BenchmarkId::new("system_malloc_free", name), |b| {
            b.iter(|| run_ops(&ops, |size| black_box(Vec::<u8>::with_capacity(size))))
        });
        alloc
            .check_invariants(DeviceIndex::new(0))
            .expect("bookkeeping is consistent after the random pattern");
    }
    group.finish();
}

/// Allocate + free pairs in one `multi_stream` iteration.
const MULTI_STREAM_OPS: usize = 1024;
/// Allocations kept live at once in `multi_stream`; the oldest is freed to make room.
const MULTI_STREAM_WINDOW: usize = 32;
/// Sizes cycled through in `multi_stream`, in bytes: both pools, split and unsplit blocks.
const MULTI_STREAM_SIZES: [usize; 5] = [4 << 10, 64 << 10, 1 << 20, 3 << 20, 12 << 20];
/// The four streams of `multi_stream`.
const STREAMS: [StreamId; 4] = [
    StreamId::DEFAULT,
    StreamId::from_raw(1),
    StreamId::from_raw(2),
    StreamId::from_raw(3),
];

fn multi_stream(c: &mut Criterion) {
    let mut group = c.benchmark_group("multi_stream");
    group.throughput(Throughput::Elements(MULTI_STREAM_OPS as u64));
    let alloc = new_allocator(1);
    let sim = alloc.backend().clone();
    // A filter on the command line may skip the benchmark; the check below needs it to run.
    let mut ran = false;
    group.bench_function("4_streams/blockpool", |b| {
        ran = true;
        b.iter(|| {
            let mut window = VecDeque::with_capacity(MULTI_STREAM_WINDOW);
            for i in 0..MULTI_STREAM_OPS {
                let stream = STREAMS[i % STREAMS.len()];
                let size = MULTI_STREAM_SIZES[i % MULTI_STREAM_SIZES.len()];
                let a = alloc
                    .allocate(0, black_box(size), stream)
                    .expect("multi-stream allocation");
                // Every fourth block is also used on the next stream: its free waits for an
                // event there.
                if i % 4 == 0 {
                    a.record_stream(STREAMS[(i + 1) % STREAMS.len()])
                        .expect("record_stream on a live allocation");
                }
                if window.len() == MULTI_STREAM_WINDOW {
                    drop(window.pop_front());
                }
                window.push_back(a);
                // Every 16 operations one stream (in turn) finishes its queued work.
                if i % 16 == 15 {
                    let done = STREAMS[(i / 16) % STREAMS.len()];
                    sim.complete_stream(DeviceIndex::new(0), done)
                        .expect("complete a stream");
                }
            }
            drop(window);
        })
    });
    assert!(
        !ran || sim.calls(DeviceIndex::new(0)).events_recorded > 0,
        "multi_stream never deferred a free behind an event"
    );
    alloc
        .check_invariants(DeviceIndex::new(0))
        .expect("bookkeeping is consistent after the multi-stream pattern");
    group.bench_function("4_streams/system_malloc_free", |b| {
        b.iter(|| {
            let mut window = VecDeque::with_capacity(MULTI_STREAM_WINDOW);
            for i in 0..MULTI_STREAM_OPS {
                let size = MULTI_STREAM_SIZES[i % MULTI_STREAM_SIZES.len()];
                if window.len() == MULTI_STREAM_WINDOW {
                    drop(black_box(window.pop_front()));
                }
                window.push_back(black_box(Vec::<u8>::with_capacity(black_box(size))));
            }
            drop(window);
        })
    });
    group.finish();
}

/// Runs `pair(thread)` `iters` times on each of two threads at once and returns the wall time.
fn two_threads(iters: u64, pair: impl Fn(usize) + Sync) -> Duration {
    let start = Instant::now();
    thread::scope(|s| {
        for t in 0..2 {
            let pair = &pair;
            s.spawn(move || {
                for _ in 0..iters {
                    pair(t);
                }
            });
        }
    });
    start.elapsed()
}

fn contended(c: &mut Criterion) {
    const SIZE: usize = 4 << 10;
    let mut group = c.benchmark_group("contended");
    // One iteration is a cache-hit pair on each of the two threads.
    group.throughput(Throughput::Elements(2));
    let alloc = new_allocator(2);
    // Warm both devices with two blocks live at once, as the two threads will hold them.
    for device in 0..2 {
        let a = alloc.allocate(device, SIZE, StreamId::DEFAULT);
        let b = alloc.allocate(device, SIZE, StreamId::DEFAULT);
        drop((
            a.expect("warm-up allocation"),
            b.expect("warm-up allocation"),
        ));
    }
    let pair = |device: usize| {
        let a = alloc
            .allocate(device, black_box(SIZE), StreamId::DEFAULT)
            .expect("cache-hit allocation");
        drop(black_box(a));
    };
    group.bench_function("2_threads_same_device/blockpool", |b| {
        b.iter_custom(|iters| two_threads(iters, |_| pair(0)))
    });
    group.bench_function("2_threads_separate_devices/blockpool", |b| {
        b.iter_custom(|iters| two_threads(iters, pair))
    });
    group.bench_function("2_threads/system_malloc_free", |b| {
        b.iter_custom(|iters| two_threads(iters, |_| system_pair(SIZE)))
    });
    group.finish();
}

/// How long the simulated device takes to allocate a segment in `slow_device`.
const SLOW_ALLOCATION: Duration = Duration::from_micros(100);

fn slow_device(c: &mut Criterion) {
    const SIZE: usize = 4 << 10;
    const SEGMENT: usize = 20 << 20;
    let mut group = c.benchmark_group("slow_device");
    group.throughput(Throughput::Elements(1));
    for (name, release_lock, busy) in [
        ("alone", false, false),
        ("lock_held", false, true),
        ("lock_released", true, true),
    ] {
        let sim = SimBackend::new(1, DEVICE_CAPACITY);
        sim.set_alloc_hook(Some(Arc::new(|_, _| thread::sleep(SLOW_ALLOCATION))));
        let config = AllocatorConfig::builder()
            .release_lock_on_cudamalloc(release_lock)
            .build()
            .expect("a valid config");
        let alloc = CachingAllocator::new(sim, config);
        // Kept for the whole run, so `empty_cache` never releases the small segment the pairs
        // are served from.
        let _anchor = alloc
            .allocate(0, SIZE, StreamId::DEFAULT)
            .expect("warm-up allocation");
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        thread::scope(|s| {
            let worker = busy.then(|| {
                s.spawn(|| {
                    let mut segments = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let segment = alloc.allocate(0, SEGMENT, StreamId::from_raw(1));
                        drop(segment.expect("the device has room"));
                        alloc.empty_cache().expect("empty_cache");
                        segments += 1;
                    }
                    segments
                })
            });
            group.bench_function(name, |b| {
                b.iter(|| {
                    let a = alloc
                        .allocate(0, black_box(SIZE), StreamId::DEFAULT)
                        .expect("cache-hit allocation");
                    drop(black_box(a));
                })
            });
            stop.store(true, Ordering::Relaxed);
            if let Some(worker) = worker {
                let segments = worker.join().expect("the segment thread panicked");
                let per_second = segments as f64 / started.elapsed().as_secs_f64();
                eprintln!("{name}: the other thread allocated {per_second:.0} segments/s");
            }
        });
    }
    group.finish();
}

/// Events each device keeps in `history`: small enough that the ring is full and overwrites,
/// as in a long run.
const HISTORY_ENTRIES: usize = 4096;

fn history(c: &mut Criterion) {
    let mut group = c.benchmark_group("history");
    group.throughput(Throughput::Elements(1));
    let recording = HistorySettings {
        enabled: true,
        context: ContextLevel::State,
        max_entries: HISTORY_ENTRIES,
        stacks: Backtraces::None,
    };
    let stream_path = std::env::temp_dir().join(format!(
        "blockpool-bench-stream-{}.jsonl",
        std::process::id()
    ));
    for (name, settings, tag, streamed) in [
        ("off", HistorySettings::DISABLED, None, false),
        ("state", recording, None, false),
        ("state_annotated", recording, Some("layer3.attn"), false),
        ("state_streamed", recording, None, true),
    ] {
        let alloc = new_allocator(1);
        alloc
            .record_memory_history(settings)
            .expect("valid history settings");
        // The streaming sink: events also go to a file, written by a background thread.
        #[cfg(feature = "trace-files")]
        let stream = streamed.then(|| {
            alloc
                .stream_history_to(&stream_path)
                .expect("the stream's file can be created")
        });
        #[cfg(not(feature = "trace-files"))]
        if streamed {
            continue;
        }
        let ran = annotated_pair(&mut group, name, &alloc, tag);
        let events = alloc.history(0).expect("device 0").len();
        if ran {
            let expected = if settings.enabled { HISTORY_ENTRIES } else { 0 };
            assert_eq!(events, expected, "{name}: the ring is full when recording");
        }
        #[cfg(feature = "trace-files")]
        if let Some(stream) = stream {
            let summary = stream.stop().expect("the stream ends cleanly");
            if ran {
                eprintln!(
                    "{name}: {} events written, {} dropped (the writer fell behind)",
                    summary.events, summary.dropped_events
                );
            }
        }
    }
    let _ = std::fs::remove_file(&stream_path);
    group.finish();
}

/// Benchmarks the 4 KiB cache-hit pair on `alloc` as `allocate_drop_4KiB/{name}`, after one
/// warm-up pair, with the annotation `tag` active if given; whether criterion ran it (a filter
/// may skip it).
fn annotated_pair(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    alloc: &CachingAllocator<SimBackend>,
    tag: Option<&str>,
) -> bool {
    const SIZE: usize = 4 << 10;
    drop(
        alloc
            .allocate(0, SIZE, StreamId::DEFAULT)
            .expect("warm-up allocation"),
    );
    let _annotation = tag.map(annotate);
    let mut ran = false;
    group.bench_function(BenchmarkId::new("allocate_drop_4KiB", name), |b| {
        ran = true;
        b.iter(|| {
            let a = alloc
                .allocate(0, black_box(SIZE), StreamId::DEFAULT)
                .expect("cache-hit allocation");
            drop(black_box(a));
        })
    });
    ran
}

fn leak_tracking(c: &mut Criterion) {
    const SIZE: usize = 4 << 10;
    let mut group = c.benchmark_group("leak_tracking");
    group.throughput(Throughput::Elements(1));
    for (name, tracking, tag) in [
        ("untracked", LeakTracking::Off, None),
        ("sites", LeakTracking::Sites, None),
        ("context", LeakTracking::Context, None),
        (
            "context_annotated",
            LeakTracking::Context,
            Some("layer3.attn"),
        ),
    ] {
        let alloc = new_allocator(1);
        alloc.set_leak_tracking(tracking);
        let ran = annotated_pair(&mut group, name, &alloc, tag);
        if ran {
            // What was measured is what the name says: the pair was tracked, or not.
            let kept = alloc
                .allocate(0, SIZE, StreamId::DEFAULT)
                .expect("cache-hit allocation");
            let live = alloc.live_allocations(0).expect("device 0");
            assert_eq!(
                live.len(),
                usize::from(tracking != LeakTracking::Off),
                "{name}"
            );
            assert_eq!(
                live.first().is_some_and(|a| a.age.is_some()),
                tracking >= LeakTracking::Context,
                "{name}: the time is taken with context capture"
            );
            drop(kept);
        }
    }
    group.finish();
}

fn main() {
    // `criterion_main!` would do the same, but its generated functions lack docs and trip
    // the workspace's `missing_docs` lint.
    let mut c = Criterion::default().configure_from_args();
    cache_hit_pair(&mut c);
    random_allocations(&mut c);
    multi_stream(&mut c);
    contended(&mut c);
    slow_device(&mut c);
    history(&mut c);
    leak_tracking(&mut c);
    c.final_summary();
}
