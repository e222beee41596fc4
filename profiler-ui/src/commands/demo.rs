//! `memtrace demo [--out FILE]`: a training-like workload through blockpool's caching allocator
//! on a simulated 80 GiB device, recorded with annotations, written as a trace and reported.
//!
//! The workload: persistent weights and two optimizer moments per layer; per step, activations
//! allocated layer by layer in the forward pass and freed in the backward pass, small scratch
//! buffers that die at once, and a gradient bucket read on a side stream (`record_stream`), over
//! six steps of varying sequence length.

use crate::commands::info;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::file::load_trace;
use blockpool::{
    annotate, format_size, Allocation, AllocatorConfig, CachingAllocator, HistorySettings,
    SimBackend, StreamId,
};
use std::path::Path;

const LAYERS: usize = 24;
const HIDDEN: usize = 4096;
const BATCH: usize = 8;
const BYTES_PER_ELEMENT: usize = 2;
const SEQUENCE_LENGTHS: [usize; 6] = [512, 1024, 768, 1024, 2048, 640];

/// Runs `memtrace demo`, writing the trace to `trace`.
pub fn run(trace: &Path, out: &mut Output) -> anyhow::Result<()> {
    let config = AllocatorConfig::from_env().context("the allocator configuration")?;
    let sim = SimBackend::new(1, 80 << 30);
    let alloc = CachingAllocator::new(sim.clone(), config);
    alloc.record_memory_history(HistorySettings {
        max_entries: 1 << 20,
        ..HistorySettings::default()
    })?;
    out.write("a training-like workload on a simulated 80 GiB device (SimBackend)\n")?;
    // The weights stay allocated until the trace is written: it ends with them live, as a
    // snapshot taken during training would.
    let weights = workload(&alloc, &sim, out)?;
    alloc
        .dump_snapshot(trace)
        .with_context(|| format!("cannot write the trace {}", trace.display()))?;
    drop(weights);
    let loaded = load_trace(trace).context("cannot read back the trace just written")?;
    out.write(&format!("\nwrote {}\n\n", trace.display()))?;
    out.write(&info::render(&info::report(trace, &loaded)))?;
    let shown = trace.display();
    out.write(&format!(
        "\nlook further:\n  memtrace info {shown}\n  memtrace convert {shown} demo.pickle   \
         # PyTorch's viewer (pytorch.org/memory_viz)\n  memtrace convert {shown} demo.json     \
         # Perfetto (ui.perfetto.dev)\n"
    ))?;
    out.flush()?;
    Ok(())
}

fn workload(
    alloc: &CachingAllocator<SimBackend>,
    sim: &SimBackend,
    out: &mut Output,
) -> anyhow::Result<Vec<Allocation<SimBackend>>> {
    let main = StreamId::DEFAULT;
    let side = StreamId(1);
    let mut persistent: Vec<Allocation<SimBackend>> = Vec::new();
    {
        let _init = annotate("init");
        for layer in 0..LAYERS {
            let _layer = annotate(&format!("layer{layer}"));
            for _ in 0..3 {
                // The weight and two Adam moments.
                persistent.push(alloc.allocate(0, HIDDEN * HIDDEN * BYTES_PER_ELEMENT, main)?);
            }
            persistent.push(alloc.allocate(0, HIDDEN * BYTES_PER_ELEMENT, main)?);
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
                activations.push(alloc.allocate(0, tokens * HIDDEN * BYTES_PER_ELEMENT, main)?);
                activations.push(alloc.allocate(
                    0,
                    tokens * 4 * HIDDEN * BYTES_PER_ELEMENT,
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
                    sim.complete_stream(0, side)?; // the all-reduce finished
                }
            }
        }
        let stats = alloc.memory_stats(0)?;
        out.write(&format!(
            "step {step}: seq_len {seq_len:>4}  peak allocated {:>9}  peak reserved {:>9}  \
             device allocs {}\n",
            format_size(stats["allocated_bytes.all.peak"] as u64),
            format_size(stats["reserved_bytes.all.peak"] as u64),
            stats["num_device_alloc"],
        ))?;
    }
    Ok(persistent)
}
