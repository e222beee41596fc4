//! Criterion benchmarks of the checkpoint planners on a 1 000-stage heterogeneous chain:
//! `Budget` (dynamic programming over segments and memory) beside `Revolve` and `Uniform`,
//! which only lay out a fixed pattern, so the ratios in `benches/README.md` show what the
//! search costs. Before measuring, each plan's forward calls, peak and time are printed, with
//! the most heap the planner held while planning (a counting global allocator), so the
//! README's columns come from the same run.
//!
//! Run with `cargo bench -p blockpool --bench checkpoint`.

use blockpool::checkpoint::{Budget, ChainCosts, Planner, Revolve, StageCost, StoreAll, Uniform};
use blockpool::AllocatorConfig;
use criterion::{black_box, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes live and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments, so `System`'s
// guarantees are this allocator's; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on unchanged.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc` above with `layout`, as the caller promises.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Runs `plan` and returns its result with the most heap bytes it held beyond what was live
/// before it started.
fn with_peak_heap<T>(plan: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = plan();
    (out, PEAK.load(Ordering::Relaxed) - before)
}

/// A deterministic heterogeneous chain (xorshift64*): activations of 64 KiB to 8 MiB,
/// workspaces up to 4 MiB, forward times 1..100 and backward times twice those.
fn chain(stages: usize) -> ChainCosts {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |bound: u64| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    };
    let costs = (0..stages)
        .map(|_| {
            let forward_time = 1 + next(100);
            StageCost {
                output_bytes: (64 << 10) * (1 + next(128) as usize),
                forward_workspace_bytes: (64 << 10) * next(64) as usize,
                backward_workspace_bytes: (64 << 10) * next(64) as usize,
                forward_time,
                backward_time: 2 * forward_time,
            }
        })
        .collect();
    ChainCosts::new(1 << 20, costs, &AllocatorConfig::default()).expect("a valid chain")
}

fn main() {
    let chain = chain(1000);
    let all = StoreAll.plan(&chain).expect("store-all plans any chain");
    let revolve = Revolve { slots: 32 };
    let revolve_peak = revolve.plan(&chain).expect("32 slots").peak_bytes();
    let planners: Vec<(&str, Box<dyn Planner>)> = vec![
        ("uniform_32", Box::new(Uniform::pytorch(32))),
        ("revolve_32", Box::new(revolve)),
        (
            "budget_revolve_peak",
            Box::new(Budget {
                bytes: revolve_peak,
            }),
        ),
        (
            "budget_quarter",
            Box::new(Budget {
                bytes: all.peak_bytes() / 4,
            }),
        ),
    ];
    println!(
        "store_all: forward calls {}, peak {} B, time {}",
        all.forward_calls(),
        all.peak_bytes(),
        all.total_time()
    );
    for (name, planner) in &planners {
        let (plan, heap) = with_peak_heap(|| planner.plan(&chain));
        let plan = plan.expect("the benchmark's budgets fit");
        println!(
            "{name}: forward calls {}, peak {} B, time {}, planner heap {} B",
            plan.forward_calls(),
            plan.peak_bytes(),
            plan.total_time(),
            heap
        );
    }
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    let mut group = criterion.benchmark_group("plan_1000_stages");
    for (name, planner) in &planners {
        group.bench_function(*name, |b| b.iter(|| black_box(planner.plan(&chain))));
    }
    group.finish();
    criterion.final_summary();
}
