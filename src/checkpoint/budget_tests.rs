//! `Budget` against two exhaustive searches written without the planner's code: a
//! shortest-path search over every schedule of the memory model (which activations are alive,
//! how many stages are reversed), which `Budget` must match exactly on chains it searches
//! exactly; and every persistent schedule (each snapshot kept until its segment is reversed)
//! built out and run through the simulator, which the segment recursion used for longer
//! chains must match exactly.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::backend::DeviceIndex;
use crate::checkpoint::plan::assert_reverses_each_stage_once;
use crate::checkpoint::random_chain_tests::SplitMix;
use crate::checkpoint::{
    Budget, ChainCosts, CheckpointError, Op, Plan, Planner, Revolve, StageCost, StoreAll,
};
use crate::{AllocatorConfig, CachingAllocator, SimBackend};

/// A state: bit `i` set when `x_i` (`1 <= i < n`) is alive; stages `reversed..n` reversed.
type State = (u32, usize);

/// The bytes of `x_i` (and of `g_i`), `x_n` being the last stage's output.
fn size(chain: &ChainCosts, i: usize) -> usize {
    match chain.activation_bytes(i) {
        Some(bytes) => bytes,
        None => chain.stage(i - 1).output_bytes,
    }
}

/// Every operation possible in `state`: (next state, its peak, its forward time).
fn moves(chain: &ChainCosts, (alive, reversed): State) -> Vec<(State, usize, u64)> {
    let n = chain.len();
    let is_alive = |i: usize| i == 0 || alive & (1 << i) != 0;
    // Live bytes: the alive activations and the gradient of the first reversed stage's input.
    let mut live: usize = (0..n)
        .filter(|&i| is_alive(i))
        .map(|i| size(chain, i))
        .sum();
    if reversed < n {
        live += size(chain, reversed);
    }
    let mut out = Vec::new();
    for i in 0..n {
        let cost = chain.stage(i);
        if is_alive(i) && i + 1 < reversed && !is_alive(i + 1) {
            let peak = live + size(chain, i + 1) + cost.forward_workspace_bytes;
            out.push(((alive | 1 << (i + 1), reversed), peak, cost.forward_time));
        }
        if i > 0 && is_alive(i) {
            out.push(((alive & !(1 << i), reversed), live, 0));
        }
    }
    if reversed > 0 && is_alive(reversed - 1) {
        let s = reversed - 1;
        let cost = chain.stage(s);
        let (x, out_bytes) = (size(chain, s), size(chain, s + 1));
        let mut peak = live + x + cost.backward_workspace_bytes;
        if s == n - 1 {
            // Forward of the last stage, then the loss gradient beside x_n; then x_n goes.
            peak = (live + out_bytes + cost.forward_workspace_bytes)
                .max(live + 2 * out_bytes)
                .max(live + out_bytes + x + cost.backward_workspace_bytes);
        }
        out.push(((alive, s), peak, 0));
    }
    out
}

/// The least forward time of any schedule whose every operation peaks within `budget`.
fn exhaustive_time(chain: &ChainCosts, budget: usize) -> Option<u64> {
    let start: State = (0, chain.len());
    let mut best: HashMap<State, u64> = HashMap::from([(start, 0)]);
    let mut queue = BinaryHeap::from([Reverse((0u64, start))]);
    while let Some(Reverse((time, state))) = queue.pop() {
        if state == (0, 0) {
            return Some(time);
        }
        if best.get(&state).is_some_and(|&t| t < time) {
            continue;
        }
        for (next, peak, cost) in moves(chain, state) {
            let t = time + cost;
            if peak <= budget && best.get(&next).map_or(true, |&b| t < b) {
                best.insert(next, t);
                queue.push(Reverse((t, next)));
            }
        }
    }
    None
}

/// The smallest budget any schedule fits: the least, over schedules, of their peak.
fn exhaustive_minimum(chain: &ChainCosts) -> usize {
    let start: State = (0, chain.len());
    let first = chain.input_bytes();
    let mut best: HashMap<State, usize> = HashMap::from([(start, first)]);
    let mut queue = BinaryHeap::from([Reverse((first, start))]);
    while let Some(Reverse((peak, state))) = queue.pop() {
        if state == (0, 0) {
            return peak;
        }
        if best.get(&state).is_some_and(|&p| p < peak) {
            continue;
        }
        for (next, op_peak, _) in moves(chain, state) {
            let p = peak.max(op_peak);
            if best.get(&next).map_or(true, |&b| p < b) {
                best.insert(next, p);
                queue.push(Reverse((p, next)));
            }
        }
    }
    unreachable!("store-all always finishes")
}

/// Every persistent schedule of segment `s..e` (`x_s` alive): its lone backward step, or a
/// sweep to some `x_k`, segment `k..e`, the drop of `x_k` and segment `s..k`.
fn persistent_schedules(s: usize, e: usize) -> Vec<Vec<Op>> {
    if e == s + 1 {
        return vec![vec![Op::Backward { stage: s }]];
    }
    let mut all = Vec::new();
    for k in s + 1..e {
        let mut sweep = Vec::new();
        for j in s..k {
            sweep.push(Op::Forward { stage: j });
            if j > s {
                sweep.push(Op::Drop { activation: j });
            }
        }
        sweep.push(Op::Store { activation: k });
        let lowers = persistent_schedules(s, k);
        for upper in persistent_schedules(k, e) {
            for lower in &lowers {
                let mut ops = sweep.clone();
                ops.extend(&upper);
                ops.push(Op::Drop { activation: k });
                ops.extend(lower);
                all.push(ops);
            }
        }
    }
    all
}

/// Every persistent schedule of the chain, simulated.
fn persistent_plans(chain: &ChainCosts) -> Vec<Plan> {
    persistent_schedules(0, chain.len())
        .into_iter()
        .map(|ops| Plan::from_schedule(chain, ops).expect("a valid schedule"))
        .collect()
}

/// A chain of `1..=max_stages` stages, sizes multiples of 512 up to 8 KiB (some zero), and
/// forward times `1..=forward_times`.
fn random_chain(seed: u64, max_stages: u64, forward_times: u64) -> ChainCosts {
    let mut rng = SplitMix(seed);
    let stages = 1 + rng.below(max_stages) as usize;
    let bytes = |rng: &mut SplitMix| 512 * rng.below(17) as usize;
    let input = bytes(&mut rng);
    let costs = (0..stages)
        .map(|_| StageCost {
            output_bytes: bytes(&mut rng),
            forward_workspace_bytes: bytes(&mut rng) / 2,
            backward_workspace_bytes: bytes(&mut rng),
            forward_time: 1 + rng.below(forward_times),
            backward_time: rng.below(100),
        })
        .collect();
    ChainCosts::new(input, costs, &AllocatorConfig::default()).expect("small chains are valid")
}

/// Backward times and the last stage's forward, which every schedule pays once.
fn fixed_time(chain: &ChainCosts) -> u64 {
    let stages = chain.stages();
    stages.iter().map(|s| s.backward_time).sum::<u64>() + stages[stages.len() - 1].forward_time
}

#[test]
fn total_time_equals_the_exhaustive_search_for_chains_up_to_8_stages() {
    let (mut cases, mut beaten) = (0, 0);
    for seed in 0..60 {
        let chain = random_chain(seed, 8, 20);
        let plans = persistent_plans(&chain);
        let persistent_minimum = plans.iter().map(Plan::peak_bytes).min().unwrap();
        let minimum = exhaustive_minimum(&chain);
        let ceiling = StoreAll.plan(&chain).unwrap().peak_bytes();
        let what = format!("seed {seed}, {} stages", chain.len());
        assert!(minimum <= persistent_minimum, "{what}");
        assert_eq!(
            Budget { bytes: minimum - 1 }.plan(&chain),
            Err(CheckpointError::BudgetTooSmall {
                budget: minimum - 1,
                minimum
            }),
            "{what}: one byte below the least peak of any schedule"
        );
        assert_eq!(
            Budget {
                bytes: persistent_minimum - 1
            }
            .persistent(&chain),
            Err(CheckpointError::BudgetTooSmall {
                budget: persistent_minimum - 1,
                minimum: persistent_minimum
            }),
            "{what}: one byte below the least persistent peak"
        );
        let steps = 12;
        for step in 0..=steps {
            let budget = minimum + (ceiling.max(minimum) - minimum) * step / steps + step % 2;
            let plan = Budget { bytes: budget }.plan(&chain).unwrap();
            assert_reverses_each_stage_once(&plan, chain.len(), &what);
            assert!(plan.peak_bytes() <= budget, "{what}: peak within {budget}");
            let any =
                exhaustive_time(&chain, budget).expect("some schedule fits") + fixed_time(&chain);
            assert_eq!(
                plan.total_time(),
                any,
                "{what}, budget {budget}: {:?}",
                plan.schedule()
            );
            cases += 1;
            if budget < persistent_minimum {
                beaten += 1;
                continue;
            }
            // The segment recursion on its own: the best persistent schedule, exactly.
            let persistent = Budget { bytes: budget }.persistent(&chain).unwrap();
            assert_reverses_each_stage_once(&persistent, chain.len(), &what);
            assert!(persistent.peak_bytes() <= budget, "{what}");
            let best = plans
                .iter()
                .filter(|p| p.peak_bytes() <= budget)
                .map(Plan::total_time)
                .min()
                .unwrap();
            assert_eq!(
                persistent.total_time(),
                best,
                "{what}, budget {budget}: {:?}",
                persistent.schedule()
            );
            beaten += usize::from(any < best);
        }
    }
    // Recomputing a dropped snapshot pays off now and then: that is what the exact search
    // adds to Rotor's persistent schedules.
    assert!(
        beaten > 0 && beaten * 5 < cases,
        "{beaten} of {cases} budgets are met faster (or only) by a non-persistent schedule"
    );
}

#[test]
fn the_minimum_budget_is_exact_and_fits() {
    for seed in 1000..1060 {
        let chain = random_chain(seed, 8, 5);
        let minimum = exhaustive_minimum(&chain);
        let plan = Budget { bytes: minimum }.plan(&chain).unwrap();
        assert_eq!(plan.peak_bytes(), minimum, "seed {seed}");
        let err = Budget { bytes: 0 }.plan(&chain).unwrap_err();
        assert_eq!(err, CheckpointError::BudgetTooSmall { budget: 0, minimum });
        assert!(
            err.to_string().contains(&format!("is {minimum} bytes")),
            "{err}"
        );
        let persistent_minimum = persistent_plans(&chain)
            .iter()
            .map(Plan::peak_bytes)
            .min()
            .unwrap();
        let plan = Budget {
            bytes: persistent_minimum,
        }
        .persistent(&chain)
        .unwrap();
        assert_eq!(plan.peak_bytes(), persistent_minimum, "seed {seed}");
    }
}

#[test]
fn more_budget_never_costs_more_and_everything_fitting_is_store_all() {
    for seed in 2000..2040 {
        // Equal forward times: least time is fewest forward calls.
        let chain = random_chain(seed, 24, 1);
        let all = StoreAll.plan(&chain).unwrap();
        let minimum = Budget { bytes: 0 }.plan(&chain).map_or_else(
            |e| match e {
                CheckpointError::BudgetTooSmall { minimum, .. } => minimum,
                other => panic!("{other}"),
            },
            |p| p.peak_bytes(),
        );
        let mut last = u64::MAX;
        for budget in (minimum..=all.peak_bytes() + 512).step_by(512) {
            let plan = Budget { bytes: budget }.plan(&chain).unwrap();
            assert!(plan.peak_bytes() <= budget, "seed {seed}");
            assert!(plan.forward_calls() <= last, "seed {seed}, budget {budget}");
            last = plan.forward_calls();
        }
        let roomy = Budget {
            bytes: all.peak_bytes(),
        }
        .plan(&chain)
        .unwrap();
        assert_eq!(roomy.forward_calls(), all.forward_calls(), "seed {seed}");
        assert_eq!(roomy.total_time(), all.total_time(), "seed {seed}");
    }
}

#[test]
fn on_a_uniform_chain_budget_is_no_slower_than_revolve_in_the_same_bytes() {
    let chain = ChainCosts::uniform(30, 1 << 10).unwrap();
    for slots in 2..=6 {
        let revolve = Revolve { slots }.plan(&chain).unwrap();
        let budget = Budget {
            bytes: revolve.peak_bytes(),
        }
        .plan(&chain)
        .unwrap();
        assert!(
            budget.forward_calls() <= revolve.forward_calls(),
            "{slots} slots"
        );
        assert!(budget.peak_bytes() <= revolve.peak_bytes());
    }
}

#[test]
fn fit_is_free_memory_plus_the_cache_capped_by_the_fraction() {
    let backend = SimBackend::builder().build();
    let alloc = CachingAllocator::new(backend, AllocatorConfig::default());
    let info = alloc.mem_get_info(0).unwrap();
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        info.free_bytes
    );
    let held = alloc.allocate(0, 3 << 20, Default::default()).unwrap();
    drop(held); // its segment stays cached: still available to the plan
    let after = alloc.mem_get_info(0).unwrap();
    let cached = alloc.device_stats(0).unwrap().reserved_bytes.all.current as usize;
    assert!(cached > 0);
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        after.free_bytes + cached
    );
    let config = AllocatorConfig::builder()
        .per_process_memory_fraction(0.25)
        .build()
        .unwrap();
    let capped = CachingAllocator::new(SimBackend::builder().build(), config);
    let total = capped.mem_get_info(0).unwrap().total_bytes;
    assert_eq!(
        Budget::fit(&capped, DeviceIndex::new(0)).unwrap().bytes,
        (0.25 * total as f64) as usize
    );
    assert!(
        Budget::fit(&alloc, DeviceIndex::new(5)).is_err(),
        "no device 5"
    );
}

/// A heterogeneous chain of `stages` stages with activations of 512 B to 1 MiB, workspaces up
/// to half that, and equal forward times (least time is fewest forward calls).
fn long_chain(seed: u64, stages: usize) -> ChainCosts {
    let mut rng = SplitMix(seed);
    let costs = (0..stages)
        .map(|_| StageCost {
            output_bytes: 512 * (1 + rng.below(2048) as usize),
            forward_workspace_bytes: 512 * rng.below(1024) as usize,
            backward_workspace_bytes: 512 * rng.below(1024) as usize,
            forward_time: 1,
            backward_time: 2,
        })
        .collect();
    ChainCosts::new(1 << 20, costs, &AllocatorConfig::default()).expect("a valid chain")
}

fn minimum_of(chain: &ChainCosts) -> usize {
    match (Budget { bytes: 0 }).plan(chain) {
        Err(CheckpointError::BudgetTooSmall { minimum, .. }) => minimum,
        other => panic!("a zero budget is too small: {other:?}"),
    }
}

#[test]
fn long_chains_fit_every_budget_from_the_minimum_and_spend_more_memory_for_less_time() {
    for (seed, stages) in [(1, 40), (2, 150), (3, 400)] {
        let chain = long_chain(seed, stages);
        let all = StoreAll.plan(&chain).unwrap();
        let minimum = minimum_of(&chain);
        let what = format!("seed {seed}, {stages} stages");
        let tight = Budget { bytes: minimum }.plan(&chain).unwrap();
        assert_eq!(tight.peak_bytes(), minimum, "{what}: the minimum is exact");
        assert_reverses_each_stage_once(&tight, stages, &what);
        let mut last = u64::MAX;
        for step in 0..=8 {
            let budget = minimum + (all.peak_bytes() - minimum) * step / 8;
            let plan = Budget { bytes: budget }.plan(&chain).unwrap();
            assert!(plan.peak_bytes() <= budget, "{what}: within {budget}");
            assert_reverses_each_stage_once(&plan, stages, &what);
            assert!(
                plan.forward_calls() <= last,
                "{what}, budget {budget}: {} forward calls after {last}",
                plan.forward_calls()
            );
            last = plan.forward_calls();
        }
        assert_eq!(last, all.forward_calls(), "{what}: store-all once it fits");
    }
}

#[test]
fn on_long_uniform_chains_budget_is_revolve_or_better_in_the_same_bytes() {
    for stages in [120, 600] {
        let chain = ChainCosts::uniform(stages, 1 << 20).unwrap();
        for slots in [3, 5, 9] {
            let revolve = Revolve { slots }.plan(&chain).unwrap();
            let budget = Budget {
                bytes: revolve.peak_bytes(),
            }
            .plan(&chain)
            .unwrap();
            assert!(budget.peak_bytes() <= revolve.peak_bytes());
            assert!(
                budget.forward_calls() <= revolve.forward_calls(),
                "{stages} stages, {slots} slots: {} against Revolve's {}",
                budget.forward_calls(),
                revolve.forward_calls()
            );
        }
    }
}

#[test]
fn on_a_heterogeneous_chain_budget_beats_revolve_and_uniform_in_their_bytes() {
    // Revolve and Uniform place snapshots by position; Budget by size, so it keeps small
    // activations and recomputes less in the same memory.
    let chain = long_chain(7, 300);
    for planner in [
        Box::new(Revolve { slots: 8 }) as Box<dyn Planner>,
        Box::new(crate::checkpoint::Uniform::pytorch(16)),
    ] {
        let fixed = planner.plan(&chain).unwrap();
        let budget = Budget {
            bytes: fixed.peak_bytes(),
        }
        .plan(&chain)
        .unwrap();
        assert!(
            budget.total_time() < fixed.total_time(),
            "{}: {} against {}",
            planner.name(),
            budget.total_time(),
            fixed.total_time()
        );
    }
}

#[test]
fn a_chain_longer_than_budget_plans_is_a_typed_error() {
    let chain = ChainCosts::uniform(Budget::MAX_STAGES + 1, 512).unwrap();
    let err = Budget { bytes: 1 << 30 }.plan(&chain).unwrap_err();
    assert_eq!(
        err,
        CheckpointError::TooManyStages {
            stages: Budget::MAX_STAGES + 1,
            max: Budget::MAX_STAGES
        }
    );
    assert!(
        err.to_string().contains("merge consecutive stages"),
        "{err}"
    );
}
