//! [`Plan`]: a schedule and what the memory model says of it.

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::schedule::{simulate, Op, OpMemory, Simulation};

/// A checkpointing plan for one chain: its schedule of operations, which activations it keeps,
/// and the forward calls, time and peak bytes the memory model of the
/// [module docs](super) gives for it.
///
/// Every planner builds its plan with [`Plan::from_schedule`], so every number here comes from
/// the same simulator; a hand-written schedule is checked the same way.
///
/// ```
/// use blockpool::checkpoint::{ChainCosts, Op, Plan};
///
/// let chain = ChainCosts::uniform(2, 512)?; // x_0 -> stage 0 -> x_1 -> stage 1 -> x_2
/// let plan = Plan::from_schedule(&chain, vec![
///     Op::Forward { stage: 0 }, // x_1
///     Op::Store { activation: 1 },
///     Op::Backward { stage: 1 }, // runs stage 1 and the loss itself
///     Op::Drop { activation: 1 },
///     Op::Backward { stage: 0 },
/// ])?;
/// assert_eq!(plan.forward_calls(), 1);
/// assert_eq!(plan.kept(), &[0, 1]);
/// // During the loss: x_0, x_1, x_2 and its gradient g_2.
/// assert_eq!(plan.peak_bytes(), 4 * 512);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    schedule: Vec<Op>,
    simulation: Simulation,
}

impl Plan {
    /// Checks `schedule` against `chain` under the memory model and records what it costs.
    ///
    /// Fails with [`CheckpointError::InvalidSchedule`], naming the operation and the rule,
    /// when the schedule uses an activation that is not alive, runs a backward step out of
    /// order or leaves one out, or ends with activations other than `x_0` alive.
    pub fn from_schedule(chain: &ChainCosts, schedule: Vec<Op>) -> Result<Plan, CheckpointError> {
        let simulation = simulate(chain, &schedule)?;
        Ok(Plan {
            schedule,
            simulation,
        })
    }

    /// The operations, in order.
    pub fn schedule(&self) -> &[Op] {
        &self.schedule
    }

    /// The activations the first forward sweep keeps: the snapshots alive when the first
    /// backward step starts, ascending (always starting with `0`, the chain's input).
    pub fn kept(&self) -> &[usize] {
        &self.simulation.kept
    }

    /// Stage forward evaluations outside backward steps, the first sweep included. Each
    /// backward step re-runs its own stage's forward, and that run is not counted.
    pub fn forward_calls(&self) -> u64 {
        self.simulation.forward_calls
    }

    /// [`Plan::forward_calls`] per stage, indexed by stage.
    pub fn forward_calls_per_stage(&self) -> &[u64] {
        &self.simulation.forward_calls_per_stage
    }

    /// The most bytes alive at any moment of the schedule under the memory model (the chain's
    /// input included), rounded as the allocator rounds.
    pub fn peak_bytes(&self) -> usize {
        self.simulation.peak_bytes
    }

    /// Index in [`Plan::schedule`] of the first operation that reaches [`Plan::peak_bytes`]
    /// (0 for a schedule that never exceeds the input alone).
    pub fn peak_op(&self) -> usize {
        self.simulation.peak_op
    }

    /// Live bytes during and after each operation, indexed like [`Plan::schedule`].
    pub fn memory(&self) -> &[OpMemory] {
        &self.simulation.memory
    }

    /// Total time in the chain's unit: every counted forward call, the last stage's forward
    /// inside its backward step (the loss), and every backward step.
    pub fn total_time(&self) -> u64 {
        self.simulation.total_time
    }

    /// The most snapshots alive at once, `x_0`'s included: what Revolve's slots bound.
    pub fn max_snapshots(&self) -> usize {
        self.simulation.max_snapshots
    }
}

/// Asserts that `plan` runs every stage's backward exactly once, from the last to the first.
#[cfg(test)]
pub(crate) fn assert_reverses_each_stage_once(plan: &Plan, stages: usize, what: &str) {
    let backward: Vec<usize> = plan
        .schedule()
        .iter()
        .filter_map(|op| match op {
            Op::Backward { stage } => Some(*stage),
            _ => None,
        })
        .collect();
    let expected: Vec<usize> = (0..stages).rev().collect();
    assert_eq!(
        backward, expected,
        "{what}: each backward once, last stage first"
    );
}
