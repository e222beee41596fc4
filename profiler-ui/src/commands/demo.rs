//! `memtrace demo [--out FILE]`: a training-like workload through blockpool's caching allocator
//! on the first GPU when CUDA is usable (`BLOCKPOOL_BACKEND=cuda|sim` forces the choice), else
//! on a simulated 80 GiB device, recorded with annotations, written as a trace and reported.
//! On a GPU the model is narrowed until its peak, measured first on a simulated device, fits
//! in 80% of the GPU's free memory.
//!
//! The workload: persistent weights and two optimizer moments per layer; per step, activations
//! allocated layer by layer in the forward pass and freed in the backward pass, small scratch
//! buffers that die at once, and a gradient bucket read on a side stream (`record_stream`), over
//! six steps of varying sequence length.

use crate::commands::info;
use crate::format::format_size;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::global::{default_backend_for, DefaultBackend, BACKEND_ENV_VAR};
use blockpool::trace::file::load_trace;
use blockpool::{
    annotate, Allocation, AllocatorConfig, CachingAllocator, DeviceIndex, HistorySettings,
    SimBackend, StreamId,
};
use std::path::Path;

const LAYERS: usize = 24;
/// Hidden sizes tried, widest first: the simulated device runs the first, a GPU the widest
/// whose peak fits.
const WIDTHS: [usize; 7] = [4096, 2048, 1024, 512, 256, 128, 64];
/// Share of a GPU's free memory the demo's peak may reserve.
#[cfg(feature = "cuda")]
const GPU_SHARE: f64 = 0.8;
/// The simulated device, big enough for the widest model's 24.90 GiB peak.
const SIM_CAPACITY: usize = 80 << 30;
const BATCH: usize = 8;
const BYTES_PER_ELEMENT: usize = 2;
const SEQUENCE_LENGTHS: [usize; 6] = [512, 1024, 768, 1024, 2048, 640];

/// Runs `memtrace demo`, writing the trace to `trace`.
pub fn run(trace: &Path, out: &mut Output) -> anyhow::Result<()> {
    let config = AllocatorConfig::from_env().context("the allocator configuration")?;
    let requested = std::env::var(BACKEND_ENV_VAR).ok();
    let backend = default_backend_for(requested.as_deref())?;
    let device = Device::new(backend, &config)?;
    let alloc = CachingAllocator::new(device.backend.clone(), config);
    alloc.record_memory_history(HistorySettings {
        max_entries: 1 << 20,
        ..HistorySettings::default()
    })?;
    out.write(&format!(
        "a training-like workload on {}\n",
        device.description
    ))?;
    // The weights stay allocated until the trace is written: it ends with them live, as a
    // snapshot taken during training would.
    let weights = workload(&alloc, &device, &mut |line| out.write(&line))?;
    alloc
        .dump_snapshot(trace)
        .with_context(|| format!("cannot write the trace {}", trace.display()))?;
    drop(weights);
    let loaded = load_trace(trace).context("cannot read back the trace just written")?;
    out.write(&format!("\nwrote {}\n\n", trace.display()))?;
    out.write(&info::render(&info::report(trace, &loaded)))?;
    let shown = trace.display();
    out.write(&format!(
        "\nlook further:\n  memtrace serve {shown} --open      # the web viewer\n  \
         memtrace summary {shown}           # peaks, fragmentation, top sites\n  \
         memtrace leaks {shown}\n  memtrace convert {shown} demo.pickle   \
         # PyTorch's viewer (pytorch.org/memory_viz)\n  memtrace convert {shown} demo.json     \
         # Perfetto (ui.perfetto.dev)\n  memtrace convert {shown} demo.parquet  \
         # SQL in DuckDB, Polars, Spark (the README's queries)\n"
    ))?;
    out.flush()?;
    Ok(())
}

/// Where the demo runs: the backend, its side stream, and how to say so.
struct Device {
    backend: DefaultBackend,
    /// The stream the gradient bucket is all-reduced on.
    side: StreamId,
    /// Keeps a CUDA side stream alive while the workload uses it.
    #[cfg(feature = "cuda")]
    _cuda_stream: Option<std::sync::Arc<blockpool::cuda::cudarc::driver::CudaStream>>,
    description: String,
    /// The model's hidden size.
    hidden: usize,
}

impl Device {
    /// The demo's device: GPU 0 of a CUDA backend, with the widest model that fits, or a
    /// simulated 80 GiB device (the default simulated backend's 16 GiB would not hold the
    /// widest model's 25 GiB peak).
    fn new(backend: DefaultBackend, config: &AllocatorConfig) -> anyhow::Result<Device> {
        #[cfg(feature = "cuda")]
        if let DefaultBackend::Cuda(cuda) = &backend {
            // The first use of GPU 0 opens it (its primary context): a GPU held by another
            // process fails here.
            let free = blockpool::Backend::mem_get_info(cuda, DeviceIndex::new(0))
                .map_err(|e| {
                    anyhow::anyhow!(
                        "CUDA looks usable, but GPU 0 could not be opened: {e} \
                         ({BACKEND_ENV_VAR}=sim uses the simulated device instead)"
                    )
                })?
                .free_bytes;
            let budget = (free as f64 * GPU_SHARE) as u64;
            let (hidden, peak) = widest_fitting(budget, config)?.ok_or_else(|| {
                anyhow::anyhow!(
                    "GPU 0 has {} free, too little for the demo's smallest model; free some \
                     memory or run it on the simulated device with {BACKEND_ENV_VAR}=sim",
                    format_size(free as u64)
                )
            })?;
            let stream = cuda
                .context(DeviceIndex::new(0))?
                .new_stream()
                .context("cannot create a CUDA stream on GPU 0")?;
            let description = format!(
                "GPU 0 ({}, {}) through CUDA, hidden size {hidden}: its peak of {} on a \
                 simulated device fits in {:.0}% of the {} free",
                cuda.device_name(DeviceIndex::new(0))?,
                format_size(cuda.total_memory_bytes(DeviceIndex::new(0))? as u64),
                format_size(peak),
                GPU_SHARE * 100.0,
                format_size(free as u64),
            );
            return Ok(Device {
                side: blockpool::CudaBackend::stream_id(&stream),
                backend,
                _cuda_stream: Some(stream),
                description,
                hidden,
            });
        }
        // The simulated device runs the widest model; its config needs no sizing run.
        let _ = config;
        drop(backend);
        Ok(Device::simulated(
            WIDTHS[0],
            "a simulated 80 GiB device (SimBackend; no usable GPU, or BLOCKPOOL_BACKEND=sim)",
        ))
    }

    /// A simulated device of [`SIM_CAPACITY`] running a model of `hidden` width.
    fn simulated(hidden: usize, description: &str) -> Device {
        Device {
            backend: DefaultBackend::Sim(SimBackend::new(1, SIM_CAPACITY)),
            side: StreamId::from_raw(1),
            #[cfg(feature = "cuda")]
            _cuda_stream: None,
            description: description.into(),
            hidden,
        }
    }

    /// Marks the side stream's work done: the simulated stream is advanced; a real stream
    /// finishes on its own (the demo queues no kernels).
    fn complete_side_stream(&self) -> anyhow::Result<()> {
        if let DefaultBackend::Sim(sim) = &self.backend {
            sim.complete_stream(DeviceIndex::new(0), self.side)?;
        }
        Ok(())
    }
}

/// The widest model whose peak reserved bytes, measured by running it on a simulated device
/// with the same allocator settings (`config`), is at most `budget`; with that peak.
#[cfg(feature = "cuda")]
fn widest_fitting(budget: u64, config: &AllocatorConfig) -> anyhow::Result<Option<(usize, u64)>> {
    for hidden in WIDTHS {
        let device = Device::simulated(hidden, "sizing run");
        let alloc = CachingAllocator::new(device.backend.clone(), config.clone());
        let weights = workload(&alloc, &device, &mut |_| Ok(()))?;
        let peak = alloc.memory_stats(0)?["reserved_bytes.all.peak"] as u64;
        drop(weights);
        if peak <= budget {
            return Ok(Some((hidden, peak)));
        }
    }
    Ok(None)
}

/// Runs the workload, giving each step's summary line to `report`; returns the allocations
/// that stay (weights, moments, biases).
fn workload(
    alloc: &CachingAllocator<DefaultBackend>,
    device: &Device,
    report: &mut dyn FnMut(String) -> std::io::Result<()>,
) -> anyhow::Result<Vec<Allocation<DefaultBackend>>> {
    let main = StreamId::DEFAULT;
    let hidden = device.hidden;
    let side = device.side;
    let mut persistent: Vec<Allocation<DefaultBackend>> = Vec::new();
    {
        let _init = annotate("init");
        for layer in 0..LAYERS {
            let _layer = annotate(&format!("layer{layer}"));
            for _ in 0..3 {
                // The weight and two Adam moments.
                persistent.push(alloc.allocate(0, hidden * hidden * BYTES_PER_ELEMENT, main)?);
            }
            persistent.push(alloc.allocate(0, hidden * BYTES_PER_ELEMENT, main)?);
        }
    }
    for (step, seq_len) in SEQUENCE_LENGTHS.into_iter().enumerate() {
        let _step = annotate(&format!("step{step}"));
        let tokens = BATCH * seq_len;
        let mut activations = Vec::new();
        {
            let _forward = annotate("forward");
            for layer in 0..LAYERS {
                let _layer = annotate(&format!("layer{layer}"));
                activations.push(alloc.allocate(0, tokens * hidden * BYTES_PER_ELEMENT, main)?);
                activations.push(alloc.allocate(
                    0,
                    tokens * 4 * hidden * BYTES_PER_ELEMENT,
                    main,
                )?);
                // Norm statistics that die at once.
                drop(alloc.allocate(0, tokens * 4, main)?);
            }
        }
        {
            let _backward = annotate("backward");
            // A gradient bucket all-reduced on a side stream: its memory is reused only once
            // the side stream's event completes.
            let bucket = alloc.allocate(0, 25 << 20, main)?;
            bucket.record_stream(side)?;
            drop(bucket);
            while let Some(activation) = activations.pop() {
                let grad = alloc.allocate(0, activation.size(), main)?;
                drop(activation);
                drop(grad);
                if activations.len() == LAYERS {
                    device.complete_side_stream()?; // the all-reduce finished
                }
            }
        }
        let stats = alloc.memory_stats(0)?;
        report(format!(
            "step {step}: seq_len {seq_len:>4}  peak allocated {:>9}  peak reserved {:>9}  \
             device allocs {}\n",
            format_size(stats["allocated_bytes.all.peak"] as u64),
            format_size(stats["reserved_bytes.all.peak"] as u64),
            stats["num_device_alloc"],
        ))?;
    }
    Ok(persistent)
}
