//! The allocators under comparison, behind one small interface: a [`Subject`] makes fresh
//! [`Instance`]s, and an instance replays a workload's operations on one of its devices, timing
//! only the operations (setup and teardown stay outside the clock).
//!
//! - `blockpool.rs`: (a) blockpool with PyTorch's policy and (b) its other configurations;
//! - `cubecl.rs`: (c) cubecl-server's `MemoryManagement` over a storage of fake addresses;
//! - `no_cache.rs`: (d) every allocation a device allocation on the simulated device;
//! - `system.rs`: (e) the system allocator, as the floor for bookkeeping cost.

pub mod blockpool;
pub mod cubecl;
pub mod no_cache;
pub mod system;

use crate::ops::Workload;
use std::time::Duration;

/// Bytes of each simulated device: an 80 GiB accelerator, as an H100.
pub const DEVICE_CAPACITY_BYTES: usize = 80 << 30;

/// An allocator under comparison.
pub trait Subject: Send + Sync {
    /// Short key in the table: `a`, `b1`, `c`, ...
    fn key(&self) -> &str;
    /// What it is, for the legend.
    fn describe(&self) -> String;
    /// A fresh allocator with `devices` devices and nothing cached.
    fn instance(&self, devices: usize) -> anyhow::Result<Box<dyn Instance>>;
}

/// One allocator instance; shared by threads in the contention runs.
pub trait Instance: Send + Sync {
    /// Replays every operation of `workload` on `device` and returns the time the operations
    /// took. Allocations the allocator refuses for lack of memory are counted, not fatal.
    fn replay(&self, workload: &Workload, device: usize) -> anyhow::Result<Replay>;
    /// What `device` has done since the instance was made.
    fn counters(&self, device: usize) -> Counters;
}

/// One replay's timing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Replay {
    /// Wall time of the operations.
    pub elapsed: Duration,
    /// Allocations refused for lack of memory.
    pub failed_allocations: u64,
}

/// What an allocator reports about a device; `None` where it has no such figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Highest bytes held from the device.
    pub peak_reserved_bytes: Option<u64>,
    /// Bytes held from the device now.
    pub reserved_bytes: Option<u64>,
    /// Bytes handed out and not yet freed, as the allocator counts them (after rounding).
    pub allocated_bytes: Option<u64>,
    /// Device allocations made.
    pub device_allocs: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{multi_stream, random, stream_per_call};

    fn every_subject() -> Vec<Box<dyn Subject>> {
        vec![
            Box::new(blockpool::Blockpool::new("a", "").expect("the default configuration")),
            Box::new(
                blockpool::Blockpool::new("b1", "max_split_size_mb:64")
                    .expect("a valid configuration"),
            ),
            Box::new(
                blockpool::Blockpool::new("b3", "expandable_segments:True")
                    .expect("a valid configuration"),
            ),
            Box::new(
                blockpool::Blockpool::new("b4", "stream_reuse:ordered")
                    .expect("a valid configuration"),
            ),
            Box::new(cubecl::Cubecl),
            Box::new(no_cache::NoCache),
            Box::new(system::System),
        ]
    }

    #[test]
    fn every_allocator_runs_every_allocation_and_frees_everything() {
        let workloads = [
            random::build(4 << 20, 2_000, 3),
            multi_stream::build(200, 3),
            stream_per_call::build(3, 20, 3),
        ];
        for subject in every_subject() {
            for workload in &workloads {
                let instance = subject.instance(1).expect("an instance");
                let replay = instance.replay(workload, 0).expect("a replay");
                assert_eq!(
                    replay.failed_allocations,
                    0,
                    "({}) on {}",
                    subject.key(),
                    workload.name
                );
                let counters = instance.counters(0);
                if let Some(allocated) = counters.allocated_bytes {
                    assert_eq!(
                        allocated,
                        0,
                        "({}) left bytes allocated after {}",
                        subject.key(),
                        workload.name
                    );
                }
                if let Some(peak) = counters.peak_reserved_bytes {
                    assert!(
                        peak >= workload.shape.peak_live_bytes,
                        "({}) reserved {peak} bytes at most, less than the {} live at once",
                        subject.key(),
                        workload.shape.peak_live_bytes
                    );
                }
            }
        }
    }

    #[test]
    fn no_cache_makes_one_device_allocation_per_allocation() {
        let workload = random::build(1 << 20, 1_000, 9);
        let instance = no_cache::NoCache.instance(1).expect("an instance");
        instance.replay(&workload, 0).expect("a replay");
        let counters = instance.counters(0);
        assert_eq!(counters.device_allocs, Some(workload.shape.allocations));
        assert_eq!(
            counters.reserved_bytes,
            Some(0),
            "everything went back to the device"
        );
    }

    #[test]
    fn a_bad_device_is_an_error_not_a_panic() {
        let workload = random::build(1 << 20, 10, 1);
        for subject in every_subject().iter().filter(|s| s.key() != "e") {
            let instance = subject.instance(1).expect("an instance");
            assert!(
                instance.replay(&workload, 5).is_err(),
                "({}) accepted device 5",
                subject.key()
            );
        }
    }
}
