//! The device as the allocator sees it: the [`Backend`] trait, and the plain values it deals
//! in (device indices, stream ids, free and total memory).

use super::BackendError;
#[cfg(doc)]
use super::SimBackend;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a device, as CUDA numbers them (`0..device_count`).
///
/// The allocator's index-taking methods take anything that converts into one, a plain
/// `usize` included (`alloc.memory_stats(0)`), as PyTorch's `torch.cuda.*(device)` functions
/// take an int.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeviceIndex(usize);

impl DeviceIndex {
    /// Device `index`.
    pub const fn new(index: usize) -> DeviceIndex {
        DeviceIndex(index)
    }

    /// The index as a number, to index per-device tables.
    pub const fn get(self) -> usize {
        self.0
    }
}

impl From<usize> for DeviceIndex {
    fn from(index: usize) -> DeviceIndex {
        DeviceIndex(index)
    }
}

impl fmt::Display for DeviceIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The number alone, as before the index had a type of its own: errors and reports that
/// print their fields with `{:?}` read `device: 3`, not `device: DeviceIndex(3)`.
impl fmt::Debug for DeviceIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A stream on which device work is queued, as a plain value the allocator can order and hash.
///
/// On CUDA this is the `CUstream` handle value; on [`SimBackend`] any number names a stream.
/// [`StreamId::DEFAULT`] is the legacy default stream (handle 0).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct StreamId(u64);

impl StreamId {
    /// The default stream (handle value 0).
    pub const DEFAULT: StreamId = StreamId(0);

    /// The stream whose handle value is `raw`: a `CUstream` on CUDA, any number on
    /// [`SimBackend`].
    pub const fn from_raw(raw: u64) -> StreamId {
        StreamId(raw)
    }

    /// The stream's handle value, as [`StreamId::from_raw`] took it.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream {:#x}", self.0)
    }
}

/// Free and total memory of a device, in bytes, as `cuMemGetInfo` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// Bytes the device can still hand out, to anyone.
    pub free_bytes: usize,
    /// Bytes the device has in all.
    pub total_bytes: usize,
}

/// A device as the caching allocator sees it.
///
/// Implementations must be cheap to call concurrently from several threads: the allocator calls
/// a backend while holding the lock of one device only, and with `release_lock_on_cudamalloc`
/// calls [`Backend::alloc_segment`] without it, alongside any other call on the same device.
pub trait Backend: Send + Sync + 'static {
    /// An event recorded on a stream; completes once the work queued before it has run.
    type Event: Send + 'static;

    /// Short name for messages and traces, such as `"sim"` or `"cuda"`.
    fn name(&self) -> &'static str;

    /// Number of devices.
    fn device_count(&self) -> usize;

    /// Free and total memory of `device`.
    fn mem_get_info(&self, device: DeviceIndex) -> Result<MemInfo, BackendError>;

    /// Allocates a segment of `size_bytes` bytes on `device` and returns its address.
    ///
    /// Fails with [`BackendError::OutOfMemory`] when the device has no room, which the
    /// allocator treats as retryable.
    fn alloc_segment(&self, device: DeviceIndex, size_bytes: usize) -> Result<u64, BackendError>;

    /// Returns a segment obtained from [`Backend::alloc_segment`] with the same size.
    ///
    /// Must not return before work already queued that may use the segment has finished, as
    /// `cuMemFree` waits for the device: the allocator frees only cached segments, whose last
    /// uses may still be running on their streams.
    fn free_segment(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError>;

    /// Records an event on `stream` of `device`, after all work queued there so far.
    fn record_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<Self::Event, BackendError>;

    /// Makes the work queued on `stream` of `device` from now on wait, on the device, until
    /// the work before `event` has completed; never blocks the host (`cuStreamWaitEvent`).
    /// The allocator releases `event` right after: a wait keeps its own hold on the event.
    ///
    /// The allocator calls this only under `stream_reuse:ordered`, to hand memory cached for
    /// one stream to another without a host synchronization. The default fails with
    /// [`BackendError::Unsupported`], and the allocator then keeps each stream's cache to
    /// itself, as under the default policy.
    fn stream_wait_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
        event: &Self::Event,
    ) -> Result<(), BackendError> {
        let _ = (stream, event);
        Err(BackendError::Unsupported {
            device,
            what: "waiting on an event from a stream",
        })
    }

    /// Whether the work before `event` has completed; never blocks.
    fn query_event(&self, event: &Self::Event) -> Result<bool, BackendError>;

    /// Blocks until the work before `event` has completed.
    fn synchronize_event(&self, event: &Self::Event) -> Result<(), BackendError>;

    /// Gives an event back once the allocator no longer needs it (backends may recycle it).
    fn release_event(&self, event: Self::Event);

    /// Allocates `size_bytes` of page-locked host memory, which devices copy to and from
    /// asynchronously (`cuMemHostAlloc`), and returns its address.
    ///
    /// Fails with [`BackendError::HostOutOfMemory`] when the host has no room (or for 0
    /// bytes), which the host cache treats as retryable.
    fn alloc_host(&self, size_bytes: usize) -> Result<u64, BackendError>;

    /// Returns host memory obtained from [`Backend::alloc_host`] with the same size.
    fn free_host(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError>;

    /// Whether `device` can back expandable segments: reserved virtual address ranges that are
    /// mapped to physical memory chunk by chunk. Defaults to false.
    ///
    /// When false, an allocator configured with `expandable_segments:True` falls back to
    /// fixed segments (and says so once through `tracing` at warn level), as PyTorch does
    /// when the driver lacks virtual memory management.
    fn supports_expandable_segments(&self, device: DeviceIndex) -> bool {
        let _ = device;
        false
    }

    /// Reserves `size_bytes` of virtual address space on `device` (no memory behind it yet)
    /// and returns its start (`cuMemAddressReserve`).
    ///
    /// The default fails with [`BackendError::Unsupported`].
    fn reserve_address_range(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
    ) -> Result<u64, BackendError> {
        let _ = size_bytes;
        Err(BackendError::Unsupported {
            device,
            what: "reserving address ranges",
        })
    }

    /// Frees a range from [`Backend::reserve_address_range`] (same size); nothing may be mapped
    /// in it (`cuMemAddressFree`).
    ///
    /// The default fails with [`BackendError::Unsupported`].
    fn release_address_range(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let _ = (ptr, size_bytes);
        Err(BackendError::Unsupported {
            device,
            what: "releasing address ranges",
        })
    }

    /// Creates `size_bytes` of physical memory and maps it read/write at `ptr`, inside a
    /// reserved range (`cuMemCreate`, `cuMemMap`, `cuMemSetAccess`). Out of memory is the
    /// retryable [`BackendError::OutOfMemory`].
    ///
    /// The allocator maps in units of its pool's segment size (2 MiB for the small pool,
    /// 20 MiB for the large one), one call per unit. The default fails with
    /// [`BackendError::Unsupported`].
    fn map_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let _ = (ptr, size_bytes);
        Err(BackendError::Unsupported {
            device,
            what: "mapping memory",
        })
    }

    /// Unmaps and frees exactly one earlier [`Backend::map_memory`]`(ptr, size_bytes)`
    /// (`cuMemUnmap`, `cuMemRelease`).
    ///
    /// As [`Backend::free_segment`], must not unmap before work already queued that may use
    /// the memory has finished; `cuMemUnmap` does not wait by itself (`CudaBackend`
    /// synchronizes the device first).
    ///
    /// The default fails with [`BackendError::Unsupported`].
    fn unmap_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let _ = (ptr, size_bytes);
        Err(BackendError::Unsupported {
            device,
            what: "unmapping memory",
        })
    }
}
