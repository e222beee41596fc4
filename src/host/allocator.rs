//! [`HostCachingAllocator`]: the thread-safe pinned host cache over a [`Backend`], and the state
//! its clones and handles share. One `parking_lot` mutex guards the pool; it is released while
//! the backend pins new memory, the slow call, as PyTorch does.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

use super::error::{HostError, HostResult};
use super::handle::HostAllocation;
use super::pool::{round_size, HostPool};
use super::stats::HostStats;
use crate::backend::{Backend, DeviceIndex, StreamId};

/// A cache of pinned (page-locked) host memory with PyTorch's `CachingHostAllocator`
/// semantics, over the host memory of `B` (`cuMemHostAlloc` on CUDA, aligned host memory on
/// [`SimBackend`](crate::SimBackend)).
///
/// Cloning is cheap and shares the cache. When the last clone and handle are gone, queued
/// events are waited for and cached blocks given back; pointers still held from
/// [`HostCachingAllocator::malloc`] are left to the backend (said through `tracing`).
///
/// ```
/// use blockpool::host::HostCachingAllocator;
/// use blockpool::{DeviceIndex, SimBackend, StreamId};
///
/// let sim = SimBackend::new(1, 1 << 30);
/// let host = HostCachingAllocator::new(sim.clone());
/// let buf = host.allocate(1000)?; // rounded up to 1024 bytes
/// assert_eq!(buf.size(), 1024);
/// let ptr = buf.ptr();
/// // An asynchronous copy from `buf` was queued on stream 7 of device 0:
/// buf.record_event(DeviceIndex::new(0), StreamId::from_raw(7))?;
/// drop(buf);
/// let other = host.allocate(1024)?;
/// assert_ne!(other.ptr(), ptr, "the copy may still be reading the first block");
/// sim.complete_stream(DeviceIndex::new(0), StreamId::from_raw(7))?;
/// let again = host.allocate(600)?;
/// assert_eq!(again.ptr(), ptr, "the copy finished: the block is reused");
/// assert_eq!(sim.host_calls().host_allocs, 2);
/// drop((other, again));
/// host.empty_cache()?;
/// assert_eq!(sim.host_allocated_bytes(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HostCachingAllocator<B: Backend> {
    shared: Arc<HostShared<B>>,
}

impl<B: Backend> Clone for HostCachingAllocator<B> {
    fn clone(&self) -> Self {
        HostCachingAllocator {
            shared: Arc::clone(&self.shared),
        }
    }
}

pub(super) struct HostShared<B: Backend> {
    backend: B,
    pool: Mutex<HostPool<B::Event>>,
}

impl<B: Backend> HostCachingAllocator<B> {
    /// An empty cache over the pinned memory of `backend`. Nothing is pinned until asked for.
    pub fn new(backend: B) -> Self {
        HostCachingAllocator {
            shared: Arc::new(HostShared {
                backend,
                pool: Mutex::new(HostPool::new()),
            }),
        }
    }

    /// The backend the memory comes from.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// Pinned memory of at least `size_bytes` bytes (rounded up to a power of two), in an
    /// owning handle that frees it on drop. 0 bytes give an empty handle (address 0) without
    /// touching the cache, as PyTorch returns a null pointer.
    ///
    /// Queued events are processed first; then the newest cached block of the bucket is
    /// reused, or the backend pins a new one. When the backend is out of pinned memory, every
    /// cached block is given back and the request retried once.
    ///
    /// # Errors
    ///
    /// [`HostError::OutOfMemory`] when the retry fails too, [`HostError::SizeTooLarge`] when
    /// the size cannot be rounded, [`HostError::Backend`] for any other backend failure.
    pub fn allocate(&self, size_bytes: usize) -> HostResult<HostAllocation<B>> {
        let (ptr, size) = self.shared.malloc(size_bytes, true)?;
        Ok(HostAllocation::new(
            Arc::clone(&self.shared),
            ptr,
            size,
            size_bytes,
        ))
    }

    /// As [`HostCachingAllocator::allocate`], but returns the bare address (0 for 0 bytes),
    /// to be given back with [`HostCachingAllocator::free`] (for C callers).
    pub fn malloc(&self, size_bytes: usize) -> HostResult<u64> {
        self.shared.malloc(size_bytes, false).map(|(ptr, _)| ptr)
    }

    /// Frees an address from [`HostCachingAllocator::malloc`]; 0 is ignored, as `free(NULL)`.
    /// Blocks recorded on streams are reused only after events recorded now complete.
    ///
    /// # Errors
    ///
    /// [`HostError::UnknownPointer`], [`HostError::DoubleFree`], [`HostError::OwnedByHandle`]
    /// for misuse (nothing changes), [`HostError::Backend`] when an event cannot be recorded
    /// (the block is then never reused, since a stream may still use it).
    pub fn free(&self, ptr: u64) -> HostResult<()> {
        match ptr {
            0 => Ok(()),
            ptr => self.shared.free(ptr, false),
        }
    }

    /// Records that work queued so far on `stream` of `device` uses the pinned memory at `ptr`
    /// (any address inside a block handed out), typically an asynchronous copy: once freed,
    /// the block is not reused before that work completes.
    ///
    /// # Errors
    ///
    /// [`HostError::NotFromThisAllocator`] for an address outside every block of this cache,
    /// [`HostError::UseAfterFree`] for a freed block.
    pub fn record_event(&self, ptr: u64, device: DeviceIndex, stream: StreamId) -> HostResult<()> {
        self.shared.record_event(ptr, device, stream)
    }

    /// Gives every cached block back to the backend (`free_host`), after processing queued
    /// events. Blocks still waiting for events stay until a later call finds them complete.
    ///
    /// # Errors
    ///
    /// [`HostError::Backend`] when an event cannot be queried or a block cannot be freed;
    /// blocks the backend refused stay cached.
    pub fn empty_cache(&self) -> HostResult<()> {
        self.shared.release_cached().map(|_| ())
    }

    /// A copy of the statistics. Like PyTorch, reading them does not process events.
    pub fn stats(&self) -> HostStats {
        self.shared.pool.lock().stats().clone()
    }

    /// Sets every peak to its current value.
    pub fn reset_peak_stats(&self) {
        self.shared.pool.lock().stats_mut().reset_peak();
    }

    /// Zeroes every accumulated total and counter.
    pub fn reset_accumulated_stats(&self) {
        self.shared.pool.lock().stats_mut().reset_accumulated();
    }

    /// Bytes of cached blocks, ready to be handed out again.
    pub fn cached_bytes(&self) -> usize {
        self.shared.pool.lock().cached_bytes()
    }

    /// Events queued for freed blocks and not yet seen complete.
    pub fn pending_events(&self) -> usize {
        self.shared.pool.lock().pending_events()
    }

    /// Checks the cache's bookkeeping: statistics against the blocks, free lists against block
    /// states, event counts against queued events. For tests; an error is a bug in blockpool.
    pub fn check_invariants(&self) -> HostResult<()> {
        self.shared.pool.lock().check_invariants()
    }
}

impl<B: Backend> HostShared<B> {
    /// A block of at least `size_bytes`: its address and rounded size ((0, 0) for 0 bytes).
    fn malloc(&self, size_bytes: usize, by_handle: bool) -> HostResult<(u64, usize)> {
        if size_bytes == 0 {
            return Ok((0, 0));
        }
        let rounded = round_size(size_bytes).ok_or(HostError::SizeTooLarge {
            requested_bytes: size_bytes,
        })?;
        {
            let mut pool = self.pool.lock();
            pool.process_events(&self.backend)?;
            if let Some(ptr) = pool.take_cached(rounded, by_handle) {
                return Ok((ptr, rounded));
            }
        }
        let ptr = match self.backend.alloc_host(rounded) {
            Ok(ptr) => ptr,
            Err(e) if e.is_out_of_memory() => {
                let released_bytes = self.release_cached()?;
                match self.backend.alloc_host(rounded) {
                    Ok(ptr) => ptr,
                    Err(source) if source.is_out_of_memory() => {
                        return Err(HostError::OutOfMemory {
                            requested_bytes: size_bytes,
                            rounded_bytes: rounded,
                            released_bytes,
                            active_bytes: self.active_bytes(),
                            source,
                        })
                    }
                    Err(e) => return Err(HostError::backend("pin host memory")(e)),
                }
            }
            Err(e) => return Err(HostError::backend("pin host memory")(e)),
        };
        if let Err(e) = self.pool.lock().insert(ptr, rounded, by_handle) {
            // Not ours to keep: give it straight back.
            if let Err(free_error) = self.backend.free_host(ptr, rounded) {
                tracing::error!(
                    ptr,
                    "giving back a refused pinned block failed: {free_error}"
                );
            }
            return Err(e);
        }
        Ok((ptr, rounded))
    }

    pub(super) fn free(&self, ptr: u64, by_handle: bool) -> HostResult<()> {
        let mut pool = self.pool.lock();
        let streams = pool.start_free(ptr, by_handle)?;
        let mut result = Ok(());
        for (device, stream) in streams {
            match self.backend.record_event(device, stream) {
                Ok(event) => pool.push_event(event, ptr),
                Err(e) => {
                    pool.strand_event();
                    if result.is_ok() {
                        result = Err(HostError::backend("record an event")(e));
                    }
                }
            }
        }
        result
    }

    pub(super) fn record_event(
        &self,
        ptr: u64,
        device: DeviceIndex,
        stream: StreamId,
    ) -> HostResult<()> {
        self.pool.lock().record_stream(ptr, (device, stream))
    }

    /// `empty_cache`: processes events, then frees every cached block; returns the bytes
    /// freed.
    fn release_cached(&self) -> HostResult<usize> {
        let mut pool = self.pool.lock();
        pool.process_events(&self.backend)?;
        let (released, result) = pool.release_cached(&self.backend);
        result.map(|()| released)
    }

    fn active_bytes(&self) -> usize {
        let current = self.pool.lock().stats().active_bytes.current;
        usize::try_from(current).unwrap_or(0)
    }
}

impl<B: Backend> Drop for HostShared<B> {
    fn drop(&mut self) {
        let pool = self.pool.get_mut();
        if let Err(e) = pool.synchronize_events(&self.backend) {
            tracing::warn!("pinned blocks whose events cannot be waited for are kept: {e}");
        }
        if let (_, Err(e)) = pool.release_cached(&self.backend) {
            tracing::warn!("cached pinned blocks could not all be given back: {e}");
        }
        let live = pool.active_blocks();
        if live > 0 {
            tracing::warn!(
                "{live} pinned block(s) still in use when the host allocator was dropped are \
                 left to the backend"
            );
        }
    }
}

impl<B: Backend> fmt::Debug for HostCachingAllocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pool = self.shared.pool.lock();
        f.debug_struct("HostCachingAllocator")
            .field("backend", &self.shared.backend.name())
            .field("allocated_bytes", &pool.stats().allocated_bytes.current)
            .field("active_bytes", &pool.stats().active_bytes.current)
            .field("pending_events", &pool.pending_events())
            .finish()
    }
}
