//! Errors: one typed enum for the whole crate.
//!
//! Out-of-memory ([`Error::OutOfMemory`]) is the one failure that is *retryable*: memory freed
//! by the program, or released with `empty_cache` by another part of it, can make the same
//! request succeed. Requests that can never fit ([`Error::SizeTooLarge`],
//! [`Error::ExceedsCapacity`]) and misuse (unknown pointers, bad configuration, wrong device)
//! will fail again no matter what is freed. Every error leaves the allocator valid.

use crate::backend::{BackendError, DeviceIndex, StreamId};
use crate::config::ConfigError;
use std::fmt;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the allocator can refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device has no room for the request, even after the allocator released what it could.
    /// Retryable: free memory (drop handles, `empty_cache`) and try again.
    #[error(transparent)]
    OutOfMemory(Box<OutOfMemoryError>),
    /// The size cannot be represented after rounding (it is near `usize::MAX`). Never fits.
    #[error("cannot allocate {requested_bytes} bytes: the size overflows when rounded up to the allocator's block granularity")]
    SizeTooLarge {
        /// The size asked for, in bytes.
        requested_bytes: usize,
    },
    /// The request is larger than the device's whole capacity (or its memory limit), so no
    /// amount of freeing can satisfy it. Never fits.
    #[error("cannot allocate {} on device {device}: that is more than the {} the device can ever provide{}", format_size(*requested_bytes as u64), format_size(*limit_bytes as u64), if *limited { " under its memory fraction" } else { "" })]
    ExceedsCapacity {
        /// Device asked.
        device: DeviceIndex,
        /// Bytes the allocator would need from the device: the segment size, or with
        /// expandable segments the request rounded up to whole mapping units.
        requested_bytes: usize,
        /// Total capacity, or the memory-fraction limit when `limited`.
        limit_bytes: usize,
        /// Whether `limit_bytes` is a memory-fraction limit rather than the capacity.
        limited: bool,
    },
    /// The device index does not exist.
    #[error("device {device} does not exist: this allocator manages {device_count} device(s)")]
    InvalidDevice {
        /// The index asked for.
        device: DeviceIndex,
        /// Number of devices.
        device_count: usize,
    },
    /// The pointer was never handed out by this allocator as a live raw allocation.
    #[error("pointer {ptr:#x} is not a live allocation of this allocator on device {device}")]
    UnknownPointer {
        /// Device searched.
        device: DeviceIndex,
        /// The pointer given.
        ptr: u64,
    },
    /// The pointer was allocated here and has already been freed.
    #[error("double free: pointer {ptr:#x} on device {device} was already freed")]
    DoubleFree {
        /// Device of the pointer.
        device: DeviceIndex,
        /// The pointer given.
        ptr: u64,
    },
    /// The pointer was allocated here and has been freed, so it cannot be used any more (for
    /// example recorded on a stream).
    #[error("use after free: pointer {ptr:#x} on device {device} was already freed")]
    UseAfterFree {
        /// Device of the pointer.
        device: DeviceIndex,
        /// The pointer given.
        ptr: u64,
    },
    /// The pointer belongs to another device than the one named in the call.
    #[error("pointer {ptr:#x} belongs to device {actual}, not to device {given}")]
    WrongDevice {
        /// The pointer given.
        ptr: u64,
        /// Device named in the call.
        given: DeviceIndex,
        /// Device that owns the pointer.
        actual: DeviceIndex,
    },
    /// A memory fraction outside `[0, 1]` (or not a number).
    #[error("memory fraction {fraction} is invalid: it must be between 0 and 1")]
    InvalidMemoryFraction {
        /// The fraction given.
        fraction: f64,
    },
    /// History recording settings that cannot be honoured (see
    /// [`CachingAllocator::record_memory_history`](crate::CachingAllocator::record_memory_history)).
    /// Nothing was changed.
    #[error("invalid history settings: {reason}")]
    InvalidHistorySettings {
        /// What is wrong.
        reason: &'static str,
    },
    /// The allocator configuration is malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The device failed. Out of memory normally arrives as [`Error::OutOfMemory`], with the
    /// allocator's numbers; a device that reports it from another call (creating an event,
    /// say) gives this variant holding [`BackendError::OutOfMemory`], which stays retryable
    /// ([`Error::is_retryable`]). Any other device failure is not.
    #[error("device error: {0}")]
    Backend(BackendError),
    /// The allocator's own bookkeeping disagrees with itself: a bug in blockpool. The operation
    /// was abandoned; please report it with the message.
    #[error("blockpool invariant violated: {what}; this is a bug in blockpool")]
    InvariantViolated {
        /// Which invariant.
        what: &'static str,
    },
}

/// The numbers behind an out-of-memory failure, as PyTorch's message gives them.
///
/// Built only by the allocator (more numbers may be added); read its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutOfMemoryError {
    /// Device that ran out.
    pub device: DeviceIndex,
    /// Stream of the request.
    pub stream: StreamId,
    /// Bytes the caller asked for.
    pub requested_bytes: usize,
    /// The request after rounding, in bytes.
    pub rounded_bytes: usize,
    /// Bytes the allocator tried to obtain from the device (the segment size).
    pub allocation_bytes: usize,
    /// Total capacity of the device.
    pub device_total_bytes: usize,
    /// Free memory the device reported.
    pub device_free_bytes: usize,
    /// The memory-fraction limit, if one is set.
    pub limit_bytes: Option<usize>,
    /// Bytes held by live allocations of this allocator.
    pub allocated_bytes: usize,
    /// Bytes reserved by this allocator (segments).
    pub reserved_bytes: usize,
}

impl OutOfMemoryError {
    /// Reserved but unallocated bytes: cached memory split by live blocks, which fragmentation
    /// keeps from serving the request.
    pub fn reserved_unallocated_bytes(&self) -> usize {
        self.reserved_bytes.saturating_sub(self.allocated_bytes)
    }
}

impl fmt::Display for OutOfMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory: tried to allocate {}",
            format_size(self.allocation_bytes as u64)
        )?;
        if self.allocation_bytes != self.requested_bytes {
            write!(
                f,
                " (for a request of {})",
                format_size(self.requested_bytes as u64)
            )?;
        }
        write!(
            f,
            ". Device {} has a total capacity of {} of which {} is free. ",
            self.device,
            format_size(self.device_total_bytes as u64),
            format_size(self.device_free_bytes as u64)
        )?;
        if let Some(limit) = self.limit_bytes {
            write!(f, "{} allowed; ", format_size(limit as u64))?;
        }
        write!(
            f,
            "Of the allocated memory {} is allocated by blockpool, and {} is reserved by \
             blockpool but unallocated. If reserved but unallocated memory is large try setting \
             max_split_size_mb or expandable_segments:True in BLOCKPOOL_ALLOC_CONF to avoid \
             fragmentation.",
            format_size(self.allocated_bytes as u64),
            format_size(self.reserved_unallocated_bytes() as u64)
        )
    }
}

impl std::error::Error for OutOfMemoryError {}

impl Error {
    /// Whether freeing memory may let the same request succeed: out-of-memory, whether the
    /// allocator ([`Error::OutOfMemory`]) or the device ([`Error::Backend`] holding
    /// [`BackendError::OutOfMemory`]) said so. Requests that never fit and misuse are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::OutOfMemory(_) => true,
            Error::Backend(e) => e.is_out_of_memory(),
            _ => false,
        }
    }

    /// The out-of-memory details, if this is an out-of-memory error.
    pub fn as_out_of_memory(&self) -> Option<&OutOfMemoryError> {
        match self {
            Error::OutOfMemory(oom) => Some(oom),
            _ => None,
        }
    }
}

/// A device failure the allocator did not handle itself. A device out-of-memory converted here
/// stays retryable (see [`Error::Backend`]).
impl From<BackendError> for Error {
    fn from(e: BackendError) -> Self {
        Error::Backend(e)
    }
}

/// Formats a byte count the way PyTorch's allocator messages do: `"512 bytes"`, `"2.00 KiB"`,
/// `"20.00 MiB"`, `"1.50 GiB"` (two decimals, binary units, bytes up to 1024).
pub fn format_size(size_bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    if size_bytes <= KIB {
        format!("{size_bytes} bytes")
    } else if size_bytes <= MIB {
        format!("{:.2} KiB", size_bytes as f64 / KIB as f64)
    } else if size_bytes <= GIB {
        format!("{:.2} MiB", size_bytes as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", size_bytes as f64 / GIB as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_size_matches_pytorch_units() {
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size(1024), "1024 bytes");
        assert_eq!(format_size(1025), "1.00 KiB");
        assert_eq!(format_size(1 << 20), "1024.00 KiB");
        assert_eq!(format_size(20 << 20), "20.00 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
    }

    #[test]
    fn a_device_out_of_memory_stays_retryable_through_from() {
        let oom = Error::from(BackendError::OutOfMemory {
            device: DeviceIndex::new(0),
            requested_bytes: 4096,
        });
        assert!(oom.is_retryable(), "{oom:?} must stay retryable");
        let host = Error::from(BackendError::HostOutOfMemory {
            requested_bytes: 4096,
        });
        assert!(host.is_retryable(), "{host:?} must stay retryable");
        let driver = Error::from(BackendError::Driver {
            device: DeviceIndex::new(0),
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            message: "an illegal memory access".into(),
        });
        assert!(!driver.is_retryable(), "{driver:?} is not retryable");
        let never = Error::ExceedsCapacity {
            device: DeviceIndex::new(0),
            requested_bytes: 1 << 40,
            limit_bytes: 1 << 30,
            limited: false,
        };
        assert!(!never.is_retryable(), "a request that never fits is not");
    }

    #[test]
    fn out_of_memory_message_names_every_number() {
        let oom = OutOfMemoryError {
            device: DeviceIndex::new(0),
            stream: StreamId::DEFAULT,
            requested_bytes: 12 << 20,
            rounded_bytes: 12 << 20,
            allocation_bytes: 12 << 20,
            device_total_bytes: 80 << 30,
            device_free_bytes: 3 << 20,
            limit_bytes: Some(40 << 30),
            allocated_bytes: 30 << 30,
            reserved_bytes: 39 << 30,
        };
        let msg = oom.to_string();
        assert_eq!(
            msg,
            "out of memory: tried to allocate 12.00 MiB. Device 0 has a total capacity of \
             80.00 GiB of which 3.00 MiB is free. 40.00 GiB allowed; Of the allocated memory \
             30.00 GiB is allocated by blockpool, and 9.00 GiB is reserved by blockpool but \
             unallocated. If reserved but unallocated memory is large try setting \
             max_split_size_mb or expandable_segments:True in BLOCKPOOL_ALLOC_CONF to avoid \
             fragmentation."
        );
    }
}
