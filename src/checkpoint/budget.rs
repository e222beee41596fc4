//! [`Budget`]: the fastest schedule whose peak fits a byte budget, for heterogeneous chains.
//!
//! Three ways to plan, chosen by the chain: when store-all fits, it is the plan (nothing is
//! faster); a chain of at most [`search::MAX_STAGES`] stages is searched exactly over every
//! schedule of the memory model (`search.rs`); a longer one by the segment recursion of
//! Beaumont et al.'s Rotor solver, exact in bytes while the budget spans few enough units of
//! the chain's byte counts, grouped at small activations for long chains (`segments.rs`).

mod search;
mod segments;

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::plan::Plan;
use super::planner::{Planner, StoreAll};
use super::revolve::Revolve;
use crate::{Backend, CachingAllocator, DeviceIndex};
use search::Outcome;
use segments::{LeastPeaks, Table};

/// Plans the schedule of least total time whose peak, under the memory model of the
/// [module docs](super), is at most `bytes`.
///
/// The byte counts are the chain's rounded ones, so the peak the plan predicts is what the
/// allocator will hold. How far the search goes depends on the chain:
///
/// - **Everything fits**: when `bytes` is at least [`StoreAll`]'s peak, the plan is
///   store-all's (every forward once: nothing is faster).
/// - **Up to [`Budget::EXACT_STAGES`] stages**: a shortest-path search over every state of
///   the memory model (which activations are alive, which stages are reversed), so the plan
///   is the fastest of *all* schedules, including those that drop a snapshot before its
///   segment is reversed and recompute it later. Among equally fast schedules it takes the
///   one with the lowest peak.
/// - **Longer chains**: Rotor's segment recursion (Beaumont et al., optimal checkpointing for
///   heterogeneous chains), the fastest *persistent* schedule (each snapshot kept until its
///   segment is reversed). It is exact when `bytes` spans at most [`Budget::MAX_UNITS`] units
///   of the greatest common divisor of the chain's byte counts and the work stays small
///   (every chain of up to 96 stages); otherwise sizes are counted in coarser units rounded
///   up, and a long chain cut into groups (at least 96) splits segments spanning several only
///   at the groups' smallest activations. The plan then still fits the budget, but may
///   recompute a little more than the optimum; it is never slower than the [`Revolve`] plan
///   with the most slots that fits (optimal for uniform chains), which is tried beside it.
///   A 1,000-stage chain plans in well under a second (`benches/README.md`).
///
/// A budget below the smallest peak of the schedules searched is
/// [`CheckpointError::BudgetTooSmall`], which names that smallest budget exactly. A chain of
/// more than [`Budget::MAX_STAGES`] stages is [`CheckpointError::TooManyStages`].
///
/// ```
/// use blockpool::checkpoint::{Budget, ChainCosts, Planner, StoreAll};
///
/// let chain = ChainCosts::uniform(8, 1 << 10)?;
/// let all = StoreAll.plan(&chain)?;
/// let tight = Budget { bytes: all.peak_bytes() / 2 }.plan(&chain)?;
/// assert!(tight.peak_bytes() <= all.peak_bytes() / 2);
/// assert!(tight.forward_calls() > all.forward_calls());
/// let roomy = Budget { bytes: all.peak_bytes() }.plan(&chain)?;
/// assert_eq!(roomy.forward_calls(), all.forward_calls());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// The most bytes the plan may have alive at once.
    pub bytes: usize,
}

impl Budget {
    /// The most memory units the segment recursion tracks; above it units grow (see
    /// [`Budget`]).
    pub const MAX_UNITS: usize = segments::MAX_UNITS;

    /// Chains of at most this many stages are searched over every schedule.
    pub const EXACT_STAGES: usize = search::MAX_STAGES;

    /// The longest chain `Budget` plans: its least-peak table holds `(stages + 1)^2` entries
    /// and tries `stages^3 / 6` splits.
    pub const MAX_STAGES: usize = 2048;

    /// A budget of what `device` can still give this allocator: the bytes it holds cached
    /// but unallocated, plus what it may still reserve (the device's free memory, capped by
    /// the configured memory fraction).
    ///
    /// The activations a plan keeps are allocated on top of whatever is allocated now, so
    /// call this with the parameters already in place.
    pub fn fit<B: Backend>(
        alloc: &CachingAllocator<B>,
        device: DeviceIndex,
    ) -> crate::Result<Budget> {
        let info = alloc.mem_get_info(device)?;
        let stats = alloc.device_stats(device)?;
        let count = |value: i64| usize::try_from(value).unwrap_or(0);
        let reserved = count(stats.reserved_bytes.all.current);
        let allocated = count(stats.allocated_bytes.all.current);
        let mut may_reserve = info.free_bytes;
        if let Some(fraction) = alloc.memory_fraction(device)? {
            let limit = (fraction * info.total_bytes as f64) as usize;
            may_reserve = may_reserve.min(limit.saturating_sub(reserved));
        }
        Ok(Budget {
            bytes: reserved
                .saturating_sub(allocated)
                .saturating_add(may_reserve),
        })
    }
}

impl Planner for Budget {
    fn name(&self) -> &'static str {
        "budget"
    }

    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        let stages = chain.len();
        if stages > Budget::MAX_STAGES {
            return Err(CheckpointError::TooManyStages {
                stages,
                max: Budget::MAX_STAGES,
            });
        }
        let all = StoreAll.plan(chain)?;
        if self.bytes >= all.peak_bytes() {
            return Ok(all);
        }
        let too_small = |minimum| CheckpointError::BudgetTooSmall {
            budget: self.bytes,
            minimum,
        };
        if stages <= Budget::EXACT_STAGES {
            return match search::fastest(chain, self.bytes) {
                Outcome::Schedule(ops) => Plan::from_schedule(chain, ops),
                Outcome::TooSmall { minimum } => Err(too_small(minimum)),
            };
        }
        let persistent = self.persistent(chain)?;
        // On long chains the segment recursion works in groups or coarse units; binomial
        // checkpointing is optimal for uniform chains and costs little to lay out, so the
        // faster of the two is the plan.
        Ok(match self.revolve_within(chain) {
            Some(revolve) if revolve.total_time() < persistent.total_time() => revolve,
            _ => persistent,
        })
    }
}

impl Budget {
    /// The fastest persistent schedule within the budget by the segment recursion, whatever
    /// the chain's length (the planner uses it above [`Budget::EXACT_STAGES`] stages).
    pub(super) fn persistent(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        let least = LeastPeaks::new(chain);
        if self.bytes < least.minimum() {
            return Err(CheckpointError::BudgetTooSmall {
                budget: self.bytes,
                minimum: least.minimum(),
            });
        }
        let mut ops = Vec::new();
        match Table::solve(chain, self.bytes) {
            Some(table) => table.emit_chain(&mut ops),
            // Coarse units can lose a schedule that fits in exact bytes; the least-peak one
            // fits since the budget is at least its peak.
            None => least.emit(0, chain.len(), &mut ops),
        }
        Plan::from_schedule(chain, ops)
    }

    /// The Revolve plan with the most slots that fits the budget (found by bisection over the
    /// slot count, whose peak grows with it), if one does.
    fn revolve_within(&self, chain: &ChainCosts) -> Option<Plan> {
        let (mut low, mut high) = (1, chain.len());
        let mut best = None;
        while low <= high {
            let slots = low + (high - low) / 2;
            match (Revolve { slots }).plan(chain) {
                Ok(plan) if plan.peak_bytes() <= self.bytes => {
                    best = Some(plan);
                    low = slots + 1;
                }
                // Too many forward calls to count: more slots need fewer.
                Err(_) => low = slots + 1,
                Ok(_) => high = slots - 1,
            }
        }
        best
    }
}
