//! Planted leaks, each found with its site and size: a buffer passed to `mem::forget`, an `Rc`
//! cycle holding a buffer, a `Vec` that keeps one buffer per step, a buffer stored in a
//! global, and a raw pointer never freed. Clean loops (frees deferred on other streams, a
//! cache warmed once and then reused) report nothing, and a freed allocation is not taken for
//! an untracked block handed out later in its place. Every report is checked as exact text:
//! the simulated device makes allocation ids and sizes deterministic, and sites are this
//! file's lines.

use blockpool::leak::{LeakTracking, SiteChange};
use blockpool::testing::assert_no_leaks;
use blockpool::DeviceIndex;
use blockpool::{
    annotate, Allocation, AllocatorConfig, CachingAllocator, SimBackend, StreamId, TypedAllocation,
};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Mutex;

const MIB: usize = 1 << 20;

fn new_allocator() -> (SimBackend, CachingAllocator<SimBackend>) {
    let sim = SimBackend::new(1, 1 << 34);
    (
        sim.clone(),
        CachingAllocator::new(sim, AllocatorConfig::default()),
    )
}

/// The site label of a call on `line` of this file at `column`.
fn site(line: u32, column: u32) -> String {
    format!("{}:{line}:{column}", file!())
}

#[test]
fn handle_knows_its_id_sizes_device_stream_site_and_name() {
    let (_, alloc) = new_allocator();
    let line = line!() + 1;
    let mut a = alloc.allocate(0, 1000, StreamId::from_raw(3)).unwrap();
    assert_eq!((a.id(), a.size(), a.requested_size()), (1, 1024, 1000));
    assert_eq!(
        (a.device(), a.stream()),
        (DeviceIndex::new(0), StreamId::from_raw(3))
    );
    assert_eq!(
        a.site_label(),
        site(line, 23),
        "the caller's line, not blockpool's"
    );
    assert_eq!(a.name(), None);
    assert!(
        a.created_at().is_none() && a.context().is_none(),
        "no clock read or context at the default tracking level"
    );
    a.set_name("activations");
    let live = alloc.live_allocations(0).unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(
        (live[0].id, live[0].size, live[0].requested, live[0].stream),
        (1, 1024, 1000, StreamId::from_raw(3))
    );
    assert_eq!((live[0].ptr, live[0].raw), (a.ptr(), false));
    assert_eq!(live[0].name.as_deref(), Some("activations"));
    assert_eq!(live[0].site, site(line, 23));

    let line = line!() + 2;
    let named = alloc
        .allocate_named(0, 4096, StreamId::DEFAULT, "kv")
        .unwrap();
    assert_eq!(
        (named.name(), named.site_label()),
        (Some("kv"), site(line, 10))
    );
    let view = alloc.device(0).unwrap();
    let line = line!() + 1;
    let through_view = view.allocate(512, StreamId::DEFAULT).unwrap();
    assert_eq!(through_view.site_label(), site(line, 29));
    let line = line!() + 2;
    let named_view = view
        .allocate_named(512, StreamId::DEFAULT, "scratch")
        .unwrap();
    assert_eq!(named_view.name(), Some("scratch"));
    assert_eq!(
        named_view.site_label(),
        site(line, 10),
        "named through the view"
    );
    let line = line!() + 1;
    let typed = TypedAllocation::<f32, _>::new(&alloc, 0, 256, StreamId::DEFAULT).unwrap();
    assert_eq!(typed.allocation().site_label(), site(line, 17));
}

#[test]
fn context_capture_adds_time_and_tags_to_the_site() {
    let (_, alloc) = new_allocator();
    alloc.set_leak_tracking(LeakTracking::Context);
    let (a, line) = {
        let _step = annotate("step 3");
        let _forward = annotate("forward");
        (alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap(), line!())
    };
    assert_eq!(
        a.site_label(),
        format!("step 3/forward @ {}", site(line, 16))
    );
    let context = a.context().expect("captured");
    assert_eq!(context.tags, ["step 3".into(), "forward".into()]);
    assert!(a.created_at().is_some() && a.age().is_some());
    let live = alloc.live_allocations(0).unwrap();
    assert!(live[0].age.is_some(), "the live table has the time too");

    alloc.set_leak_tracking(LeakTracking::Backtraces);
    let line = line!() + 1;
    let b = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    let label = b.site_label();
    assert!(
        label.starts_with(&site(line, 19)),
        "the location first: {label}"
    );
    assert!(
        !b.context().expect("captured").frames.is_empty(),
        "the call stack was taken"
    );
}

#[test]
fn forgotten_buffer_is_found_with_its_site_and_size() {
    let (_, alloc) = new_allocator();
    let scope = alloc.leak_scope("forget");
    let line = line!() + 1;
    let lost = alloc.allocate(0, 3 * MIB, StreamId::DEFAULT).unwrap();
    std::mem::forget(lost);
    drop(alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap());
    let report = scope.finish();
    assert_eq!(
        report.to_string(),
        format!(
            "scope \"forget\": peak 4.00 MiB on device 0; still live:\n  \
             3145728 bytes in 1 allocation at {} (device 0, stream 0x0, oldest #1)\n\
             3145728 bytes in 1 allocation at 1 site",
            site(line, 22)
        )
    );
    let teardown = alloc.shutdown();
    assert_eq!(
        teardown, report.leaks,
        "still live at shutdown: the same report"
    );
}

/// A node of a list that can point back at itself: the cycle keeps the buffer alive.
struct Node {
    buffer: Allocation<SimBackend>,
    next: RefCell<Option<Rc<Node>>>,
}

#[test]
fn rc_cycle_holding_a_buffer_is_found() {
    let (_, alloc) = new_allocator();
    let scope = alloc.leak_scope("cycle");
    let line = line!() + 2;
    let node = Rc::new(Node {
        buffer: alloc.allocate(0, 2 * MIB, StreamId::from_raw(7)).unwrap(),
        next: RefCell::new(None),
    });
    *node.next.borrow_mut() = Some(Rc::clone(&node));
    assert_eq!(node.buffer.size(), 2 * MIB);
    drop(node);
    let report = scope.finish();
    assert_eq!(
        report.leaks.to_string(),
        format!(
            "  2097152 bytes in 1 allocation at {} (device 0, stream 0x7, oldest #1)\n\
             2097152 bytes in 1 allocation at 1 site",
            site(line, 23)
        )
    );
}

#[test]
fn vec_keeping_one_buffer_per_step_grows_by_one_buffer_per_step() {
    let (_, alloc) = new_allocator();
    let mut history: Vec<Allocation<SimBackend>> = Vec::new();
    let mut before = alloc.live_snapshot(0).unwrap();
    let mut kept_line = 0;
    for step in 0..4 {
        let scope = alloc.leak_scope(&format!("step {step}"));
        let activation = alloc.allocate(0, 8 * MIB, StreamId::DEFAULT).unwrap();
        kept_line = line!() + 1;
        history.push(alloc.allocate(0, 16 * MIB, StreamId::DEFAULT).unwrap());
        drop(activation);
        let report = scope.finish();
        assert_eq!(
            report.leaks.summary(),
            "16777216 bytes in 1 allocation at 1 site",
            "step {step}: the kept buffer is its only leak"
        );
        assert_eq!(report.peak_bytes, [24 * MIB as u64], "step {step}");
        let after = alloc.live_snapshot(0).unwrap();
        let changes = after.compare_to(&before);
        assert_eq!(
            changes[0],
            SiteChange {
                site: site(kept_line, 28),
                bytes: 16 * MIB as u64 * (step + 1),
                count: step + 1,
                bytes_diff: 16 * MIB as i64,
                count_diff: 1,
            },
            "step {step}: the growing site comes first"
        );
        assert_eq!(
            changes.len(),
            1,
            "the activation is gone again: {changes:?}"
        );
        before = after;
    }
    assert_eq!(
        alloc.live_snapshot(0).unwrap().to_string(),
        format!(
            "device 0: 67108864 bytes in 4 allocations\n  {}: size=64.00 MiB, count=4",
            site(kept_line, 28)
        )
    );
    assert_eq!(
        alloc.leak_report().to_string(),
        format!(
            "  67108864 bytes in 4 allocations at {} (device 0, stream 0x0, oldest #2)\n\
             67108864 bytes in 4 allocations at 1 site",
            site(kept_line, 28)
        )
    );
    history.clear();
    assert!(alloc.leak_report().is_empty());
}

/// A buffer kept in a global, as a lazily made workspace often is.
static WORKSPACE: Mutex<Option<Allocation<SimBackend>>> = Mutex::new(None);

#[test]
fn buffer_stored_in_a_global_is_found_at_teardown() {
    let (_, alloc) = new_allocator();
    let line = line!() + 2;
    let buffer = alloc
        .allocate_named(0, 5 * MIB, StreamId::DEFAULT, "workspace")
        .unwrap();
    *WORKSPACE.lock().unwrap() = Some(buffer);
    let clone = alloc.clone();
    let report = clone.shutdown();
    assert_eq!(
        report.to_string(),
        format!(
            "  5242880 bytes in 1 allocation at {} (device 0, stream 0x0, oldest #1, named \
             \"workspace\")\n5242880 bytes in 1 allocation at 1 site",
            site(line, 10)
        )
    );
    drop(alloc);
    // The handle outlives every allocator value and still frees cleanly.
    assert_eq!(
        WORKSPACE.lock().unwrap().take().map(|b| b.size()),
        Some(5 * MIB)
    );
}

#[test]
fn raw_pointer_leaks_are_found_the_same_way() {
    let (_, alloc) = new_allocator();
    let scope = alloc.leak_scope("raw");
    let line = line!() + 1;
    let kept = alloc.malloc(0, 4096, StreamId::from_raw(2)).unwrap();
    let freed = alloc.malloc(0, 4096, StreamId::from_raw(2)).unwrap();
    alloc.free(0, freed).unwrap();
    let report = scope.finish();
    assert_eq!(
        report.leaks.to_string(),
        format!(
            "  4096 bytes in 1 allocation at {} (device 0, stream 0x2, oldest #1, 1 raw \
             pointer)\n4096 bytes in 1 allocation at 1 site",
            site(line, 22)
        )
    );
    let live = alloc.live_allocations(0).unwrap();
    assert_eq!((live.len(), live[0].ptr, live[0].raw), (1, kept, true));
    alloc.free(0, kept).unwrap();
    assert!(alloc.live_allocations(0).unwrap().is_empty());
}

#[test]
fn deferred_frees_on_other_streams_are_not_live() {
    let (sim, alloc) = new_allocator();
    assert_no_leaks(&alloc, || {
        for _ in 0..4 {
            let a = alloc.allocate(0, 4 * MIB, StreamId::from_raw(1)).unwrap();
            a.record_stream(StreamId::from_raw(2)).unwrap();
            let ptr = alloc.malloc(0, MIB, StreamId::from_raw(1)).unwrap();
            alloc.record_stream(0, ptr, StreamId::from_raw(3)).unwrap();
            drop(a);
            alloc.free(0, ptr).unwrap();
        }
    });
    let stats = alloc.memory_stats(0).unwrap();
    assert!(
        stats["active_bytes.all.current"] > 0,
        "the frees still wait for streams 2 and 3"
    );
    assert!(alloc.live_allocations(0).unwrap().is_empty());
    sim.complete_stream(DeviceIndex::new(0), StreamId::from_raw(2))
        .unwrap();
    sim.complete_stream(DeviceIndex::new(0), StreamId::from_raw(3))
        .unwrap();
}

#[test]
fn cache_warmed_once_then_reused_is_clean_after_warm_up() {
    let (_, alloc) = new_allocator();
    let mut cache: Vec<Allocation<SimBackend>> = Vec::new();
    let mut reports = Vec::new();
    for step in 0..5 {
        let scope = alloc.leak_scope(&format!("step {step}"));
        if cache.len() < 3 {
            // Warm-up: the cache fills to its cap in the first step, then is only read.
            while cache.len() < 3 {
                cache.push(alloc.allocate(0, 2 * MIB, StreamId::DEFAULT).unwrap());
            }
        }
        drop(alloc.allocate(0, 6 * MIB, StreamId::DEFAULT).unwrap());
        reports.push(scope.finish());
    }
    assert_eq!(reports[0].leaks.allocations(), 3, "warm-up keeps the cache");
    for report in &reports[1..] {
        assert!(report.is_clean(), "after warm-up nothing is kept: {report}");
        assert_eq!(
            report.to_string(),
            format!(
                "scope {:?}: peak 6.00 MiB on device 0; nothing allocated inside is still live",
                report.name
            )
        );
    }
    // Memory the allocator merely caches is not live.
    drop(cache);
    assert!(alloc.live_allocations(0).unwrap().is_empty());
    assert!(alloc.memory_stats(0).unwrap()["reserved_bytes.all.current"] > 0);
}

#[test]
fn nested_scopes_fold_their_peak_into_the_parent() {
    let (_, alloc) = new_allocator();
    let base = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    let outer = alloc.leak_scope("outer");
    let a = alloc.allocate(0, 2 * MIB, StreamId::DEFAULT).unwrap();
    let inner = alloc.leak_scope("inner");
    drop(alloc.allocate(0, 10 * MIB, StreamId::DEFAULT).unwrap());
    let inner = inner.finish();
    drop(a);
    let outer = outer.finish();
    assert_eq!(
        inner.peak_bytes,
        [10 * MIB as u64],
        "above the 3 MiB live at its start"
    );
    assert_eq!(
        outer.peak_bytes,
        [12 * MIB as u64],
        "the inner peak on top of the outer's own 2 MiB"
    );
    assert!(inner.is_clean() && outer.is_clean());
    drop(base);
}

#[test]
fn assert_no_leaks_lists_the_leaked_sites() {
    let (_, alloc) = new_allocator();
    let mut kept = Vec::new();
    let mut line = 0;
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_no_leaks(&alloc, || {
            line = line!() + 1;
            kept.push(alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap());
            drop(alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap());
        })
    }));
    let message = *panic
        .expect_err("a leak fails")
        .downcast::<String>()
        .unwrap();
    assert_eq!(
        message,
        format!(
            "assert_no_leaks at {}: allocations made inside are still live:\n  \
             4096 bytes in 1 allocation at {} (device 0, stream 0x0, oldest #1)\n\
             4096 bytes in 1 allocation at 1 site",
            site(line - 2, 9),
            site(line, 29)
        )
    );
}

#[test]
fn tracking_off_records_nothing() {
    let (_, alloc) = new_allocator();
    alloc.set_leak_tracking(LeakTracking::Off);
    let scope = alloc.leak_scope("off");
    let kept = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    assert!(scope.finish().is_clean());
    assert!(alloc.leak_report().is_empty());
    assert_eq!(
        kept.site().file(),
        file!(),
        "the handle still knows its site"
    );
}

#[test]
fn reports_span_devices_and_threads() {
    let alloc = CachingAllocator::new(SimBackend::new(2, 1 << 30), AllocatorConfig::default());
    let scope = alloc.leak_scope("two devices");
    let line = line!() + 1;
    let on_0 = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    let on_1 = std::thread::scope(|s| {
        s.spawn(|| alloc.allocate(1, 8192, StreamId::from_raw(5)).unwrap())
            .join()
            .unwrap()
    });
    let report = scope.finish();
    assert_eq!(
        report.to_string(),
        format!(
            "scope \"two devices\": peak 4.00 KiB on device 0, 8.00 KiB on device 1; still \
             live:\n  \
             8192 bytes in 1 allocation at {} (device 1, stream 0x5, oldest #1)\n  \
             4096 bytes in 1 allocation at {} (device 0, stream 0x0, oldest #1)\n\
             12288 bytes in 2 allocations at 2 sites",
            site(line + 2, 26),
            site(line, 22)
        ),
        "another thread's allocation belongs to the scope too"
    );
    assert_eq!(alloc.live_snapshot(1).unwrap().bytes(), 8192);
    drop((on_0, on_1));
    assert!(alloc.shutdown().is_empty());
}

#[test]
fn step_detector_on_live_snapshots_flags_the_growing_site_not_the_weights() {
    use blockpool::leak::{GrowthSettings, StepDetector};
    let (_, alloc) = new_allocator();
    let line = line!() + 1;
    let weights = alloc.allocate(0, 64 * MIB, StreamId::DEFAULT).unwrap();
    let mut kept = Vec::new();
    let mut detector = StepDetector::new(GrowthSettings::default()).unwrap();
    let mut kept_line = 0;
    for step in 0..6 {
        let activation = alloc.allocate(0, 32 * MIB, StreamId::DEFAULT).unwrap();
        kept_line = line!() + 1;
        kept.push(alloc.allocate(0, 2 * MIB, StreamId::DEFAULT).unwrap());
        drop(activation);
        let snapshot = alloc.live_snapshot(0).unwrap();
        detector.observe(format!("step {step}"), snapshot.site_totals());
    }
    let growing = detector.growing();
    assert_eq!(growing.len(), 1, "{growing:?}");
    assert_eq!(growing[0].site, site(kept_line, 25));
    assert_eq!(
        (growing[0].bytes_per_step, growing[0].count_per_step),
        (2 * MIB as u64, 1)
    );
    let persistent = detector.persistent();
    assert_eq!(persistent.len(), 1, "{persistent:?}");
    assert_eq!(
        (persistent[0].site.as_str(), persistent[0].bytes),
        (site(line, 25).as_str(), 64 * MIB as u64)
    );
    drop(weights);
}

#[test]
fn a_freed_allocation_is_not_seen_in_a_block_allocated_while_tracking_was_off() {
    let (_, alloc) = new_allocator();
    let tracked = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    let ptr = tracked.ptr();
    drop(tracked);
    alloc.set_leak_tracking(LeakTracking::Off);
    let untracked = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(
        untracked.ptr(),
        ptr,
        "the same cached block, in the same slot"
    );
    alloc.set_leak_tracking(LeakTracking::Sites);
    assert!(
        alloc.live_allocations(0).unwrap().is_empty(),
        "the block allocated while off is not the freed allocation"
    );
    let scope = alloc.leak_scope("after");
    drop(untracked);
    let report = scope.finish();
    assert_eq!(report.peak_bytes, [0], "nothing tracked was live: {report}");
    assert!(alloc.shutdown().is_empty());
}

#[test]
fn adopted_blocks_are_not_taken_for_the_allocation_freed_before_in_their_slot() {
    use blockpool::introspect::Introspect;
    use blockpool::introspect::{AdoptBlock, AdoptSegment, PoolKind};
    let (_, alloc) = new_allocator();
    drop(alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap());
    alloc.empty_cache().unwrap();
    let live = [AdoptBlock {
        offset: 0,
        size: MIB,
        requested: MIB,
    }];
    let segment = AdoptSegment {
        size: 2 * MIB,
        pool: PoolKind::Large,
        stream: StreamId::DEFAULT,
        blocks: &live,
    };
    let ptrs = alloc.adopt_segment(DeviceIndex::new(0), &segment).unwrap();
    assert!(
        alloc.live_allocations(0).unwrap().is_empty(),
        "an adopted block is untracked, not the allocation freed before it"
    );
    let line = line!() + 1;
    let tracked = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    let live = alloc.live_allocations(0).unwrap();
    assert_eq!(
        live.iter()
            .map(|a| (a.id, a.site.clone()))
            .collect::<Vec<_>>(),
        [(tracked.id(), site(line, 25))]
    );
    alloc.free(0, ptrs[0]).unwrap();
    drop(tracked);
}
