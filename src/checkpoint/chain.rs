//! A chain's costs: what each stage's output, workspaces and time cost, with every byte count
//! rounded the way the caching allocator rounds it, so that what a plan predicts is what the
//! allocator will hold.

use super::error::CheckpointError;
use crate::config::AllocatorConfig;
use crate::pool::sizing::round_size;

/// What one stage of a chain costs, as declared or measured, before rounding.
///
/// Stage `i` maps activation `x_i` to `x_{i+1}`; its output is `x_{i+1}`. Times are in one
/// unit of the caller's choice for the whole chain (nanoseconds when measured); only their
/// sums and comparisons matter, and integers keep those exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StageCost {
    /// Bytes of the stage's output activation `x_{i+1}` (also the size of its gradient).
    pub output_bytes: usize,
    /// Bytes of scratch memory the forward pass allocates and frees before it returns.
    pub forward_workspace_bytes: usize,
    /// Bytes of scratch memory the backward pass allocates and frees before it returns,
    /// including whatever it recomputes internally from its input.
    pub backward_workspace_bytes: usize,
    /// Time of one forward evaluation, in the chain's time unit.
    pub forward_time: u64,
    /// Time of one backward step (its own re-run of the forward included), in the chain's
    /// time unit.
    pub backward_time: u64,
}

impl StageCost {
    /// A stage whose output is `output_bytes`, with no workspaces and unit times (forward 1,
    /// backward 2): the uniform chain of the Revolve literature.
    pub fn uniform(output_bytes: usize) -> StageCost {
        StageCost {
            output_bytes,
            forward_workspace_bytes: 0,
            backward_workspace_bytes: 0,
            forward_time: 1,
            backward_time: 2,
        }
    }
}

/// A validated chain: its input's size and each stage's cost, byte counts rounded as the
/// allocator rounds them.
///
/// Rounding follows [`round_size`] under the allocator's configuration: a request below 512
/// bytes takes 512, others round up to a multiple of 512 (or to `roundup_power2_divisions`
/// steps when the configuration sets them). A zero-byte buffer stays zero: the allocator
/// hands out a null handle with no device memory for it. The raw values are kept beside the
/// rounded ones ([`ChainCosts::declared`]).
///
/// Construction checks that the chain has at least one stage and that the planners' numbers
/// stay countable: the sum of all rounded buffers (the input and its gradient; per stage its
/// output, two gradients of that size and both workspaces) fits in a `usize`, and the sum of all
/// times times `stages + 1` fits in a `u64`. A hand-written schedule that goes past either is
/// refused when it is simulated.
///
/// ```
/// use blockpool::checkpoint::{ChainCosts, StageCost};
/// use blockpool::AllocatorConfig;
///
/// let chain = ChainCosts::new(1000, vec![StageCost::uniform(100); 3], &AllocatorConfig::default())?;
/// assert_eq!(chain.len(), 3);
/// assert_eq!(chain.input_bytes(), 1024); // 1000 rounded up to a multiple of 512
/// assert_eq!(chain.stage(0).output_bytes, 512); // below 512 bytes: one 512-byte block
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCosts {
    input_bytes: usize,
    stages: Vec<StageCost>,
    declared_input_bytes: usize,
    declared: Vec<StageCost>,
}

impl ChainCosts {
    /// Validates a chain whose input is `input_bytes` and whose stages cost `stages`, rounding
    /// every byte count as an allocator with `config` would.
    ///
    /// Fails with [`CheckpointError::NoStages`] for an empty chain and
    /// [`CheckpointError::BytesOverflow`] / [`CheckpointError::TimeOverflow`] when the sums
    /// described on [`ChainCosts`] do not fit.
    pub fn new(
        input_bytes: usize,
        stages: Vec<StageCost>,
        config: &AllocatorConfig,
    ) -> Result<ChainCosts, CheckpointError> {
        if stages.is_empty() {
            return Err(CheckpointError::NoStages);
        }
        let round = |bytes: usize| -> Result<usize, CheckpointError> {
            if bytes == 0 {
                return Ok(0);
            }
            round_size(bytes, config).ok_or(CheckpointError::BytesOverflow)
        };
        let rounded_input = round(input_bytes)?;
        let mut rounded = Vec::with_capacity(stages.len());
        // The input and its gradient g_0.
        let mut total_bytes = rounded_input
            .checked_mul(2)
            .ok_or(CheckpointError::BytesOverflow)?;
        let mut total_time = 0u64;
        for stage in &stages {
            let cost = StageCost {
                output_bytes: round(stage.output_bytes)?,
                forward_workspace_bytes: round(stage.forward_workspace_bytes)?,
                backward_workspace_bytes: round(stage.backward_workspace_bytes)?,
                ..*stage
            };
            // An output is alive at most once as an activation and twice as a gradient
            // (the loss gradient and one stage's input gradient never coexist with more).
            for bytes in [
                cost.output_bytes,
                cost.output_bytes,
                cost.output_bytes,
                cost.forward_workspace_bytes,
                cost.backward_workspace_bytes,
            ] {
                total_bytes = total_bytes
                    .checked_add(bytes)
                    .ok_or(CheckpointError::BytesOverflow)?;
            }
            total_time = total_time
                .checked_add(cost.forward_time)
                .and_then(|t| t.checked_add(cost.backward_time))
                .ok_or(CheckpointError::TimeOverflow)?;
            rounded.push(cost);
        }
        // The planners evaluate each stage's forward at most once per later backward step, so
        // their times stay below `stages + 1` times the sum.
        let count = u64::try_from(stages.len()).map_err(|_| CheckpointError::TimeOverflow)?;
        total_time
            .checked_mul(count.saturating_add(1))
            .ok_or(CheckpointError::TimeOverflow)?;
        Ok(ChainCosts {
            input_bytes: rounded_input,
            stages: rounded,
            declared_input_bytes: input_bytes,
            declared: stages,
        })
    }

    /// A uniform chain of `stages` stages whose input and outputs are all `bytes` bytes, with
    /// [`StageCost::uniform`] costs, rounded under the default configuration.
    pub fn uniform(stages: usize, bytes: usize) -> Result<ChainCosts, CheckpointError> {
        ChainCosts::new(
            bytes,
            vec![StageCost::uniform(bytes); stages],
            &AllocatorConfig::default(),
        )
    }

    /// Number of stages (at least one).
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Always `false`: a chain has at least one stage. Present for the `len` convention.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// Bytes of the chain's input `x_0`, rounded.
    pub fn input_bytes(&self) -> usize {
        self.input_bytes
    }

    /// Stage `index`'s costs, rounded. Panics if `index >= len()`, like slice indexing.
    pub fn stage(&self, index: usize) -> &StageCost {
        &self.stages[index]
    }

    /// Every stage's costs, rounded, in chain order.
    pub fn stages(&self) -> &[StageCost] {
        &self.stages
    }

    /// Bytes of activation `x_index`, rounded: the input for 0, else stage `index - 1`'s
    /// output. `None` past the chain's output `x_len()`.
    pub fn activation_bytes(&self, index: usize) -> Option<usize> {
        match index {
            0 => Some(self.input_bytes),
            i => self.stages.get(i - 1).map(|s| s.output_bytes),
        }
    }

    /// The input's size and the stages' costs as given, before rounding.
    pub fn declared(&self) -> (usize, &[StageCost]) {
        (self.declared_input_bytes, &self.declared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_stages_is_a_typed_error() {
        let err = ChainCosts::new(512, Vec::new(), &AllocatorConfig::default()).unwrap_err();
        assert_eq!(err, CheckpointError::NoStages);
        assert!(err.to_string().contains("at least one stage"), "{err}");
    }

    #[test]
    fn bytes_round_like_the_allocator_and_zero_stays_zero() {
        let stage = StageCost {
            output_bytes: 513,
            forward_workspace_bytes: 0,
            backward_workspace_bytes: 1,
            forward_time: 3,
            backward_time: 4,
        };
        let chain = ChainCosts::new(0, vec![stage], &AllocatorConfig::default()).unwrap();
        assert_eq!(
            chain.input_bytes(),
            0,
            "a zero-byte input allocates nothing"
        );
        let got = chain.stage(0);
        assert_eq!(
            (
                got.output_bytes,
                got.forward_workspace_bytes,
                got.backward_workspace_bytes
            ),
            (1024, 0, 512),
            "513 B rounds to 1024 B, 1 B to 512 B, 0 B stays 0"
        );
        assert_eq!((got.forward_time, got.backward_time), (3, 4));
        assert_eq!(chain.declared().1[0].output_bytes, 513);
        assert_eq!(chain.activation_bytes(1), Some(1024));
        assert_eq!(chain.activation_bytes(2), None);
    }

    #[test]
    fn overflowing_sizes_and_times_are_typed_errors() {
        let config = AllocatorConfig::default();
        let huge = StageCost::uniform(usize::MAX / 2);
        assert_eq!(
            ChainCosts::new(0, vec![huge; 2], &config),
            Err(CheckpointError::BytesOverflow)
        );
        let slow = StageCost {
            forward_time: u64::MAX / 2,
            ..StageCost::uniform(512)
        };
        assert_eq!(
            ChainCosts::new(0, vec![slow; 3], &config),
            Err(CheckpointError::TimeOverflow)
        );
    }
}
