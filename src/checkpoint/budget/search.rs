//! The exact search for short chains: a shortest path over every state of the memory model,
//! so [`Budget`](super::Budget) finds the fastest of *all* schedules, including those that drop
//! a snapshot before its segment is reversed and recompute it later (which the segment
//! recursion, like Rotor's, never does, and which sometimes pays off on heterogeneous chains).
//!
//! A state is the next stage to reverse and which activations are alive. Three facts keep the
//! graph to `2^n` states without losing an optimum: `x_0` is always alive; a forward step can
//! only make an activation below the next stage's input plus one (the memory model's rule);
//! and an activation whose stage has been reversed serves nothing, so it is dropped at once.
//! States are numbered densely: with `r` stages left to reverse, the alive set among
//! `x_1 .. x_{r-1}` is an `(r - 1)`-bit mask, and the `r`-stage block starts at `2^(r-1)`.
//!
//! Each move is one operation of the schedule with its peak from the module docs' model (the
//! same sums as [`simulate`](super::super::schedule::simulate)); a path may use a move only
//! if the move's peak fits the budget. Dijkstra's algorithm orders paths by (forward time,
//! peak), so among the fastest schedules the one with the lowest peak is returned; a second
//! search minimises the peak alone and gives the exact smallest budget.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::super::chain::ChainCosts;
use super::super::schedule::Op;

/// Chains of at most this many stages are searched exactly (`2^16` states).
pub(super) const MAX_STAGES: usize = 16;

/// What the exact search found.
pub(super) enum Outcome {
    /// The fastest schedule within the budget (the lowest-peak one among equals).
    Schedule(Vec<Op>),
    /// No schedule fits; the smallest budget that one does.
    TooSmall {
        /// The least peak of any schedule.
        minimum: usize,
    },
}

/// The fastest schedule of `chain` whose every operation peaks within `budget`.
/// `chain.len()` must be at most [`MAX_STAGES`].
pub(super) fn fastest(chain: &ChainCosts, budget: usize) -> Outcome {
    let graph = Graph::new(chain);
    match graph.search(|time, peak| (time, peak), Some(budget)) {
        Some(path) => Outcome::Schedule(graph.schedule(&path)),
        None => {
            // Lowest-peak path first, the forward time only breaking ties.
            let minimum = graph
                .search(|time, peak| (peak as u64, time), None)
                .map_or(usize::MAX, |path| path.peak);
            Outcome::TooSmall { minimum }
        }
    }
}

/// A state: `left` stages still to reverse (`left` is the next stage's index plus one) and
/// the alive set among `x_1 .. x_{left-1}`, bit `i - 1` for `x_i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct State {
    left: usize,
    alive: u32,
}

impl State {
    fn index(self) -> usize {
        match self.left {
            0 => 0,
            left => (1 << (left - 1)) + self.alive as usize,
        }
    }

    fn has(self, activation: usize) -> bool {
        activation == 0 || self.alive & (1 << (activation - 1)) != 0
    }

    fn with(self, activation: usize) -> State {
        State {
            alive: self.alive | 1 << (activation - 1),
            ..self
        }
    }

    fn without(self, activation: usize) -> State {
        State {
            alive: self.alive & !(1 << (activation - 1)),
            ..self
        }
    }
}

/// One move: the operation that makes it, the state it leads to, its peak and forward time.
#[derive(Clone, Copy)]
struct Move {
    op: Op,
    next: State,
    peak: usize,
    time: u64,
}

/// A path found by [`Graph::search`]: the operations (one per move) and its peak.
struct Path {
    ops: Vec<Op>,
    peak: usize,
}

struct Graph<'a> {
    chain: &'a ChainCosts,
    n: usize,
    /// `x_0 ..= x_n`, rounded bytes (`x_n` the last stage's output).
    size: Vec<usize>,
}

impl<'a> Graph<'a> {
    fn new(chain: &'a ChainCosts) -> Graph<'a> {
        let n = chain.len();
        debug_assert!(
            n <= MAX_STAGES,
            "the exact search takes at most {MAX_STAGES} stages"
        );
        let mut size: Vec<usize> = (0..n)
            .map(|i| chain.activation_bytes(i).unwrap_or(0))
            .collect();
        size.push(chain.stage(n - 1).output_bytes);
        Graph { chain, n, size }
    }

    /// Bytes alive in `state` between operations: its activations and the gradient of the
    /// last reversed stage's input (`g_left`; none before the first backward step).
    fn live(&self, state: State) -> usize {
        let activations: usize = (0..state.left.max(1))
            .filter(|&i| state.has(i))
            .map(|i| self.size[i])
            .sum();
        activations
            + if state.left < self.n {
                self.size[state.left]
            } else {
                0
            }
    }

    /// Every move out of `state`, in a fixed order.
    fn moves(&self, state: State, out: &mut Vec<Move>) {
        out.clear();
        if state.left == 0 {
            return;
        }
        let live = self.live(state);
        // Forward steps up to x_{left-1}, the next backward step's input.
        for i in 0..state.left - 1 {
            if state.has(i) && !state.has(i + 1) {
                let cost = self.chain.stage(i);
                out.push(Move {
                    op: Op::Forward { stage: i },
                    next: state.with(i + 1),
                    peak: live + self.size[i + 1] + cost.forward_workspace_bytes,
                    time: cost.forward_time,
                });
            }
        }
        for i in 1..state.left {
            if state.has(i) {
                out.push(Move {
                    op: Op::Drop { activation: i },
                    next: state.without(i),
                    peak: live,
                    time: 0,
                });
            }
        }
        let s = state.left - 1;
        if state.has(s) {
            let cost = self.chain.stage(s);
            let (x, out_bytes) = (self.size[s], self.size[s + 1]);
            let proper = cost.backward_workspace_bytes + x;
            let peak = if s + 1 == self.n {
                // The loss: the last forward, the loss gradient beside x_n, then the backward.
                (live + out_bytes + cost.forward_workspace_bytes)
                    .max(live + 2 * out_bytes)
                    .max(live + out_bytes + proper)
            } else {
                live + proper
            };
            let reversed = State {
                left: s,
                alive: state.alive,
            };
            out.push(Move {
                op: Op::Backward { stage: s },
                // x_s has served its last purpose: dropped with the step (see `schedule`).
                next: if s > 0 { reversed.without(s) } else { reversed },
                peak,
                time: 0,
            });
        }
    }

    /// Dijkstra from the start to the end state by `key(time, peak)` of paths, using only
    /// moves whose peak is within `budget` when one is given.
    fn search<K: Ord + Copy>(
        &self,
        key: impl Fn(u64, usize) -> K,
        budget: Option<usize>,
    ) -> Option<Path> {
        let states = 1usize << self.n;
        // Per state: the best (time, peak) reaching it and the move that did.
        let mut best: Vec<Option<(u64, usize)>> = vec![None; states];
        let mut came: Vec<Option<(State, Op)>> = vec![None; states];
        let start = State {
            left: self.n,
            alive: 0,
        };
        let first = self.size[0];
        if budget.is_some_and(|b| first > b) {
            return None;
        }
        best[start.index()] = Some((0, first));
        let mut queue = BinaryHeap::from([Reverse((key(0, first), start))]);
        let mut moves = Vec::new();
        let end = State { left: 0, alive: 0 };
        while let Some(Reverse((at, state))) = queue.pop() {
            let Some((time, peak)) = best[state.index()] else {
                continue;
            };
            if key(time, peak) != at {
                continue; // a stale entry: the state was reached better since
            }
            if state == end {
                return Some(Path {
                    ops: self.walk_back(&came, end),
                    peak,
                });
            }
            self.moves(state, &mut moves);
            for m in &moves {
                if budget.is_some_and(|b| m.peak > b) {
                    continue;
                }
                let reach = (time + m.time, peak.max(m.peak));
                let slot = m.next.index();
                if best[slot].map_or(true, |(t, p)| key(reach.0, reach.1) < key(t, p)) {
                    best[slot] = Some(reach);
                    came[slot] = Some((state, m.op));
                    queue.push(Reverse((key(reach.0, reach.1), m.next)));
                }
            }
        }
        None
    }

    fn walk_back(&self, came: &[Option<(State, Op)>], end: State) -> Vec<Op> {
        let mut ops = Vec::new();
        let mut state = end;
        while let Some((previous, op)) = came[state.index()] {
            ops.push(op);
            state = previous;
        }
        ops.reverse();
        ops
    }

    /// The path's moves as a schedule: each backward step is followed by the drop of its
    /// input (the move's second half), and the activations alive at a backward step that no
    /// store has marked yet are stored just before it, so [`Plan::kept`](super::super::Plan::kept)
    /// names what the first sweep kept.
    fn schedule(&self, path: &Path) -> Vec<Op> {
        let mut alive = vec![false; self.n + 1];
        let mut stored = vec![false; self.n + 1];
        alive[0] = true;
        stored[0] = true;
        let mut ops = Vec::with_capacity(2 * path.ops.len());
        for &op in &path.ops {
            match op {
                Op::Forward { stage } => alive[stage + 1] = true,
                Op::Drop { activation } => {
                    alive[activation] = false;
                    stored[activation] = false;
                }
                Op::Backward { stage } => {
                    for activation in 1..=stage {
                        if alive[activation] && !stored[activation] {
                            stored[activation] = true;
                            ops.push(Op::Store { activation });
                        }
                    }
                }
                Op::Store { .. } => {}
            }
            ops.push(op);
            if let Op::Backward { stage } = op {
                if stage > 0 {
                    alive[stage] = false;
                    stored[stage] = false;
                    ops.push(Op::Drop { activation: stage });
                }
            }
        }
        ops
    }
}
