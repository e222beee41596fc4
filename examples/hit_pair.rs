//! The allocator's hot path alone, for instruction counts: one warm-up pair, then N pairs of a
//! 4 KiB `allocate` served from the cache and its drop, on one stream of the simulated device.
//!
//! Wall-clock benchmarks cannot tell a few percent apart on a shared machine; instruction
//! counts can. Count the pairs' instructions as the program with N pairs minus the same
//! program with none (`benches/README.md`):
//!
//! ```sh
//! cargo build --profile bench --example hit_pair
//! valgrind --tool=callgrind target/release/examples/hit_pair 0
//! valgrind --tool=callgrind target/release/examples/hit_pair 100000
//! ```

use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let pairs: u64 = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|e| format!("the number of pairs must be a whole number, not {arg:?}: {e}"))?,
        None => return Err("usage: hit_pair PAIRS (for example 100000)".into()),
    };
    let alloc = CachingAllocator::new(SimBackend::new(1, 80 << 30), AllocatorConfig::default());
    let dev = alloc.device(0)?;
    drop(dev.allocate(4096, StreamId::DEFAULT)?);
    for _ in 0..pairs {
        let block = dev.allocate(4096, StreamId::DEFAULT)?;
        std::hint::black_box(&block);
    }
    Ok(())
}
