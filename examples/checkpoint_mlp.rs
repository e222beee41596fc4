//! A 32-layer MLP trained for real under every checkpointing planner: each plan's forward
//! calls, its predicted peak beside the caching allocator's measured one, and the wall time
//! per step beside the memory model's time (in multiply-adds), set against store-all; and a
//! check that every planner trains the same weights, bit for bit.
//!
//! `cargo run --release --example checkpoint_mlp` (the output is in README.md, Checkpointing,
//! and in benches/README.md, Checkpoint planners).
//!
//! Every layer is `y = dropout(tanh(W x + b))` on a batch of 32 rows of 128 floats, the dropout
//! mask drawn from the executor's (step, stage) random stream so that a recomputed forward is
//! the first one again. Activations, their gradients and the layers' workspaces are real bytes
//! in the memory of a host-backed [`SimBackend`]: each stage reads its input from the device
//! memory the caching allocator handed out and writes its output there, so a block handed out
//! twice would corrupt the numbers. The weights and their gradients are the caller's host
//! arrays, as the memory model leaves parameters out. The loss is half the mean squared error
//! against random targets; six SGD steps run from the same seed under each planner, three
//! times over in turn with the others, and the fastest step after the first counts.
//!
//! It runs on the simulated device only, also where a GPU is present: the layers are host f32
//! code reading and writing device memory, which `SimBackend`'s host-backed mode allows and
//! CUDA device memory does not (a CUDA version needs kernels for the layers, which blockpool,
//! an allocator, does not have). The memory figures are the allocator's either way: the
//! planners and the executor are backend-independent.

use std::error::Error;
use std::time::{Duration, Instant};

use blockpool::checkpoint::{
    Budget, ChainCosts, CheckpointError, Executor, Loss, Plan, Planner, Revolve, Sqrt, Stage,
    StageContext, StageCost, StageError, StoreAll, Uniform,
};
use blockpool::error::format_size;
use blockpool::DeviceIndex;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, SimBackend, StreamId};

const LAYERS: usize = 32;
const WIDTH: usize = 128;
const BATCH: usize = 32;
const STEPS: u64 = 6;
/// Times each plan trains from scratch, in turn with the others; its fastest step counts.
const ROUNDS: usize = 3;
const LEARNING_RATE: f32 = 0.05;
const DROPOUT: f32 = 0.1;
const SEED: u64 = 2026;
const STREAM: StreamId = StreamId::from_raw(1);

/// `len` floats in the simulated device's memory.
struct Tensor {
    memory: Allocation<SimBackend>,
    len: usize,
}

impl Tensor {
    /// Allocates `values.len()` floats through `alloc` and writes `values` there.
    fn store(alloc: &CachingAllocator<SimBackend>, values: &[f32]) -> blockpool::Result<Tensor> {
        let memory = alloc.allocate(0, values.len() * 4, STREAM)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        alloc
            .backend()
            .write(DeviceIndex::new(0), memory.ptr(), &bytes)?;
        Ok(Tensor {
            memory,
            len: values.len(),
        })
    }

    /// Reads the floats back from the device.
    fn load(&self, alloc: &CachingAllocator<SimBackend>) -> blockpool::Result<Vec<f32>> {
        let mut bytes = vec![0u8; self.len * 4];
        alloc
            .backend()
            .read(DeviceIndex::new(0), self.memory.ptr(), &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

/// `y = dropout(tanh(W x + b))` for `BATCH` rows.
struct Dense {
    inputs: usize,
    outputs: usize,
    /// `outputs` rows of `inputs` weights.
    weights: Vec<f32>,
    bias: Vec<f32>,
    grad_weights: Vec<f32>,
    grad_bias: Vec<f32>,
}

impl Dense {
    fn new(inputs: usize, outputs: usize, rng: &mut Lcg) -> Dense {
        let scale = 1.5 / (inputs as f32).sqrt();
        Dense {
            inputs,
            outputs,
            weights: (0..inputs * outputs)
                .map(|_| scale * rng.symmetric())
                .collect(),
            bias: (0..outputs).map(|_| 0.1 * rng.symmetric()).collect(),
            grad_weights: vec![0.0; inputs * outputs],
            grad_bias: vec![0.0; outputs],
        }
    }

    /// What the memory model needs to know: the output, and one `BATCH x outputs` workspace
    /// each way (pre-activations forward, their gradient backward). Times in multiply-adds.
    fn cost(&self) -> StageCost {
        let activation = BATCH * self.outputs * 4;
        let macs = (BATCH * self.inputs * self.outputs) as u64;
        StageCost {
            output_bytes: activation,
            forward_workspace_bytes: activation,
            backward_workspace_bytes: activation,
            forward_time: macs,
            // The backward re-runs the forward's product, then two products of its own.
            backward_time: 3 * macs,
        }
    }

    /// `W x + b` for every row of `x`.
    fn affine(&self, x: &[f32]) -> Vec<f32> {
        let mut z = Vec::with_capacity(BATCH * self.outputs);
        for row in x.chunks_exact(self.inputs) {
            for (w, b) in self.weights.chunks_exact(self.inputs).zip(&self.bias) {
                z.push(w.iter().zip(row).map(|(w, x)| w * x).sum::<f32>() + b);
            }
        }
        z
    }

    /// The dropout scale of every output: 0, or `1 / (1 - DROPOUT)`, from this stage's stream.
    fn mask(&self, ctx: &StageContext<'_, SimBackend>) -> Vec<f32> {
        let mut rng = ctx.rng();
        (0..BATCH * self.outputs)
            .map(|_| {
                if rng.next_f32() < DROPOUT {
                    0.0
                } else {
                    1.0 / (1.0 - DROPOUT)
                }
            })
            .collect()
    }
}

impl Stage<Tensor, SimBackend> for Dense {
    fn forward(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        input: &Tensor,
    ) -> Result<Tensor, StageError> {
        let alloc = ctx.allocator();
        let x = input.load(alloc)?;
        // The pre-activations go to a device workspace, as a GEMM would write them.
        let workspace = Tensor::store(alloc, &self.affine(&x))?;
        let z = workspace.load(alloc)?;
        let y: Vec<f32> = z
            .iter()
            .zip(self.mask(ctx))
            .map(|(z, m)| z.tanh() * m)
            .collect();
        // The output is allocated while the workspace is alive, as the model counts them.
        let output = Tensor::store(alloc, &y)?;
        drop(workspace);
        Ok(output)
    }

    fn backward(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        input: &Tensor,
        grad_output: &Tensor,
    ) -> Result<Tensor, StageError> {
        let alloc = ctx.allocator();
        let x = input.load(alloc)?;
        let g = grad_output.load(alloc)?;
        // Recompute this stage's forward from its input (the same mask: the same stream).
        let dz: Vec<f32> = self
            .affine(&x)
            .iter()
            .zip(self.mask(ctx))
            .zip(&g)
            .map(|((z, m), g)| {
                let t = z.tanh();
                g * m * (1.0 - t * t)
            })
            .collect();
        let workspace = Tensor::store(alloc, &dz)?;
        let dz = workspace.load(alloc)?;
        let mut grad_input = vec![0.0f32; BATCH * self.inputs];
        for ((dz_row, x_row), gx_row) in dz
            .chunks_exact(self.outputs)
            .zip(x.chunks_exact(self.inputs))
            .zip(grad_input.chunks_exact_mut(self.inputs))
        {
            for (j, &d) in dz_row.iter().enumerate() {
                self.grad_bias[j] += d;
                let row = j * self.inputs..(j + 1) * self.inputs;
                let weights = &self.weights[row.clone()];
                for (((gw, w), x), gx) in self.grad_weights[row]
                    .iter_mut()
                    .zip(weights)
                    .zip(x_row)
                    .zip(gx_row.iter_mut())
                {
                    *gw += d * x;
                    *gx += w * d;
                }
            }
        }
        let grad = Tensor::store(alloc, &grad_input)?;
        drop(workspace);
        Ok(grad)
    }
}

/// Half the mean squared error against `targets`; remembers the last value.
struct SquaredError<'t> {
    targets: &'t [f32],
    value: f32,
}

impl Loss<Tensor, SimBackend> for SquaredError<'_> {
    fn gradient(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        output: &Tensor,
    ) -> Result<Tensor, StageError> {
        let y = output.load(ctx.allocator())?;
        let n = BATCH as f32;
        let diff: Vec<f32> = y.iter().zip(self.targets).map(|(y, t)| y - t).collect();
        self.value = diff.iter().map(|d| d * d).sum::<f32>() / (2.0 * n);
        Ok(Tensor::store(
            ctx.allocator(),
            &diff.iter().map(|d| d / n).collect::<Vec<_>>(),
        )?)
    }
}

/// A small deterministic generator for the weights and the data (64-bit LCG, top bits).
struct Lcg(u64);

impl Lcg {
    /// Uniform in `[-1, 1)`.
    fn symmetric(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

fn layers() -> Vec<Dense> {
    let mut rng = Lcg(SEED);
    (0..LAYERS)
        .map(|_| Dense::new(WIDTH, WIDTH, &mut rng))
        .collect()
}

/// What training under one plan gave.
struct Training {
    measured_peak_bytes: usize,
    /// The fastest step after the first (which also reserves the segments): the least
    /// disturbed by whatever else the machine runs.
    step_time: Duration,
    losses: Vec<f32>,
    /// Every loss, final weight and bias, and the last input gradient, as bits.
    bits: Vec<u32>,
    /// Whether the allocator ever held other bytes than the plan predicted.
    diverged: bool,
}

fn train(chain: &ChainCosts, plan: &Plan) -> Result<Training, Box<dyn Error>> {
    let sim = SimBackend::builder()
        .capacity(1 << 30)
        .host_backed(true)
        .build();
    let alloc = CachingAllocator::new(sim, AllocatorConfig::default());
    let mut rng = Lcg(SEED ^ 0xda7a);
    let data: Vec<f32> = (0..BATCH * WIDTH).map(|_| rng.symmetric()).collect();
    let targets: Vec<f32> = (0..BATCH * WIDTH).map(|_| 0.5 * rng.symmetric()).collect();
    let input = Tensor::store(&alloc, &data)?;
    let mut layers = layers();
    let mut training = Training {
        measured_peak_bytes: 0,
        step_time: Duration::MAX,
        losses: Vec::new(),
        bits: Vec::new(),
        diverged: false,
    };
    let mut input_gradient = Vec::new();
    for step in 0..STEPS {
        let started = Instant::now();
        for layer in &mut layers {
            layer.grad_weights.fill(0.0);
            layer.grad_bias.fill(0.0);
        }
        let mut loss = SquaredError {
            targets: &targets,
            value: 0.0,
        };
        let mut stages: Vec<Box<dyn Stage<Tensor, SimBackend> + '_>> = layers
            .iter_mut()
            .map(|l| Box::new(l) as Box<dyn Stage<Tensor, SimBackend>>)
            .collect();
        let executor = Executor::new(&alloc, 0, STREAM).seed(SEED).step(step);
        let run = executor.run(chain, plan, &mut stages, &mut loss, &input)?;
        drop(stages);
        for layer in &mut layers {
            for (w, g) in layer.weights.iter_mut().zip(&layer.grad_weights) {
                *w -= LEARNING_RATE * g;
            }
            for (b, g) in layer.bias.iter_mut().zip(&layer.grad_bias) {
                *b -= LEARNING_RATE * g;
            }
        }
        if step > 0 {
            training.step_time = training.step_time.min(started.elapsed());
        }
        training.measured_peak_bytes = training.measured_peak_bytes.max(run.measured_peak_bytes);
        training.diverged |= run.divergence.is_some();
        training.losses.push(loss.value);
        input_gradient = run.input_gradient.load(&alloc)?;
    }
    training.bits = training
        .losses
        .iter()
        .chain(layers.iter().flat_map(|l| l.weights.iter().chain(&l.bias)))
        .chain(&input_gradient)
        .map(|v| v.to_bits())
        .collect();
    Ok(training)
}

fn main() -> Result<(), Box<dyn Error>> {
    let costs = layers().iter().map(Dense::cost).collect();
    let chain = ChainCosts::new(BATCH * WIDTH * 4, costs, &AllocatorConfig::default())?;
    let store_all = StoreAll.plan(&chain)?;
    let peak = store_all.peak_bytes();
    let planners: Vec<(String, Box<dyn Planner>)> = vec![
        ("store-all".into(), Box::new(StoreAll)),
        ("uniform, 4 segments".into(), Box::new(Uniform::pytorch(4))),
        (
            format!("sqrt, {} segments", Sqrt::segments(LAYERS)),
            Box::new(Sqrt),
        ),
        ("revolve, 4 slots".into(), Box::new(Revolve { slots: 4 })),
        ("revolve, 2 slots".into(), Box::new(Revolve { slots: 2 })),
        (
            "budget, 1/2 of store-all".into(),
            Box::new(Budget { bytes: peak / 2 }),
        ),
        (
            "budget, 1/4 of store-all".into(),
            Box::new(Budget { bytes: peak / 4 }),
        ),
    ];
    println!(
        "{LAYERS}-layer MLP, {BATCH} x {WIDTH} floats per activation ({}), tanh and dropout \
         {DROPOUT}; {STEPS} SGD steps on random data, seed {SEED}, on the host-backed simulated \
         device",
        format_size((BATCH * WIDTH * 4) as u64)
    );
    println!();
    println!(
        "{:<26} {:>7} {:>11} {:>11} {:>6} {:>9} {:>6} {:>6}  same bits",
        "planner", "forward", "predicted", "measured", "peak", "per step", "time", "model"
    );
    println!(
        "{:<26} {:>7} {:>11} {:>11} {:>6} {:>9} {:>6} {:>6}  as store-all",
        "", "calls", "peak", "peak", "ratio", "(ms)", "ratio", "time"
    );
    let plans: Vec<(&String, Result<Plan, CheckpointError>)> = planners
        .iter()
        .map(|(label, planner)| (label, planner.plan(&chain)))
        .collect();
    // Rounds over every plan in turn, so that whatever else the machine runs slows them alike;
    // each keeps its fastest step, and must train the same bits every round.
    let mut results: Vec<Option<Training>> = plans.iter().map(|_| None).collect();
    for _ in 0..ROUNDS {
        for ((_, plan), result) in plans.iter().zip(&mut results) {
            let Ok(plan) = plan else { continue };
            let training = train(&chain, plan)?;
            match result {
                None => *result = Some(training),
                Some(best) if best.bits != training.bits => {
                    return Err("a plan trained other bits in another round".into())
                }
                Some(best) => best.step_time = best.step_time.min(training.step_time),
            }
        }
    }
    let reference = results[0].as_ref().ok_or("store-all did not run")?;
    for ((label, plan), training) in plans.iter().zip(&results) {
        let (plan, training) = match (plan, training) {
            (Ok(plan), Some(training)) => (plan, training),
            (Err(CheckpointError::BudgetTooSmall { minimum, .. }), _) => {
                println!(
                    "{label:<26} below the least peak, {}",
                    format_size(*minimum as u64)
                );
                continue;
            }
            (Err(e), _) => return Err(e.clone().into()),
            (Ok(_), None) => return Err("a plan did not run".into()),
        };
        let same = if std::ptr::eq(training, reference) {
            "(reference)"
        } else if training.bits == reference.bits {
            "yes"
        } else {
            "NO"
        };
        let check = if training.diverged || training.measured_peak_bytes != plan.peak_bytes() {
            " (measured differs from the model)"
        } else {
            ""
        };
        println!(
            "{label:<26} {:>7} {:>11} {:>11} {:>6.2} {:>9.2} {:>6.2} {:>6.2}  {same}{check}",
            plan.forward_calls(),
            format_size(plan.peak_bytes() as u64),
            format_size(training.measured_peak_bytes as u64),
            training.measured_peak_bytes as f64 / reference.measured_peak_bytes as f64,
            training.step_time.as_secs_f64() * 1e3,
            training.step_time.as_secs_f64() / reference.step_time.as_secs_f64(),
            plan.total_time() as f64 / store_all.total_time() as f64,
        );
    }
    let losses: Vec<String> = reference.losses.iter().map(|l| format!("{l:.6}")).collect();
    println!();
    println!("losses by step (every planner): {}", losses.join(", "));
    Ok(())
}
