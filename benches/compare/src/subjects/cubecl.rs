//! (c) the memory manager burn's CUDA backend uses: cubecl-server 0.11's `MemoryManagement`
//! with its default layout (`MemoryConfiguration::Adaptive`), over [`FakeStorage`], a
//! `ComputeStorage` that hands out fake, never-reused addresses and counts what it holds.
//!
//! It is driven through its public API the way cubecl's server drives it for one stream:
//! `reserve(size, PageUpdate::Allow)` for an allocation (which runs the pools' periodic
//! cleanup first), dropping the returned handle for a free, and on a refusal that a reclaim
//! may cure, an explicit cleanup and one retry, as `command/base.rs` does. cubecl keeps one
//! memory manager per stream, so each stream gets its own here too. What is not driven:
//! relocation (moving live allocations off outdated pages needs a copy engine), and cubecl's
//! own cross-stream fencing (it lives in the server, outside the memory manager). Each device
//! sits behind a mutex, as behind cubecl's device handle, so two threads can share one.

use super::{Counters, Instance, Replay, Subject, DEVICE_CAPACITY_BYTES};
use crate::ops::{Op, Workload};
use cubecl_environment::backtrace::BackTrace;
use cubecl_ir::MemoryDeviceProperties;
use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    Cleanup, ErrorGraph, ManagedMemoryHandle, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, PageUpdate,
};
use cubecl_server::server::IoError;
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The alignment cubecl's CUDA runtime declares, in bytes.
const ALIGNMENT: u64 = 256;

/// cubecl's `MemoryManagement`.
#[derive(Debug, Default)]
pub struct Cubecl;

impl Subject for Cubecl {
    fn key(&self) -> &str {
        "c"
    }

    fn describe(&self) -> String {
        "cubecl-server 0.11 MemoryManagement (Adaptive), fake-address ComputeStorage".to_string()
    }

    fn instance(&self, devices: usize) -> anyhow::Result<Box<dyn Instance>> {
        Ok(Box::new(CubeclInstance {
            devices: (0..devices)
                .map(|_| Mutex::new(DeviceMemory::default()))
                .collect(),
            counters: (0..devices).map(|_| Arc::default()).collect(),
        }))
    }
}

/// What a storage has handed out, shared by the storages of one device's streams.
#[derive(Debug, Default)]
pub struct StorageCounters {
    /// Bytes held now.
    pub current: AtomicU64,
    /// Highest bytes held.
    pub peak: AtomicU64,
    /// Allocations made.
    pub allocs: AtomicU64,
}

/// A `ComputeStorage` with no memory behind it: each allocation gets the next aligned range
/// of a fake address space (never reused, so live ranges never overlap).
#[derive(Debug)]
pub struct FakeStorage {
    next_address: u64,
    held: HashMap<StorageId, (u64, u64)>,
    counters: Arc<StorageCounters>,
}

impl FakeStorage {
    /// A storage counting into `counters`, handing out addresses from `base`.
    pub fn new(base: u64, counters: Arc<StorageCounters>) -> FakeStorage {
        FakeStorage {
            next_address: base,
            held: HashMap::new(),
            counters,
        }
    }
}

/// Where an allocation is: what a kernel would be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FakeResource {
    /// First byte.
    pub address: u64,
    /// Bytes.
    pub size: u64,
}

impl ComputeStorage for FakeStorage {
    type Resource = FakeResource;

    fn alignment(&self) -> usize {
        ALIGNMENT as usize
    }

    fn get(&mut self, handle: &StorageHandle) -> Result<FakeResource, IoError> {
        match self.held.get(&handle.id) {
            Some(&(address, _)) => Ok(FakeResource {
                address: address + handle.offset(),
                size: handle.size(),
            }),
            None => Err(IoError::NotFound {
                backtrace: BackTrace::capture(),
                reason: "no such storage".into(),
            }),
        }
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let current = self.counters.current.load(Ordering::Relaxed);
        if current.saturating_add(size) > DEVICE_CAPACITY_BYTES as u64 {
            return Err(IoError::OutOfMemory {
                size,
                backtrace: BackTrace::capture(),
            });
        }
        let id = StorageId::new();
        let address = self.next_address;
        self.next_address += size.div_ceil(ALIGNMENT).max(1) * ALIGNMENT;
        self.held.insert(id, (address, size));
        let now = self.counters.current.fetch_add(size, Ordering::Relaxed) + size;
        self.counters.peak.fetch_max(now, Ordering::Relaxed);
        self.counters.allocs.fetch_add(1, Ordering::Relaxed);
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        if let Some((_, size)) = self.held.remove(&id) {
            self.counters.current.fetch_sub(size, Ordering::Relaxed);
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.held.values().map(|&(_, size)| size).sum()
    }
}

/// One device: a memory manager per stream, made on first use.
#[derive(Default)]
struct DeviceMemory {
    streams: Vec<MemoryManagement<FakeStorage>>,
    failures: ErrorGraph,
}

impl DeviceMemory {
    fn stream(
        &mut self,
        stream: u32,
        counters: &Arc<StorageCounters>,
    ) -> &mut MemoryManagement<FakeStorage> {
        while self.streams.len() <= stream as usize {
            // Each stream's storage its own 1 TiB window of the fake address space.
            let base = (self.streams.len() as u64 + 1) << 40;
            let storage = FakeStorage::new(base, Arc::clone(counters));
            let properties = MemoryDeviceProperties::new(DEVICE_CAPACITY_BYTES as u64, ALIGNMENT)
                .with_max_memory(DEVICE_CAPACITY_BYTES as u64);
            self.streams.push(MemoryManagement::from_configuration(
                storage,
                &properties,
                MemoryConfiguration::Adaptive,
                Arc::new(ServerLogger::default()),
                MemoryManagementOptions::new(format!("stream {}", self.streams.len())),
            ));
        }
        &mut self.streams[stream as usize]
    }

    /// What cubecl's server does for one allocation on `stream`.
    fn reserve(
        &mut self,
        stream: u32,
        size: u64,
        counters: &Arc<StorageCounters>,
    ) -> Result<ManagedMemoryHandle, IoError> {
        self.stream(stream, counters);
        let memory = &mut self.streams[stream as usize];
        match memory.reserve(size, PageUpdate::Allow, &mut self.failures) {
            Err(err) if err.may_succeed_after_reclaim() => {
                memory.cleanup(Cleanup::Explicit, &mut self.failures);
                memory.reserve(size, PageUpdate::Allow, &mut self.failures)
            }
            result => result,
        }
    }
}

struct CubeclInstance {
    devices: Vec<Mutex<DeviceMemory>>,
    counters: Vec<Arc<StorageCounters>>,
}

impl Instance for CubeclInstance {
    fn replay(&self, workload: &Workload, device: usize) -> anyhow::Result<Replay> {
        let (Some(memory), Some(counters)) = (self.devices.get(device), self.counters.get(device))
        else {
            anyhow::bail!("no device {device}");
        };
        let mut slots: Vec<Option<ManagedMemoryHandle>> = Vec::new();
        slots.resize_with(workload.slots, || None);
        let mut failed = 0;
        let start = Instant::now();
        for op in &workload.ops {
            match *op {
                Op::Alloc {
                    slot,
                    size_bytes,
                    stream,
                } => {
                    let mut memory = memory.lock().map_err(|_| {
                        anyhow::anyhow!("a thread panicked holding device {device}")
                    })?;
                    match memory.reserve(stream, size_bytes as u64, counters) {
                        Ok(handle) => slots[slot as usize] = Some(handle),
                        Err(_) => failed += 1,
                    }
                }
                Op::Free { slot } => drop(slots[slot as usize].take()),
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
        let Some(counters) = self.counters.get(device) else {
            return Counters::default();
        };
        let allocated = self.devices.get(device).and_then(|memory| {
            let memory = memory.lock().ok()?;
            let in_use = memory
                .streams
                .iter()
                .map(|m| m.memory_report().usage().bytes_in_use)
                .sum::<u64>();
            Some(in_use)
        });
        Counters {
            peak_reserved_bytes: Some(counters.peak.load(Ordering::Relaxed)),
            reserved_bytes: Some(counters.current.load(Ordering::Relaxed)),
            allocated_bytes: allocated,
            device_allocs: Some(counters.allocs.load(Ordering::Relaxed)),
        }
    }
}
