//! Where raw memory, streams and events come from.
//!
//! A [`Backend`] is a device driver seen from the allocator: it hands out and takes back whole
//! segments, reports free and total memory, and records events on streams so the allocator can
//! tell when work that used a block has finished. [`SimBackend`] simulates devices for tests,
//! replays and docs; `CudaBackend` (in [`cuda`](crate::cuda), feature `cuda`) implements the
//! trait over NVIDIA's driver. Nothing here knows about CUDA: the CUDA module imports this one,
//! never the other way.

pub(crate) mod address_ranges;
mod sim;

pub use sim::{
    SimAllocHook, SimBackend, SimBackendBuilder, SimCalls, SimEvent, SimFault, SimHostCalls,
    HOST_PAGE, MAPPING_GRANULARITY,
};

use std::fmt;

/// Index of a device, as CUDA numbers them (`0..device_count`).
pub type DeviceIndex = usize;

/// A stream on which device work is queued, as a plain value the allocator can order and hash.
///
/// On CUDA this is the `CUstream` handle value; on [`SimBackend`] any number names a stream.
/// [`StreamId::DEFAULT`] is the legacy default stream (handle 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The default stream (handle value 0).
    pub const DEFAULT: StreamId = StreamId(0);
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

/// A failure reported by a [`Backend`].
///
/// Out-of-memory is kept apart from every other failure: the allocator answers it by releasing
/// cached memory and retrying, and passes everything else straight to the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The device could not provide `requested_bytes` more bytes. Retryable: freeing memory
    /// (for example with `empty_cache`) may let the same request succeed.
    #[error("device {device} is out of memory allocating {requested_bytes} bytes")]
    OutOfMemory {
        /// Device that refused.
        device: DeviceIndex,
        /// Size of the refused segment, in bytes.
        requested_bytes: usize,
    },
    /// The device index does not name a device of this backend.
    #[error("device {device} does not exist (this backend has {device_count} device(s))")]
    InvalidDevice {
        /// The index asked for.
        device: DeviceIndex,
        /// Number of devices the backend has.
        device_count: usize,
    },
    /// A segment free named memory this backend did not hand out (an allocator bug).
    #[error("device {device} has no segment at {ptr:#x} of {size_bytes} bytes")]
    UnknownSegment {
        /// Device of the free.
        device: DeviceIndex,
        /// Address passed to the free.
        ptr: u64,
        /// Size passed to the free, in bytes.
        size_bytes: usize,
    },
    /// Waiting on an event would never return (a simulated hung stream).
    #[error("an event on {stream} of device {device} will never complete")]
    EventNeverCompletes {
        /// Device of the event.
        device: DeviceIndex,
        /// Stream the event was recorded on.
        stream: StreamId,
    },
    /// A failure the simulated device was told to inject.
    #[error("injected device failure on device {device}: {what}")]
    InjectedFault {
        /// Device of the failing call.
        device: DeviceIndex,
        /// Which call failed.
        what: &'static str,
    },
    /// The host could not provide `requested_bytes` of page-locked memory.
    #[error("out of pinned host memory allocating {requested_bytes} bytes")]
    HostOutOfMemory {
        /// Size of the refused allocation, in bytes.
        requested_bytes: usize,
    },
    /// A pinned-memory free named memory this backend did not hand out (an allocator bug).
    #[error("no pinned host allocation at {ptr:#x} of {size_bytes} bytes")]
    UnknownHostAllocation {
        /// Address passed to the free.
        ptr: u64,
        /// Size passed to the free, in bytes.
        size_bytes: usize,
    },
    /// An event recorded by a backend of another kind was handed to this one (only possible
    /// when calling [`Backend`] methods directly; the allocator never mixes backends).
    #[error(
        "an event recorded on device {device} of the {event_backend} backend was given to the \
         {backend} backend; wait on an event with the backend that recorded it"
    )]
    ForeignEvent {
        /// Device the event was recorded on.
        device: DeviceIndex,
        /// The backend that recorded it.
        event_backend: &'static str,
        /// The backend it was given to.
        backend: &'static str,
    },
    /// The backend cannot do `what` on this device (for example expandable segments on a
    /// backend or driver without virtual memory management). Never fits: check
    /// [`Backend::supports_expandable_segments`] first, or turn `expandable_segments` off.
    #[error(
        "device {device} does not support {what}; turn expandable_segments off (the allocator \
         falls back to fixed segments on its own when the backend says it cannot map memory)"
    )]
    Unsupported {
        /// Device of the refused call.
        device: DeviceIndex,
        /// What was asked for, such as `"reserving address ranges"`.
        what: &'static str,
    },
    /// A call named a reserved address range this backend did not hand out, or gave it with
    /// another size (an allocator bug).
    #[error("device {device} has no reserved address range at {ptr:#x} of {size_bytes} bytes")]
    UnknownAddressRange {
        /// Device of the call.
        device: DeviceIndex,
        /// Address passed.
        ptr: u64,
        /// Size passed, in bytes.
        size_bytes: usize,
    },
    /// An address range was released while memory is still mapped in it (an allocator bug:
    /// unmap every chunk first).
    #[error(
        "device {device} cannot release the address range at {ptr:#x}: {mapped_bytes} bytes are \
         still mapped in it; unmap them first"
    )]
    AddressRangeInUse {
        /// Device of the call.
        device: DeviceIndex,
        /// Address of the range.
        ptr: u64,
        /// Bytes still mapped inside it.
        mapped_bytes: usize,
    },
    /// A map or unmap named memory that cannot be mapped or unmapped there (an allocator bug):
    /// outside every reserved range, overlapping a mapping, not exactly one earlier mapping,
    /// empty, or not aligned to the mapping granularity.
    #[error("device {device} cannot {what} {size_bytes} bytes at {ptr:#x}: {reason}")]
    BadMapping {
        /// Device of the call.
        device: DeviceIndex,
        /// `"reserve"` (with `ptr` 0), `"map"` or `"unmap"`.
        what: &'static str,
        /// Address passed.
        ptr: u64,
        /// Size passed, in bytes.
        size_bytes: usize,
        /// Why it was refused.
        reason: &'static str,
    },
    /// Any other driver error, with the driver's own code and name.
    #[error("driver error {code} ({name}) on device {device}: {message}")]
    Driver {
        /// Device of the failing call.
        device: DeviceIndex,
        /// The driver's numeric error code.
        code: i32,
        /// The driver's name for the code, such as `CUDA_ERROR_LAUNCH_FAILED`.
        name: String,
        /// What the driver or the wrapper said.
        message: String,
    },
}

impl BackendError {
    /// Whether freeing memory may let the failed request succeed.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            BackendError::OutOfMemory { .. } | BackendError::HostOutOfMemory { .. }
        )
    }
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
