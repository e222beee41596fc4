//! Stacking the chosen bands over a window's columns: each band as runs of columns at one
//! height, the runs counted without stacking, and the columns a lifetime is alive in.

use super::super::model::Allocation;

/// Finds the columns lifetimes are alive in: `[first, end)` of the columns whose states are
/// `states` (ascending). The states' range is cut into buckets about as many as the columns,
/// each knowing the first column at or after its start, so finding a state's column is a
/// lookup and a search among the few columns of one bucket, whatever the window's width and
/// however far a lifetime reaches.
pub(super) struct ColumnFinder<'s> {
    states: &'s [usize],
    /// The first state.
    base: usize,
    /// log2 of the states a bucket spans.
    shift: u32,
    /// Per bucket: the first column whose state is at or after the bucket's start; one more
    /// entry closes the last bucket.
    starts: Vec<u32>,
}

impl<'s> ColumnFinder<'s> {
    pub(super) fn new(states: &'s [usize]) -> ColumnFinder<'s> {
        let (base, last) = match (states.first(), states.last()) {
            (Some(&first), Some(&last)) => (first, last),
            _ => (0, 0),
        };
        let span = last - base + 1;
        let wanted = states.len().max(1);
        let shift = (span / wanted).max(1).ilog2();
        let buckets = (span >> shift) + 1;
        let mut starts = Vec::with_capacity(buckets + 1);
        let mut column = 0;
        for bucket in 0..=buckets {
            let from = base + (bucket << shift);
            while column < states.len() && states[column] < from {
                column += 1;
            }
            // Columns fit in u32: a window is at most a few thousand wide.
            starts.push(column as u32);
        }
        ColumnFinder {
            states,
            base,
            shift,
            starts,
        }
    }

    /// The columns `a` is alive in.
    pub(super) fn of(&self, a: &Allocation) -> (usize, usize) {
        (self.below(a.start), self.below(a.end))
    }

    /// How many of the states are below `bound`.
    fn below(&self, bound: usize) -> usize {
        if bound <= self.base {
            return 0;
        }
        let bucket = (bound - self.base) >> self.shift;
        let (Some(&lo), Some(&hi)) = (self.starts.get(bucket), self.starts.get(bucket + 1)) else {
            return self.states.len();
        };
        let (lo, hi) = (lo as usize, hi as usize);
        lo + self.states[lo..hi].partition_point(|&s| s < bound)
    }
}

/// The runs [`stack`] would make of `chosen`, in `O(n log width)` instead of the columns they
/// cover: adding a band's size to the columns it covers changes the bytes below from one
/// column to the next only at its two ends, so a band's runs are one plus the columns inside
/// it where the bytes below change, counted in a Fenwick tree of those columns.
pub(super) fn count_runs(spans: &[Allocation], chosen: &[usize], states: &[usize]) -> usize {
    let mut ids = chosen.to_vec();
    ids.sort_unstable();
    // step[c]: the bytes below at column c less those at c - 1 (wrapping); `changes` counts
    // the columns where it is not zero.
    let mut step = vec![0u64; states.len() + 1];
    let mut changes = Fenwick::new(states.len() + 1);
    let mut count = 0;
    let columns = ColumnFinder::new(states);
    for id in ids {
        let a = &spans[id];
        let (c0, c1) = columns.of(a);
        if c0 >= c1 {
            continue;
        }
        count += 1 + changes.count(c0 + 1, c1);
        for (c, delta) in [(c0, a.size), (c1, a.size.wrapping_neg())] {
            // Column 0 starts a run whatever is below it.
            if c == 0 {
                continue;
            }
            let before = step[c] != 0;
            step[c] = step[c].wrapping_add(delta);
            match (before, step[c] != 0) {
                (false, true) => changes.add(c, 1),
                (true, false) => changes.add(c, -1),
                _ => {}
            }
        }
    }
    count
}

/// Counts over positions `0..len`: add at a position, and the sum of a range, each in
/// `O(log len)`.
struct Fenwick {
    tree: Vec<i64>,
}

impl Fenwick {
    fn new(len: usize) -> Fenwick {
        Fenwick {
            tree: vec![0; len + 1],
        }
    }

    fn add(&mut self, position: usize, delta: i64) {
        let mut i = position + 1;
        while i < self.tree.len() {
            self.tree[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// The sum over `0..end`.
    fn prefix(&self, end: usize) -> i64 {
        let mut i = end.min(self.tree.len() - 1);
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }

    /// The sum over `lo..hi`, as a count (never negative: only counts are added).
    fn count(&self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return 0;
        }
        usize::try_from(self.prefix(hi) - self.prefix(lo)).unwrap_or(0)
    }
}

/// Allocations stacked over columns ([`stack`]).
pub(super) struct Stacked {
    /// Each allocation that covers a column, bottom of the stack first: its id and its runs
    /// (`[first column, end column, bytes below it]`).
    pub(super) bands: Vec<(usize, Vec<[u64; 3]>)>,
    /// The ids stacked, ascending.
    pub(super) shown: Vec<usize>,
    /// The runs of all the bands.
    pub(super) runs: usize,
}

/// The `chosen` allocations stacked over the columns showing `states` (which never decrease
/// from column to column), oldest at the bottom. Each band visits only the columns it is alive
/// in: the work is the columns the bands cover, not columns times bands.
pub(super) fn stack(spans: &[Allocation], chosen: &[usize], states: &[usize]) -> Stacked {
    let mut shown = chosen.to_vec();
    // Ids are in order of becoming alive: oldest at the bottom.
    shown.sort_unstable();
    debug_assert!(
        states.windows(2).all(|w| w[0] <= w[1]),
        "column states never decrease"
    );
    let mut below = vec![0u64; states.len()];
    let mut count = 0;
    let mut bands = Vec::with_capacity(shown.len());
    let columns = ColumnFinder::new(states);
    for &id in &shown {
        let a = &spans[id];
        let (c0, c1) = columns.of(a);
        let mut runs: Vec<[u64; 3]> = Vec::new();
        for (c, under) in below.iter_mut().enumerate().take(c1).skip(c0) {
            let c = c as u64;
            match runs.last_mut() {
                Some(run) if run[1] == c && run[2] == *under => run[1] = c + 1,
                _ => runs.push([c, c + 1, *under]),
            }
            *under = under.wrapping_add(a.size);
        }
        if !runs.is_empty() {
            count += runs.len();
            bands.push((id, runs));
        }
    }
    Stacked {
        bands,
        shown,
        runs: count,
    }
}
