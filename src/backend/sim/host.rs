//! Pinned host memory as the simulated backend plays it: real, zeroed host allocations aligned
//! to a 4 KiB page (as `cuMemHostAlloc` returns them), an optional capacity for out-of-memory
//! tests, and counters.

use super::super::BackendError;
use std::collections::HashMap;

/// The alignment of simulated pinned allocations.
pub const HOST_PAGE: usize = 4096;

/// One page; a `Vec` of them is page-aligned without `unsafe`.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; HOST_PAGE]);

/// How many host-memory calls a [`SimBackend`](super::SimBackend) has served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimHostCalls {
    /// Pinned allocations that succeeded.
    pub host_allocs: u64,
    /// Pinned allocations refused (out of host memory, or 0 bytes).
    pub failed_host_allocs: u64,
    /// Pinned frees that succeeded.
    pub host_frees: u64,
    /// Frees refused because no such allocation was handed out.
    pub failed_host_frees: u64,
}

/// The live pinned allocations.
pub(super) struct HostMemory {
    live: HashMap<u64, (Vec<Page>, usize)>,
    bytes: usize,
    capacity: usize,
    pub(super) calls: SimHostCalls,
}

impl HostMemory {
    /// No allocations; at most `capacity` bytes live at once.
    pub(super) fn new(capacity: usize) -> HostMemory {
        HostMemory {
            live: HashMap::new(),
            bytes: 0,
            capacity,
            calls: SimHostCalls::default(),
        }
    }

    /// Bytes live, as asked for.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// `size_bytes` of zeroed, page-aligned host memory.
    pub(super) fn alloc(&mut self, size_bytes: usize) -> Result<u64, BackendError> {
        let fits = self
            .bytes
            .checked_add(size_bytes)
            .is_some_and(|total| total <= self.capacity);
        if size_bytes == 0 || !fits {
            self.calls.failed_host_allocs += 1;
            return Err(BackendError::HostOutOfMemory {
                requested_bytes: size_bytes,
            });
        }
        let mut pages = vec![Page([0; HOST_PAGE]); size_bytes.div_ceil(HOST_PAGE)];
        let ptr = pages.as_mut_ptr() as u64;
        self.live.insert(ptr, (pages, size_bytes));
        self.bytes += size_bytes;
        self.calls.host_allocs += 1;
        Ok(ptr)
    }

    /// Frees the allocation at `ptr`, which must have been `size_bytes` long.
    pub(super) fn free(&mut self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        match self.live.get(&ptr) {
            Some(&(_, size)) if size == size_bytes => {
                self.live.remove(&ptr);
                self.bytes -= size_bytes;
                self.calls.host_frees += 1;
                Ok(())
            }
            _ => {
                self.calls.failed_host_frees += 1;
                Err(BackendError::UnknownHostAllocation { ptr, size_bytes })
            }
        }
    }
}
