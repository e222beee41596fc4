//! Expandable segments on CUDA: virtual address ranges (`cuMemAddressReserve`) mapped unit by
//! unit to physical memory (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`), unmapped and freed
//! again (`cuMemUnmap`, `cuMemRelease`), and released (`cuMemAddressFree`).
//!
//! Each device keeps its reserved ranges and, inside each, its mappings with their physical
//! allocation handles, so a call naming memory it never handed out is refused with a typed
//! error before the driver sees it, as the simulated backend refuses it. The calls (and the C
//! layouts of their arguments) are in `cuda/driver.rs`.

use std::collections::BTreeMap;

use cudarc::driver::sys;
use parking_lot::Mutex;

use super::device::CudaDevice;
use crate::backend::address_ranges::{
    check_release, place_mapping, range_of_mapping, ReleaseRefusal, Reserved,
};
use crate::backend::{BackendError, DeviceIndex};
use crate::cuda::driver::Driver;
use crate::cuda::error::{device_alloc_error, OnDevice};

/// The unit the pool maps in (its small segment size); the driver's granularity must divide it.
const POOL_UNIT: usize = 2 << 20;

/// One device's reserved ranges.
pub(super) struct AddressSpace {
    /// The driver's minimum mapping granularity, when the device supports virtual memory
    /// management and the granularity divides [`POOL_UNIT`]; `None` otherwise.
    granularity: Option<usize>,
    /// Reserved ranges by start address.
    ranges: Mutex<BTreeMap<u64, Range>>,
}

struct Range {
    size_bytes: usize,
    /// Mappings by start address: size and the physical allocation behind it.
    mappings: BTreeMap<u64, (usize, sys::CUmemGenericAllocationHandle)>,
}

impl Reserved for Range {
    type Mapping = (usize, sys::CUmemGenericAllocationHandle);
    fn size_bytes(&self) -> usize {
        self.size_bytes
    }
    fn mappings(&self) -> &BTreeMap<u64, Self::Mapping> {
        &self.mappings
    }
}

impl AddressSpace {
    /// Reads whether `device` supports virtual memory management and at what granularity;
    /// any failure means unsupported (said at debug level), never an error.
    pub(super) fn probe(driver: Driver, device: DeviceIndex, vmm_attribute: i32) -> AddressSpace {
        let none = AddressSpace {
            granularity: None,
            ranges: Mutex::new(BTreeMap::new()),
        };
        if vmm_attribute <= 0 {
            return none;
        }
        // The device's context is current (called from `CudaDevice::open`).
        let granularity = match driver.allocation_granularity(device.get()).on(device) {
            Ok(granularity) => granularity,
            Err(e) => {
                tracing::warn!(device = device.get(), "no expandable segments: {e}");
                return none;
            }
        };
        if granularity == 0 || POOL_UNIT % granularity != 0 {
            tracing::debug!(
                device = device.get(),
                granularity,
                "no expandable segments: the mapping granularity does not divide 2 MiB"
            );
            return none;
        }
        AddressSpace {
            granularity: Some(granularity),
            ..none
        }
    }

    /// Whether the device can back expandable segments.
    pub(super) fn supported(&self) -> bool {
        self.granularity.is_some()
    }

    /// Whether nothing is reserved.
    pub(super) fn is_empty(&self) -> bool {
        self.ranges.lock().is_empty()
    }

    /// Bytes mapped in every range.
    pub(super) fn mapped_bytes(&self) -> usize {
        self.ranges
            .lock()
            .values()
            .flat_map(|r| r.mappings.values())
            .map(|&(size, _)| size)
            .sum()
    }
}

impl CudaDevice {
    /// The granularity, or the `Unsupported` error for `what`.
    fn granularity(&self, what: &'static str) -> Result<usize, BackendError> {
        self.address_space
            .granularity
            .ok_or(BackendError::Unsupported {
                device: self.index,
                what,
            })
    }

    /// `cuMemAddressReserve` of `size_bytes`, a non-zero multiple of the granularity.
    pub(super) fn reserve_address_range(&self, size_bytes: usize) -> Result<u64, BackendError> {
        let granularity = self.granularity("reserving address ranges")?;
        if size_bytes == 0 || size_bytes % granularity != 0 {
            return Err(BackendError::BadMapping {
                device: self.index,
                what: "reserve",
                ptr: 0,
                size_bytes,
                reason: "the size must be a non-zero multiple of the driver's granularity",
            });
        }
        let _current = self.make_current()?;
        // Running out of address space is out of memory too: the allocator then releases
        // what it caches and retries, as for memory.
        let ptr = self
            .driver
            .address_reserve(size_bytes)
            .map_err(|e| device_alloc_error(self.index, e.code, size_bytes, e.call))?;
        self.address_space.ranges.lock().insert(
            ptr,
            Range {
                size_bytes,
                mappings: BTreeMap::new(),
            },
        );
        Ok(ptr)
    }

    /// `cuMemAddressFree` of a range reserved here with this size and nothing mapped in it.
    pub(super) fn release_address_range(
        &self,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let mut ranges = self.address_space.ranges.lock();
        check_release(&ranges, ptr, size_bytes).map_err(|refusal| match refusal {
            ReleaseRefusal::InUse { mapped_bytes } => BackendError::AddressRangeInUse {
                device: self.index,
                ptr,
                mapped_bytes,
            },
            ReleaseRefusal::Unknown => BackendError::UnknownAddressRange {
                device: self.index,
                ptr,
                size_bytes,
            },
        })?;
        let _current = self.make_current()?;
        // SAFETY: `ptr..ptr + size_bytes` was reserved by `cuMemAddressReserve` on this device
        // (it is in `ranges`, removed only here, under the lock) and nothing is mapped in it.
        unsafe { self.driver.address_free(ptr, size_bytes) }.on(self.index)?;
        ranges.remove(&ptr);
        Ok(())
    }

    /// Creates `size_bytes` of physical memory and maps it read/write at `ptr`, inside a
    /// reserved range and over no mapping. Out of memory is [`BackendError::OutOfMemory`].
    pub(super) fn map_memory(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let granularity = self.granularity("mapping memory")?;
        let mut ranges = self.address_space.ranges.lock();
        let start = place_mapping(&ranges, ptr, size_bytes, granularity).map_err(|reason| {
            BackendError::BadMapping {
                device: self.index,
                what: "map",
                ptr,
                size_bytes,
                reason,
            }
        })?;
        let _current = self.make_current()?;
        let handle = self
            .driver
            .mem_create(self.index.get(), size_bytes)
            .map_err(|e| device_alloc_error(self.index, e.code, size_bytes, e.call))?;
        if let Err(e) = self.map_and_enable(ptr, size_bytes, handle) {
            // SAFETY: `handle` came from `cuMemCreate` above and is mapped nowhere.
            let released = unsafe { self.driver.mem_release(handle) };
            if let Err(release) = released.on(self.index) {
                tracing::warn!(device = self.index.get(), "{release}");
            }
            return Err(e);
        }
        // `start` names a range in `ranges`: found above under the lock still held.
        if let Some(range) = ranges.get_mut(&start) {
            range.mappings.insert(ptr, (size_bytes, handle));
        }
        Ok(())
    }

    /// `cuMemMap` of `handle` at `ptr`, then `cuMemSetAccess` read/write for this device;
    /// unmapped again if access cannot be set.
    fn map_and_enable(
        &self,
        ptr: u64,
        size_bytes: usize,
        handle: sys::CUmemGenericAllocationHandle,
    ) -> Result<(), BackendError> {
        // SAFETY: `ptr..ptr + size_bytes` lies in a range reserved on this device with nothing
        // mapped there (checked by the caller under the ranges lock, still held); `handle` is
        // a live allocation of exactly `size_bytes`.
        unsafe { self.driver.mem_map(ptr, size_bytes, handle) }.on(self.index)?;
        // SAFETY: the range was just mapped, above.
        let access = unsafe {
            self.driver
                .set_read_write(ptr, size_bytes, self.index.get())
        };
        if let Err(e) = access.on(self.index) {
            // SAFETY: the range was mapped just above and is used by nothing yet.
            let unmapped = unsafe { self.driver.mem_unmap(ptr, size_bytes) };
            if let Err(unmap) = unmapped.on(self.index) {
                tracing::warn!(device = self.index.get(), "{unmap}");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Unmaps exactly an earlier `map_memory(ptr, size_bytes)` and frees its memory.
    pub(super) fn unmap_memory(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let mut ranges = self.address_space.ranges.lock();
        let found = range_of_mapping(&ranges, ptr, size_bytes)
            .and_then(|start| ranges.get_mut(&start))
            .and_then(|range| Some((range.mappings.get(&ptr)?.1, range)));
        let Some((handle, range)) = found else {
            return Err(BackendError::BadMapping {
                device: self.index,
                what: "unmap",
                ptr,
                size_bytes,
                reason: "no earlier map_memory call mapped exactly this range",
            });
        };
        let _current = self.make_current()?;
        self.synchronize()?;
        // SAFETY: `ptr..ptr + size_bytes` is exactly one mapping made by `map_memory` (it is in
        // `mappings`, under the lock); the allocator unmaps only free units (blocks freed on
        // other streams after their events completed), and the device has just finished all
        // work queued before, so no kernel still uses the unit.
        unsafe { self.driver.mem_unmap(ptr, size_bytes) }.on(self.index)?;
        range.mappings.remove(&ptr);
        // SAFETY: `handle` was created for this mapping, which is gone; released once, here.
        let released = unsafe { self.driver.mem_release(handle) };
        if let Err(e) = released.on(self.index) {
            // The range is unmapped whatever happened to the memory behind it: say so, and
            // leak the handle to the context rather than report a mapping that is gone.
            tracing::warn!(device = self.index.get(), "{e}");
        }
        Ok(())
    }

    /// Waits for all work queued on the device's context. Unlike `cuMemFree`, `cuMemUnmap`
    /// does not wait for kernels that may still use the memory (PyTorch synchronizes before
    /// unmapping for the same reason); the caller has made the context current.
    fn synchronize(&self) -> Result<(), BackendError> {
        self.driver.synchronize_context().on(self.index)
    }

    /// Unmaps and frees every mapping and releases every range (the backend is going away);
    /// failures are warned about, and what failed is leaked to the context.
    pub(super) fn release_address_space(&self) {
        let ranges = std::mem::take(&mut *self.address_space.ranges.lock());
        if ranges.values().any(|range| !range.mappings.is_empty()) {
            if let Err(e) = self.synchronize() {
                tracing::warn!(device = self.index.get(), "{e}");
            }
        }
        for (start, range) in ranges {
            for (ptr, (size_bytes, handle)) in range.mappings {
                // SAFETY: a mapping made by `map_memory` on this device, whose context is
                // current (the caller made it so); nothing uses the backend any more.
                let unmapped = unsafe { self.driver.mem_unmap(ptr, size_bytes) }.on(self.index);
                // SAFETY: the handle of that mapping, released once, here.
                let released = unsafe { self.driver.mem_release(handle) }.on(self.index);
                if let Err(e) = unmapped.and(released) {
                    tracing::warn!(device = self.index.get(), "{e}");
                }
            }
            // SAFETY: a range reserved on this device, with its mappings gone.
            let freed = unsafe { self.driver.address_free(start, range.size_bytes) };
            if let Err(e) = freed.on(self.index) {
                tracing::warn!(device = self.index.get(), "{e}");
            }
        }
    }
}
