//! [`BackendError`]: what a device can refuse, with out-of-memory kept apart from the rest.

#[cfg(doc)]
use super::Backend;
use super::{DeviceIndex, StreamId};

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
