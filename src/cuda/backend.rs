//! [`CudaBackend`]: the [`Backend`] over NVIDIA's driver API, through `cuda/driver.rs`.
//!
//! Creating one checks, in order, that libcuda can be loaded (without letting cudarc panic),
//! that it has every function blockpool calls, that `cuInit` succeeds, that the driver is
//! recent enough, and that there is a device; each failure is a typed [`BackendError`] that
//! says what to do. A device's primary context (the same context the CUDA runtime, PyTorch and
//! cudarc's `CudaContext::new` use, so memory from here works with streams and kernels from any
//! of them) is retained on the device's first use, as PyTorch initializes devices lazily: a
//! process that uses one GPU of eight (a rank under `torchrun`) holds a context, and its
//! memory, on that one only.
//!
//! `backend/device.rs` holds one device (primary context, properties, segments, event pool),
//! `backend/vmm.rs` its expandable-segment address ranges and mappings.

mod device;
mod vmm;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaStream};
use parking_lot::Mutex;

pub use device::CudaDeviceProperties;

use super::driver::{Driver, Library};
use super::error::{
    driver_error, host_alloc_error, library_missing, symbol_missing, OnDevice,
    CALL_REQUIRES_NEWER_DRIVER,
};
use crate::backend::{Backend, BackendError, DeviceIndex, MemInfo, StreamId};
use device::{ContextGuard, CudaDevice, RawEvent};

/// The oldest driver accepted, as `cuDriverGetVersion` numbers it (11.4, the oldest CUDA that
/// cudarc supports).
pub const MIN_DRIVER_VERSION: i32 = 11040;

/// Real NVIDIA GPUs through the CUDA driver: segments from `cuMemAlloc_v2` / `cuMemFree_v2` in
/// each device's primary context, events from a recycled per-device pool created with
/// `CU_EVENT_DISABLE_TIMING`, pinned host memory from `cuMemHostAlloc`, and expandable
/// segments from the driver's virtual memory management (`cuMemAddressReserve`, `cuMemCreate`,
/// `cuMemMap`) on devices that support it.
///
/// Cloning is cheap and gives another handle to the same devices. Out-of-memory from the
/// driver becomes the retryable [`BackendError::OutOfMemory`] (or
/// [`BackendError::HostOutOfMemory`]); every other failure is a [`BackendError::Driver`] with
/// the driver's code and name.
///
/// ```no_run
/// use blockpool::{AllocatorConfig, CachingAllocator, CudaBackend, DeviceIndex, StreamId};
///
/// let backend = CudaBackend::new()?; // a typed error, never a panic, without a GPU
/// println!("{} ({:?})", backend.device_name(DeviceIndex::new(0))?, backend.compute_capability(DeviceIndex::new(0))?);
/// let alloc = CachingAllocator::new(backend, AllocatorConfig::default());
/// let block = alloc.allocate(0, 1 << 20, StreamId::DEFAULT)?;
/// drop(block); // cached, not returned to the driver
/// alloc.empty_cache()?; // now it is
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CudaBackend {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Driver,
    /// Every device of the process, each opened on its first use.
    devices: Vec<OnceLock<CudaDevice>>,
    /// Serializes opening devices.
    opening: Mutex<()>,
    driver_version: i32,
    /// Live pinned host allocations: address -> size in bytes.
    host: Mutex<HashMap<u64, usize>>,
}

impl Drop for Inner {
    /// Dropping a device releases its primary context, which cudarc makes current first: the
    /// caller's context is put back afterwards.
    fn drop(&mut self) {
        let _current = ContextGuard::save(self.driver).ok();
        self.devices.clear();
    }
}

/// An event recorded by a [`CudaBackend`]: a pooled `CUevent` with the device and stream it was
/// recorded on. Give it back with [`Backend::release_event`] so it is reused.
pub struct CudaBackendEvent {
    device: DeviceIndex,
    stream: StreamId,
    raw: RawEvent,
}

impl CudaBackendEvent {
    /// Device the event was recorded on.
    pub fn device(&self) -> DeviceIndex {
        self.device
    }

    /// Stream the event was recorded on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

impl fmt::Debug for CudaBackendEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackendEvent")
            .field("device", &self.device)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// The CUDA devices of this process. Each device is opened (its primary context retained
    /// and its properties read) on first use, by any method that takes its index; a device that
    /// cannot be opened then (for example `CUDA_ERROR_DEVICE_UNAVAILABLE`, held exclusively by
    /// another process) fails that call with a typed error, and the next use tries again.
    ///
    /// Fails, without panicking, with a [`BackendError::Driver`] whose message says what to do
    /// when: the driver library cannot be loaded (code 303,
    /// `CUDA_ERROR_SHARED_OBJECT_INIT_FAILED`), it lacks a function blockpool calls (code 36,
    /// `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER`, naming the function), `cuInit` fails (for example
    /// `CUDA_ERROR_NO_DEVICE` or `CUDA_ERROR_STUB_LIBRARY`), the driver is older than
    /// [`MIN_DRIVER_VERSION`] (`CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER`), there is no device
    /// (`CUDA_ERROR_NO_DEVICE`).
    pub fn new() -> Result<CudaBackend, BackendError> {
        let library = Library::open().ok_or_else(library_missing)?;
        // Before any driver call: cudarc panics on calling a function the library lacks.
        let driver = library.driver().map_err(symbol_missing)?;
        driver.init().on(DeviceIndex::new(0))?;
        let version = driver.driver_version().on(DeviceIndex::new(0))?;
        if version < MIN_DRIVER_VERSION {
            return Err(BackendError::Driver {
                device: DeviceIndex::new(0),
                code: CALL_REQUIRES_NEWER_DRIVER,
                name: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER".to_owned(),
                message: format!(
                    "the NVIDIA driver supports CUDA {}, older than the {} this program needs: \
                     update the driver",
                    format_version(version),
                    format_version(MIN_DRIVER_VERSION)
                ),
            });
        }
        let count = driver.device_count().on(DeviceIndex::new(0))?;
        if count <= 0 {
            return Err(driver_error(
                DeviceIndex::new(0),
                CUresult::CUDA_ERROR_NO_DEVICE,
                "cuDeviceGetCount",
            ));
        }
        tracing::debug!(
            devices = count,
            driver_version = version,
            "CUDA backend ready"
        );
        Ok(CudaBackend {
            inner: Arc::new(Inner {
                driver,
                devices: (0..count as usize).map(|_| OnceLock::new()).collect(),
                opening: Mutex::new(()),
                driver_version: version,
                host: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The driver's CUDA version as `cuDriverGetVersion` reports it: 1000 x major + 10 x minor
    /// (12040 is CUDA 12.4).
    pub fn driver_version(&self) -> i32 {
        self.inner.driver_version
    }

    /// Everything read about `device` when it was opened (its first use).
    pub fn properties(&self, device: DeviceIndex) -> Result<&CudaDeviceProperties, BackendError> {
        Ok(&self.device(device)?.properties)
    }

    /// The name of `device`, such as `NVIDIA H100 80GB HBM3`.
    pub fn device_name(&self, device: DeviceIndex) -> Result<&str, BackendError> {
        Ok(&self.properties(device)?.name)
    }

    /// Compute capability of `device` as (major, minor).
    pub fn compute_capability(&self, device: DeviceIndex) -> Result<(u32, u32), BackendError> {
        Ok(self.properties(device)?.compute_capability)
    }

    /// Memory on `device`, in bytes.
    pub fn total_memory_bytes(&self, device: DeviceIndex) -> Result<usize, BackendError> {
        Ok(self.properties(device)?.total_memory_bytes)
    }

    /// cudarc's context over the primary context this backend uses on `device`. Make streams
    /// with it (`context.new_stream()`) for buffers and kernels on memory from this backend.
    pub fn context(&self, device: DeviceIndex) -> Result<Arc<CudaContext>, BackendError> {
        Ok(Arc::clone(&self.device(device)?.context))
    }

    /// Bytes of device memory this backend has handed out and not taken back on `device`.
    pub fn allocated_bytes(&self, device: DeviceIndex) -> Result<usize, BackendError> {
        Ok(self.device(device)?.allocated_bytes())
    }

    /// Bytes of device memory mapped into expandable segments' address ranges on `device`.
    pub fn mapped_bytes(&self, device: DeviceIndex) -> Result<usize, BackendError> {
        Ok(self.device(device)?.address_space.mapped_bytes())
    }

    /// Number of live segments on `device`.
    pub fn segment_count(&self, device: DeviceIndex) -> Result<usize, BackendError> {
        Ok(self.device(device)?.segment_count())
    }

    /// Bytes of pinned host memory this backend has handed out and not taken back.
    pub fn host_allocated_bytes(&self) -> usize {
        self.inner.host.lock().values().sum()
    }

    /// The [`StreamId`] the allocator knows `stream` by: its `CUstream` handle value.
    pub fn stream_id(stream: &CudaStream) -> StreamId {
        StreamId::from_raw(stream.cu_stream() as u64)
    }

    /// The device whose primary context `stream` belongs to: `device` for the default streams
    /// (the call makes `device`'s context current) and for streams of `device`, else the one
    /// whose primary context it is, checked in order (opening them). A stream of a context
    /// that is no device's primary one is left to `device`, where the driver refuses it.
    fn stream_device(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<DeviceIndex, BackendError> {
        // CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2), like the null stream, are the
        // current context's.
        if stream.raw() <= 2 {
            return Ok(device);
        }
        let driver = self.inner.driver;
        // SAFETY: `stream.0` is a `CUstream` handle value the caller keeps alive while it has
        // work queued (the contract of `record_stream`); a destroyed one is reported by the
        // driver as an error (`CUDA_ERROR_INVALID_HANDLE`), which is this call's.
        let context = unsafe { driver.stream_context(stream.raw() as sys::CUstream) }.on(device)?;
        if self.device(device)?.context.cu_ctx() == context {
            return Ok(device);
        }
        Ok((0..self.inner.devices.len())
            .map(DeviceIndex::new)
            .filter(|&d| d != device)
            .find(|&other| {
                self.device(other)
                    .is_ok_and(|d| d.context.cu_ctx() == context)
            })
            .unwrap_or(device))
    }

    /// Device `device`, opened on its first use.
    fn device(&self, device: DeviceIndex) -> Result<&CudaDevice, BackendError> {
        let slot = self
            .inner
            .devices
            .get(device.get())
            .ok_or(BackendError::InvalidDevice {
                device,
                device_count: self.inner.devices.len(),
            })?;
        if let Some(opened) = slot.get() {
            return Ok(opened);
        }
        let _opening = self.inner.opening.lock();
        if let Some(opened) = slot.get() {
            return Ok(opened);
        }
        // `CudaContext::new` makes the primary context current: the caller's is put back.
        let _current = ContextGuard::save(self.inner.driver)?;
        let opened = CudaDevice::open(self.inner.driver, device)?;
        tracing::debug!(device = device.get(), "CUDA device opened");
        Ok(slot.get_or_init(|| opened))
    }
}

/// `12040` as `12.4`.
fn format_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opened: Vec<(DeviceIndex, &str)> = self
            .inner
            .devices
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                d.get()
                    .map(|d| (DeviceIndex::new(i), d.properties.name.as_str()))
            })
            .collect();
        f.debug_struct("CudaBackend")
            .field("driver_version", &self.inner.driver_version)
            .field("devices", &self.inner.devices.len())
            .field("opened", &opened)
            .finish()
    }
}

impl Backend for CudaBackend {
    type Event = CudaBackendEvent;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    fn mem_get_info(&self, device: DeviceIndex) -> Result<MemInfo, BackendError> {
        self.device(device)?.mem_get_info()
    }

    fn alloc_segment(&self, device: DeviceIndex, size_bytes: usize) -> Result<u64, BackendError> {
        self.device(device)?.alloc_segment(size_bytes)
    }

    fn free_segment(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.free_segment(ptr, size_bytes)
    }

    fn record_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<CudaBackendEvent, BackendError> {
        // An event must be made in its stream's context: a block of device 0 used on a stream
        // of device 1 (`record_stream`) gets device 1's event, as PyTorch's allocator records
        // it under a guard of the stream's device.
        let owner = self.stream_device(device, stream)?;
        let raw = self.device(owner)?.record_event(stream)?;
        Ok(CudaBackendEvent {
            device: owner,
            stream,
            raw,
        })
    }

    /// `cuStreamWaitEvent` in the context of the stream's device (the event may be another
    /// device's, as CUDA allows).
    fn stream_wait_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
        event: &CudaBackendEvent,
    ) -> Result<(), BackendError> {
        let owner = self.stream_device(device, stream)?;
        self.device(owner)?.stream_wait_event(stream, &event.raw)
    }

    fn query_event(&self, event: &CudaBackendEvent) -> Result<bool, BackendError> {
        self.device(event.device)?.query_event(&event.raw)
    }

    fn synchronize_event(&self, event: &CudaBackendEvent) -> Result<(), BackendError> {
        self.device(event.device)?.synchronize_event(&event.raw)
    }

    fn release_event(&self, event: CudaBackendEvent) {
        match self.device(event.device) {
            Ok(device) => device.release_event(event.raw),
            Err(e) => tracing::warn!("leaking an event of another backend: {e}"),
        }
    }

    fn alloc_host(&self, size_bytes: usize) -> Result<u64, BackendError> {
        if size_bytes == 0 {
            return Err(BackendError::HostOutOfMemory { requested_bytes: 0 });
        }
        // Pinned memory belongs to no device, but the driver wants a current context: device
        // 0's primary, which the backend keeps alive as long as the memory (a caller's context
        // could be destroyed under it), and the caller's is current again afterwards.
        let _current = self.device(DeviceIndex::new(0))?.make_current()?;
        // Portable: pinned for every context, as the allocator's host cache serves all devices.
        let ptr = self
            .inner
            .driver
            .host_alloc_portable(size_bytes)
            .map_err(|e| host_alloc_error(e.code, size_bytes))?;
        let addr = ptr as u64;
        self.inner.host.lock().insert(addr, size_bytes);
        Ok(addr)
    }

    fn supports_expandable_segments(&self, device: DeviceIndex) -> bool {
        let Some(slot) = self.inner.devices.get(device.get()) else {
            return false;
        };
        if let Some(opened) = slot.get() {
            return opened.properties.virtual_memory_supported;
        }
        // Not opened yet, and asking must not open it (the allocator asks for every device):
        // the device attribute, which needs no context. Opening also checks the granularity.
        let driver = self.inner.driver;
        let attribute =
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED;
        i32::try_from(device.get())
            .ok()
            .and_then(|ordinal| driver.device(ordinal).ok())
            .and_then(|handle| driver.device_attribute(handle, attribute).ok())
            .is_some_and(|supported| supported > 0)
    }

    fn reserve_address_range(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
    ) -> Result<u64, BackendError> {
        self.device(device)?.reserve_address_range(size_bytes)
    }

    fn release_address_range(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.release_address_range(ptr, size_bytes)
    }

    fn map_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.map_memory(ptr, size_bytes)
    }

    fn unmap_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.unmap_memory(ptr, size_bytes)
    }

    fn free_host(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let mut host = self.inner.host.lock();
        if host.get(&ptr) != Some(&size_bytes) {
            return Err(BackendError::UnknownHostAllocation { ptr, size_bytes });
        }
        let _current = self.device(DeviceIndex::new(0))?.make_current()?;
        // SAFETY: 1. `ptr` came from `cuMemHostAlloc` and is still live (it is in `host`,
        // removed only here, under the lock); 2. the host cache frees memory only after the
        // events recorded after its asynchronous copies have completed.
        unsafe { self.inner.driver.free_host(ptr as *mut std::ffi::c_void) }
            .on(DeviceIndex::new(0))?;
        host.remove(&ptr);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI has no driver: creating the backend must say so, typed, without a panic.
    #[test]
    fn new_without_a_driver_is_a_typed_error_not_a_panic() {
        if Library::open().is_some() {
            // A machine with a driver: creating must not panic either way.
            let _ = CudaBackend::new();
            return;
        }
        let err = CudaBackend::new().expect_err("no libcuda here, so no backend");
        match &err {
            BackendError::Driver {
                device,
                code,
                name,
                message,
            } => {
                assert_eq!(*device, DeviceIndex::new(0));
                assert_eq!(
                    *code, 303,
                    "the missing library uses the shared-object code"
                );
                assert_eq!(name, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED");
                assert!(
                    message.contains("libcuda"),
                    "must name the library: {message}"
                );
                assert!(message.contains("install the NVIDIA driver"), "{message}");
            }
            other => panic!("expected a driver error, got {other:?}"),
        }
        assert!(!err.is_out_of_memory(), "a missing driver is not retryable");
        let text = err.to_string();
        assert!(text.contains("driver error 303"), "{text}");
    }

    #[test]
    fn versions_print_as_major_dot_minor() {
        assert_eq!(format_version(12040), "12.4");
        assert_eq!(format_version(MIN_DRIVER_VERSION), "11.4");
        assert_eq!(format_version(13000), "13.0");
    }
}
