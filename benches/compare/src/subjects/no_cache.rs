//! (d) no caching: every allocation is a device allocation and every free a device free, on
//! the same simulated device blockpool runs on (its call counters count them). Sizes are
//! rounded up to 512 bytes, the allocation granularity PyTorch assumes; a free of a block
//! used on another stream would need a device synchronization on a real GPU, which the
//! simulation does not charge.

use super::{Counters, Instance, Replay, Subject, DEVICE_CAPACITY_BYTES};
use crate::ops::{Op, Workload};
use blockpool::{Backend, SimBackend};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// No caching.
#[derive(Debug, Default)]
pub struct NoCache;

impl Subject for NoCache {
    fn key(&self) -> &str {
        "d"
    }

    fn describe(&self) -> String {
        "no caching: every allocation a device allocation (SimBackend)".to_string()
    }

    fn instance(&self, devices: usize) -> anyhow::Result<Box<dyn Instance>> {
        Ok(Box::new(NoCacheInstance {
            sim: SimBackend::new(devices, DEVICE_CAPACITY_BYTES),
            reserved: (0..devices).map(|_| Reserved::default()).collect(),
        }))
    }
}

struct NoCacheInstance {
    sim: SimBackend,
    reserved: Vec<Reserved>,
}

/// Bytes a device holds, now and at most.
#[derive(Default)]
struct Reserved {
    current: AtomicU64,
    peak: AtomicU64,
}

impl Instance for NoCacheInstance {
    fn replay(&self, workload: &Workload, device: usize) -> anyhow::Result<Replay> {
        let reserved = self
            .reserved
            .get(device)
            .ok_or_else(|| anyhow::anyhow!("no device {device}"))?;
        let mut slots: Vec<Option<(u64, usize)>> = vec![None; workload.slots];
        let mut failed = 0;
        let start = Instant::now();
        for op in &workload.ops {
            match *op {
                Op::Alloc {
                    slot, size_bytes, ..
                } => {
                    let size = size_bytes.div_ceil(512).saturating_mul(512);
                    match self.sim.alloc_segment(device, size) {
                        Ok(ptr) => {
                            slots[slot as usize] = Some((ptr, size));
                            let now = reserved.current.fetch_add(size as u64, Ordering::Relaxed);
                            reserved
                                .peak
                                .fetch_max(now + size as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.is_out_of_memory() => failed += 1,
                        Err(e) => return Err(e.into()),
                    }
                }
                Op::Free { slot } => {
                    if let Some((ptr, size)) = slots[slot as usize].take() {
                        self.sim.free_segment(device, ptr, size)?;
                        reserved.current.fetch_sub(size as u64, Ordering::Relaxed);
                    }
                }
                Op::RecordStream { .. } | Op::CompleteStream { .. } => {}
            }
        }
        let elapsed = start.elapsed();
        Ok(Replay {
            elapsed,
            failed_allocations: failed,
        })
    }

    fn counters(&self, device: usize) -> Counters {
        let Some(reserved) = self.reserved.get(device) else {
            return Counters::default();
        };
        let current = reserved.current.load(Ordering::Relaxed);
        Counters {
            peak_reserved_bytes: Some(reserved.peak.load(Ordering::Relaxed)),
            reserved_bytes: Some(self.sim.allocated_bytes(device) as u64),
            allocated_bytes: Some(current),
            device_allocs: Some(self.sim.calls(device).segment_allocs),
        }
    }
}
