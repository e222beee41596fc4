//! [`Series`]: one value per state of a device (the bytes alive, a memory curve), with the
//! highest value of each block of [`BLOCK`] states kept beside it, so that the highest value of
//! a range of states, and the first state that reaches it, cost the range's blocks and its two
//! ragged ends instead of a read of every state: a column of a ten-million-event window spans
//! thousands of states, and every answer asks this of every column.

use std::ops::Deref;

/// States per block.
pub const BLOCK: usize = 256;

/// Values per state and the highest of each block of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    values: Vec<u64>,
    blocks: Vec<u64>,
}

impl From<Vec<u64>> for Series {
    fn from(values: Vec<u64>) -> Series {
        let blocks = values
            .chunks(BLOCK)
            .map(|block| block.iter().copied().max().unwrap_or(0))
            .collect();
        Series { values, blocks }
    }
}

impl Deref for Series {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        &self.values
    }
}

impl Series {
    /// The first state of `[lo, hi)` where the value is highest, as [`peak_in`] finds it
    /// (`lo` when the range holds no state).
    pub fn peak(&self, lo: usize, hi: usize) -> usize {
        let hi = hi.min(self.values.len());
        let (first_block, end_block) = (lo.div_ceil(BLOCK), hi / BLOCK);
        if lo >= hi || first_block >= end_block {
            return peak_in(&self.values, lo, hi);
        }
        // The best so far: its value, and its state or (when it is a block's) its block.
        let head_end = first_block * BLOCK;
        let mut best = if lo < head_end {
            let state = peak_in(&self.values, lo, head_end);
            (self.values[state], Err(state))
        } else {
            (self.blocks[first_block], Ok(first_block))
        };
        for (&highest, block) in self.blocks[first_block..end_block]
            .iter()
            .zip(first_block..)
        {
            // Only a higher value replaces the best: the first state reaching it wins.
            if highest > best.0 {
                best = (highest, Ok(block));
            }
        }
        let tail = end_block * BLOCK;
        if tail < hi {
            let state = peak_in(&self.values, tail, hi);
            if self.values[state] > best.0 {
                best = (self.values[state], Err(state));
            }
        }
        match best.1 {
            Err(state) => state,
            Ok(block) => peak_in(&self.values, block * BLOCK, (block + 1) * BLOCK),
        }
    }

    /// The highest value of `[lo, hi)`; 0 when the range holds no state.
    pub fn max(&self, lo: usize, hi: usize) -> u64 {
        let hi = hi.min(self.values.len());
        if lo >= hi {
            return 0;
        }
        self.values[self.peak(lo, hi)]
    }
}

/// The first state of `[lo, hi)` where `values` is highest (`lo` when the range is empty), by
/// reading each.
pub fn peak_in(values: &[u64], lo: usize, hi: usize) -> usize {
    let mut best = (lo, None);
    for (s, &v) in values.iter().enumerate().take(hi).skip(lo) {
        if best.1.is_none_or(|b| v > b) {
            best = (s, Some(v));
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocks_find_the_first_peak_reading_every_state_finds() {
        // Few distinct values, so peaks tie within and across blocks; ranges of every shape,
        // on block edges and off them, past the end, and empty.
        let mut next = crate::serve::testing::random(0x2545_f491_4f6c_dd1d);
        for _ in 0..200 {
            let len = next(5 * BLOCK);
            let distinct = 1 + next(6);
            let values: Vec<u64> = (0..len).map(|_| next(distinct) as u64).collect();
            let series = Series::from(values.clone());
            for _ in 0..50 {
                let lo = next(len + 10);
                let hi = lo + next(3 * BLOCK);
                let lo = if next(4) == 0 { lo / BLOCK * BLOCK } else { lo };
                assert_eq!(
                    series.peak(lo, hi),
                    peak_in(&values, lo, hi),
                    "{lo}..{hi} of {len}"
                );
                let max = values.get(lo..hi.min(len)).and_then(|r| r.iter().max());
                assert_eq!(series.max(lo, hi), max.copied().unwrap_or(0));
            }
        }
    }
}
