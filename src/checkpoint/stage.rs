//! The user's side of a checkpointed chain: the [`Stage`] trait over the user's tensor type,
//! the [`Loss`] at the chain's end, and the [`StageContext`] both get, which allocates through
//! the caching allocator and hands out the (step, stage) random stream.
//!
//! The executor counts on one contract (the memory model of the [module docs](super)): a
//! stage's `forward` allocates its output and at most its forward workspace (freed before it
//! returns), its `backward` allocates the input gradient and at most its backward workspace,
//! and parameter gradients live in buffers the caller allocated beforehand. The model counts
//! the output (or the input gradient) alive beside the workspace, so a stage that allocates its
//! result before freeing its workspace holds exactly the predicted bytes, and one that frees
//! the workspace first holds less (the prediction is then an upper bound). A stage that
//! allocates more than it declared is not refused; the executor's measured peak exposes it.

use super::rng::StageRng;
use crate::allocator::{Allocation, CachingAllocator};
use crate::backend::{Backend, DeviceIndex, StreamId};

/// What a stage's `forward` or `backward` may use: the allocator, on the executor's device and
/// stream, and the random stream of this stage in this step.
pub struct StageContext<'a, B: Backend> {
    allocator: &'a CachingAllocator<B>,
    device: DeviceIndex,
    stream: StreamId,
    seed: u64,
    step: u64,
    stage: usize,
}

impl<'a, B: Backend> StageContext<'a, B> {
    /// A context for `stage` in training step `step`; the executor makes these.
    pub(crate) fn new(
        allocator: &'a CachingAllocator<B>,
        device: DeviceIndex,
        stream: StreamId,
        seed: u64,
        step: u64,
        stage: usize,
    ) -> Self {
        StageContext {
            allocator,
            device,
            stream,
            seed,
            step,
            stage,
        }
    }

    /// The caching allocator every activation, gradient and workspace comes from.
    pub fn allocator(&self) -> &'a CachingAllocator<B> {
        self.allocator
    }

    /// The device the chain runs on.
    pub fn device(&self) -> DeviceIndex {
        self.device
    }

    /// The stream the chain's work is queued on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Allocates `size_bytes` on the chain's device and stream (the caller's line is the site).
    #[track_caller]
    pub fn allocate(&self, size_bytes: usize) -> crate::Result<Allocation<B>> {
        self.allocator
            .allocate(self.device, size_bytes, self.stream)
    }

    /// The training step being run.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The stage being run (its index in the chain; the loss sees the chain's length).
    pub fn stage(&self) -> usize {
        self.stage
    }

    /// A fresh random stream for this stage in this step: every call, in the first sweep, in
    /// a recompute or inside the backward step, starts the same stream, so a recomputed
    /// forward is bit-identical to the first.
    pub fn rng(&self) -> StageRng {
        StageRng::new(self.seed, self.step, self.stage)
    }
}

/// Why a stage (or the loss) could not run. Returned by the user's code; the executor stops,
/// frees what it holds and reports it with the stage's index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// The allocator refused a buffer (out of memory is retryable after freeing memory).
    #[error("allocation failed: {0}")]
    Allocator(#[from] crate::Error),
    /// The stage's own check failed (shapes that do not match, a value out of range).
    #[error("{0}")]
    Invalid(String),
}

/// One stage of a chain: maps its input activation to its output and, in the backward pass,
/// the output's gradient to the input's, accumulating its parameter gradients.
///
/// `T` is the user's tensor type; it owns its memory (an [`Allocation`] from the context's
/// allocator, freed when dropped). `forward` must be deterministic given its input and
/// [`StageContext::rng`]: checkpointing reruns it and relies on the same output.
pub trait Stage<T, B: Backend> {
    /// Computes the output of `input`, allocating it through `ctx`.
    fn forward(&mut self, ctx: &StageContext<'_, B>, input: &T) -> Result<T, StageError>;

    /// Computes the gradient of `input` from `grad_output` (the gradient of this stage's
    /// output), adding this stage's parameter gradients to the caller-owned accumulators.
    /// Whatever of the forward it needs it recomputes from `input` itself (use the same
    /// [`StageContext::rng`] stream).
    fn backward(
        &mut self,
        ctx: &StageContext<'_, B>,
        input: &T,
        grad_output: &T,
    ) -> Result<T, StageError>;
}

/// The chain's loss: the gradient of the scalar loss with respect to the chain's output.
pub trait Loss<T, B: Backend> {
    /// The gradient of the loss at `output`, the same size as `output`, allocated through
    /// `ctx`.
    fn gradient(&mut self, ctx: &StageContext<'_, B>, output: &T) -> Result<T, StageError>;
}

/// A borrowed stage is a stage: lend a chain to the executor and read its parameter gradients
/// afterwards.
impl<T, B: Backend, S: Stage<T, B> + ?Sized> Stage<T, B> for &mut S {
    fn forward(&mut self, ctx: &StageContext<'_, B>, input: &T) -> Result<T, StageError> {
        (**self).forward(ctx, input)
    }

    fn backward(
        &mut self,
        ctx: &StageContext<'_, B>,
        input: &T,
        grad_output: &T,
    ) -> Result<T, StageError> {
        (**self).backward(ctx, input, grad_output)
    }
}
