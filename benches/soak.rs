//! A soak run: threads sharing one allocator over the simulated device, each doing 1e6
//! operations (allocations of mixed sizes on two streams, frees, a `record_stream` now and
//! then, a snapshot of its statistics), timed in windows of 100,000 operations. A cost per
//! operation that grows with the run (a table that only grows, a list scanned per call) shows
//! as later windows slower than the first; the last column is each window's time over the
//! first's, and the run fails if the slowest window of the second half takes more than twice
//! the median of the first half.
//!
//! ```sh
//! cargo bench --bench soak                 # 4 threads x 1e6 operations
//! cargo bench --bench soak -- 8 2000000    # threads, operations per thread
//! ```

use std::time::{Duration, Instant};

use blockpool::{AllocatorConfig, CachingAllocator, DeviceIndex, SimBackend, StreamId};

const WINDOW: usize = 100_000;
const SIZES: [usize; 6] = [512, 4096, 65_536, 1 << 20, 3 << 20, 12 << 20];

fn worker(
    alloc: &CachingAllocator<SimBackend>,
    sim: &SimBackend,
    t: usize,
    operations: usize,
) -> Vec<Duration> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let streams = [
        StreamId::from_raw(2 * t as u64 + 1),
        StreamId::from_raw(2 * t as u64 + 2),
    ];
    let mut held = Vec::with_capacity(64);
    let mut windows = Vec::new();
    let mut start = Instant::now();
    for op in 1..=operations {
        let roll = next();
        if held.len() < 32 && (held.is_empty() || roll % 8 < 5) {
            let size = SIZES[(roll >> 8) as usize % SIZES.len()];
            let stream = streams[(roll >> 16) as usize % 2];
            let a = alloc
                .allocate(0, size, stream)
                .expect("the device holds the working set");
            if roll % 64 == 0 {
                a.record_stream(streams[0]).expect("a live allocation");
            }
            held.push(a);
        } else {
            let at = (roll >> 8) as usize % held.len();
            drop(held.swap_remove(at));
        }
        if op % 1_000 == 0 {
            for stream in streams {
                sim.complete_stream(DeviceIndex::new(0), stream)
                    .expect("device 0");
            }
        }
        if op % WINDOW == 0 {
            windows.push(start.elapsed());
            start = Instant::now();
        }
    }
    windows
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() {
    let numbers: Vec<usize> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let threads = numbers.first().copied().unwrap_or(4);
    let operations = numbers.get(1).copied().unwrap_or(1_000_000).max(2 * WINDOW);
    let sim = SimBackend::new(1, 1 << 40);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    let start = Instant::now();
    let per_thread: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (alloc, sim) = (&alloc, &sim);
                scope.spawn(move || worker(alloc, sim, t, operations))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker"))
            .collect()
    });
    let total = start.elapsed();
    println!(
        "soak: {threads} threads x {operations} operations in {:.2} s",
        total.as_secs_f64()
    );
    println!("window\tns/op (mean over threads)\tover the first");
    let windows = per_thread[0].len();
    let mean_ns: Vec<f64> = (0..windows)
        .map(|w| {
            let sum: f64 = per_thread.iter().map(|t| t[w].as_secs_f64()).sum();
            sum / threads as f64 * 1e9 / WINDOW as f64
        })
        .collect();
    for (w, ns) in mean_ns.iter().enumerate() {
        println!("{w}\t{ns:.0}\t{:.2}", ns / mean_ns[0]);
    }
    let all: Vec<Duration> = (0..windows)
        .map(|w| per_thread.iter().map(|t| t[w]).max().unwrap_or_default())
        .collect();
    let first_half = median(all[..windows / 2].to_vec());
    let slowest_late = all[windows / 2..].iter().max().copied().unwrap_or_default();
    let ratio = slowest_late.as_secs_f64() / first_half.as_secs_f64();
    println!("slowest window of the second half over the first half's median: {ratio:.2}");
    assert!(
        ratio < 2.0,
        "the cost per operation grew over the run: {ratio:.2}x"
    );
}
