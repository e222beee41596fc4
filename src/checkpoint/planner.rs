//! The [`Planner`] trait and the plan without recompute, [`StoreAll`].

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::plan::Plan;
use super::schedule::Op;

/// Decides which activations to keep and what to recompute for a chain.
pub trait Planner {
    /// A short name for reports (`store-all`, `uniform`, `revolve`, ...).
    fn name(&self) -> &'static str;

    /// The plan for `chain`, or why this planner's settings cannot plan it.
    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError>;
}

/// Keeps every stage's input: one forward sweep, no recompute, the most memory.
///
/// Its schedule: forward stages `0..n-1`, storing each output; then for each stage from the
/// last to the first, its backward step and the drop of its input. Forward calls: `n - 1`
/// (the last stage's forward runs inside its backward step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StoreAll;

impl Planner for StoreAll {
    fn name(&self) -> &'static str {
        "store-all"
    }

    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        let n = chain.len();
        let mut ops = Vec::with_capacity(4 * n);
        for stage in 0..n - 1 {
            ops.push(Op::Forward { stage });
            ops.push(Op::Store {
                activation: stage + 1,
            });
        }
        reverse_stored(&mut ops, 0, n);
        Plan::from_schedule(chain, ops)
    }
}

/// Appends the backward steps of stages `end-1` down to `start`, each followed by the drop of
/// its input (except `x_0`): for a stretch whose inputs are all alive.
pub(crate) fn reverse_stored(ops: &mut Vec<Op>, start: usize, end: usize) {
    for stage in (start..end).rev() {
        ops.push(Op::Backward { stage });
        if stage > 0 {
            ops.push(Op::Drop { activation: stage });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{ScheduleError, StageCost};
    use crate::AllocatorConfig;

    /// A three-stage chain whose every number differs, so a wrong term shows.
    fn hand_chain() -> ChainCosts {
        let stage = |out_kib: usize, fw_kib: usize, bw_kib: usize, f: u64, b: u64| StageCost {
            output_bytes: out_kib << 10,
            forward_workspace_bytes: fw_kib << 10,
            backward_workspace_bytes: bw_kib << 10,
            forward_time: f,
            backward_time: b,
        };
        ChainCosts::new(
            1 << 10,
            vec![
                stage(2, 16, 32, 1, 10),
                stage(4, 8, 64, 2, 20),
                stage(8, 0, 1, 4, 40),
            ],
            &AllocatorConfig::default(),
        )
        .expect("a valid chain")
    }

    #[test]
    fn store_all_peak_and_calls_are_exact_on_a_hand_computed_chain() {
        let plan = StoreAll.plan(&hand_chain()).unwrap();
        // x_0 = 1 KiB; x_1 = 2; x_2 = 4; x_3 = 8 (KiB).
        // F0: 1 + 2 + ws 16 = 19.  F1: 1 + 2 + 4 + ws 8 = 15.
        // B2: loss forward 7 + 8 + ws 0 = 15; loss 7 + 8 + g_3 8 = 23;
        //     backward 7 + g_3 8 + g_2 4 + ws 1 = 20; after 7 + 4 = 11.
        // D2 -> 7.  B1: 7 + g_1 2 + ws 64 = 73; after x_0, x_1, g_1 = 5.
        // D1 -> 3.  B0: 3 + g_0 1 + ws 32 = 36; after x_0 + g_0 = 2.
        assert_eq!(plan.forward_calls(), 2);
        assert_eq!(plan.forward_calls_per_stage(), &[1, 1, 0]);
        assert_eq!(plan.kept(), &[0, 1, 2]);
        let peaks: Vec<usize> = plan.memory().iter().map(|m| m.peak_bytes >> 10).collect();
        let afters: Vec<usize> = plan.memory().iter().map(|m| m.after_bytes >> 10).collect();
        assert_eq!(plan.schedule().len(), 9);
        assert_eq!(
            peaks,
            [19, 3, 15, 7, 23, 11, 73, 5, 36],
            "per-op peaks in KiB"
        );
        assert_eq!(
            afters,
            [3, 3, 7, 7, 11, 7, 5, 3, 2],
            "per-op live bytes after, KiB"
        );
        assert_eq!(plan.peak_bytes(), 73 << 10);
        assert_eq!(plan.peak_op(), 6, "the peak is stage 1's backward");
        // Forwards 1 + 2, the loss's forward 4, backwards 10 + 20 + 40.
        assert_eq!(plan.total_time(), 77);
        assert_eq!(plan.max_snapshots(), 3);
    }

    #[test]
    fn single_stage_chain_runs_only_its_backward() {
        let chain = ChainCosts::uniform(1, 512).unwrap();
        let plan = StoreAll.plan(&chain).unwrap();
        assert_eq!(plan.schedule(), &[Op::Backward { stage: 0 }]);
        assert_eq!(plan.forward_calls(), 0);
        // x_0, x_1 and g_1 during the loss; then x_0, g_1, g_0.
        assert_eq!(plan.peak_bytes(), 3 * 512);
    }

    #[test]
    fn a_hand_schedule_whose_time_overflows_is_refused_not_wrapped() {
        let slow = StageCost {
            forward_time: u64::MAX / 8,
            ..StageCost::uniform(512)
        };
        let chain = ChainCosts::new(512, vec![slow; 2], &AllocatorConfig::default()).unwrap();
        let mut ops = Vec::new();
        for _ in 0..10 {
            ops.push(Op::Forward { stage: 0 });
            ops.push(Op::Drop { activation: 1 });
        }
        assert_eq!(
            Plan::from_schedule(&chain, ops),
            Err(CheckpointError::InvalidSchedule {
                position: 16, // the ninth forward of MAX / 8
                reason: ScheduleError::Overflow
            })
        );
    }

    #[test]
    fn broken_schedules_name_the_operation_and_rule() {
        let chain = ChainCosts::uniform(3, 512).unwrap();
        let cases = [
            (
                vec![Op::Forward { stage: 1 }],
                0,
                ScheduleError::InputNotAlive { activation: 1 },
            ),
            (
                vec![Op::Backward { stage: 1 }],
                0,
                ScheduleError::BackwardOutOfOrder {
                    stage: 1,
                    expected: 2,
                },
            ),
            (
                vec![Op::Drop { activation: 0 }],
                0,
                ScheduleError::NotDroppable { activation: 0 },
            ),
            (
                vec![
                    Op::Forward { stage: 0 },
                    Op::Forward { stage: 1 },
                    Op::Forward { stage: 2 },
                ],
                2,
                ScheduleError::ForwardNotNeeded {
                    stage: 2,
                    reversed_from: 3,
                },
            ),
            (
                vec![Op::Forward { stage: 0 }, Op::Forward { stage: 0 }],
                1,
                ScheduleError::AlreadyAlive { activation: 1 },
            ),
            (
                vec![Op::Store { activation: 0 }],
                0,
                ScheduleError::AlreadyStored { activation: 0 },
            ),
            (
                vec![Op::Drop { activation: 3 }],
                0,
                ScheduleError::NoSuchActivation {
                    activation: 3,
                    last: 2,
                },
            ),
            (
                vec![Op::Backward { stage: 7 }],
                0,
                ScheduleError::NoSuchStage {
                    stage: 7,
                    stages: 3,
                },
            ),
            (
                vec![Op::Forward { stage: 0 }],
                1,
                ScheduleError::Unfinished { next: 2 },
            ),
        ];
        for (ops, position, reason) in cases {
            let shown: Vec<String> = ops.iter().map(Op::to_string).collect();
            assert_eq!(
                Plan::from_schedule(&chain, ops),
                Err(CheckpointError::InvalidSchedule { position, reason }),
                "schedule {shown:?}"
            );
        }
        let leaky = vec![
            Op::Forward { stage: 0 },
            Op::Forward { stage: 1 },
            Op::Backward { stage: 2 },
            Op::Backward { stage: 1 },
            Op::Backward { stage: 0 },
        ];
        let err = Plan::from_schedule(&chain, leaky).unwrap_err();
        assert_eq!(
            err,
            CheckpointError::InvalidSchedule {
                position: 5,
                reason: ScheduleError::LeftAlive { activation: 1 }
            }
        );
        assert!(err.to_string().contains("x_1 still alive"), "{err}");
    }
}
