//! [`Revolve`]: binomial checkpointing, optimal in forward calls for a uniform chain with a
//! fixed number of snapshot slots (Griewank 1992; Griewank and Walther, "Algorithm 799:
//! revolve", ACM TOMS 2000).

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::plan::Plan;
use super::planner::Planner;
use super::schedule::Op;

/// Binomial checkpointing with `slots` snapshots.
///
/// Conventions (those of the Revolve literature, which the closed form below assumes):
///
/// - `slots` counts the snapshots *including* the one holding the chain's input `x_0`, so one
///   slot means "recompute everything from the input";
/// - [`Plan::forward_calls`] counts stage forward evaluations outside backward steps, the first
///   sweep included;
/// - each backward step of stage `i` re-runs stage `i`'s forward itself, and that run is not
///   counted (the last stage's forward, before the loss, is one of those).
///
/// Under them the plan's forward calls for `l` stages equal
/// `t(l, c) = r * l - C(c + r, c + 1)`, where `r` is the smallest repetition number with
/// `C(c + r, c) >= l` ([`Revolve::forward_calls`]); so `t(l, 1) = l (l - 1) / 2`, and
/// `t(l, c) = l - 1` (store-all's count) once `c + 1 >= l`.
///
/// The schedule reverses stages `s..e` from a snapshot of `x_s` with `c` slots: with one slot,
/// it advances from `x_s` to each stage's input in turn, last first; otherwise it advances to
/// `x_m`, stores it, reverses `m..e` with `c - 1` slots, drops `x_m` and reverses `s..m` with
/// `c`. The split `m` minimises `(m - s) + t(e - m, c - 1) + t(m - s, c)`; that sum is convex in
/// `m`, so a binary search finds it. Uniform costs are assumed: on a heterogeneous chain the
/// plan is valid and its memory exact, but it is optimal only in forward calls, not in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Revolve {
    /// Snapshots, the one holding `x_0` included; at least 1.
    pub slots: usize,
}

impl Revolve {
    /// The fewest forward calls that reverse `stages` stages with `slots` snapshots:
    /// `t(l, c) = r * l - C(c + r, c + 1)`, `r` the smallest with `C(c + r, c) >= l`.
    ///
    /// `None` for zero slots, or when the count does not fit in a `u64`.
    ///
    /// ```
    /// use blockpool::checkpoint::Revolve;
    ///
    /// assert_eq!(Revolve::forward_calls(10, 1), Some(45)); // l (l - 1) / 2
    /// assert_eq!(Revolve::forward_calls(10, 10), Some(9)); // every input kept
    /// assert_eq!(Revolve::forward_calls(10, 3), Some(15)); // r = 2: 2 * 10 - C(5, 4)
    /// ```
    pub fn forward_calls(stages: usize, slots: usize) -> Option<u64> {
        let l = u128::try_from(stages).ok()?;
        if slots == 0 {
            return None;
        }
        if stages == 0 {
            return Some(0);
        }
        let t = if slots == 1 {
            l * (l - 1) / 2
        } else {
            // More slots than stages change nothing: r = 1 already at c = l - 1.
            let c = u128::try_from(slots.min(stages)).ok()?;
            let mut r = 0u128;
            let mut binomial = 1u128; // C(c + r, c)
            while binomial < l {
                r += 1;
                binomial = binomial.checked_mul(c + r)? / r;
            }
            // C(c + r, c + 1) = C(c + r, c) * r / (c + 1).
            let tail = binomial.checked_mul(r)? / (c + 1);
            r.checked_mul(l)?.checked_sub(tail)?
        };
        u64::try_from(t).ok()
    }
}

impl Planner for Revolve {
    fn name(&self) -> &'static str {
        "revolve"
    }

    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        if self.slots == 0 {
            return Err(CheckpointError::ZeroSlots);
        }
        let n = chain.len();
        // Counts for chains the planner can hold in memory fit comfortably; the check keeps
        // an absurd chain a typed error rather than a wrong split.
        Revolve::forward_calls(n, self.slots).ok_or(CheckpointError::TooManyForwardCalls {
            stages: n,
            slots: self.slots,
        })?;
        let mut ops = Vec::new();
        reverse(&mut ops, 0, n, self.slots.min(n));
        Plan::from_schedule(chain, ops)
    }
}

/// `t(l, c)`, for arguments [`Revolve::plan`] has already checked.
fn cost(stages: usize, slots: usize) -> u64 {
    Revolve::forward_calls(stages, slots).unwrap_or(u64::MAX)
}

/// Appends forwards from alive `x_start` to `x_target`, dropping every activation in between.
fn advance(ops: &mut Vec<Op>, start: usize, target: usize) {
    for stage in start..target {
        ops.push(Op::Forward { stage });
        if stage > start {
            ops.push(Op::Drop { activation: stage });
        }
    }
}

/// Appends the reversal of stages `start..end` from `x_start` (alive, stored) with `slots`
/// snapshots, `x_start`'s included; leaves `x_start` alive.
fn reverse(ops: &mut Vec<Op>, start: usize, mut end: usize, slots: usize) {
    loop {
        let len = end - start;
        if len == 1 {
            ops.push(Op::Backward { stage: start });
            return;
        }
        if slots == 1 {
            for stage in (start..end).rev() {
                advance(ops, start, stage);
                ops.push(Op::Backward { stage });
                if stage > start {
                    ops.push(Op::Drop { activation: stage });
                }
            }
            return;
        }
        let split = start + best_split(len, slots);
        advance(ops, start, split);
        ops.push(Op::Store { activation: split });
        reverse(ops, split, end, slots - 1);
        ops.push(Op::Drop { activation: split });
        // The tail call `reverse(start, split, slots)`, as a loop so depth stays <= slots.
        end = split;
    }
}

/// The offset `k` in `1..len` of the next snapshot that minimises
/// `f(k) = k + t(len - k, slots - 1) + t(k, slots)`; `len >= 2`, `slots >= 2`.
///
/// `t(., c)` is convex (its increments are the repetition numbers, which never decrease), so
/// `f` is too, and the first `k` whose increment `f(k + 1) - f(k)` is not negative is a
/// minimum.
fn best_split(len: usize, slots: usize) -> usize {
    let f = |k: usize| -> u128 {
        k as u128 + u128::from(cost(len - k, slots - 1)) + u128::from(cost(k, slots))
    };
    let (mut low, mut high) = (1, len - 1);
    while low < high {
        let mid = low + (high - low) / 2;
        if f(mid + 1) >= f(mid) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    low
}

#[cfg(test)]
#[path = "revolve_tests.rs"]
mod tests;
