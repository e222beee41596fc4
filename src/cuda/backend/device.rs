//! One CUDA device as the backend holds it: its retained primary context, its properties, the
//! segments handed out on it, and its pool of recycled events.
//!
//! Every driver call here first makes the device's primary context current on the calling
//! thread with raw `cuCtxGetCurrent`/`cuCtxSetCurrent`, not cudarc's `bind_to_thread`: that one
//! also reports (and clears) errors cudarc deferred from its own drops, which belong to the
//! user's next cudarc call, not to the allocator's. The [`ContextGuard`] that does it puts the
//! caller's context back when it drops, on error paths too: the thread that called blockpool
//! (PyTorch on device 1, say) finds its current context, and so its current device, as it left
//! it, as PyTorch's allocator does with its device guard. The calls go through
//! `cuda/driver.rs`; the primary context itself is cudarc's `CudaContext`, which the user makes
//! streams from.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::CudaContext;
use parking_lot::Mutex;

use super::vmm::AddressSpace;
use crate::backend::{BackendError, DeviceIndex, MemInfo, StreamId};
use crate::cuda::driver::Driver;
use crate::cuda::error::{device_alloc_error, driver_error, OnDevice};

/// What the driver reports about a device, read once when the backend is created.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaDeviceProperties {
    /// The device's name, such as `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability as (major, minor), such as (9, 0).
    pub compute_capability: (u32, u32),
    /// Memory on the device, in bytes.
    pub total_memory_bytes: usize,
    /// Number of streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// Whether the device supports stream-ordered allocation (`cuMemAllocAsync`).
    pub memory_pools_supported: bool,
    /// Whether the device supports virtual memory management (`cuMemMap`), which
    /// expandable segments need.
    pub virtual_memory_supported: bool,
}

/// A `CUevent` created with `CU_EVENT_DISABLE_TIMING`, owned by one device's pool.
pub(super) struct RawEvent(pub(super) sys::CUevent);

// SAFETY: a CUevent handle is an opaque driver pointer that the driver lets any thread use
// (with the owning context current, which every user here ensures); the pool hands each one to
// one owner at a time.
unsafe impl Send for RawEvent {}

/// The calling thread's current context when the guard was made (null: none), made current
/// again when it drops; `None` when nothing was changed.
#[must_use = "the caller's context is restored when the guard drops"]
pub(super) struct ContextGuard {
    driver: Driver,
    saved: Option<sys::CUcontext>,
}

impl ContextGuard {
    /// Saves the thread's current context, whatever blockpool then makes current.
    pub(super) fn save(driver: Driver) -> Result<ContextGuard, BackendError> {
        let current = driver.current_context().on(DeviceIndex::new(0))?;
        Ok(ContextGuard {
            driver,
            saved: Some(current),
        })
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        let Some(saved) = self.saved else {
            return;
        };
        // SAFETY: `saved` was current on this thread when the guard was made: the caller's
        // context (or null, which pops what blockpool made current), which nothing blockpool
        // did in between destroys. A context the caller destroyed meanwhile on another thread
        // is reported by the driver as an error, logged here.
        if let Err(e) = unsafe { self.driver.set_current_context(saved) } {
            tracing::error!(
                "could not make the caller's CUDA context current again: {} returned {:?}",
                e.call,
                e.code
            );
        }
    }
}

/// One device of a [`CudaBackend`](super::CudaBackend).
pub(super) struct CudaDevice {
    pub(super) driver: Driver,
    pub(super) index: DeviceIndex,
    /// The retained primary context; cudarc's safe API shares it with the user.
    pub(super) context: Arc<CudaContext>,
    pub(super) properties: CudaDeviceProperties,
    /// Live segments: address -> size in bytes.
    segments: Mutex<HashMap<u64, usize>>,
    /// Idle events, ready to be recorded again.
    events: Mutex<Vec<RawEvent>>,
    /// Reserved ranges and mappings of expandable segments (`vmm.rs`).
    pub(super) address_space: AddressSpace,
}

impl CudaDevice {
    /// Retains the primary context of device `index` and reads its properties.
    ///
    /// The driver must be initialized (`cuInit` succeeded).
    pub(super) fn open(driver: Driver, index: DeviceIndex) -> Result<CudaDevice, BackendError> {
        let context = CudaContext::new(index.get())
            .map_err(|e| driver_error(index, e.0, "retaining the primary context"))?;
        let device = context.cu_device();
        let attribute = |attr| driver.device_attribute(device, attr).on(index);
        use sys::CUdevice_attribute as A;
        let major = attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let multiprocessors = attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let pools = attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
        let vmm = attribute(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)?;
        // `CudaContext::new` made the context current on this thread (`CudaBackend::new` puts
        // the caller's back).
        let address_space = AddressSpace::probe(driver, index, vmm);
        let properties = CudaDeviceProperties {
            name: driver.device_name(device).on(index)?,
            compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            total_memory_bytes: driver.device_total_bytes(device).on(index)?,
            multiprocessor_count: multiprocessors.max(0) as u32,
            memory_pools_supported: pools > 0,
            virtual_memory_supported: address_space.supported(),
        };
        Ok(CudaDevice {
            driver,
            index,
            context,
            properties,
            segments: Mutex::new(HashMap::new()),
            events: Mutex::new(Vec::new()),
            address_space,
        })
    }

    /// Makes this device's primary context current on the calling thread until the guard
    /// drops, which makes the caller's current again.
    pub(super) fn make_current(&self) -> Result<ContextGuard, BackendError> {
        let wanted = self.context.cu_ctx();
        let current = self.driver.current_context().on(self.index)?;
        if current != wanted {
            // SAFETY: `wanted` is the primary context this device retained, alive as long as
            // `self.context`.
            unsafe { self.driver.set_current_context(wanted) }.on(self.index)?;
        }
        // Nothing to put back when the caller's context was the wanted one already.
        Ok(ContextGuard {
            driver: self.driver,
            saved: (current != wanted).then_some(current),
        })
    }

    /// `cuMemGetInfo` for this device.
    pub(super) fn mem_get_info(&self) -> Result<MemInfo, BackendError> {
        let _current = self.make_current()?;
        let (free, total) = self.driver.mem_get_info().on(self.index)?;
        Ok(MemInfo {
            free_bytes: free,
            total_bytes: total,
        })
    }

    /// `cuMemAlloc_v2` of `size_bytes`; out-of-memory is [`BackendError::OutOfMemory`].
    pub(super) fn alloc_segment(&self, size_bytes: usize) -> Result<u64, BackendError> {
        let _current = self.make_current()?;
        let ptr = self
            .driver
            .mem_alloc(size_bytes)
            .map_err(|e| device_alloc_error(self.index, e.code, size_bytes, e.call))?;
        self.segments.lock().insert(ptr, size_bytes);
        Ok(ptr)
    }

    /// `cuMemFree_v2` of a segment this device handed out with the same size.
    pub(super) fn free_segment(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let mut segments = self.segments.lock();
        if segments.get(&ptr) != Some(&size_bytes) {
            return Err(BackendError::UnknownSegment {
                device: self.index,
                ptr,
                size_bytes,
            });
        }
        let _current = self.make_current()?;
        // SAFETY: 1. `ptr` was returned by `cuMemAlloc_v2` on this context and is still live
        // (it is in `segments`, removed only here, under the lock); 2. the allocator frees a
        // segment only when no block in it is in use and every event of its blocks completed.
        unsafe { self.driver.mem_free(ptr) }.on(self.index)?;
        segments.remove(&ptr);
        Ok(())
    }

    /// Bytes of live segments.
    pub(super) fn allocated_bytes(&self) -> usize {
        self.segments.lock().values().sum()
    }

    /// Number of live segments.
    pub(super) fn segment_count(&self) -> usize {
        self.segments.lock().len()
    }

    /// Records an event (a recycled one when the pool has one) on `stream`.
    pub(super) fn record_event(&self, stream: StreamId) -> Result<RawEvent, BackendError> {
        let _current = self.make_current()?;
        let event = match self.events.lock().pop() {
            Some(event) => event,
            None => RawEvent(self.driver.event_create().on(self.index)?),
        };
        // SAFETY: 1. `event.0` is a live event of this context; 2. `stream.0` is a `CUstream`
        // handle value (0 = legacy default stream): a handle of another context or a destroyed
        // stream is reported by the driver as an error, not undefined behaviour, for streams
        // the caller obtained from cudarc and keeps alive while it has work queued.
        let recorded = unsafe {
            self.driver
                .event_record(event.0, stream.raw() as sys::CUstream)
        };
        if let Err(e) = recorded.on(self.index) {
            self.events.lock().push(event);
            return Err(e);
        }
        Ok(event)
    }

    /// Makes later work on `stream` (of this device) wait for `event`, which may be another
    /// device's (`cuStreamWaitEvent`).
    pub(super) fn stream_wait_event(
        &self,
        stream: StreamId,
        event: &RawEvent,
    ) -> Result<(), BackendError> {
        let _current = self.make_current()?;
        // SAFETY: `event.0` is a live event recorded by `record_event` (the pool keeps it live
        // until `release_event`); `stream.0` is a `CUstream` handle value, as in `record_event`.
        unsafe {
            self.driver
                .stream_wait_event(stream.raw() as sys::CUstream, event.0)
        }
        .on(self.index)
    }

    /// Whether the work before `event` has completed (`cuEventQuery`).
    pub(super) fn query_event(&self, event: &RawEvent) -> Result<bool, BackendError> {
        let _current = self.make_current()?;
        // SAFETY: `event.0` is a live event of this context, recorded by `record_event`.
        unsafe { self.driver.event_query(event.0) }.on(self.index)
    }

    /// Blocks until the work before `event` has completed (`cuEventSynchronize`).
    pub(super) fn synchronize_event(&self, event: &RawEvent) -> Result<(), BackendError> {
        let _current = self.make_current()?;
        // SAFETY: `event.0` is a live event of this context, recorded by `record_event`.
        unsafe { self.driver.event_synchronize(event.0) }.on(self.index)
    }

    /// Puts `event` back in the pool for the next `record_event`.
    pub(super) fn release_event(&self, event: RawEvent) {
        self.events.lock().push(event);
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let events = std::mem::take(&mut *self.events.lock());
        if events.is_empty() && self.address_space.is_empty() {
            return;
        }
        let _current = match self.make_current() {
            Ok(guard) => guard,
            Err(e) => {
                tracing::warn!(
                    device = self.index.get(),
                    "leaking {} pooled events and any expandable-segment ranges: {e}",
                    events.len()
                );
                return;
            }
        };
        // Normally empty: the allocator unmaps and releases everything when it is dropped.
        self.release_address_space();
        for event in events {
            // SAFETY: each pooled event was created on this device's context (current now),
            // is idle (it is in the pool), and is destroyed once, here.
            let destroyed = unsafe { self.driver.event_destroy(event.0) };
            if let Err(e) = destroyed.on(self.index) {
                tracing::warn!(device = self.index.get(), "{e}");
            }
        }
    }
}
