//! [`HostAllocation`], the owning handle to pinned memory that
//! [`HostCachingAllocator::allocate`](super::HostCachingAllocator::allocate) returns: its
//! address and sizes, `record_event`, and the free on drop (or the explicit
//! [`HostAllocation::free`] that reports a failure instead of logging it).

use std::fmt;
use std::sync::Arc;

use super::allocator::HostShared;
use super::error::HostResult;
use crate::backend::{Backend, DeviceIndex, StreamId};

/// An owning handle to pinned host memory. Dropping it gives the block back to the cache
/// (reused only after the events of the streams it was recorded on have completed).
pub struct HostAllocation<B: Backend> {
    shared: Arc<HostShared<B>>,
    /// 0 for an empty handle, or once freed.
    ptr: u64,
    size: usize,
    requested: usize,
}

impl<B: Backend> HostAllocation<B> {
    pub(super) fn new(shared: Arc<HostShared<B>>, ptr: u64, size: usize, requested: usize) -> Self {
        HostAllocation {
            shared,
            ptr,
            size,
            requested,
        }
    }

    /// Host address of the first byte (0 for a zero-byte allocation).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Usable size in bytes: the request rounded up to a power of two.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes asked for.
    pub fn requested_size(&self) -> usize {
        self.requested
    }

    /// Whether this is the empty handle of a zero-byte request.
    pub fn is_empty(&self) -> bool {
        self.ptr == 0
    }

    /// The block's bytes (all [`HostAllocation::size`] of them), to read after a
    /// device-to-host copy has completed; empty for an empty handle.
    ///
    /// # Safety
    ///
    /// 1. The backend's [`Backend::alloc_host`] returned initialized host memory, readable for
    ///    the block's size, at this address (true of [`SimBackend`](crate::SimBackend), which
    ///    zeroes it, and of `cuMemHostAlloc`; a custom backend must guarantee it).
    /// 2. No device copy *into* this memory is in flight: synchronize the stream of the last
    ///    copy first.
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.ptr == 0 {
            return &[];
        }
        // SAFETY: 1. the memory is initialized and readable for `size` bytes at `ptr`, by the
        // caller's first obligation; `size` fits in `isize` since it was allocated. 2. Nothing
        // writes it while the borrow of `self` lives: the block is handed out to this handle
        // only, Rust code reaches it only through `&self`/`&mut self`, and devices do not by
        // the caller's second obligation.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.size) }
    }

    /// The block's bytes, to fill before a host-to-device copy; empty for an empty handle.
    ///
    /// # Safety
    ///
    /// 1. As for [`HostAllocation::as_slice`]: initialized host memory, writable for the
    ///    block's size.
    /// 2. No device copy to *or* from this memory is in flight: synchronize the streams of
    ///    earlier copies first.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.ptr == 0 {
            return &mut [];
        }
        // SAFETY: 1. the memory is initialized and writable for `size` bytes at `ptr`, by the
        // caller's first obligation. 2. The borrow is unique: this handle alone holds the block
        // and is borrowed mutably, and no device touches it, by the second obligation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.size) }
    }

    /// Records that work queued so far on `stream` of `device` (an asynchronous copy to or from
    /// this memory) uses the block: once freed, it is not reused before that work completes.
    /// Does nothing for an empty handle.
    pub fn record_event(&self, device: DeviceIndex, stream: StreamId) -> HostResult<()> {
        match self.ptr {
            0 => Ok(()),
            ptr => self.shared.record_event(ptr, device, stream),
        }
    }

    /// Frees now, reporting a failure (an event that could not be recorded) that dropping
    /// would only log.
    pub fn free(mut self) -> HostResult<()> {
        match std::mem::take(&mut self.ptr) {
            0 => Ok(()),
            ptr => self.shared.free(ptr, true),
        }
    }
}

impl<B: Backend> Drop for HostAllocation<B> {
    fn drop(&mut self) {
        let ptr = std::mem::take(&mut self.ptr);
        if ptr != 0 {
            if let Err(e) = self.shared.free(ptr, true) {
                tracing::error!(ptr, "freeing pinned memory failed: {e}");
            }
        }
    }
}

impl<B: Backend> fmt::Debug for HostAllocation<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostAllocation")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .field("requested", &self.requested)
            .finish()
    }
}
