//! Schedules and the one simulator of the memory model: every planner's plan is a schedule, and
//! its forward calls, time and peak come from running it here, so any planner's numbers (and a
//! hand-written schedule's) are checked the same way.

use std::fmt;

use super::chain::ChainCosts;
use super::error::{CheckpointError, ScheduleError};

/// One operation of a schedule. Activation `x_i` is stage `i`'s input; `x_0` is the chain's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Run stage `stage`'s forward on `x_stage` (alive), allocating `x_{stage+1}`. Counted in
    /// [`Plan::forward_calls`](super::Plan::forward_calls).
    Forward {
        /// The stage to run.
        stage: usize,
    },
    /// Mark alive activation `x_activation` as a snapshot: kept to restart forwards from. No
    /// memory changes hands; snapshots are what Revolve's slots count.
    Store {
        /// The activation to keep.
        activation: usize,
    },
    /// Free activation `x_activation` (never `x_0`, which the caller owns).
    Drop {
        /// The activation to free.
        activation: usize,
    },
    /// Stage `stage`'s backward step, on `x_stage` (alive) and the gradient of its output.
    /// The last stage's step also runs its forward and the loss (see the module docs).
    Backward {
        /// The stage to reverse.
        stage: usize,
    },
}

impl fmt::Display for Op {
    /// `F3` (forward of stage 3), `S3` / `D3` (store / drop `x_3`), `B3` (backward of stage 3).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Forward { stage } => write!(f, "F{stage}"),
            Op::Store { activation } => write!(f, "S{activation}"),
            Op::Drop { activation } => write!(f, "D{activation}"),
            Op::Backward { stage } => write!(f, "B{stage}"),
        }
    }
}

/// Live bytes around one operation of a schedule, as the memory model counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpMemory {
    /// The most bytes alive at any moment of the operation.
    pub peak_bytes: usize,
    /// Bytes alive once the operation has finished.
    pub after_bytes: usize,
}

/// What running a schedule through the memory model gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Simulation {
    pub forward_calls: u64,
    pub forward_calls_per_stage: Vec<u64>,
    pub peak_bytes: usize,
    pub peak_op: usize,
    pub total_time: u64,
    pub max_snapshots: usize,
    pub kept: Vec<usize>,
    pub memory: Vec<OpMemory>,
}

struct State<'a> {
    chain: &'a ChainCosts,
    alive: Vec<bool>,
    stored: Vec<bool>,
    snapshots: usize,
    live_bytes: usize,
    /// Stages `reversed_from..n` have had their backward step.
    reversed_from: usize,
}

impl State<'_> {
    fn bytes(&self, activation: usize) -> usize {
        // Every caller has checked `activation < n`, so this is `Some`.
        self.chain.activation_bytes(activation).unwrap_or(0)
    }

    fn activation(&self, activation: usize) -> Result<usize, ScheduleError> {
        let last = self.chain.len() - 1;
        if activation > last {
            return Err(ScheduleError::NoSuchActivation { activation, last });
        }
        Ok(activation)
    }

    fn stage(&self, stage: usize) -> Result<usize, ScheduleError> {
        let stages = self.chain.len();
        if stage >= stages {
            return Err(ScheduleError::NoSuchStage { stage, stages });
        }
        Ok(stage)
    }
}

fn add(a: usize, b: usize) -> Result<usize, ScheduleError> {
    a.checked_add(b).ok_or(ScheduleError::Overflow)
}

/// Runs `ops` through the memory model of the module docs.
pub(crate) fn simulate(chain: &ChainCosts, ops: &[Op]) -> Result<Simulation, CheckpointError> {
    let n = chain.len();
    let mut state = State {
        chain,
        alive: vec![false; n],
        stored: vec![false; n],
        snapshots: 1,
        live_bytes: chain.input_bytes(),
        reversed_from: n,
    };
    state.alive[0] = true;
    state.stored[0] = true;
    let mut sim = Simulation {
        forward_calls: 0,
        forward_calls_per_stage: vec![0; n],
        peak_bytes: state.live_bytes,
        peak_op: 0,
        total_time: 0,
        max_snapshots: 1,
        kept: Vec::new(),
        memory: Vec::with_capacity(ops.len()),
    };
    for (position, op) in ops.iter().enumerate() {
        let fail = |reason| CheckpointError::InvalidSchedule { position, reason };
        let peak = step(&mut state, &mut sim, *op).map_err(fail)?;
        sim.memory.push(OpMemory {
            peak_bytes: peak,
            after_bytes: state.live_bytes,
        });
        if peak > sim.peak_bytes {
            sim.peak_bytes = peak;
            sim.peak_op = position;
        }
        sim.max_snapshots = sim.max_snapshots.max(state.snapshots);
    }
    let end = |reason| CheckpointError::InvalidSchedule {
        position: ops.len(),
        reason,
    };
    if state.reversed_from > 0 {
        return Err(end(ScheduleError::Unfinished {
            next: state.reversed_from - 1,
        }));
    }
    if let Some(activation) = (1..n).find(|&i| state.alive[i]) {
        return Err(end(ScheduleError::LeftAlive { activation }));
    }
    Ok(sim)
}

/// Applies one operation; returns the most bytes alive during it.
fn step(state: &mut State<'_>, sim: &mut Simulation, op: Op) -> Result<usize, ScheduleError> {
    let n = state.chain.len();
    match op {
        Op::Forward { stage } => {
            let stage = state.stage(stage)?;
            if stage + 1 >= state.reversed_from {
                return Err(ScheduleError::ForwardNotNeeded {
                    stage,
                    reversed_from: state.reversed_from,
                });
            }
            if !state.alive[stage] {
                return Err(ScheduleError::InputNotAlive { activation: stage });
            }
            if state.alive[stage + 1] {
                return Err(ScheduleError::AlreadyAlive {
                    activation: stage + 1,
                });
            }
            let cost = state.chain.stage(stage);
            let after = add(state.live_bytes, cost.output_bytes)?;
            let peak = add(after, cost.forward_workspace_bytes)?;
            state.alive[stage + 1] = true;
            state.live_bytes = after;
            sim.forward_calls += 1;
            sim.forward_calls_per_stage[stage] += 1;
            sim.total_time = sim
                .total_time
                .checked_add(cost.forward_time)
                .ok_or(ScheduleError::Overflow)?;
            Ok(peak)
        }
        Op::Store { activation } => {
            let activation = state.activation(activation)?;
            if !state.alive[activation] {
                return Err(ScheduleError::NotDroppable { activation });
            }
            if state.stored[activation] {
                return Err(ScheduleError::AlreadyStored { activation });
            }
            state.stored[activation] = true;
            state.snapshots += 1;
            Ok(state.live_bytes)
        }
        Op::Drop { activation } => {
            let activation = state.activation(activation)?;
            if activation == 0 || !state.alive[activation] {
                return Err(ScheduleError::NotDroppable { activation });
            }
            let peak = state.live_bytes;
            state.alive[activation] = false;
            if state.stored[activation] {
                state.stored[activation] = false;
                state.snapshots -= 1;
            }
            state.live_bytes -= state.bytes(activation);
            Ok(peak)
        }
        Op::Backward { stage } => {
            let stage = state.stage(stage)?;
            let expected = state.reversed_from.checked_sub(1);
            if expected != Some(stage) {
                return Err(ScheduleError::BackwardOutOfOrder {
                    stage,
                    expected: expected.unwrap_or(0),
                });
            }
            if !state.alive[stage] {
                return Err(ScheduleError::InputNotAlive { activation: stage });
            }
            if state.reversed_from == n {
                // The kept activations are what the first sweep left alive as snapshots.
                sim.kept = (0..n).filter(|&i| state.stored[i]).collect();
            }
            let cost = *state.chain.stage(stage);
            let input_bytes = state.bytes(stage);
            let mut peak = state.live_bytes;
            let mut time = cost.backward_time;
            if stage == n - 1 {
                // The loss: forward of the last stage (x_n and its workspace), then the loss
                // gradient g_n beside x_n, then x_n is freed.
                let with_output = add(state.live_bytes, cost.output_bytes)?;
                peak = peak.max(add(with_output, cost.forward_workspace_bytes)?);
                peak = peak.max(add(with_output, cost.output_bytes)?);
                state.live_bytes = add(state.live_bytes, cost.output_bytes)?; // g_n
                time = time
                    .checked_add(cost.forward_time)
                    .ok_or(ScheduleError::Overflow)?;
            }
            // The backward proper: g_{i+1} (already alive), g_i and the backward workspace.
            let with_grad = add(state.live_bytes, input_bytes)?;
            peak = peak.max(add(with_grad, cost.backward_workspace_bytes)?);
            state.live_bytes = with_grad - cost.output_bytes; // g_{i+1} freed
            state.reversed_from = stage;
            sim.total_time = sim
                .total_time
                .checked_add(time)
                .ok_or(ScheduleError::Overflow)?;
            Ok(peak)
        }
    }
}
