//! Segment checkpointing: [`Uniform`] (PyTorch's `checkpoint_sequential` split, or a balanced
//! one) and [`Sqrt`] (Chen et al. 2016), both keeping only segment inputs through the first
//! sweep and recomputing one segment at a time.

use super::chain::ChainCosts;
use super::error::CheckpointError;
use super::plan::Plan;
use super::planner::{reverse_stored, Planner};
use super::schedule::Op;

/// How [`Uniform`] cuts `n` stages into `k` segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Split {
    /// `torch.utils.checkpoint.checkpoint_sequential`'s split: `k - 1` segments of
    /// `n / k` stages (rounded down) and a last segment with everything left, so 9 stages in
    /// 5 segments become `[1, 1, 1, 1, 5]` (pytorch#68423).
    #[default]
    PyTorch,
    /// Segment lengths differ by at most one, the longer ones first: 9 stages in 5 segments
    /// become `[2, 2, 2, 2, 1]`. The last segment is held whole beside every segment input,
    /// so it is the one made shorter.
    Balanced,
}

impl Split {
    /// The segment lengths for `stages` stages in `segments` segments, in chain order.
    ///
    /// Fails with [`CheckpointError::BadSegments`] unless `1 <= segments <= stages` (PyTorch
    /// itself fails on more segments than modules: its segment size becomes 0).
    pub fn lengths(self, stages: usize, segments: usize) -> Result<Vec<usize>, CheckpointError> {
        if segments == 0 || segments > stages {
            return Err(CheckpointError::BadSegments { segments, stages });
        }
        let base = stages / segments;
        Ok(match self {
            Split::PyTorch => {
                let mut lengths = vec![base; segments - 1];
                lengths.push(stages - base * (segments - 1));
                lengths
            }
            Split::Balanced => {
                let longer = stages % segments;
                (0..segments)
                    .map(|s| if s < longer { base + 1 } else { base })
                    .collect()
            }
        })
    }
}

/// Cuts the chain into `segments` segments ([`Split`] says how); the first sweep keeps each
/// segment's input and, as `checkpoint_sequential` does, every activation of the last
/// segment, which is not checkpointed. Backward then recomputes one segment at a time from its
/// input, keeping its activations, and reverses it.
///
/// Forward calls: `n - 1` in the first sweep plus `len - 1` for every checkpointed segment of
/// `len` stages (its last stage's forward runs inside its backward step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Uniform {
    /// The number of segments, `1..=stages`.
    pub segments: usize,
    /// How the stages are cut.
    pub split: Split,
}

impl Uniform {
    /// `segments` segments cut as `checkpoint_sequential` cuts them.
    pub fn pytorch(segments: usize) -> Uniform {
        Uniform {
            segments,
            split: Split::PyTorch,
        }
    }

    /// `segments` segments of lengths that differ by at most one.
    pub fn balanced(segments: usize) -> Uniform {
        Uniform {
            segments,
            split: Split::Balanced,
        }
    }
}

impl Planner for Uniform {
    fn name(&self) -> &'static str {
        "uniform"
    }

    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        let lengths = self.split.lengths(chain.len(), self.segments)?;
        Plan::from_schedule(chain, segment_schedule(chain.len(), &lengths))
    }
}

/// Chen et al.'s sqrt(n) checkpointing ("Training Deep Nets with Sublinear Memory Cost",
/// 2016): a balanced [`Uniform`] split into `ceil(sqrt(n))` segments, so both the kept segment
/// inputs and one segment's activations number about `sqrt(n)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sqrt;

impl Sqrt {
    /// The segment count for `stages` stages: the smallest `k` with `k * k >= stages`.
    pub fn segments(stages: usize) -> usize {
        // Integer search, not f64::sqrt, so no rounding can be off by one (and `isqrt` is
        // newer than the crate's MSRV).
        let (mut low, mut high) = (0usize, stages);
        while low < high {
            let mid = low + (high - low) / 2;
            if mid.checked_mul(mid).is_some_and(|square| square >= stages) {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        low
    }
}

impl Planner for Sqrt {
    fn name(&self) -> &'static str {
        "sqrt"
    }

    fn plan(&self, chain: &ChainCosts) -> Result<Plan, CheckpointError> {
        Uniform::balanced(Sqrt::segments(chain.len())).plan(chain)
    }
}

/// The schedule of segments of `lengths` (summing to `n`), the last one not checkpointed.
fn segment_schedule(n: usize, lengths: &[usize]) -> Vec<Op> {
    let mut starts = Vec::with_capacity(lengths.len());
    let mut start = 0;
    for &len in lengths {
        starts.push(start);
        start += len;
    }
    let last_start = starts.last().copied().unwrap_or(0);
    let mut ops = Vec::with_capacity(6 * n);
    // First sweep: keep segment inputs and the whole last segment, drop the rest as soon as
    // the next stage has read it.
    let kept =
        |activation: usize| activation >= last_start || starts.binary_search(&activation).is_ok();
    for stage in 0..n - 1 {
        ops.push(Op::Forward { stage });
        if kept(stage + 1) {
            ops.push(Op::Store {
                activation: stage + 1,
            });
        }
        if !kept(stage) {
            ops.push(Op::Drop { activation: stage });
        }
    }
    // Then each segment from the last: recompute its activations from its input (the last
    // segment's are all kept already), and reverse it.
    for (segment, &start) in starts.iter().enumerate().rev() {
        let end = start + lengths[segment];
        if segment + 1 < starts.len() {
            for stage in start..end - 1 {
                ops.push(Op::Forward { stage });
                ops.push(Op::Store {
                    activation: stage + 1,
                });
            }
        }
        reverse_stored(&mut ops, start, end);
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::plan::assert_reverses_each_stage_once;
    use crate::checkpoint::StoreAll;

    #[test]
    fn pytorch_split_matches_checkpoint_sequential() {
        // torch.utils.checkpoint.checkpoint_sequential: segment_size = n // k; k - 1
        // checkpointed segments of that size, the rest in the last (pytorch#68423).
        let cases: [(usize, usize, &[usize]); 6] = [
            (9, 5, &[1, 1, 1, 1, 5]),
            (10, 3, &[3, 3, 4]),
            (8, 4, &[2, 2, 2, 2]),
            (7, 1, &[7]),
            (7, 7, &[1; 7]),
            (100, 8, &[12, 12, 12, 12, 12, 12, 12, 16]),
        ];
        for (stages, segments, expected) in cases {
            assert_eq!(
                Split::PyTorch.lengths(stages, segments).unwrap(),
                expected,
                "{stages} stages in {segments} segments"
            );
        }
    }

    #[test]
    fn balanced_split_differs_by_at_most_one_longer_first() {
        assert_eq!(Split::Balanced.lengths(9, 5).unwrap(), [2, 2, 2, 2, 1]);
        assert_eq!(Split::Balanced.lengths(10, 3).unwrap(), [4, 3, 3]);
        assert_eq!(Split::Balanced.lengths(8, 4).unwrap(), [2, 2, 2, 2]);
    }

    #[test]
    fn segment_counts_outside_one_to_stages_are_typed_errors() {
        let chain = ChainCosts::uniform(8, 512).unwrap();
        for segments in [0, 9] {
            let err = Uniform::pytorch(segments).plan(&chain).unwrap_err();
            assert_eq!(
                err,
                CheckpointError::BadSegments {
                    segments,
                    stages: 8
                }
            );
            assert!(
                err.to_string().contains("between 1 and 8 segments"),
                "{err}"
            );
        }
    }

    #[test]
    fn pytorch_split_keeps_segment_inputs_and_the_last_segment() {
        let a = 4096;
        let chain = ChainCosts::uniform(10, a).unwrap();
        let plan = Uniform::pytorch(3).plan(&chain).unwrap(); // [3, 3, 4]
        assert_eq!(plan.kept(), &[0, 3, 6, 7, 8, 9]);
        // The sweep's 9, then 2 per recomputed segment of 3.
        assert_eq!(plan.forward_calls(), 13);
        assert_eq!(
            plan.forward_calls_per_stage(),
            &[2, 2, 1, 2, 2, 1, 1, 1, 1, 0]
        );
        // During the loss: the six kept, x_10 and g_10.
        assert_eq!(plan.peak_bytes(), 8 * a);
        assert_reverses_each_stage_once(&plan, 10, "uniform [3, 3, 4]");

        let balanced = Uniform::balanced(3).plan(&chain).unwrap(); // [4, 3, 3]
        assert_eq!(balanced.kept(), &[0, 4, 7, 8, 9]);
        assert_eq!(balanced.forward_calls(), 9 + 3 + 2);
        // The loss (5 kept + 2) outweighs each segment's backward (kept inputs + 3 + 2).
        assert_eq!(balanced.peak_bytes(), 7 * a);
    }

    #[test]
    fn one_segment_is_store_all_and_single_stage_segments_recompute_nothing() {
        let chain = ChainCosts::uniform(9, 512).unwrap();
        let all = StoreAll.plan(&chain).unwrap();
        for plan in [
            Uniform::pytorch(1).plan(&chain).unwrap(),
            Uniform::pytorch(5).plan(&chain).unwrap(), // [1, 1, 1, 1, 5]
            Uniform::balanced(9).plan(&chain).unwrap(),
        ] {
            assert_eq!(plan.forward_calls(), all.forward_calls());
            assert_eq!(plan.peak_bytes(), all.peak_bytes());
            assert_eq!(plan.kept(), all.kept());
        }
    }

    #[test]
    fn sqrt_uses_ceil_sqrt_balanced_segments() {
        let counts: Vec<usize> = [1, 2, 4, 9, 10, 16, 17, 1000]
            .into_iter()
            .map(Sqrt::segments)
            .collect();
        assert_eq!(counts, [1, 2, 2, 3, 4, 4, 5, 32]);
        let a = 1 << 20;
        let chain = ChainCosts::uniform(100, a).unwrap();
        let plan = Sqrt.plan(&chain).unwrap();
        // Ten segments of ten: the sweep's 99 and 9 for each of nine recomputed segments.
        assert_eq!(plan.forward_calls(), 99 + 9 * 9);
        // At the loss: nine segment inputs, the last segment's ten, x_100 and g_100.
        assert_eq!(plan.peak_bytes(), 21 * a);
        assert!(plan.peak_bytes() * 4 < StoreAll.plan(&chain).unwrap().peak_bytes());
        assert_reverses_each_stage_once(&plan, 100, "sqrt");
    }

    #[test]
    fn every_split_of_small_chains_is_a_valid_schedule_with_the_counted_calls() {
        for stages in 1..=30 {
            let chain = ChainCosts::uniform(stages, 512).unwrap();
            for segments in 1..=stages {
                for split in [Split::PyTorch, Split::Balanced] {
                    let lengths = split.lengths(stages, segments).unwrap();
                    let plan = Uniform { segments, split }.plan(&chain).unwrap();
                    let recomputed: usize = lengths[..segments - 1].iter().map(|l| l - 1).sum();
                    assert_eq!(
                        plan.forward_calls(),
                        (stages - 1 + recomputed) as u64,
                        "{stages} stages, {lengths:?}"
                    );
                    assert_reverses_each_stage_once(&plan, stages, "uniform");
                }
            }
        }
    }
}
