//! Revolve against its closed form, against the recurrence the closed form solves, and against
//! an exhaustive search over every schedule of small chains.

use std::collections::VecDeque;

use super::*;
use crate::checkpoint::plan::assert_reverses_each_stage_once;
use crate::checkpoint::{StoreAll, Uniform};

#[test]
fn forward_calls_equal_the_closed_form_up_to_300_stages_and_8_slots() {
    for stages in 1..=300 {
        let chain = ChainCosts::uniform(stages, 512).unwrap();
        for slots in 1..=8 {
            let plan = Revolve { slots }.plan(&chain).unwrap();
            let closed = Revolve::forward_calls(stages, slots).unwrap();
            assert_eq!(
                plan.forward_calls(),
                closed,
                "l = {stages}, c = {slots}: schedule vs t(l, c)"
            );
            assert!(
                plan.max_snapshots() <= slots,
                "l = {stages}, c = {slots}: {} snapshots used",
                plan.max_snapshots()
            );
            if stages <= 40 {
                assert_reverses_each_stage_once(&plan, stages, "revolve");
            }
        }
    }
}

#[test]
fn closed_form_matches_known_values() {
    for l in 1..=200u64 {
        assert_eq!(
            Revolve::forward_calls(l as usize, 1),
            Some(l * (l - 1) / 2),
            "t(l, 1) = l(l-1)/2"
        );
    }
    // r = 3 for l = 20, c = 3 (C(6, 3) = 20): 3 * 20 - C(6, 4) = 60 - 15.
    assert_eq!(Revolve::forward_calls(20, 3), Some(45));
    assert_eq!(Revolve::forward_calls(21, 3), Some(49)); // r = 4: 84 - C(7, 4) = 84 - 35
    assert_eq!(
        Revolve::forward_calls(5, 4),
        Some(4),
        "c + 1 >= l: store-all's l - 1"
    );
    assert_eq!(Revolve::forward_calls(5, usize::MAX), Some(4));
    assert_eq!(Revolve::forward_calls(5, 0), None);
}

/// The recurrence t(l, c) = min over k of k + t(l - k, c - 1) + t(k, c), solved by table.
#[test]
fn closed_form_solves_the_recurrence() {
    const L: usize = 80;
    const C: usize = 7;
    let mut table = vec![vec![0u64; C + 1]; L + 1];
    for l in 1..=L {
        table[l][1] = (l * (l - 1) / 2) as u64;
        for c in 2..=C {
            table[l][c] = if l == 1 {
                0
            } else {
                (1..l)
                    .map(|k| k as u64 + table[l - k][c - 1] + table[k][c])
                    .min()
                    .unwrap()
            };
            assert_eq!(
                Some(table[l][c]),
                Revolve::forward_calls(l, c),
                "l = {l}, c = {c}"
            );
        }
    }
}

/// Fewest forward calls over every schedule of Griewank's model, by 0-1 breadth-first search:
/// a state is the set of snapshots (`x_0` always among them, at most `slots`), the current
/// value (an activation held outside the slots, or none) and the first stage reversed.
fn exhaustive_forward_calls(stages: usize, slots: usize) -> u64 {
    const NONE: usize = usize::MAX;
    let encode = |set: usize, current: usize, reversed: usize| {
        let current = if current == NONE { stages } else { current };
        (set * (stages + 1) + current) * (stages + 1) + reversed
    };
    let states = (1usize << stages) * (stages + 1) * (stages + 1);
    let mut best = vec![u64::MAX; states];
    let mut queue = VecDeque::new();
    best[encode(1, NONE, stages)] = 0;
    queue.push_back((1usize, NONE, stages, 0u64));
    while let Some((set, current, reversed, cost)) = queue.pop_front() {
        if cost > best[encode(set, current, reversed)] {
            continue;
        }
        if reversed == 0 {
            return cost;
        }
        let mut next = Vec::new(); // (set, current, reversed, extra cost)
                                   // Backward of stage `reversed - 1` from the current value or a snapshot.
        let target = reversed - 1;
        if current == target || set & (1 << target) != 0 {
            next.push((set & !(1 << target) | (set & 1), NONE, target, 0));
        }
        if current != NONE {
            if current + 1 < reversed {
                next.push((set, current + 1, reversed, 1));
            }
            if set.count_ones() < slots as u32 {
                next.push((set | (1 << current), current, reversed, 0));
            }
        }
        for i in 0..stages {
            if set & (1 << i) != 0 {
                if i < reversed {
                    next.push((set, i, reversed, 0)); // restart from snapshot i
                }
                if i > 0 {
                    next.push((set & !(1 << i), current, reversed, 0));
                }
            }
        }
        for (set, current, reversed, extra) in next {
            let key = encode(set, current, reversed);
            if cost + extra < best[key] {
                best[key] = cost + extra;
                if extra == 0 {
                    queue.push_front((set, current, reversed, cost));
                } else {
                    queue.push_back((set, current, reversed, cost + 1));
                }
            }
        }
    }
    unreachable!("every chain can be reversed from its input")
}

#[test]
fn forward_calls_equal_an_exhaustive_search_for_small_chains() {
    for stages in 1..=8 {
        let chain = ChainCosts::uniform(stages, 512).unwrap();
        for slots in 1..=stages.min(5) {
            let searched = exhaustive_forward_calls(stages, slots);
            let plan = Revolve { slots }.plan(&chain).unwrap();
            assert_eq!(
                plan.forward_calls(),
                searched,
                "l = {stages}, c = {slots}: Revolve vs the fewest over all schedules"
            );
        }
    }
}

#[test]
fn more_slots_never_cost_more_forward_calls_and_enough_equal_store_all() {
    for stages in [1, 2, 7, 33, 120] {
        let chain = ChainCosts::uniform(stages, 4096).unwrap();
        let store_all = StoreAll.plan(&chain).unwrap();
        let mut previous = u64::MAX;
        for slots in 1..=stages + 1 {
            let plan = Revolve { slots }.plan(&chain).unwrap();
            assert!(
                plan.forward_calls() <= previous,
                "l = {stages}: {slots} slots cost {} > {previous}",
                plan.forward_calls()
            );
            previous = plan.forward_calls();
        }
        assert_eq!(previous, store_all.forward_calls(), "l = {stages}");
    }
}

/// A uniform split is one schedule among those Revolve optimises over (every activation it
/// holds past the next operation is a snapshot), so Revolve with as many slots never needs
/// more forward calls.
#[test]
fn revolve_never_needs_more_forward_calls_than_a_uniform_split_with_as_many_snapshots() {
    for stages in 1..=40 {
        let chain = ChainCosts::uniform(stages, 512).unwrap();
        for segments in 1..=stages {
            for uniform in [Uniform::pytorch(segments), Uniform::balanced(segments)] {
                let split = uniform.plan(&chain).unwrap();
                let revolve = Revolve {
                    slots: split.max_snapshots(),
                }
                .plan(&chain)
                .unwrap();
                assert!(
                    revolve.forward_calls() <= split.forward_calls(),
                    "l = {stages}, {uniform:?}: revolve {} > uniform {}",
                    revolve.forward_calls(),
                    split.forward_calls()
                );
            }
        }
    }
}

#[test]
fn one_slot_recomputes_from_the_input_and_holds_little() {
    let chain = ChainCosts::uniform(4, 512).unwrap();
    let plan = Revolve { slots: 1 }.plan(&chain).unwrap();
    let ops: Vec<String> = plan.schedule().iter().map(Op::to_string).collect();
    assert_eq!(
        ops.join(" "),
        "F0 F1 D1 F2 D2 B3 D3 F0 F1 D1 B2 D2 F0 B1 D1 B0"
    );
    assert_eq!(plan.kept(), &[0]);
    // x_0, x_3, x_4 and g_4 during the loss.
    assert_eq!(plan.peak_bytes(), 4 * 512);
}

#[test]
fn zero_slots_is_a_typed_error() {
    let chain = ChainCosts::uniform(3, 512).unwrap();
    let err = Revolve { slots: 0 }.plan(&chain).unwrap_err();
    assert_eq!(err, CheckpointError::ZeroSlots);
    assert!(err.to_string().contains("at least 1 slot"), "{err}");
}
