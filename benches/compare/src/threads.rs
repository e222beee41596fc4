//! Two threads against one: the same workload replayed by one thread, then by two threads at
//! once on separate devices of one allocator, then by two threads on the same device. Scaling
//! is the two-thread throughput (2 x operations over the slower thread's time) over the
//! one-thread throughput: 2.0 is perfect, 1.0 is no gain.

use crate::measure::median;
use crate::ops::Workload;
use crate::subjects::Subject;
use serde::Serialize;
use std::sync::Barrier;
use std::time::Duration;

/// One allocator's scaling.
#[derive(Clone, Debug, Serialize)]
pub struct Scaling {
    /// The allocator's key.
    pub allocator: String,
    /// The workload each thread replays.
    pub workload: String,
    /// Median nanoseconds per operation, one thread.
    pub one_thread_ns_per_op: f64,
    /// Two threads on devices 0 and 1: throughput over one thread's.
    pub separate_devices: f64,
    /// Two threads both on device 0: throughput over one thread's.
    pub same_device: f64,
}

/// Measures `subject` on `workload`, each figure the median of `runs`.
pub fn measure(subject: &dyn Subject, workload: &Workload, runs: usize) -> anyhow::Result<Scaling> {
    let runs = runs.max(1);
    let mut one = Vec::with_capacity(runs);
    let mut separate = Vec::with_capacity(runs);
    let mut same = Vec::with_capacity(runs);
    for _ in 0..runs {
        let instance = subject.instance(2)?;
        one.push(instance.replay(workload, 0)?.elapsed);
        separate.push(two_threads(subject, workload, [0, 1])?);
        same.push(two_threads(subject, workload, [0, 0])?);
    }
    let one = median(&mut one);
    let scaling = |two: Duration| {
        if two.is_zero() {
            0.0
        } else {
            2.0 * one.as_secs_f64() / two.as_secs_f64()
        }
    };
    Ok(Scaling {
        allocator: subject.key().to_string(),
        workload: workload.name.clone(),
        one_thread_ns_per_op: one.as_nanos() as f64 / workload.shape.ops.max(1) as f64,
        separate_devices: scaling(median(&mut separate)),
        same_device: scaling(median(&mut same)),
    })
}

/// The slower of two threads replaying `workload` at once on `devices` of a fresh instance.
fn two_threads(
    subject: &dyn Subject,
    workload: &Workload,
    devices: [usize; 2],
) -> anyhow::Result<Duration> {
    let instance = subject.instance(2)?;
    let instance = instance.as_ref();
    let barrier = Barrier::new(2);
    let results = std::thread::scope(|scope| {
        let handles = devices.map(|device| {
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                instance.replay(workload, device)
            })
        });
        handles.map(|h| h.join())
    });
    let mut slowest = Duration::ZERO;
    for result in results {
        let replay = result.map_err(|_| anyhow::anyhow!("a replay thread panicked"))??;
        slowest = slowest.max(replay.elapsed);
    }
    Ok(slowest)
}
