//! What other threads do while workers allocate: expandable segments mapped and unmapped
//! under contention; history, snapshots, dumps and annotations toggled; the memory fraction
//! changed; out-of-memory hit by many threads while others free; leak scopes and step
//! detectors used. Every worker's error is one the call may give (out of memory where memory
//! is short, nothing else), and afterwards the bookkeeping is intact: the invariants hold,
//! every allocation was freed, and emptying the cache gives every byte back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use blockpool::event::ContextLevel;
use blockpool::introspect::Introspect;
use blockpool::leak::StepDetector;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, LeakTracking, SimBackend,
    StreamId,
};

use crate::support::Rng;
use blockpool::DeviceIndex;

const MIB: usize = 1 << 20;
const WORKERS: usize = 4;
const STREAMS: [StreamId; 2] = [StreamId::DEFAULT, StreamId::from_raw(1)];

/// Workers allocating and freeing sizes up to `max_bytes` (a few held at once) until `stop`,
/// beside `other` run on the test's thread; out-of-memory errors are counted, any other error
/// fails the test. Then checks the allocator is whole and gives everything back.
fn with_workers(
    alloc: &CachingAllocator<SimBackend>,
    sim: &SimBackend,
    max_bytes: u64,
    other: impl FnOnce(&AtomicBool),
) -> u64 {
    let stop = AtomicBool::new(false);
    let ooms = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            let (stop, ooms) = (&stop, &ooms);
            scope.spawn(move || {
                let mut rng = Rng(0xc0c0_0000 + w as u64);
                let mut held = Vec::new();
                let mut operations = 0u64;
                while !stop.load(Ordering::Relaxed) || operations < 2_000 {
                    operations += 1;
                    let size = 1 + (rng.next() % max_bytes) as usize;
                    let stream = STREAMS[w % STREAMS.len()];
                    match alloc.allocate(0, size, stream) {
                        Ok(a) => held.push(a),
                        Err(e) if e.is_retryable() => {
                            ooms.fetch_add(1, Ordering::Relaxed);
                            held.clear();
                        }
                        Err(e) => panic!("worker {w}: {e}"),
                    }
                    if held.len() > 4 || rng.next().is_multiple_of(3) {
                        let at = (rng.next() as usize) % held.len().max(1);
                        if at < held.len() {
                            drop(held.swap_remove(at));
                        }
                    }
                }
            });
        }
        other(&stop);
        stop.store(true, Ordering::Relaxed);
    });
    sim.complete_all();
    alloc
        .check_invariants(DeviceIndex::new(0))
        .expect("the bookkeeping after the run");
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(stats["allocation.all.current"], 0, "{stats:?}");
    assert_eq!(
        stats["allocation.all.allocated"], stats["allocation.all.freed"],
        "{stats:?}"
    );
    alloc.empty_cache().unwrap();
    assert_eq!(
        sim.allocated_bytes(DeviceIndex::new(0)),
        0,
        "every segment went back"
    );
    ooms.load(Ordering::Relaxed)
}

fn allocator(
    config: AllocatorConfig,
    capacity: usize,
) -> (CachingAllocator<SimBackend>, SimBackend) {
    let sim = SimBackend::new(1, capacity);
    (CachingAllocator::new(sim.clone(), config), sim)
}

#[test]
fn expandable_segments_map_and_unmap_under_contention() {
    let config = AllocatorConfig::builder()
        .expandable_segments(true)
        .build()
        .unwrap();
    let (alloc, sim) = allocator(config, 1 << 30);
    with_workers(&alloc, &sim, 24 * MIB as u64, |stop| {
        // Unmapping what is free while the workers map more.
        for _ in 0..200 {
            alloc.empty_cache().unwrap();
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let stats = alloc.memory_stats(0).unwrap();
    assert!(
        stats["num_device_alloc"] > 0,
        "memory was mapped: {stats:?}"
    );
}

#[test]
fn history_snapshots_dumps_and_annotations_toggle_while_others_allocate() {
    let (alloc, sim) = allocator(AllocatorConfig::default(), 1 << 30);
    let dir = std::env::temp_dir().join(format!("blockpool-toggle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    with_workers(&alloc, &sim, 4 * MIB as u64, |_| {
        for round in 0..40 {
            let context = [ContextLevel::None, ContextLevel::State, ContextLevel::All][round % 3];
            alloc
                .record_memory_history(HistorySettings {
                    context,
                    max_entries: 1 + round * 100,
                    ..HistorySettings::default()
                })
                .unwrap();
            let _tag = annotate(&format!("round {round}"));
            let snapshot = alloc.snapshot();
            assert!(snapshot
                .events
                .windows(2)
                .all(|w| w[0].time_us <= w[1].time_us));
            if round % 10 == 0 {
                alloc
                    .dump_snapshot(dir.join(format!("round-{round}.jsonl")))
                    .unwrap();
            }
            if round % 4 == 3 {
                alloc
                    .record_memory_history(HistorySettings::DISABLED)
                    .unwrap();
                assert!(alloc.history(0).unwrap().is_empty());
            }
        }
        alloc
            .record_memory_history(HistorySettings::DISABLED)
            .unwrap();
    });
    let dumps = std::fs::read_dir(&dir).unwrap().count();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(dumps, 4);
}

#[test]
fn the_memory_fraction_changes_while_others_allocate() {
    let (alloc, sim) = allocator(AllocatorConfig::default(), 512 * MIB);
    let ooms = with_workers(&alloc, &sim, 40 * MIB as u64, |_| {
        for round in 0..400 {
            let fraction = [1.0, 0.5, 0.1, 0.25][round % 4];
            alloc.set_per_process_memory_fraction(fraction, 0).unwrap();
            std::thread::yield_now();
        }
        alloc.set_per_process_memory_fraction(1.0, 0).unwrap();
    });
    assert!(ooms > 0, "a fraction of 10% refuses some of 4 x 5 x 40 MiB");
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(stats["num_ooms"] as u64, ooms, "each refusal counted once");
}

#[test]
fn many_threads_out_of_memory_while_others_free_recover() {
    // 4 workers holding up to 5 blocks of up to 64 MiB on a 256 MiB device: out of memory is
    // hit often, and each time the cache is released and the request retried.
    let (alloc, sim) = allocator(AllocatorConfig::default(), 256 * MIB);
    let ooms = with_workers(&alloc, &sim, 64 * MIB as u64, |stop| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        stop.store(true, Ordering::Relaxed);
    });
    let stats = alloc.memory_stats(0).unwrap();
    assert!(ooms > 0 && stats["num_alloc_retries"] > 0, "{stats:?}");
    assert_eq!(stats["num_ooms"] as u64, ooms);
}

#[test]
fn leak_scopes_and_step_detectors_run_while_others_allocate() {
    let (alloc, sim) = allocator(AllocatorConfig::default(), 1 << 30);
    alloc.set_leak_tracking(LeakTracking::Context);
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    with_workers(&alloc, &sim, MIB as u64, |_| {
        let mut detector = StepDetector::new(Default::default()).unwrap();
        let mut growing = Vec::new();
        for step in 0..30 {
            let scope = alloc.leak_scope(&format!("step {step}"));
            // One 1 MiB buffer kept per step, under its own tag: a leak the detector finds.
            let _tag = annotate("kept buffers");
            kept.lock()
                .unwrap()
                .push(alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap());
            drop(_tag);
            let report = scope.finish();
            assert!(
                report
                    .leaks
                    .sites
                    .iter()
                    .any(|s| s.site.contains("kept buffers") && s.bytes >= MIB as u64),
                "the kept buffer is a leak of the scope: {:?}",
                report.leaks.sites
            );
            let live = alloc.live_snapshot(0).unwrap();
            growing = detector.observe(format!("step {step}"), live.site_totals());
        }
        assert!(
            growing.iter().any(|g| g.site.contains("kept buffers")),
            "the kept buffers' site grows every step: {growing:?}"
        );
        kept.lock().unwrap().clear();
    });
}
