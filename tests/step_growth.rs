//! The step detector fed by the allocator's own memory, a snapshot at the end of each step of a
//! training-like loop on the simulated device: the planted leak (one 16 MiB buffer kept per
//! step) is flagged with its exact growth, the weights and a cache filled in the first two
//! steps are persistent, and nothing else is flagged: neither that cache, nor buffers whose free is deferred on
//! another stream (`record_stream`), nor the memory the allocator caches.
//!
//! Sites here are the annotation tags of each live block; the live-handle snapshot of the
//! leak module gives the same totals without history recording.

use blockpool::leak::{site_totals, GrowthSettings, SiteTotal, StepDetector};
use blockpool::trace::BlockState;
use blockpool::DeviceIndex;
use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};

const MIB: usize = 1 << 20;

/// Live bytes and blocks per annotation site in `alloc`'s snapshot (allocated blocks only:
/// cached and pending-free blocks are not live).
fn live_totals(alloc: &CachingAllocator<SimBackend>) -> Vec<SiteTotal> {
    let snapshot = alloc.snapshot();
    let blocks = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| {
            let site = snapshot
                .contexts
                .get(b.context)
                .map(|c| c.tags.join("/"))
                .unwrap_or_default();
            (site, b.size)
        });
    site_totals(blocks)
}

#[test]
fn a_training_loop_on_the_allocator_flags_only_the_buffer_it_keeps() {
    let sim = SimBackend::new(1, 16 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("records");
    let stream = StreamId::DEFAULT;
    let side = StreamId::from_raw(3);
    let allocate = |bytes: usize| alloc.allocate(0, bytes, stream).expect("fits");
    let weights: Vec<_> = {
        let _tag = annotate("weights");
        (0..4).map(|_| allocate(64 * MIB)).collect()
    };
    let mut detector = StepDetector::new(GrowthSettings::default()).expect("defaults");
    let (mut history, mut cache) = (Vec::new(), Vec::new());
    let mut flagged = Vec::new();
    for step in 0..8 {
        let activations: Vec<_> = {
            let _tag = annotate("activations");
            // More each step: the allocator reserves more, and caches it once freed.
            (0..=step).map(|_| allocate(8 * MIB)).collect()
        };
        {
            let _tag = annotate("history");
            history.push(allocate(16 * MIB));
        }
        if step < 2 {
            let _tag = annotate("cache");
            cache.push(allocate(4 * MIB));
        }
        {
            let _tag = annotate("comm");
            let buffer = allocate(2 * MIB);
            buffer.record_stream(side).expect("records");
            // Its free waits for `side`, which only every other step lets finish.
            drop(buffer);
            if step % 2 == 1 {
                sim.complete_stream(DeviceIndex::new(0), side)
                    .expect("the stream exists");
            }
        }
        drop(activations);
        let growing = detector.observe(format!("step {step}"), live_totals(&alloc));
        flagged.push(
            growing
                .iter()
                .map(|g| g.site.clone())
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    assert_eq!(
        flagged,
        ["", "", "", "history", "history", "history", "history", "history"],
        "the first step is the baseline; three growing steps flag the history"
    );
    let findings = detector.findings();
    let history_growth = &findings.growing[0];
    assert_eq!(
        (
            history_growth.bytes_per_step,
            history_growth.count_per_step,
            history_growth.steps,
            history_growth.since_step.as_str(),
            history_growth.bytes,
        ),
        ((16 * MIB) as u64, 1, 7, "step 0", (128 * MIB) as u64)
    );
    let kept: Vec<(&str, u64, u64, &str)> = findings
        .persistent
        .iter()
        .map(|p| (p.site.as_str(), p.bytes, p.count, p.since_step.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            ("weights", (256 * MIB) as u64, 4, "step 0"),
            ("cache", (8 * MIB) as u64, 2, "step 1")
        ],
        "a cache full by the end of the warm-up step is kept memory, not growth"
    );
    assert!(
        alloc.memory_stats(0).expect("device 0")["reserved_bytes.all.current"]
            > alloc.memory_stats(0).expect("device 0")["allocated_bytes.all.current"],
        "the allocator caches memory the detector never counts"
    );
    assert!(
        sim.calls(DeviceIndex::new(0)).events_recorded >= 8,
        "every comm buffer's free was deferred on the side stream"
    );
    drop((weights, history, cache));
}
