//! The segment recursion for long chains, in the manner of Beaumont et al.'s optimal
//! checkpointing for heterogeneous chains (the Rotor solver): to reverse stages `s..e` with
//! `x_s` alive, either `e = s + 1` and the stage's backward step runs, or the schedule sweeps
//! forward from `x_s` to some `x_k` (dropping what lies between), reverses `k..e` with `x_s`
//! held, then reverses `s..k`. Every snapshot is kept until its segment is reversed (Rotor's
//! persistent schedules).
//!
//! Two tables, both over segments:
//!
//! - the least peak of each segment (exact bytes, no memory axis), which names the smallest
//!   budget and gives a schedule when the other table, in coarse units, loses one that fits;
//! - the least forward time of each segment for each memory size, in units of the greatest
//!   common divisor of the chain's byte counts, or coarser units (each size rounded up, so a
//!   plan still fits) when the budget holds more than [`MAX_UNITS`] of them.
//!
//! The time table costs one cell per segment and memory unit, and each cell tries every split:
//! `n^3 / 6` splits per unit. To plan a thousand stages in well under a second, a long chain
//! is cut into groups at its smallest activations (one per stretch of equal length): a segment
//! inside a group may split anywhere, a longer one only at group boundaries. The chain keeps
//! as many groups as [`WORK`] allows with exact units (all its stages when it can), and at
//! least [`GROUPS`]; the number of units is then what the work allows, up to [`MAX_UNITS`].

use super::super::chain::ChainCosts;
use super::super::schedule::Op;

/// The most memory units the time table tracks.
pub(super) const MAX_UNITS: usize = 4096;

/// The fewest groups a chain is cut into (when it has more stages); segments spanning several
/// groups split only at group boundaries.
pub(super) const GROUPS: usize = 96;

/// About how many (segment, split, memory unit) triples the time table may try.
const WORK: usize = 150_000_000;

/// The most cells of the time table (8 bytes each: 256 MiB).
const MAX_CELLS: usize = 1 << 25;

const NONE: u64 = u64::MAX;

/// The chain's rounded byte counts as the recursion uses them, in some unit.
struct Sizes {
    n: usize,
    /// `x_0 ..= x_n` (`x_n` the last stage's output).
    activation: Vec<usize>,
    forward_workspace: Vec<usize>,
    /// The most bytes a lone backward step of stage `s` has alive besides other segments'
    /// snapshots and `g_{s+1}`: `x_s`, `g_s` and the workspace (and the loss, for the last).
    backward_peak: Vec<usize>,
    /// Sparse table of `x_j + x_{j+1} + workspace_j`, the bytes of forward step `j` of a
    /// sweep besides its start: level `l` holds the maximum over `[j, j + 2^l)`.
    step_max: Vec<Vec<usize>>,
}

impl Sizes {
    /// Sizes in units of `unit` bytes, each rounded up, so sums of units never undercount.
    fn in_units(chain: &ChainCosts, unit: usize) -> Sizes {
        let n = chain.len();
        let up = |bytes: usize| bytes.div_ceil(unit);
        let mut activation: Vec<usize> = (0..n)
            .map(|i| up(chain.activation_bytes(i).unwrap_or(0)))
            .collect();
        activation.push(up(chain.stage(n - 1).output_bytes));
        let forward_workspace: Vec<usize> = chain
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
                    let loss = (x + out + forward_workspace[s]).max(x + 2 * out);
                    (proper + out).max(loss)
                } else {
                    proper
                }
            })
            .collect();
        let steps: Vec<usize> = (0..n)
            .map(|j| activation[j] + activation[j + 1] + forward_workspace[j])
            .collect();
        let mut step_max = vec![steps];
        while 1 << step_max.len() <= n {
            let half = 1 << (step_max.len() - 1);
            let last = &step_max[step_max.len() - 1];
            let next = (0..last.len().saturating_sub(half))
                .map(|j| last[j].max(last[j + half]))
                .collect();
            step_max.push(next);
        }
        Sizes {
            n,
            activation,
            forward_workspace,
            backward_peak,
            step_max,
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

    /// The most of `x_j + x_{j+1} + workspace_j` over `j` in `from..to` (`from < to`).
    fn steps_max(&self, from: usize, to: usize) -> usize {
        let level = (usize::BITS - 1 - (to - from).leading_zeros()) as usize;
        let table = &self.step_max[level];
        table[from].max(table[to - (1 << level)])
    }

    /// Peak of the sweep from `x_s` to `x_k` beside gradient `g`: at forward step `j`, `x_s`,
    /// `x_j` (when `j > s`), `x_{j+1}` and the workspace.
    fn sweep_peak(&self, s: usize, k: usize, g: usize) -> usize {
        let first = self.activation[s + 1] + self.forward_workspace[s];
        let rest = if k > s + 1 {
            self.steps_max(s + 1, k)
        } else {
            0
        };
        g + self.activation[s] + first.max(rest)
    }
}

/// Where a segment may split: anywhere inside a group, at group boundaries across groups.
struct Boundaries {
    /// Ascending, `0` first and `n` last.
    at: Vec<usize>,
    /// For each position `0..=n`, the group it starts in (the last group for `n`).
    group: Vec<usize>,
    /// For each position, its index in `at`, if it is a boundary.
    index: Vec<Option<usize>>,
}

impl Boundaries {
    /// Every position a boundary: every split allowed.
    fn everywhere(n: usize) -> Boundaries {
        Boundaries::new(n, (0..=n).collect())
    }

    /// `groups` groups, each boundary at the smallest activation of its stretch of the chain
    /// (the cheapest snapshot there), the first of equals.
    fn at_small_activations(chain: &ChainCosts, groups: usize) -> Boundaries {
        let n = chain.len();
        let mut at = vec![0];
        for g in 1..groups {
            let (from, to) = ((g * n / groups).max(1), ((g + 1) * n / groups).min(n));
            let last = *at.last().unwrap_or(&0);
            let best =
                (from.max(last + 1)..to).min_by_key(|&i| chain.activation_bytes(i).unwrap_or(0));
            if let Some(best) = best {
                at.push(best);
            }
        }
        at.push(n);
        Boundaries::new(n, at)
    }

    fn new(n: usize, at: Vec<usize>) -> Boundaries {
        let mut group = vec![0; n + 1];
        let mut index = vec![None; n + 1];
        for (g, pair) in at.windows(2).enumerate() {
            group[pair[0]..pair[1]].fill(g);
        }
        group[n] = at.len().saturating_sub(2);
        for (i, &p) in at.iter().enumerate() {
            index[p] = Some(i);
        }
        Boundaries { at, group, index }
    }

    /// The splits segment `s..e` may use, ascending.
    fn splits(&self, s: usize, e: usize) -> Splits<'_> {
        if self.group[s] == self.group[e - 1] {
            Splits::Anywhere(s + 1..e)
        } else {
            // Spanning groups: both ends are boundaries.
            let (i, j) = (self.index[s].unwrap_or(0), self.index[e].unwrap_or(0));
            Splits::Boundaries(self.at[(i + 1).min(j)..j].iter())
        }
    }
}

enum Splits<'a> {
    Anywhere(std::ops::Range<usize>),
    Boundaries(std::slice::Iter<'a, usize>),
}

impl Iterator for Splits<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match self {
            Splits::Anywhere(range) => range.next(),
            Splits::Boundaries(iter) => iter.next().copied(),
        }
    }
}

/// The segments the time table holds, each with a dense number.
struct SegmentIndex {
    n: usize,
    /// `(s, e)` of every segment, shortest first.
    order: Vec<(usize, usize)>,
    /// Number of `(s, e)` at `s * (n + 1) + e`, `u32::MAX` for segments not held.
    number: Vec<u32>,
    splits: usize,
}

impl SegmentIndex {
    fn new(boundaries: &Boundaries, n: usize) -> SegmentIndex {
        let mut order = Vec::new();
        let mut splits = 0;
        // Inside each group, every segment; across groups, boundary to boundary.
        for pair in boundaries.at.windows(2) {
            for s in pair[0]..pair[1] {
                for e in s + 1..=pair[1] {
                    order.push((s, e));
                    splits += e - s - 1;
                }
            }
        }
        for (i, &s) in boundaries.at.iter().enumerate() {
            for (j, &e) in boundaries.at.iter().enumerate().skip(i + 2) {
                order.push((s, e));
                splits += j - i - 1;
            }
        }
        order.sort_by_key(|&(s, e)| (e - s, s));
        // n <= 2^16 stages for a dense map: longer chains are grouped before they get here.
        let mut number = vec![u32::MAX; (n + 1) * (n + 1)];
        for (i, &(s, e)) in order.iter().enumerate() {
            number[s * (n + 1) + e] = i as u32;
        }
        SegmentIndex {
            n,
            order,
            number,
            splits,
        }
    }

    fn of(&self, s: usize, e: usize) -> usize {
        self.number[s * (self.n + 1) + e] as usize
    }
}

/// The least peak of every segment in exact bytes and the first split reaching it (`e` for a
/// lone backward step): `least[s * (n + 1) + e]`, `choice` likewise.
pub(super) struct LeastPeaks {
    sizes: Sizes,
    least: Vec<usize>,
    choice: Vec<usize>,
}

impl LeastPeaks {
    /// Every split of every segment, in exact bytes: the exact smallest budget of any
    /// persistent schedule. A split whose sweep alone already peaks at the best found so far
    /// cannot do better, nor can any later one (sweeps only grow), so the search stops there.
    pub(super) fn new(chain: &ChainCosts) -> LeastPeaks {
        let sizes = Sizes::in_units(chain, 1);
        let n = sizes.n;
        let at = |s: usize, e: usize| s * (n + 1) + e;
        let mut least = vec![usize::MAX; (n + 1) * (n + 1)];
        // The same numbers by end, `e * (n + 1) + s`, so both halves of a split are read
        // along a row.
        let mut by_end = vec![usize::MAX; (n + 1) * (n + 1)];
        let mut choice = vec![0; (n + 1) * (n + 1)];
        for len in 1..=n {
            for s in 0..=n - len {
                let e = s + len;
                let g = sizes.gradient(e);
                let (mut best, mut best_k) = (usize::MAX, e);
                if len == 1 {
                    best = g + sizes.backward_peak[s];
                } else {
                    let held = sizes.activation[s];
                    let lower = &least[at(s, s + 1)..at(s, e)];
                    let upper = &by_end[at(e, s + 1)..at(e, e)];
                    // The sweep's first step, to x_{s+1}, holds no x_j besides x_s.
                    let mut sweep = g + held + sizes.activation[s + 1] + sizes.forward_workspace[s];
                    let steps = &sizes.step_max[0][s..e - 1];
                    for (k, ((&low, &up), &step)) in
                        (s + 1..).zip(lower.iter().zip(upper).zip(steps))
                    {
                        if k > s + 1 {
                            sweep = sweep.max(g + held + step);
                        }
                        if sweep >= best {
                            break;
                        }
                        let peak = sweep.max(held + up).max(low);
                        if peak < best {
                            (best, best_k) = (peak, k);
                        }
                    }
                }
                least[at(s, e)] = best;
                by_end[at(e, s)] = best;
                choice[at(s, e)] = best_k;
            }
        }
        LeastPeaks {
            sizes,
            least,
            choice,
        }
    }

    /// The smallest budget any persistent schedule of the whole chain fits.
    pub(super) fn minimum(&self) -> usize {
        self.least[self.sizes.n]
    }

    /// Appends the least-peak schedule of segment `s..e`.
    pub(super) fn emit(&self, s: usize, e: usize, ops: &mut Vec<Op>) {
        let k = self.choice[s * (self.sizes.n + 1) + e];
        emit_split(s, k, e, ops, |s, e, ops| self.emit(s, e, ops));
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

/// Least forward time of every held segment for every memory size `0..=units`.
pub(super) struct Table {
    units: usize,
    sizes: Sizes,
    boundaries: Boundaries,
    segments: SegmentIndex,
    forward_prefix: Vec<u64>,
    /// `time[segment * (units + 1) + m]`, [`NONE`] where nothing fits.
    time: Vec<u64>,
}

impl Table {
    /// The table for `chain` under `budget` bytes, or `None` when in its units no schedule
    /// fits (coarse units can lose one that fits in exact bytes).
    pub(super) fn solve(chain: &ChainCosts, budget: usize) -> Option<Table> {
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
        // As many groups as the work allows with exact units, at least GROUPS.
        let exact_units = (budget / unit.max(1)).clamp(1, MAX_UNITS);
        let groups = [n, 768, 512, 384, 256, 192, 128]
            .into_iter()
            .find(|&g| g <= n && splits_estimate(n, g).saturating_mul(exact_units) <= WORK)
            .unwrap_or(GROUPS)
            .min(n);
        let boundaries = if groups == n {
            Boundaries::everywhere(n)
        } else {
            Boundaries::at_small_activations(chain, groups)
        };
        let segments = SegmentIndex::new(&boundaries, n);
        let by_work = WORK / segments.splits.max(1);
        let by_cells = MAX_CELLS / segments.order.len();
        let cap = by_work.min(by_cells).clamp(1, MAX_UNITS);
        let unit = unit.max(budget.div_ceil(cap)).max(1);
        let units = budget / unit;
        let mut forward_prefix = vec![0u64; n + 1];
        for (i, s) in chain.stages().iter().enumerate() {
            // ChainCosts bounds the sum of all times, so this does not overflow.
            forward_prefix[i + 1] = forward_prefix[i] + s.forward_time;
        }
        let width = units + 1;
        let mut table = Table {
            units,
            sizes: Sizes::in_units(chain, unit),
            time: vec![NONE; segments.order.len() * width],
            boundaries,
            segments,
            forward_prefix,
        };
        let mut best = vec![NONE; width];
        for number in 0..table.segments.order.len() {
            let (s, e) = table.segments.order[number];
            table.fill(s, e, &mut best);
            table.time[number * width..(number + 1) * width].copy_from_slice(&best);
        }
        (table.time(0, n, units) != NONE).then_some(table)
    }

    /// Computes row `s..e` of the table (every memory size) into `best`, split by split: for
    /// each split the sums run along two rows already computed, and only over the sizes
    /// where the split can still win. A row is nonincreasing in memory, so those sizes are a
    /// stretch from the split's least memory (its sweep, and `x_s` held) up to the first size
    /// whose best is at most the split's floor (it computes `x_s..x_{k-1}` twice): that
    /// floor only rises with `k`, and the sweep too, so once the stretch is empty no later
    /// split can win.
    fn fill(&self, s: usize, e: usize, best: &mut [u64]) {
        let sizes = &self.sizes;
        let width = self.units + 1;
        let g = sizes.gradient(e);
        best.fill(NONE);
        if e == s + 1 {
            let need = g + sizes.backward_peak[s];
            if need < width {
                best[need..].fill(0);
            }
            return;
        }
        let held = sizes.activation[s];
        let prefix = &self.forward_prefix;
        let floor = prefix[e - 1] - prefix[s];
        let mut cut = width;
        for k in self.boundaries.splits(s, e) {
            let least_time = floor + prefix[k - 1] - prefix[s];
            while cut > 0 && best[cut - 1] <= least_time {
                cut -= 1;
            }
            let start = sizes.sweep_peak(s, k, g).max(held);
            if start >= cut {
                break;
            }
            let sweep_time = prefix[k] - prefix[s];
            let upper = self.row(k, e);
            let lower = self.row(s, k);
            let stretch = best[start..cut].iter_mut();
            for ((slot, &up), &low) in stretch
                .zip(&upper[start - held..cut - held])
                .zip(&lower[start..cut])
            {
                let time = sweep_time.saturating_add(up).saturating_add(low);
                *slot = (*slot).min(time);
            }
        }
    }

    fn row(&self, s: usize, e: usize) -> &[u64] {
        let width = self.units + 1;
        let at = self.segments.of(s, e) * width;
        &self.time[at..at + width]
    }

    fn time(&self, s: usize, e: usize, m: usize) -> u64 {
        self.time[self.segments.of(s, e) * (self.units + 1) + m]
    }

    /// The first split of segment `s..e` that reaches the table's time for `m` units (`e`
    /// for a lone backward step), read back from the table rather than searched again.
    /// Only asked of feasible cells, whose time some split reaches.
    fn split_of(&self, s: usize, e: usize, m: usize) -> usize {
        let sizes = &self.sizes;
        let target = self.time(s, e, m);
        let (Some(held), false) = (m.checked_sub(sizes.activation[s]), e == s + 1) else {
            return e;
        };
        let g = sizes.gradient(e);
        let prefix = &self.forward_prefix;
        self.boundaries
            .splits(s, e)
            .take_while(|&k| sizes.sweep_peak(s, k, g) <= m)
            .find(|&k| {
                let (upper, lower) = (self.time(k, e, held), self.time(s, k, m));
                upper != NONE && lower != NONE && prefix[k] - prefix[s] + upper + lower == target
            })
            .unwrap_or(e)
    }

    /// Appends the schedule the table found for the whole chain.
    pub(super) fn emit_chain(&self, ops: &mut Vec<Op>) {
        self.emit(0, self.sizes.n, self.units, ops);
    }

    fn emit(&self, s: usize, e: usize, m: usize, ops: &mut Vec<Op>) {
        let k = self.split_of(s, e, m);
        let held = m.saturating_sub(self.sizes.activation[s]);
        emit_split(s, k, e, ops, |a, b, ops| {
            let room = if a == s { m } else { held };
            self.emit(a, b, room, ops);
        });
    }
}

/// About how many splits the table tries per memory unit for `n` stages in `groups` groups:
/// every split of segments across groups, and of segments inside each group.
fn splits_estimate(n: usize, groups: usize) -> usize {
    let cube = |x: usize| x.saturating_mul(x).saturating_mul(x) / 6;
    cube(groups).saturating_add(groups.saturating_mul(cube(n.div_ceil(groups))))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
