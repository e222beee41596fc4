//! A training loop that keeps one buffer per step by mistake (as `total_loss += loss` keeps a
//! graph alive in PyTorch), and what blockpool's leak tracking says about it: each step's leak
//! scope, the site that grew between live snapshots, the step detector's findings (the growing
//! site, and the weights set apart as persistent), and the report at shutdown.
//!
//! `cargo run --release --example leaks` (on the simulated device; the output is in README.md).

use blockpool::leak::{GrowthSettings, StepDetector};
use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let alloc = CachingAllocator::new(SimBackend::new(1, 80 << 30), AllocatorConfig::default());
    let weights = alloc.allocate_named(0, 2 << 30, StreamId::DEFAULT, "weights")?;
    let mut detector = StepDetector::new(GrowthSettings::default())?;
    let mut losses = Vec::new();
    let mut before = alloc.live_snapshot(0)?;
    detector.observe("start", before.site_totals());
    for step in 0..4 {
        let scope = alloc.leak_scope(&format!("step {step}"));
        let activations = alloc.allocate(0, 64 << 20, StreamId::DEFAULT)?;
        losses.push(alloc.allocate_named(0, 16 << 20, StreamId::DEFAULT, "loss")?);
        drop(activations);
        println!("{}", scope.finish());
        let after = alloc.live_snapshot(0)?;
        println!("{}", after.compare_to(&before)[0]);
        detector.observe(format!("step {step}"), after.site_totals());
        before = after;
    }
    print!("{}", detector.findings());
    drop(weights);
    // Dropping the allocator instead would log this report through `tracing` at warn level.
    println!("{}", alloc.shutdown());
    Ok(())
}
