//! The cost of one operation against how many streams have existed (issue 22, "Many
//! streams"). For each count N, a fresh allocator over the simulated device first caches one
//! 4 KiB block on each of N streams (allocated and freed there, as a program that makes a new
//! stream per call leaves them); then it times:
//! - `hit`: 4 KiB allocated and freed on one stream, numbered after all the others (the last a
//!   scan of them would reach), served from its cache every time;
//! - `new`: 4 KiB allocated and freed on a stream never seen before, each time a new one
//!   (10,000 of them);
//! - `empty_cache`: one call, which releases every cached block;
//! - `hit after`: `hit` again once `empty_cache` has emptied every stream's cache.
//!
//! The time per operation should not depend on N. The last column is each row's `hit` time over
//! the first row's.
//!
//! ```sh
//! cargo bench --bench streams                   # N = 1, 1000, 4000, 16000
//! cargo bench --bench streams -- 1 100000       # other counts
//! ```

use std::time::Instant;

use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};

/// Allocation-and-free pairs timed on stream 0.
const PAIRS: usize = 100_000;
/// Allocation-and-free pairs timed on new streams (each leaves one more stream behind).
const NEW_PAIRS: usize = 10_000;
/// The block size, in bytes.
const SIZE: usize = 4096;

/// Nanoseconds per allocation-and-free pair of `SIZE` bytes, `pairs` of them, on the stream
/// `stream_of(i)` gives.
fn per_pair(
    alloc: &CachingAllocator<SimBackend>,
    pairs: usize,
    stream_of: impl Fn(usize) -> StreamId,
) -> f64 {
    let start = Instant::now();
    for i in 0..pairs {
        let block = alloc
            .allocate(0, SIZE, stream_of(i))
            .expect("a 4 KiB block fits");
        drop(block);
    }
    start.elapsed().as_nanos() as f64 / pairs as f64
}

fn main() {
    let counts: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![1, 1_000, 4_000, 16_000]
    } else {
        counts
    };
    println!(
        "{:>8} {:>12} {:>12} {:>16} {:>15} {:>10}",
        "streams", "hit ns", "new ns", "empty_cache us", "hit after ns", "hit / N=1"
    );
    let mut first = None;
    for n in counts {
        let sim = SimBackend::new(1, 64 << 30);
        let alloc = CachingAllocator::new(sim, AllocatorConfig::default());
        for s in 1..=n as u64 {
            drop(
                alloc
                    .allocate(0, SIZE, StreamId::from_raw(s))
                    .expect("fits"),
            );
        }
        let hit = per_pair(&alloc, PAIRS, |_| StreamId::from_raw(1 << 39));
        let base = 1 << 40;
        let new = per_pair(&alloc, NEW_PAIRS, |i| StreamId::from_raw(base + i as u64));
        let start = Instant::now();
        alloc.empty_cache().expect("empty_cache");
        let empty = start.elapsed().as_secs_f64() * 1e6;
        let after = per_pair(&alloc, PAIRS, |_| StreamId::from_raw(1 << 39));
        let ratio = hit / *first.get_or_insert(hit);
        println!("{n:>8} {hit:>12.0} {new:>12.0} {empty:>16.0} {after:>15.0} {ratio:>10.2}");
    }
}
