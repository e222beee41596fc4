//! [`Budget`]: the fastest schedule whose peak fits a byte budget, for heterogeneous chains.
//!
//! Dynamic programming over segments in the manner of Beaumont et al.'s optimal checkpointing
//! for heterogeneous chains (the Rotor solver): to reverse stages `s..e` with `x_s` alive,
//! either `e = s + 1` and the stage's backward step runs, or the schedule sweeps forward from
//! `x_s` to some `x_k` (dropping what lies between), reverses `k..e` with `x_s` held, then
//! reverses `s..k`. The table is indexed by the memory left for the segment, in units of the
//! greatest common divisor of the chain's rounded byte counts, so its peaks are exact bytes.

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::plan::Plan;
use super::planner::Planner;
use super::schedule::Op;
use crate::{Backend, CachingAllocator, DeviceIndex};

/// Plans the schedule of least total time whose peak, under the memory model of the
/// [module docs](super), is at most `bytes`.
///
/// The byte counts are the chain's rounded ones, so the peak the plan predicts is what the
/// allocator will hold. The search is exact (the fastest schedule among those that keep a
/// snapshot until its segment is reversed) when `bytes` is at most
/// [`Budget::MAX_UNITS`] times the greatest common divisor of the chain's byte counts
/// (512 B for most chains: 2 MiB), and the table of `(stages + 1)^2` segments by memory units
/// stays within 2^25 cells; above that, sizes are counted in coarser units rounded up,
/// so the plan still fits the budget but may recompute a little more than the optimum.
///
/// A budget below the smallest peak of any such schedule is
/// [`CheckpointError::BudgetTooSmall`], which names that smallest budget.
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
    /// The most memory units the table tracks; above it units grow (see [`Budget`]).
    pub const MAX_UNITS: usize = 4096;

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
        let sizes = Sizes::new(chain);
        let (least, choices) = sizes.least_peaks();
        let minimum = least[sizes.index(0, sizes.n)];
        if self.bytes < minimum {
            return Err(CheckpointError::BudgetTooSmall {
                budget: self.bytes,
                minimum,
            });
        }
        let mut ops = Vec::new();
        match Table::solve(chain, self.bytes) {
            Some(table) => table.emit(0, table.n, table.units, &mut ops),
            // Coarse units can lose a schedule that fits in exact bytes; the least-peak one
            // fits since the budget is at least its peak.
            None => sizes.emit_least(&choices, 0, sizes.n, &mut ops),
        }
        Plan::from_schedule(chain, ops)
    }
}

/// The chain's rounded byte counts as the recursion uses them, in some unit.
struct Sizes {
    n: usize,
    /// `x_i` for `i < n`; `x_n` is the last stage's output.
    activation: Vec<usize>,
    forward_workspace: Vec<usize>,
    /// The most bytes a lone backward step of stage `s` has alive besides other segments'
    /// snapshots and `g_{s+1}`: `x_s`, `g_s` and the workspace (and the loss, for the last).
    backward_peak: Vec<usize>,
}

impl Sizes {
    fn new(chain: &ChainCosts) -> Sizes {
        Sizes::in_units(chain, 1)
    }

    /// Sizes in units of `unit` bytes, each rounded up, so sums of units never undercount.
    fn in_units(chain: &ChainCosts, unit: usize) -> Sizes {
        let n = chain.len();
        let up = |bytes: usize| bytes.div_ceil(unit);
        let mut activation: Vec<usize> = (0..n)
            .map(|i| up(chain.activation_bytes(i).unwrap_or(0)))
            .collect();
        activation.push(up(chain.stage(n - 1).output_bytes));
        let forward_workspace = chain
            .stages()
            .iter()
            .map(|s| up(s.forward_workspace_bytes))
            .collect();
        let backward_peak = (0..n)
            .map(|s| {
                let cost = chain.stage(s);
                let (x, out) = (activation[s], activation[s + 1]);
                // `x_s`, `g_s` and the workspace; `g_{s+1}` is the segment's gradient,
                // counted by the caller, except for the last stage where it is the loss's.
                let proper = 2 * x + up(cost.backward_workspace_bytes);
                if s + 1 == n {
                    let loss = (x + out + up(cost.forward_workspace_bytes)).max(x + 2 * out);
                    (proper + out).max(loss)
                } else {
                    proper
                }
            })
            .collect();
        Sizes {
            n,
            activation,
            forward_workspace,
            backward_peak,
        }
    }

    /// The gradient alive beside segment `s..e`: `g_e`, none for the chain's end.
    fn gradient(&self, e: usize) -> usize {
        if e < self.n {
            self.activation[e]
        } else {
            0
        }
    }

    /// Peak of forward step `j` of a sweep from `x_s` (`x_s`, `x_j`, `x_{j+1}`, workspace).
    fn forward_peak(&self, s: usize, j: usize) -> usize {
        let held = if j > s { self.activation[j] } else { 0 };
        self.activation[s] + held + self.activation[j + 1] + self.forward_workspace[j]
    }

    fn index(&self, s: usize, e: usize) -> usize {
        s * (self.n + 1) + e
    }

    /// For every segment, the least peak (besides outer snapshots) of reversing it, and the
    /// first snapshot `k` of a schedule reaching it (`e` for a lone backward step).
    fn least_peaks(&self) -> (Vec<usize>, Vec<usize>) {
        let n = self.n;
        let mut least = vec![usize::MAX; (n + 1) * (n + 1)];
        let mut choice = vec![0; (n + 1) * (n + 1)];
        for len in 1..=n {
            for s in 0..=n - len {
                let e = s + len;
                let g = self.gradient(e);
                let at = self.index(s, e);
                if len == 1 {
                    least[at] = g + self.backward_peak[s];
                    choice[at] = e;
                    continue;
                }
                let mut sweep = 0;
                for k in s + 1..e {
                    sweep = sweep.max(g + self.forward_peak(s, k - 1));
                    let peak = sweep
                        .max(self.activation[s] + least[self.index(k, e)])
                        .max(least[self.index(s, k)]);
                    if peak < least[at] {
                        least[at] = peak;
                        choice[at] = k;
                    }
                }
            }
        }
        (least, choice)
    }

    fn emit_least(&self, choices: &[usize], s: usize, e: usize, ops: &mut Vec<Op>) {
        let k = choices[self.index(s, e)];
        emit_split(s, k, e, ops, |s, e, ops| {
            self.emit_least(choices, s, e, ops)
        });
    }
}

/// Appends the schedule of segment `s..e` split at `k` (`k == e`: its lone backward step):
/// the sweep to `x_k`, segment `k..e`, the drop of `x_k`, segment `s..k`.
fn emit_split(
    s: usize,
    k: usize,
    e: usize,
    ops: &mut Vec<Op>,
    mut segment: impl FnMut(usize, usize, &mut Vec<Op>),
) {
    if k == e {
        ops.push(Op::Backward { stage: s });
        return;
    }
    for j in s..k {
        ops.push(Op::Forward { stage: j });
        if j > s {
            ops.push(Op::Drop { activation: j });
        }
    }
    ops.push(Op::Store { activation: k });
    segment(k, e, ops);
    ops.push(Op::Drop { activation: k });
    segment(s, k, ops);
}

/// Least forward time of every segment for every memory size `0..=units`.
struct Table {
    n: usize,
    units: usize,
    sizes: Sizes,
    forward_prefix: Vec<u64>,
    /// `time[(s * (n + 1) + e) * (units + 1) + m]`, `u64::MAX` where nothing fits.
    time: Vec<u64>,
}

const NONE: u64 = u64::MAX;

/// The most cells of the time table (8 bytes each: 256 MiB).
const MAX_CELLS: usize = 1 << 25;

impl Table {
    fn solve(chain: &ChainCosts, budget: usize) -> Option<Table> {
        let n = chain.len();
        let mut unit = chain.input_bytes();
        for s in chain.stages() {
            for bytes in [
                s.output_bytes,
                s.forward_workspace_bytes,
                s.backward_workspace_bytes,
            ] {
                unit = gcd(unit, bytes);
            }
        }
        // The table has `(n + 1)^2` segments of `units + 1` cells each; cap its size too.
        let cap = (MAX_CELLS / ((n + 1) * (n + 1))).clamp(1, Budget::MAX_UNITS);
        let unit = unit.max(budget.div_ceil(cap)).max(1);
        let units = budget / unit;
        let sizes = Sizes::in_units(chain, unit);
        let mut forward_prefix = vec![0u64; n + 1];
        for (i, s) in chain.stages().iter().enumerate() {
            // ChainCosts bounds the sum of all times, so this does not overflow.
            forward_prefix[i + 1] = forward_prefix[i] + s.forward_time;
        }
        let width = units + 1;
        let mut table = Table {
            n,
            units,
            sizes,
            forward_prefix,
            time: vec![NONE; (n + 1) * (n + 1) * width],
        };
        for len in 1..=n {
            for s in 0..=n - len {
                let e = s + len;
                for m in 0..=units {
                    let best = table.best(s, e, m).map_or(NONE, |(time, _)| time);
                    let at = table.at(s, e, m);
                    table.time[at] = best;
                }
            }
        }
        (table.time[table.at(0, n, units)] != NONE).then_some(table)
    }

    fn at(&self, s: usize, e: usize, m: usize) -> usize {
        self.sizes.index(s, e) * (self.units + 1) + m
    }

    /// The least time of segment `s..e` in `m` units and the split reaching it, from the
    /// shorter segments already in the table.
    fn best(&self, s: usize, e: usize, m: usize) -> Option<(u64, usize)> {
        let sizes = &self.sizes;
        let g = sizes.gradient(e);
        if e == s + 1 {
            return (g + sizes.backward_peak[s] <= m).then_some((0, e));
        }
        let held = m.checked_sub(sizes.activation[s])?;
        let floor = self.forward_prefix[e - 1] - self.forward_prefix[s];
        let mut best: Option<(u64, usize)> = None;
        let mut sweep = 0;
        for k in s + 1..e {
            sweep = sweep.max(g + sizes.forward_peak(s, k - 1));
            if sweep > m {
                break; // longer sweeps only peak higher
            }
            let (upper, lower) = (self.time[self.at(k, e, held)], self.time[self.at(s, k, m)]);
            if upper == NONE || lower == NONE {
                continue;
            }
            let time = self.forward_prefix[k] - self.forward_prefix[s] + upper + lower;
            if time == floor {
                // Every x_j of the segment computed once: nothing is faster, and an earlier
                // split would have returned already, so this is still the first best split.
                return Some((time, k));
            }
            if best.map_or(true, |(t, _)| time < t) {
                best = Some((time, k));
            }
        }
        best
    }

    fn emit(&self, s: usize, e: usize, m: usize, ops: &mut Vec<Op>) {
        // Only called on segments the table found feasible, so `best` is `Some`.
        let k = self.best(s, e, m).map_or(e, |(_, k)| k);
        let held = m.saturating_sub(self.sizes.activation[s]);
        emit_split(s, k, e, ops, |a, b, ops| {
            let room = if a == s { m } else { held };
            self.emit(a, b, room, ops);
        });
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
