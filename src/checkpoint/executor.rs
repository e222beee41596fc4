//! [`Executor`]: runs a chain of [`Stage`]s forward and backward under any [`Plan`], and
//! checks the plan's memory model against what the caching allocator actually held.
//!
//! Each operation of the plan's schedule is run as the [module docs](super) describe it, and
//! around each one the allocator's own statistics are read (`reset_peak_memory_stats`, then
//! `allocated_bytes` current and peak), so the measured peak is the allocator's, not a
//! re-count of the model's. A stage whose declared sizes lie shows up as the first operation
//! whose measured bytes differ from the prediction ([`Divergence`]); the run still completes
//! and every buffer is freed. [`Executor::measure`] runs a chain once to find its costs.

use std::time::Instant;

use super::chain::{ChainCosts, StageCost};
use super::error::CheckpointError;
use super::plan::Plan;
use super::schedule::Op;
use super::stage::{Loss, Stage, StageContext, StageError};
use crate::allocator::CachingAllocator;
use crate::backend::{Backend, DeviceIndex, StreamId};

/// Which call of the user's code failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pass {
    /// A stage's `forward`.
    Forward,
    /// A stage's `backward`.
    Backward,
    /// The loss's `gradient`.
    Loss,
}

/// Why a run or a measurement stopped. Everything the run held has been freed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The plan was made for a chain of another length than the stages given.
    #[error("the plan is for {planned} stages but {given} stages were given; plan this chain")]
    StageCount {
        /// Stages in the plan's chain.
        planned: usize,
        /// Stages passed to the executor.
        given: usize,
    },
    /// No stages were given to measure.
    #[error("a chain needs at least one stage to run; none were given")]
    NoStages,
    /// A stage or the loss returned an error.
    #[error("{pass:?} of stage {stage} failed: {source}")]
    Stage {
        /// The stage (the chain's length for the loss).
        stage: usize,
        /// Which call failed.
        pass: Pass,
        /// What the user's code reported.
        source: StageError,
    },
    /// The allocator refused to report statistics (the device index is not valid).
    #[error("cannot read the allocator's statistics: {0}")]
    Allocator(#[from] crate::Error),
    /// The plan's schedule needs an activation this run does not hold; a plan from
    /// [`Plan::from_schedule`] never does this for a chain of the right length.
    #[error("operation {position} needs activation x_{activation}, which is not alive")]
    NotAlive {
        /// Index of the operation in the schedule.
        position: usize,
        /// The activation needed.
        activation: usize,
    },
    /// The measured costs do not make a valid chain (they overflow).
    #[error("the measured costs are not a valid chain: {0}")]
    Costs(#[from] CheckpointError),
}

/// The first operation at which the allocator held other bytes than the plan predicted: the
/// sign that some stage's declared sizes are not what it allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the operation in [`Plan::schedule`].
    pub position: usize,
    /// The operation.
    pub op: Op,
    /// Most bytes alive during it, per the model.
    pub predicted_peak_bytes: usize,
    /// Most bytes the allocator held during it (relative to the run's start, the input
    /// counted as the model counts it).
    pub measured_peak_bytes: usize,
    /// Bytes alive after it, per the model.
    pub predicted_after_bytes: usize,
    /// Bytes the allocator held after it.
    pub measured_after_bytes: usize,
}

/// What one run of a plan gave.
#[derive(Debug)]
pub struct Run<T> {
    /// The gradient of the chain's input.
    pub input_gradient: T,
    /// Forward calls per stage outside backward steps (what [`Plan::forward_calls_per_stage`]
    /// predicts).
    pub forward_calls_per_stage: Vec<u64>,
    /// Backward calls per stage: 1 each in a valid run.
    pub backward_calls_per_stage: Vec<u64>,
    /// [`Plan::peak_bytes`].
    pub predicted_peak_bytes: usize,
    /// The allocator's `allocated_bytes` peak over the run, relative to the bytes held before
    /// it, plus the chain's input as the model counts it.
    pub measured_peak_bytes: usize,
    /// The first operation where the allocator disagreed with the model, if any.
    pub divergence: Option<Divergence>,
}

impl<T> Run<T> {
    /// Whether the allocator held more at its peak than the plan predicted: some stage
    /// allocates more than its declared sizes (see [`Run::divergence`] for where).
    pub fn exceeds_prediction(&self) -> bool {
        self.measured_peak_bytes > self.predicted_peak_bytes
    }
}

/// Runs chains of stages through the caching allocator on one device and stream.
///
/// `seed` and `step` key every stage's random stream ([`StageContext::rng`]).
///
/// ```
/// use blockpool::checkpoint::{
///     ChainCosts, Executor, Loss, Planner, Revolve, Stage, StageContext, StageError,
/// };
/// use blockpool::{Allocation, AllocatorConfig, CachingAllocator, SimBackend, StreamId};
///
/// /// A value and the device memory it stands for.
/// struct Tensor(f32, Allocation<SimBackend>);
///
/// /// y = 2x: its output is 512 bytes.
/// struct Double;
/// impl Stage<Tensor, SimBackend> for Double {
///     fn forward(&mut self, ctx: &StageContext<'_, SimBackend>, x: &Tensor) -> Result<Tensor, StageError> {
///         Ok(Tensor(2.0 * x.0, ctx.allocate(512)?))
///     }
///     fn backward(&mut self, ctx: &StageContext<'_, SimBackend>, _: &Tensor, g: &Tensor) -> Result<Tensor, StageError> {
///         Ok(Tensor(2.0 * g.0, ctx.allocate(512)?))
///     }
/// }
/// /// The loss y, whose gradient is 1.
/// struct Sum;
/// impl Loss<Tensor, SimBackend> for Sum {
///     fn gradient(&mut self, ctx: &StageContext<'_, SimBackend>, _: &Tensor) -> Result<Tensor, StageError> {
///         Ok(Tensor(1.0, ctx.allocate(512)?))
///     }
/// }
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// let input = Tensor(1.0, alloc.allocate(0, 512, StreamId::from_raw(1))?);
/// let mut stages: Vec<Box<dyn Stage<Tensor, SimBackend>>> = (0..8).map(|_| Box::new(Double) as _).collect();
/// let chain = ChainCosts::uniform(8, 512)?;
/// let plan = Revolve { slots: 2 }.plan(&chain)?;
/// let run = Executor::new(&alloc, 0, StreamId::from_raw(1)).run(&chain, &plan, &mut stages, &mut Sum, &input)?;
/// assert_eq!(run.input_gradient.0, 256.0); // d(2^8 x)/dx
/// assert_eq!(run.backward_calls_per_stage, vec![1; 8]);
/// assert_eq!(run.measured_peak_bytes, plan.peak_bytes()); // the model is exact here
/// assert!(run.divergence.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Executor<'a, B: Backend> {
    allocator: &'a CachingAllocator<B>,
    device: DeviceIndex,
    stream: StreamId,
    seed: u64,
    step: u64,
}

/// Allocator byte counts as the model counts them: from the run's origin.
struct Meter<'a, B: Backend> {
    allocator: &'a CachingAllocator<B>,
    device: DeviceIndex,
    origin: i64,
}

impl<B: Backend> Meter<'_, B> {
    /// Resets the peak so that the next [`Meter::read`] covers what happens from now.
    fn start(&self) -> Result<(), ExecError> {
        Ok(self.allocator.reset_peak_memory_stats(self.device)?)
    }

    /// (peak since `start`, current), in bytes from the origin.
    fn read(&self) -> Result<(usize, usize), ExecError> {
        let stat = self
            .allocator
            .device_stats(self.device)?
            .allocated_bytes
            .all;
        let relative = |bytes: i64| usize::try_from(bytes - self.origin).unwrap_or(0);
        Ok((relative(stat.peak), relative(stat.current)))
    }
}

fn nanos(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl<'a, B: Backend> Executor<'a, B> {
    /// An executor on `device` and `stream` of `allocator`, seed 0, step 0.
    pub fn new(
        allocator: &'a CachingAllocator<B>,
        device: impl Into<DeviceIndex>,
        stream: StreamId,
    ) -> Self {
        Executor {
            allocator,
            device: device.into(),
            stream,
            seed: 0,
            step: 0,
        }
    }

    /// Sets the seed of every stage's random stream.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the training step (part of every random stream's key).
    pub fn step(mut self, step: u64) -> Self {
        self.step = step;
        self
    }

    fn context(&self, stage: usize) -> StageContext<'a, B> {
        StageContext::new(
            self.allocator,
            self.device,
            self.stream,
            self.seed,
            self.step,
            stage,
        )
    }

    fn meter(&self, input_bytes: usize) -> Result<Meter<'a, B>, ExecError> {
        let current = self
            .allocator
            .device_stats(self.device)?
            .allocated_bytes
            .all
            .current;
        let input = i64::try_from(input_bytes).unwrap_or(i64::MAX);
        Ok(Meter {
            allocator: self.allocator,
            device: self.device,
            origin: current.saturating_sub(input),
        })
    }

    /// Runs `stages` forward and backward under `plan` (made for `chain`) from `input`, with
    /// `loss` at the end, and returns the input's gradient, the calls made and the peaks.
    ///
    /// The caller owns `input` (counted as `x_0`, as the model counts it, whether or not it
    /// came from this allocator) and the parameter-gradient accumulators. Nothing else should
    /// allocate on the device meanwhile, or the measured numbers include it.
    pub fn run<T>(
        &self,
        chain: &ChainCosts,
        plan: &Plan,
        stages: &mut [Box<dyn Stage<T, B> + '_>],
        loss: &mut dyn Loss<T, B>,
        input: &T,
    ) -> Result<Run<T>, ExecError> {
        let n = stages.len();
        let planned = plan.forward_calls_per_stage().len();
        if planned != n || chain.len() != n {
            return Err(ExecError::StageCount { planned, given: n });
        }
        let meter = self.meter(chain.input_bytes())?;
        let mut activations: Vec<Option<T>> = (0..n).map(|_| None).collect();
        let mut gradient: Option<T> = None;
        let mut forward_calls = vec![0u64; n];
        let mut backward_calls = vec![0u64; n];
        let mut measured_peak = chain.input_bytes();
        let mut divergence = None;
        for (position, (&op, predicted)) in plan.schedule().iter().zip(plan.memory()).enumerate() {
            meter.start()?;
            match op {
                Op::Forward { stage } => {
                    let x = alive(input, &activations, stage, position)?;
                    let out = stages[stage]
                        .forward(&self.context(stage), x)
                        .map_err(failed(stage, Pass::Forward))?;
                    forward_calls[stage] += 1;
                    activations[stage + 1] = Some(out);
                }
                Op::Store { .. } => {}
                Op::Drop { activation } => {
                    if let Some(slot) = activations.get_mut(activation) {
                        *slot = None;
                    }
                }
                Op::Backward { stage } => {
                    let x = alive(input, &activations, stage, position)?;
                    let ctx = self.context(stage);
                    if stage + 1 == n {
                        let out = stages[stage]
                            .forward(&ctx, x)
                            .map_err(failed(stage, Pass::Forward))?;
                        let grad = loss
                            .gradient(&self.context(n), &out)
                            .map_err(failed(n, Pass::Loss))?;
                        drop(out);
                        gradient = Some(grad);
                    }
                    let grad_output = gradient.as_ref().ok_or(ExecError::NotAlive {
                        position,
                        activation: stage + 1,
                    })?;
                    let grad_input = stages[stage]
                        .backward(&ctx, x, grad_output)
                        .map_err(failed(stage, Pass::Backward))?;
                    backward_calls[stage] += 1;
                    // Assigning frees g_{i+1} only now that g_i exists, as the model says.
                    gradient = Some(grad_input);
                }
            }
            let (peak, after) = meter.read()?;
            measured_peak = measured_peak.max(peak);
            if divergence.is_none()
                && (peak != predicted.peak_bytes || after != predicted.after_bytes)
            {
                divergence = Some(Divergence {
                    position,
                    op,
                    predicted_peak_bytes: predicted.peak_bytes,
                    measured_peak_bytes: peak,
                    predicted_after_bytes: predicted.after_bytes,
                    measured_after_bytes: after,
                });
            }
        }
        let input_gradient = gradient.ok_or(ExecError::NotAlive {
            position: plan.schedule().len(),
            activation: 0,
        })?;
        Ok(Run {
            input_gradient,
            forward_calls_per_stage: forward_calls,
            backward_calls_per_stage: backward_calls,
            predicted_peak_bytes: plan.peak_bytes(),
            measured_peak_bytes: measured_peak,
            divergence,
        })
    }

    /// Runs `stages` once (every forward, the loss, every backward, keeping all activations)
    /// and returns their costs as the allocator saw them: output and workspace bytes from its
    /// `allocated_bytes` current and peak around each call, times in nanoseconds of wall
    /// clock, the input's size from its gradient's. Parameter gradients accumulate as in a
    /// real step.
    pub fn measure<T>(
        &self,
        stages: &mut [Box<dyn Stage<T, B> + '_>],
        loss: &mut dyn Loss<T, B>,
        input: &T,
    ) -> Result<ChainCosts, ExecError> {
        let n = stages.len();
        if n == 0 {
            return Err(ExecError::NoStages);
        }
        let meter = self.meter(0)?;
        let mut costs = vec![StageCost::default(); n];
        let mut outputs: Vec<T> = Vec::with_capacity(n);
        for (stage, cost) in stages.iter_mut().zip(costs.iter_mut()) {
            let index = outputs.len();
            let (_, before) = meter.read()?;
            meter.start()?;
            let started = Instant::now();
            let x = outputs.last().unwrap_or(input);
            let out = stage
                .forward(&self.context(index), x)
                .map_err(failed(index, Pass::Forward))?;
            cost.forward_time = nanos(started);
            let (peak, after) = meter.read()?;
            cost.output_bytes = after.saturating_sub(before);
            cost.forward_workspace_bytes = peak.saturating_sub(after);
            outputs.push(out);
        }
        let mut gradient = match outputs.last() {
            Some(out) => loss
                .gradient(&self.context(n), out)
                .map_err(failed(n, Pass::Loss))?,
            None => return Err(ExecError::NoStages),
        };
        let mut input_bytes = 0;
        for index in (0..n).rev() {
            // x_{index+1} is no longer needed: free it before stage `index`'s backward.
            outputs.pop();
            let x = outputs.last().unwrap_or(input);
            let (_, before) = meter.read()?;
            meter.start()?;
            let started = Instant::now();
            let grad_input = stages[index]
                .backward(&self.context(index), x, &gradient)
                .map_err(failed(index, Pass::Backward))?;
            costs[index].backward_time = nanos(started);
            let (peak, with_both) = meter.read()?;
            costs[index].backward_workspace_bytes = peak.saturating_sub(with_both);
            input_bytes = with_both.saturating_sub(before);
            gradient = grad_input;
        }
        Ok(ChainCosts::new(
            input_bytes,
            costs,
            self.allocator.config(),
        )?)
    }
}

/// `x_activation`: the caller's input for 0, else the run's copy if alive.
fn alive<'t, T>(
    input: &'t T,
    activations: &'t [Option<T>],
    activation: usize,
    position: usize,
) -> Result<&'t T, ExecError> {
    if activation == 0 {
        return Ok(input);
    }
    activations
        .get(activation)
        .and_then(Option::as_ref)
        .ok_or(ExecError::NotAlive {
            position,
            activation,
        })
}

fn failed(stage: usize, pass: Pass) -> impl FnOnce(StageError) -> ExecError {
    move |source| ExecError::Stage {
        stage,
        pass,
        source,
    }
}
