//! (a) and (b): blockpool's `CachingAllocator` on `SimBackend` (fake addresses), driven through
//! owning `Allocation` handles as a Rust user holds them: dropping one frees it.

use super::{Counters, Instance, Replay, Subject, DEVICE_CAPACITY_BYTES};
use crate::ops::{Op, Workload};
use anyhow::Context as _;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use std::time::Instant;

/// blockpool with one configuration.
#[derive(Debug)]
pub struct Blockpool {
    key: String,
    config_text: String,
    config: AllocatorConfig,
}

impl Blockpool {
    /// blockpool under `config_text` (`PYTORCH_CUDA_ALLOC_CONF` syntax; empty: PyTorch's
    /// defaults), shown as `key`.
    pub fn new(key: &str, config_text: &str) -> anyhow::Result<Blockpool> {
        let config = AllocatorConfig::parse(config_text)
            .with_context(|| format!("bad blockpool configuration `{config_text}`"))?;
        Ok(Blockpool {
            key: key.to_string(),
            config_text: config_text.to_string(),
            config,
        })
    }
}

impl Subject for Blockpool {
    fn key(&self) -> &str {
        &self.key
    }

    fn describe(&self) -> String {
        match self.config_text.as_str() {
            "" => "blockpool, PyTorch's policy (default configuration)".to_string(),
            text => format!("blockpool, `{text}`"),
        }
    }

    fn instance(&self, devices: usize) -> anyhow::Result<Box<dyn Instance>> {
        let sim = SimBackend::new(devices, DEVICE_CAPACITY_BYTES);
        let allocator = CachingAllocator::new(sim.clone(), self.config.clone());
        Ok(Box::new(BlockpoolInstance { sim, allocator }))
    }
}

struct BlockpoolInstance {
    sim: SimBackend,
    allocator: CachingAllocator<SimBackend>,
}

impl Instance for BlockpoolInstance {
    fn replay(&self, workload: &Workload, device: usize) -> anyhow::Result<Replay> {
        let mut slots: Vec<Option<Allocation<SimBackend>>> = Vec::new();
        slots.resize_with(workload.slots, || None);
        let mut failed = 0;
        let start = Instant::now();
        for op in &workload.ops {
            match *op {
                Op::Alloc {
                    slot,
                    size_bytes,
                    stream,
                } => match self
                    .allocator
                    .allocate(device, size_bytes, StreamId::from_raw(u64::from(stream)))
                {
                    Ok(allocation) => slots[slot as usize] = Some(allocation),
                    Err(Error::OutOfMemory(_) | Error::ExceedsCapacity { .. }) => failed += 1,
                    Err(e) => return Err(e).context("blockpool refused an allocation"),
                },
                Op::Free { slot } => drop(slots[slot as usize].take()),
                Op::RecordStream { slot, stream } => {
                    if let Some(allocation) = &slots[slot as usize] {
                        allocation.record_stream(StreamId::from_raw(u64::from(stream)))?;
                    }
                }
                Op::CompleteStream { stream } => {
                    self.sim
                        .complete_stream(device, StreamId::from_raw(u64::from(stream)))?;
                }
            }
        }
        let elapsed = start.elapsed();
        drop(slots);
        Ok(Replay {
            elapsed,
            failed_allocations: failed,
        })
    }

    fn counters(&self, device: usize) -> Counters {
        let Ok(stats) = self.allocator.memory_stats(device) else {
            return Counters::default();
        };
        let get = |key: &str| stats.get(key).and_then(|v| u64::try_from(v).ok());
        Counters {
            peak_reserved_bytes: get("reserved_bytes.all.peak"),
            reserved_bytes: get("reserved_bytes.all.current"),
            allocated_bytes: get("allocated_bytes.all.current"),
            device_allocs: get("num_device_alloc"),
        }
    }
}
