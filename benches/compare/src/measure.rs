//! Running one workload through one allocator: fresh instances, repeated runs, the median
//! time, and the allocator's counters from the first run (every run replays the same stream,
//! so they do not change from run to run).

use crate::ops::Workload;
use crate::subjects::{Counters, Subject};
use std::time::Duration;

/// How long and how often to repeat one cell.
#[derive(Clone, Copy, Debug)]
pub struct Repeat {
    /// Runs at least.
    pub min_runs: usize,
    /// Runs at most.
    pub max_runs: usize,
    /// Stop after `min_runs` once the runs took this long together.
    pub budget: Duration,
}

/// One workload through one allocator.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Median nanoseconds per operation.
    pub ns_per_op: f64,
    /// Runs timed.
    pub runs: usize,
    /// The allocator's counters after the first run.
    pub counters: Counters,
    /// Allocations refused for lack of memory, in the first run.
    pub failed_allocations: u64,
}

/// Runs `workload` through fresh instances of `subject` as `repeat` says.
pub fn measure(
    subject: &dyn Subject,
    workload: &Workload,
    repeat: Repeat,
) -> anyhow::Result<Measured> {
    let mut times = Vec::with_capacity(repeat.min_runs);
    let mut counters = Counters::default();
    let mut failed = 0;
    let mut total = Duration::ZERO;
    while times.len() < repeat.max_runs.max(1) {
        let instance = subject.instance(1)?;
        let replay = instance.replay(workload, 0)?;
        if times.is_empty() {
            counters = instance.counters(0);
            failed = replay.failed_allocations;
        }
        drop(instance);
        times.push(replay.elapsed);
        total += replay.elapsed;
        if times.len() >= repeat.min_runs && total >= repeat.budget {
            break;
        }
    }
    let ops = workload.shape.ops.max(1) as f64;
    Ok(Measured {
        ns_per_op: median(&mut times).as_nanos() as f64 / ops,
        runs: times.len(),
        counters,
        failed_allocations: failed,
    })
}

/// The median (the lower middle of an even count).
pub fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    match times.len() {
        0 => Duration::ZERO,
        n => times[(n - 1) / 2],
    }
}
