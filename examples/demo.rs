//! A training-like workload through the caching allocator on a simulated 80 GiB device:
//! persistent weights and optimizer state, activations allocated layer by layer in the forward
//! pass and freed in the backward pass, with a side stream, over a few steps of varying
//! sequence length. Prints what the device was asked for against what the program asked for,
//! and PyTorch's `memory_summary` table.
//!
//! Run: `cargo run --release --example demo`

use blockpool::{Allocation, AllocatorConfig, CachingAllocator, SimBackend, StreamId};
use std::error::Error;

const LAYERS: usize = 24;
const HIDDEN: usize = 4096;
const BATCH: usize = 8;
const BYTES_PER_ELEMENT: usize = 2;

fn main() -> Result<(), Box<dyn Error>> {
    let config = AllocatorConfig::from_env()?;
    let sim = SimBackend::new(1, 80 << 30);
    let alloc = CachingAllocator::new(sim.clone(), config);
    let main = StreamId::DEFAULT;
    let side = StreamId(1);

    // Weights and two Adam moments per layer: persistent.
    let mut persistent: Vec<Allocation<SimBackend>> = Vec::new();
    for _ in 0..LAYERS {
        for _ in 0..3 {
            persistent.push(alloc.allocate(0, HIDDEN * HIDDEN * BYTES_PER_ELEMENT, main)?);
        }
        persistent.push(alloc.allocate(0, HIDDEN * BYTES_PER_ELEMENT, main)?); // bias
    }

    for (step, seq_len) in [512usize, 1024, 768, 1024, 2048, 640]
        .into_iter()
        .enumerate()
    {
        let tokens = BATCH * seq_len;
        let mut activations = Vec::new();
        for _ in 0..LAYERS {
            activations.push(alloc.allocate(0, tokens * HIDDEN * BYTES_PER_ELEMENT, main)?);
            activations.push(alloc.allocate(0, tokens * 4 * HIDDEN * BYTES_PER_ELEMENT, main)?);
            // Small scratch buffers (norm statistics) that die at once.
            let scratch = alloc.allocate(0, tokens * 4, main)?;
            drop(scratch);
        }
        // A gradient bucket all-reduced on a side stream: freed from the main stream while the
        // side stream may still read it, so its memory is reused only after the side stream's
        // event completes (checked at the next allocation).
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
        let stats = alloc.memory_stats(0)?;
        println!(
            "step {step}: seq_len {seq_len:>4}  peak allocated {:>9}  peak reserved {:>9}  device allocs {}",
            blockpool::format_size(stats["allocated_bytes.all.peak"] as u64),
            blockpool::format_size(stats["reserved_bytes.all.peak"] as u64),
            stats["num_device_alloc"],
        );
    }
    drop(persistent);
    print!("{}", alloc.memory_summary(0)?);
    Ok(())
}
