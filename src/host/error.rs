//! What the pinned host cache can refuse: [`HostError`].
//!
//! Out-of-memory ([`HostError::OutOfMemory`]) is the one retryable failure: it is returned only
//! after the cache was released and the request retried, so what is left to free is held by the
//! program (live buffers, or freed ones whose copies are still running). A size that overflows
//! never fits; pointer misuse is a bug in the caller and fails the same way every time.

use crate::backend::BackendError;
use crate::error::format_size;

/// Result with the host cache's [`HostError`].
pub type HostResult<T, E = HostError> = std::result::Result<T, E>;

/// Everything the pinned host cache can refuse. Every error leaves the cache valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// The backend could not pin `rounded_bytes` more bytes, even after the cache was released.
    /// Retryable: drop pinned buffers (or let their copies finish) and try again.
    #[error(
        "out of pinned host memory: cannot allocate {} (a request of {} rounded up to a power \
         of two) even after releasing {} of cached pinned memory; {} is still in use or waiting \
         for copies to finish: drop pinned buffers that are no longer needed, or wait for their \
         streams",
        format_size(*rounded_bytes as u64),
        format_size(*requested_bytes as u64),
        format_size(*released_bytes as u64),
        format_size(*active_bytes as u64)
    )]
    OutOfMemory {
        /// Bytes asked for.
        requested_bytes: usize,
        /// The request rounded up to a power of two, what the backend was asked for.
        rounded_bytes: usize,
        /// Cached bytes given back to the backend before the retry.
        released_bytes: usize,
        /// Bytes of blocks in use or waiting for events when the retry failed.
        active_bytes: usize,
        /// What the backend answered to the retry.
        source: BackendError,
    },
    /// The size cannot be rounded up to a power of two (it is above `usize::MAX / 2 + 1`).
    /// Never fits.
    #[error(
        "cannot allocate {requested_bytes} bytes of pinned host memory: the size overflows when \
         rounded up to a power of two"
    )]
    SizeTooLarge {
        /// The size asked for, in bytes.
        requested_bytes: usize,
    },
    /// A free named an address this allocator never handed out (or already gave back to the
    /// backend with `empty_cache`).
    #[error(
        "pointer {ptr:#x} is not a pinned allocation of this host allocator: free only the \
         exact address `malloc` returned"
    )]
    UnknownPointer {
        /// The pointer given.
        ptr: u64,
    },
    /// The pointer was handed out here and has already been freed.
    #[error("double free: pinned pointer {ptr:#x} was already freed")]
    DoubleFree {
        /// The pointer given.
        ptr: u64,
    },
    /// A raw free named memory an owning [`HostAllocation`](super::HostAllocation) holds;
    /// freeing it here would free it twice.
    #[error(
        "pinned pointer {ptr:#x} is owned by a `HostAllocation`: drop the handle (or call its \
         `free`) instead of freeing the pointer"
    )]
    OwnedByHandle {
        /// The pointer given.
        ptr: u64,
    },
    /// An event was recorded for an address that lies in no block this allocator handed out,
    /// so the allocator cannot protect it (pageable memory, or another allocator's).
    #[error(
        "cannot record an event for {ptr:#x}: that address is not pinned memory from this host \
         allocator"
    )]
    NotFromThisAllocator {
        /// The address given.
        ptr: u64,
    },
    /// An event was recorded for a block that has been freed.
    #[error(
        "use after free: pinned block at {ptr:#x} was already freed, record events before \
         freeing it"
    )]
    UseAfterFree {
        /// The address given.
        ptr: u64,
    },
    /// The backend failed in a way other than running out of pinned memory.
    #[error("pinned memory backend failed to {op}: {source}")]
    Backend {
        /// What the allocator asked of the backend.
        op: &'static str,
        /// The backend's error.
        source: BackendError,
    },
    /// The cache's own bookkeeping disagrees with itself: a bug in blockpool. The operation was
    /// abandoned; please report it with the message.
    #[error("blockpool host cache invariant violated: {what}; this is a bug in blockpool")]
    InvariantViolated {
        /// Which invariant.
        what: &'static str,
    },
}

impl HostError {
    /// Whether freeing memory may let the same request succeed (only out-of-memory).
    pub fn is_retryable(&self) -> bool {
        matches!(self, HostError::OutOfMemory { .. })
    }

    pub(super) fn backend(op: &'static str) -> impl FnOnce(BackendError) -> HostError {
        move |source| HostError::Backend { op, source }
    }
}
