//! One CUDA device as the backend holds it: its retained primary context, its properties, the
//! segments handed out on it, and its pool of recycled events.
//!
//! Every driver call here first makes the device's primary context current on the calling
//! thread with raw `cuCtxGetCurrent`/`cuCtxSetCurrent`, not cudarc's `bind_to_thread`: that one
//! also reports (and clears) errors cudarc deferred from its own drops, which belong to the
//! user's next cudarc call, not to the allocator's.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::CudaContext;
use parking_lot::Mutex;

use super::vmm::AddressSpace;
use crate::backend::{BackendError, DeviceIndex, MemInfo, StreamId};
use crate::cuda::error::{check, driver_error};

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

/// One device of a [`CudaBackend`](super::CudaBackend).
pub(super) struct CudaDevice {
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
    pub(super) fn open(index: DeviceIndex) -> Result<CudaDevice, BackendError> {
        let context = CudaContext::new(index)
            .map_err(|e| driver_error(index, e.0, "retaining the primary context"))?;
        let attribute = |attr| {
            context
                .attribute(attr)
                .map_err(|e| driver_error(index, e.0, "cuDeviceGetAttribute"))
        };
        use sys::CUdevice_attribute as A;
        let major = attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let multiprocessors = attribute(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let pools = attribute(A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
        let vmm = attribute(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)?;
        // `CudaContext::new` made the context current on this thread.
        let address_space = AddressSpace::probe(index, vmm);
        let properties = CudaDeviceProperties {
            name: device_name(index, context.cu_device())?,
            compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            total_memory_bytes: context
                .total_mem()
                .map_err(|e| driver_error(index, e.0, "cuDeviceTotalMem_v2"))?,
            multiprocessor_count: multiprocessors.max(0) as u32,
            memory_pools_supported: pools > 0,
            virtual_memory_supported: address_space.supported(),
        };
        Ok(CudaDevice {
            index,
            context,
            properties,
            segments: Mutex::new(HashMap::new()),
            events: Mutex::new(Vec::new()),
            address_space,
        })
    }

    /// Makes this device's primary context current on the calling thread.
    pub(super) fn make_current(&self) -> Result<(), BackendError> {
        let wanted = self.context.cu_ctx();
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: 1. the driver is loaded and initialized (a `CudaDevice` exists only after
        // `cuInit` succeeded); 2. `current` is a valid out-pointer.
        let code = unsafe { sys::cuCtxGetCurrent(&mut current) };
        check(self.index, code, "cuCtxGetCurrent")?;
        if current != wanted {
            // SAFETY: `wanted` is the primary context this device retained, alive as long as
            // `self.context`.
            let code = unsafe { sys::cuCtxSetCurrent(wanted) };
            check(self.index, code, "cuCtxSetCurrent")?;
        }
        Ok(())
    }

    /// `cuMemGetInfo` for this device.
    pub(super) fn mem_get_info(&self) -> Result<MemInfo, BackendError> {
        self.make_current()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the device's context is current and both out-pointers are valid.
        let code = unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) };
        check(self.index, code, "cuMemGetInfo_v2")?;
        Ok(MemInfo {
            free_bytes: free,
            total_bytes: total,
        })
    }

    /// `cuMemAlloc_v2` of `size_bytes`; out-of-memory is [`BackendError::OutOfMemory`].
    pub(super) fn alloc_segment(&self, size_bytes: usize) -> Result<u64, BackendError> {
        self.make_current()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the device's context is current and `ptr` is a valid out-pointer.
        let code = unsafe { sys::cuMemAlloc_v2(&mut ptr, size_bytes) };
        if code != CUresult::CUDA_SUCCESS {
            return Err(crate::cuda::error::device_alloc_error(
                self.index,
                code,
                size_bytes,
                "cuMemAlloc_v2",
            ));
        }
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
        self.make_current()?;
        // SAFETY: 1. `ptr` was returned by `cuMemAlloc_v2` on this context and is still live
        // (it is in `segments`, removed only here, under the lock); 2. the allocator frees a
        // segment only when no block in it is in use and every event of its blocks completed.
        let code = unsafe { sys::cuMemFree_v2(ptr) };
        check(self.index, code, "cuMemFree_v2")?;
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
        self.make_current()?;
        let event = match self.events.lock().pop() {
            Some(event) => event,
            None => {
                let mut raw: sys::CUevent = std::ptr::null_mut();
                let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                // SAFETY: the device's context is current and `raw` is a valid out-pointer.
                let code = unsafe { sys::cuEventCreate(&mut raw, flags) };
                check(self.index, code, "cuEventCreate")?;
                RawEvent(raw)
            }
        };
        // SAFETY: 1. `event.0` is a live event of this context; 2. `stream.0` is a `CUstream`
        // handle value (0 = legacy default stream): a handle of another context or a destroyed
        // stream is reported by the driver as an error, not undefined behaviour, for streams
        // the caller obtained from cudarc and keeps alive while it has work queued.
        let code = unsafe { sys::cuEventRecord(event.0, stream.0 as sys::CUstream) };
        if let Err(e) = check(self.index, code, "cuEventRecord") {
            self.events.lock().push(event);
            return Err(e);
        }
        Ok(event)
    }

    /// Whether the work before `event` has completed (`cuEventQuery`).
    pub(super) fn query_event(&self, event: &RawEvent) -> Result<bool, BackendError> {
        self.make_current()?;
        // SAFETY: `event.0` is a live event of this context, recorded by `record_event`.
        match unsafe { sys::cuEventQuery(event.0) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(driver_error(self.index, code, "cuEventQuery")),
        }
    }

    /// Blocks until the work before `event` has completed (`cuEventSynchronize`).
    pub(super) fn synchronize_event(&self, event: &RawEvent) -> Result<(), BackendError> {
        self.make_current()?;
        // SAFETY: `event.0` is a live event of this context, recorded by `record_event`.
        let code = unsafe { sys::cuEventSynchronize(event.0) };
        check(self.index, code, "cuEventSynchronize")
    }

    /// Puts `event` back in the pool for the next `record_event`.
    pub(super) fn release_event(&self, event: RawEvent) {
        self.events.lock().push(event);
    }
}

/// `cuDeviceGetName`, read without trusting the driver to NUL-terminate.
fn device_name(index: DeviceIndex, device: sys::CUdevice) -> Result<String, BackendError> {
    let mut buf = [0u8; 256];
    // SAFETY: 1. the driver is initialized and `device` came from `cuDeviceGet`; 2. `buf` is
    // writable for the length passed (256 fits in a c_int).
    let code = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as i32, device) };
    check(index, code, "cuDeviceGetName")?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let events = std::mem::take(&mut *self.events.lock());
        if events.is_empty() && self.address_space.is_empty() {
            return;
        }
        if let Err(e) = self.make_current() {
            tracing::warn!(
                device = self.index,
                "leaking {} pooled events and any expandable-segment ranges: {e}",
                events.len()
            );
            return;
        }
        // Normally empty: the allocator unmaps and releases everything when it is dropped.
        self.release_address_space();
        for event in events {
            // SAFETY: each pooled event was created on this device's context (current now),
            // is idle (it is in the pool), and is destroyed once, here.
            let code = unsafe { sys::cuEventDestroy_v2(event.0) };
            if let Err(e) = check(self.index, code, "cuEventDestroy_v2") {
                tracing::warn!(device = self.index, "{e}");
            }
        }
    }
}
