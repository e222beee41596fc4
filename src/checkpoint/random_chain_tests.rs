//! Every planner on random heterogeneous chains: each plan is a valid schedule, reverses each
//! stage once, and its numbers agree with what the per-operation memory and the stage counts
//! imply.

use crate::checkpoint::plan::assert_reverses_each_stage_once;
use crate::checkpoint::{ChainCosts, Plan, Planner, Revolve, Sqrt, StageCost, StoreAll, Uniform};
use crate::AllocatorConfig;

/// A small deterministic generator (SplitMix64), so a failure names a reproducible seed.
pub(super) struct SplitMix(pub(super) u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

fn random_chain(seed: u64) -> ChainCosts {
    let mut rng = SplitMix(seed);
    let stages = 1 + rng.below(24) as usize;
    let bytes = |rng: &mut SplitMix| match rng.below(4) {
        0 => 0,
        1 => rng.below(512) as usize,
        _ => rng.below(64 << 10) as usize,
    };
    let input = bytes(&mut rng);
    let costs = (0..stages)
        .map(|_| StageCost {
            output_bytes: bytes(&mut rng),
            forward_workspace_bytes: bytes(&mut rng),
            backward_workspace_bytes: bytes(&mut rng),
            forward_time: rng.below(1000),
            backward_time: rng.below(2000),
        })
        .collect();
    ChainCosts::new(input, costs, &AllocatorConfig::default()).expect("small chains are valid")
}

fn check(chain: &ChainCosts, plan: &Plan, what: &str) {
    let n = chain.len();
    assert_reverses_each_stage_once(plan, n, what);
    let most = plan
        .memory()
        .iter()
        .map(|m| m.peak_bytes)
        .max()
        .unwrap_or(0);
    assert_eq!(
        plan.peak_bytes(),
        most.max(chain.input_bytes()),
        "{what}: peak is the largest per-operation peak"
    );
    assert_eq!(
        plan.memory()[plan.peak_op()]
            .peak_bytes
            .max(chain.input_bytes()),
        plan.peak_bytes(),
        "{what}: peak_op points at the peak"
    );
    assert_eq!(
        plan.memory().last().map(|m| m.after_bytes),
        Some(2 * chain.input_bytes()),
        "{what}: only x_0 and g_0 are alive at the end"
    );
    let per_stage: u64 = plan.forward_calls_per_stage().iter().sum();
    assert_eq!(
        per_stage,
        plan.forward_calls(),
        "{what}: per-stage calls add up"
    );
    let forward: u64 = chain
        .stages()
        .iter()
        .zip(plan.forward_calls_per_stage())
        .map(|(s, &calls)| s.forward_time * calls)
        .sum();
    let backward: u64 = chain.stages().iter().map(|s| s.backward_time).sum();
    assert_eq!(
        plan.total_time(),
        forward + backward + chain.stage(n - 1).forward_time,
        "{what}: time = counted forwards + backwards + the loss's forward"
    );
    assert_eq!(plan.kept().first(), Some(&0), "{what}: x_0 is always kept");
    assert!(
        plan.forward_calls() >= (n - 1) as u64,
        "{what}: the first sweep alone is n - 1 calls"
    );
}

#[test]
fn every_planner_gives_a_consistent_plan_on_random_chains() {
    for seed in 0..200 {
        let chain = random_chain(seed);
        let n = chain.len();
        let all = StoreAll.plan(&chain).unwrap();
        check(&chain, &all, &format!("seed {seed}: store-all"));
        assert_eq!(all.kept(), (0..n).collect::<Vec<_>>(), "seed {seed}");
        assert_eq!(all.forward_calls(), (n - 1) as u64, "seed {seed}");
        let sqrt = Sqrt.plan(&chain).unwrap();
        check(&chain, &sqrt, &format!("seed {seed}: sqrt"));
        for segments in 1..=n {
            for uniform in [Uniform::pytorch(segments), Uniform::balanced(segments)] {
                let plan = uniform.plan(&chain).unwrap();
                check(&chain, &plan, &format!("seed {seed}: {uniform:?}"));
            }
        }
        for slots in 1..=n + 1 {
            let plan = Revolve { slots }.plan(&chain).unwrap();
            check(&chain, &plan, &format!("seed {seed}: revolve {slots}"));
            assert_eq!(
                Some(plan.forward_calls()),
                Revolve::forward_calls(n, slots),
                "seed {seed}: revolve's count depends only on l and c"
            );
        }
    }
}

/// On a uniform chain without workspaces, recomputing never holds more than keeping all.
#[test]
fn recompute_never_raises_the_peak_of_a_uniform_chain() {
    for stages in 1..=40 {
        let chain = ChainCosts::uniform(stages, 512).unwrap();
        let all = StoreAll.plan(&chain).unwrap().peak_bytes();
        assert_eq!(
            all,
            (stages + 2) * 512,
            "store-all: every input, x_n and g_n"
        );
        for slots in 1..=stages {
            let peak = Revolve { slots }.plan(&chain).unwrap().peak_bytes();
            assert!(peak <= all, "l = {stages}, c = {slots}: {peak} > {all}");
        }
        for segments in 1..=stages {
            let peak = Uniform::balanced(segments)
                .plan(&chain)
                .unwrap()
                .peak_bytes();
            assert!(
                peak <= all,
                "l = {stages}, {segments} segments: {peak} > {all}"
            );
        }
    }
}
