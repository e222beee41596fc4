//! Criterion benchmarks of the checkpoint planners on a 1 000-stage heterogeneous chain:
//! `Budget` (dynamic programming over segments and memory) beside `Revolve` and `Uniform`,
//! which only lay out a fixed pattern, so the ratios in `benches/README.md` show what the
//! search costs. Before measuring, each plan's forward calls, peak and time are printed, so
//! the README's memory column comes from the same run.
//!
//! Run with `cargo bench -p blockpool --bench checkpoint`.

use blockpool::checkpoint::{Budget, ChainCosts, Planner, Revolve, StageCost, StoreAll, Uniform};
use blockpool::AllocatorConfig;
use criterion::{black_box, Criterion};
use std::time::Duration;

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
        let plan = planner.plan(&chain).expect("the benchmark's budgets fit");
        println!(
            "{name}: forward calls {}, peak {} B, time {}",
            plan.forward_calls(),
            plan.peak_bytes(),
            plan.total_time()
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
