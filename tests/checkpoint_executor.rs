//! The checkpoint executor on SimBackend: a small MLP of host f32 math whose activations,
//! gradients and workspaces are allocated through the caching allocator, run under every
//! planner. Gradients must be bit-identical to store-all's, every backward must run once, and
//! the allocator's measured peak must equal the memory model's prediction (the sizes here are
//! declared truly); a stage that lies about its sizes is exposed, and nothing is corrupted.

use blockpool::checkpoint::{
    Budget, ChainCosts, CheckpointError, ExecError, Executor, Loss, Op, Pass, Plan, Planner,
    Revolve, Run, Sqrt, Stage, StageContext, StageCost, StageError, StoreAll, Uniform,
};
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, SimBackend, StreamId};

/// A host vector whose device footprint is an allocation from the caching allocator.
#[derive(Debug)]
struct Tensor {
    data: Vec<f32>,
    _memory: Allocation<SimBackend>,
    _undeclared: Option<Allocation<SimBackend>>,
}

impl Tensor {
    fn new(ctx: &StageContext<'_, SimBackend>, data: Vec<f32>) -> Result<Tensor, StageError> {
        let memory = ctx.allocate(data.len() * 4)?;
        Ok(Tensor {
            data,
            _memory: memory,
            _undeclared: None,
        })
    }
}

/// y = dropout(tanh(W x + b)), with a (step, stage) dropout mask.
struct Dense {
    inputs: usize,
    outputs: usize,
    weights: Vec<f32>,
    bias: Vec<f32>,
    grad_weights: Vec<f32>,
    grad_bias: Vec<f32>,
    forward_workspace_bytes: usize,
    backward_workspace_bytes: usize,
    /// Bytes the forward keeps beside its output without declaring them.
    undeclared_bytes: usize,
    /// Whether the forward frees its workspace before allocating its output (holding less
    /// than the model, which counts both together).
    workspace_first: bool,
}

impl Dense {
    fn new(inputs: usize, outputs: usize, seed: u64) -> Dense {
        let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) / (inputs as f32).sqrt()
        };
        Dense {
            inputs,
            outputs,
            weights: (0..inputs * outputs).map(|_| next()).collect(),
            bias: (0..outputs).map(|_| next()).collect(),
            grad_weights: vec![0.0; inputs * outputs],
            grad_bias: vec![0.0; outputs],
            forward_workspace_bytes: 0,
            backward_workspace_bytes: 0,
            undeclared_bytes: 0,
            workspace_first: false,
        }
    }

    fn cost(&self) -> StageCost {
        StageCost {
            output_bytes: self.outputs * 4,
            forward_workspace_bytes: self.forward_workspace_bytes,
            backward_workspace_bytes: self.backward_workspace_bytes,
            forward_time: (self.inputs * self.outputs) as u64,
            backward_time: 2 * (self.inputs * self.outputs) as u64,
        }
    }

    /// (tanh(W x + b), the dropout scale per output: 0 or 1/0.9).
    fn activate(&self, ctx: &StageContext<'_, SimBackend>, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut rng = ctx.rng();
        let mut tanh = Vec::with_capacity(self.outputs);
        let mut mask = Vec::with_capacity(self.outputs);
        for j in 0..self.outputs {
            let row = &self.weights[j * self.inputs..(j + 1) * self.inputs];
            let z: f32 = row.iter().zip(x).map(|(w, v)| w * v).sum::<f32>() + self.bias[j];
            tanh.push(z.tanh());
            mask.push(if rng.next_f32() < 0.1 { 0.0 } else { 1.0 / 0.9 });
        }
        (tanh, mask)
    }
}

impl Stage<Tensor, SimBackend> for Dense {
    fn forward(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        input: &Tensor,
    ) -> Result<Tensor, StageError> {
        if input.data.len() != self.inputs {
            return Err(StageError::Invalid(format!(
                "expected {} inputs, got {}",
                self.inputs,
                input.data.len()
            )));
        }
        let workspace = ctx.allocate(self.forward_workspace_bytes)?;
        let (tanh, mask) = self.activate(ctx, &input.data);
        let output = tanh.iter().zip(&mask).map(|(t, m)| t * m).collect();
        let mut out = if self.workspace_first {
            drop(workspace);
            Tensor::new(ctx, output)?
        } else {
            // The output is allocated while the workspace is alive, as the model counts it.
            let out = Tensor::new(ctx, output)?;
            drop(workspace);
            out
        };
        if self.undeclared_bytes > 0 {
            out._undeclared = Some(ctx.allocate(self.undeclared_bytes)?);
        }
        Ok(out)
    }

    fn backward(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        input: &Tensor,
        grad_output: &Tensor,
    ) -> Result<Tensor, StageError> {
        let (tanh, mask) = self.activate(ctx, &input.data);
        let mut grad_input = vec![0.0f32; self.inputs];
        let workspace = ctx.allocate(self.backward_workspace_bytes)?;
        for j in 0..self.outputs {
            let dz = grad_output.data[j] * mask[j] * (1.0 - tanh[j] * tanh[j]);
            self.grad_bias[j] += dz;
            let row = j * self.inputs..(j + 1) * self.inputs;
            let rows = self.grad_weights[row.clone()]
                .iter_mut()
                .zip(&self.weights[row]);
            for (((grad_w, w), x), grad_x) in rows.zip(&input.data).zip(&mut grad_input) {
                *grad_w += dz * x;
                *grad_x += w * dz;
            }
        }
        let grad = Tensor::new(ctx, grad_input)?;
        drop(workspace);
        Ok(grad)
    }
}

/// 0.5 * |y - target|^2, so the gradient is y - target.
struct SquaredError {
    target: f32,
}

impl Loss<Tensor, SimBackend> for SquaredError {
    fn gradient(
        &mut self,
        ctx: &StageContext<'_, SimBackend>,
        output: &Tensor,
    ) -> Result<Tensor, StageError> {
        Tensor::new(ctx, output.data.iter().map(|y| y - self.target).collect())
    }
}

/// A chain description: widths in floats (multiples of 128, so every buffer is a whole
/// number of 512-byte blocks) and per-stage workspaces in bytes.
struct Mlp {
    widths: Vec<usize>,
    workspaces: Vec<(usize, usize)>,
}

impl Mlp {
    fn random(seed: u64, stages: usize) -> Mlp {
        let mut state = seed;
        let mut next = move |modulus: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 33) % modulus) as usize
        };
        Mlp {
            widths: (0..=stages).map(|_| 128 * (1 + next(3))).collect(),
            workspaces: (0..stages)
                .map(|_| (512 * next(4), 512 * next(5)))
                .collect(),
        }
    }

    fn stages(&self) -> Vec<Dense> {
        (0..self.workspaces.len())
            .map(|i| {
                let mut layer = Dense::new(self.widths[i], self.widths[i + 1], i as u64 + 1);
                (
                    layer.forward_workspace_bytes,
                    layer.backward_workspace_bytes,
                ) = self.workspaces[i];
                layer
            })
            .collect()
    }

    fn chain(&self) -> ChainCosts {
        let costs = self.stages().iter().map(Dense::cost).collect();
        ChainCosts::new(self.widths[0] * 4, costs, &AllocatorConfig::default()).unwrap()
    }
}

fn allocator() -> CachingAllocator<SimBackend> {
    CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default())
}

/// What one run left: the input gradient's bits, every parameter gradient's bits, the report.
struct Outcome {
    input_gradient: Vec<u32>,
    parameter_gradients: Vec<u32>,
    forward_calls: Vec<u64>,
    backward_calls: Vec<u64>,
    predicted_peak: usize,
    measured_peak: usize,
    diverged: bool,
}

fn run(mlp: &Mlp, mut layers: Vec<Dense>, plan: &Plan) -> Outcome {
    let alloc = allocator();
    let executor = Executor::new(&alloc, 0, StreamId::from_raw(1))
        .seed(42)
        .step(7);
    let input = input_tensor(&alloc, mlp.widths[0]);
    let before = alloc.device_stats(0).unwrap().allocated_bytes.all.current;
    let mut stages = lend(&mut layers);
    let report = execute(&executor, &mlp.chain(), plan, &mut stages, &input).unwrap();
    drop(stages);
    let outcome = Outcome {
        input_gradient: report
            .input_gradient
            .data
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        parameter_gradients: layers
            .iter()
            .flat_map(|l| l.grad_weights.iter().chain(&l.grad_bias))
            .map(|v| v.to_bits())
            .collect(),
        forward_calls: report.forward_calls_per_stage.clone(),
        backward_calls: report.backward_calls_per_stage.clone(),
        predicted_peak: report.predicted_peak_bytes,
        measured_peak: report.measured_peak_bytes,
        diverged: report.divergence.is_some(),
    };
    drop(report);
    // Only the caller's input is left: the run freed every activation and gradient.
    let after = alloc.device_stats(0).unwrap().allocated_bytes.all.current;
    assert_eq!(
        after, before,
        "the run and its report freed everything they allocated"
    );
    outcome
}

/// The layers as the executor takes them, lent so their gradients can be read afterwards.
fn lend(layers: &mut [Dense]) -> Vec<Box<dyn Stage<Tensor, SimBackend> + '_>> {
    layers
        .iter_mut()
        .map(|l| Box::new(l) as Box<dyn Stage<Tensor, SimBackend>>)
        .collect()
}

/// One run of `stages` under `plan` with the tests' loss.
fn execute(
    executor: &Executor<'_, SimBackend>,
    chain: &ChainCosts,
    plan: &Plan,
    stages: &mut [Box<dyn Stage<Tensor, SimBackend> + '_>],
    input: &Tensor,
) -> Result<Run<Tensor>, ExecError> {
    let mut loss = SquaredError { target: 0.25 };
    executor.run(chain, plan, stages, &mut loss, input)
}

/// Every planner, with the most bytes its plan may hold (a budget's, else no limit).
fn planners(chain: &ChainCosts) -> Vec<(Box<dyn Planner>, usize)> {
    let stages = chain.len();
    let mut planners: Vec<Box<dyn Planner>> = vec![Box::new(StoreAll), Box::new(Sqrt)];
    for segments in 1..=stages.min(4) {
        planners.push(Box::new(Uniform::pytorch(segments)));
        planners.push(Box::new(Uniform::balanced(segments)));
    }
    for slots in 1..=4 {
        planners.push(Box::new(Revolve { slots }));
    }
    // Budget from its minimum to store-all's peak: up to 16 stages its schedules may drop a
    // snapshot and recompute it, which the executor must run like any other.
    let most = StoreAll.plan(chain).unwrap().peak_bytes();
    let least = match (Budget { bytes: 0 }).plan(chain) {
        Err(CheckpointError::BudgetTooSmall { minimum, .. }) => minimum,
        other => panic!("a zero budget is too small: {other:?}"),
    };
    let mut planners: Vec<(Box<dyn Planner>, usize)> =
        planners.into_iter().map(|p| (p, usize::MAX)).collect();
    for step in 0..=4 {
        let bytes = least + (most.max(least) - least) * step / 4;
        planners.push((Box::new(Budget { bytes }), bytes));
    }
    planners
}

/// Whether `plan` drops a stored activation before its stage's backward step (to recompute it
/// later): what no persistent schedule does.
fn drops_a_snapshot_early(plan: &Plan) -> bool {
    let mut stored = std::collections::HashSet::new();
    let mut reversed = std::collections::HashSet::new();
    plan.schedule().iter().any(|op| match *op {
        Op::Store { activation } => !stored.insert(activation),
        Op::Backward { stage } => !reversed.insert(stage),
        Op::Drop { activation } => stored.remove(&activation) && !reversed.contains(&activation),
        Op::Forward { .. } => false,
    })
}

#[test]
fn every_planner_gives_store_alls_gradients_bit_for_bit_and_its_predicted_peak() {
    let mut early_drops = 0;
    for (seed, stages) in [(1u64, 1usize), (2, 2), (3, 5), (4, 8), (5, 11), (6, 24)] {
        let mlp = Mlp::random(seed, stages);
        let chain = mlp.chain();
        let reference = run(&mlp, mlp.stages(), &StoreAll.plan(&chain).unwrap());
        assert!(reference.input_gradient.iter().any(|&b| b != 0));
        for (planner, limit) in planners(&chain) {
            let plan = planner.plan(&chain).unwrap();
            let what = format!("{} on seed {seed}, {stages} stages", planner.name());
            let got = run(&mlp, mlp.stages(), &plan);
            assert_eq!(got.input_gradient, reference.input_gradient, "{what}");
            assert_eq!(
                got.parameter_gradients, reference.parameter_gradients,
                "{what}"
            );
            assert_eq!(got.backward_calls, vec![1; stages], "{what}");
            assert_eq!(got.forward_calls, plan.forward_calls_per_stage(), "{what}");
            assert_eq!(got.predicted_peak, plan.peak_bytes(), "{what}");
            assert!(got.measured_peak <= limit, "{what}: within {limit} bytes");
            early_drops += usize::from(drops_a_snapshot_early(&plan));
            // The sizes are declared truly, so the model is exact at every operation.
            assert_eq!(got.measured_peak, got.predicted_peak, "{what}");
            assert!(!got.diverged, "{what}");
        }
    }
    assert!(
        early_drops > 0,
        "some Budget plan recomputes a dropped snapshot, so the executor ran one"
    );
}

#[test]
fn a_stage_that_allocates_more_than_it_declares_is_exposed_and_nothing_is_corrupted() {
    let mlp = Mlp::random(9, 6);
    let chain = mlp.chain();
    let liar = |stages: Vec<Dense>| -> Vec<Dense> {
        let mut stages = stages;
        stages[2].undeclared_bytes = 4096;
        stages
    };
    for (planner, _) in planners(&chain) {
        let plan = planner.plan(&chain).unwrap();
        let what = planner.name();
        let honest = run(&mlp, mlp.stages(), &plan);
        let alloc = allocator();
        let executor = Executor::new(&alloc, 0, StreamId::from_raw(1))
            .seed(42)
            .step(7);
        let input = input_tensor(&alloc, mlp.widths[0]);
        let before = alloc.device_stats(0).unwrap().allocated_bytes.all.current;
        let mut layers = liar(mlp.stages());
        let mut stages = lend(&mut layers);
        let report = execute(&executor, &chain, &plan, &mut stages, &input).unwrap();
        assert!(report.exceeds_prediction(), "{what}");
        assert!(
            report.measured_peak_bytes > report.predicted_peak_bytes,
            "{what}"
        );
        let divergence = report.divergence.expect("the lie is located");
        // The first operation that holds stage 2's output is stage 2's forward (or, when the
        // plan never runs it outside a backward step, stage 2's backward).
        let first_use = plan
            .schedule()
            .iter()
            .position(|op| matches!(op, Op::Forward { stage: 2 } | Op::Backward { stage: 2 }))
            .unwrap();
        assert_eq!(divergence.position, first_use, "{what}");
        assert!(divergence.measured_peak_bytes > divergence.predicted_peak_bytes);
        // The gradients are those of the honest chain: the lie cost memory, not correctness.
        let bits: Vec<u32> = report
            .input_gradient
            .data
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(bits, honest.input_gradient, "{what}");
        drop(report);
        drop(stages);
        assert_eq!(
            alloc.device_stats(0).unwrap().allocated_bytes.all.current,
            before,
            "{what}: every buffer was freed"
        );
    }
}

fn input_tensor(alloc: &CachingAllocator<SimBackend>, width: usize) -> Tensor {
    let data: Vec<f32> = (0..width).map(|k| (k as f32 * 0.37).sin()).collect();
    let memory = alloc.allocate(0, width * 4, StreamId::from_raw(1)).unwrap();
    Tensor {
        data,
        _memory: memory,
        _undeclared: None,
    }
}

#[test]
fn measuring_a_chain_once_gives_its_declared_sizes() {
    let mlp = Mlp::random(11, 7);
    let alloc = allocator();
    let executor = Executor::new(&alloc, 0, StreamId::from_raw(1));
    let input = input_tensor(&alloc, mlp.widths[0]);
    let mut layers = mlp.stages();
    let mut stages = lend(&mut layers);
    let measured = executor
        .measure(&mut stages, &mut SquaredError { target: 0.0 }, &input)
        .unwrap();
    let declared = mlp.chain();
    assert_eq!(measured.input_bytes(), declared.input_bytes());
    let bytes = |s: &StageCost| {
        (
            s.output_bytes,
            s.forward_workspace_bytes,
            s.backward_workspace_bytes,
        )
    };
    assert_eq!(
        measured.stages().iter().map(bytes).collect::<Vec<_>>(),
        declared.stages().iter().map(bytes).collect::<Vec<_>>()
    );
    // The measured chain plans like the declared one.
    let plan = Revolve { slots: 3 }.plan(&measured).unwrap();
    assert_eq!(
        plan.peak_bytes(),
        Revolve { slots: 3 }.plan(&declared).unwrap().peak_bytes()
    );
}

/// A stage that refuses its input.
struct Refuses;

impl Stage<Tensor, SimBackend> for Refuses {
    fn forward(
        &mut self,
        _: &StageContext<'_, SimBackend>,
        _: &Tensor,
    ) -> Result<Tensor, StageError> {
        Err(StageError::Invalid("no".into()))
    }

    fn backward(
        &mut self,
        _: &StageContext<'_, SimBackend>,
        _: &Tensor,
        _: &Tensor,
    ) -> Result<Tensor, StageError> {
        Err(StageError::Invalid("no".into()))
    }
}

#[test]
fn bad_input_is_a_typed_error_and_frees_what_the_run_held() {
    let mlp = Mlp::random(13, 4);
    let chain = mlp.chain();
    let alloc = allocator();
    let executor = Executor::new(&alloc, 0, StreamId::from_raw(1));
    let input = input_tensor(&alloc, mlp.widths[0]);
    let before = alloc.device_stats(0).unwrap().allocated_bytes.all.current;
    let plan = StoreAll.plan(&chain).unwrap();

    // A plan for 4 stages given 3.
    let mut layers = mlp.stages();
    let mut three = lend(&mut layers[..3]);
    let err = execute(&executor, &chain, &plan, &mut three, &input).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::StageCount {
                planned: 4,
                given: 3
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("plan this chain"), "{err}");
    drop(three);

    // A stage that fails midway: the error names it, and what was allocated is freed.
    let mut layers = mlp.stages();
    let (head, tail) = layers.split_at_mut(2);
    let mut stages: Vec<Box<dyn Stage<Tensor, SimBackend> + '_>> = Vec::new();
    for l in head.iter_mut() {
        stages.push(Box::new(l));
    }
    stages.push(Box::new(Refuses));
    stages.push(Box::new(&mut tail[1]));
    let err = execute(&executor, &chain, &plan, &mut stages, &input).unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::Stage {
                stage: 2,
                pass: Pass::Forward,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        alloc.device_stats(0).unwrap().allocated_bytes.all.current,
        before
    );

    // No stages to measure.
    let mut none: Vec<Box<dyn Stage<Tensor, SimBackend>>> = Vec::new();
    let err = executor
        .measure(&mut none, &mut SquaredError { target: 0.0 }, &input)
        .unwrap_err();
    assert!(matches!(err, ExecError::NoStages), "{err}");
}

#[test]
fn a_stage_that_holds_less_than_declared_stays_under_the_prediction() {
    let mlp = Mlp {
        widths: vec![256, 128, 384, 256, 128],
        workspaces: vec![(2048, 512), (4096, 0), (1024, 1536), (512, 512)],
    };
    let chain = mlp.chain();
    for (planner, _) in planners(&chain) {
        let plan = planner.plan(&chain).unwrap();
        let mut layers = mlp.stages();
        for layer in &mut layers {
            layer.workspace_first = true;
        }
        let honest = run(&mlp, mlp.stages(), &plan);
        let frugal = run(&mlp, layers, &plan);
        let what = planner.name();
        assert_eq!(frugal.input_gradient, honest.input_gradient, "{what}");
        assert!(frugal.measured_peak <= frugal.predicted_peak, "{what}");
        assert!(
            frugal.diverged,
            "{what}: the first forward holds less than predicted"
        );
        assert!(!honest.diverged, "{what}");
    }
}
