//! The cost of call stacks in the history (`Backtraces::Rust`, the plugin's context 2, the
//! Python package's default `stacks="all"`): a 4 KiB allocate and drop with history recording
//! every event's context and call stack, on 1, 2 and 8 threads sharing the allocator.
//! Prints microseconds per pair on each thread (wall time over one thread's pairs).
//!
//! ```sh
//! cargo bench --bench stacks
//! ```

use std::time::Instant;

use blockpool::event::{Backtraces, ContextLevel};
use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};

const PAIRS: usize = 2_000;

fn main() {
    let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings {
            context: ContextLevel::All,
            stacks: Backtraces::Rust,
            ..HistorySettings::default()
        })
        .expect("valid settings");
    // Warm up: the first capture loads the unwinder's tables.
    drop(alloc.allocate(0, 4096, StreamId::DEFAULT));
    println!("threads\tus per allocate+drop pair (Backtraces::Rust)");
    for threads in [1usize, 2, 8] {
        let start = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                let alloc = &alloc;
                scope.spawn(move || {
                    for _ in 0..PAIRS {
                        drop(alloc.allocate(0, 4096, StreamId::DEFAULT).expect("fits"));
                    }
                });
            }
        });
        let us = start.elapsed().as_secs_f64() * 1e6 / PAIRS as f64;
        println!("{threads}\t{us:.1}");
    }
    // Reading the contexts back symbolizes each distinct address once.
    let start = Instant::now();
    let snapshot = alloc.snapshot();
    println!(
        "snapshot of {} events and {} contexts: {:.1} ms",
        snapshot.events.len(),
        snapshot.contexts.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
}
