//! [`DeviceView`]: one device of a [`CachingAllocator`], and [`CachingAllocator::device`] /
//! [`CachingAllocator::devices`] that hand one out.
//!
//! The device index is checked once, when the view is made, so a view's methods return plain
//! values where the index was the only thing that could go wrong (`stats`, `memory_summary`,
//! the resets), and a `Result` only where something else can fail: the device (out of
//! memory, `mem_get_info`), a raw pointer, or an argument. The index-taking methods of
//! [`CachingAllocator`] stay for parity with PyTorch's `torch.cuda.*(device)` functions and
//! give the same answers.

use super::caching::CachingAllocator;
use super::handle::Allocation;
use crate::backend::{Backend, DeviceIndex, MemInfo, StreamId};
use crate::error::{Error, Result};
use crate::event::{ContextLevel, TraceEvent};
use crate::pool::DeviceAllocator;
use crate::stats::{memory_summary, DeviceStats, MemoryStats};
use parking_lot::{Mutex, MutexGuard};
use std::fmt;

/// One device of a [`CachingAllocator`], from [`CachingAllocator::device`]: the allocator's
/// per-device API without a device index to get wrong.
///
/// A view borrows the allocator and is `Copy`; it holds no lock (each call takes the device's
/// lock for its own duration), so keeping one around blocks nobody.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
///
/// let alloc = CachingAllocator::new(SimBackend::new(2, 1 << 30), AllocatorConfig::default());
/// let dev = alloc.device(1)?; // the index is checked here, once
/// let a = dev.allocate(4096, StreamId::DEFAULT)?;
/// assert_eq!(a.device().get(), 1);
/// assert_eq!(dev.stats().allocated_bytes.all.current, 4096);
/// assert_eq!(dev.stats().reserved_bytes.small_pool.current, 2 << 20);
/// assert_eq!(dev.memory_stats()["allocated_bytes.small_pool.current"], 4096);
/// drop(a);
/// dev.empty_cache()?;
/// assert_eq!(dev.stats().reserved_bytes.all.current, 0);
/// print!("{}", dev.memory_summary());
/// assert!(matches!(
///     alloc.device(2),
///     Err(Error::InvalidDevice { device, device_count: 2 }) if device.get() == 2
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceView<'a, B: Backend> {
    alloc: &'a CachingAllocator<B>,
    index: DeviceIndex,
    pool: &'a Mutex<DeviceAllocator<B::Event>>,
}

impl<B: Backend> CachingAllocator<B> {
    /// The view of device `index`, whose methods need no index; [`Error::InvalidDevice`] when
    /// `index` is not below [`device_count`](Self::device_count).
    #[inline]
    pub fn device(&self, index: impl Into<DeviceIndex>) -> Result<DeviceView<'_, B>> {
        let index = index.into();
        match self.shared.devices.get(index.get()) {
            Some(pool) => Ok(DeviceView {
                alloc: self,
                index,
                pool,
            }),
            None => Err(Error::InvalidDevice {
                device: index,
                device_count: self.shared.devices.len(),
            }),
        }
    }

    /// A view of every device, in index order.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(2, 1 << 30), AllocatorConfig::default());
    /// for dev in alloc.devices() {
    ///     assert_eq!(dev.stats().reserved_bytes.all.current, 0, "device {}", dev.index());
    /// }
    /// ```
    pub fn devices(&self) -> impl ExactSizeIterator<Item = DeviceView<'_, B>> + '_ {
        self.shared
            .devices
            .iter()
            .enumerate()
            .map(|(index, pool)| DeviceView {
                alloc: self,
                index: DeviceIndex::new(index),
                pool,
            })
    }
}

impl<'a, B: Backend> DeviceView<'a, B> {
    /// The device's index.
    pub fn index(&self) -> DeviceIndex {
        self.index
    }

    /// The allocator this is a device of.
    pub fn allocator(&self) -> &'a CachingAllocator<B> {
        self.alloc
    }

    fn lock(&self) -> MutexGuard<'a, DeviceAllocator<B::Event>> {
        self.pool.lock()
    }

    /// Allocates `size_bytes` bytes on this device for use on `stream`, as
    /// [`CachingAllocator::allocate`]: an owning handle that frees the block when dropped.
    /// Fails only when the device cannot provide the memory. Its site is the caller's line.
    #[track_caller]
    pub fn allocate(&self, size_bytes: usize, stream: StreamId) -> Result<Allocation<B>> {
        self.alloc.allocate(self.index, size_bytes, stream)
    }

    /// [`allocate`](Self::allocate) with a name, as [`CachingAllocator::allocate_named`].
    #[track_caller]
    pub fn allocate_named(
        &self,
        size_bytes: usize,
        stream: StreamId,
        name: &str,
    ) -> Result<Allocation<B>> {
        self.alloc
            .allocate_named(self.index, size_bytes, stream, name)
    }

    /// Raw allocation for C callers, as [`CachingAllocator::malloc`]: the device address (0
    /// for a zero-byte request), to be given back with [`DeviceView::free`].
    #[track_caller]
    pub fn malloc(&self, size_bytes: usize, stream: StreamId) -> Result<u64> {
        self.alloc.malloc(self.index, size_bytes, stream)
    }

    /// Frees a pointer returned by [`DeviceView::malloc`] (or [`CachingAllocator::malloc`] on
    /// this device). Freeing 0 does nothing; unknown pointers, double frees and pointers of
    /// another device are errors that change nothing.
    pub fn free(&self, ptr: u64) -> Result<()> {
        self.alloc.free(self.index, ptr)
    }

    /// Marks the raw allocation `ptr` of this device as used on `stream`, as
    /// [`CachingAllocator::record_stream`].
    pub fn record_stream(&self, ptr: u64, stream: StreamId) -> Result<()> {
        self.alloc.record_stream(self.index, ptr, stream)
    }

    /// A copy of the device's statistics, typed: `stats().allocated_bytes.all.current`.
    pub fn stats(&self) -> DeviceStats {
        self.lock().stats().clone()
    }

    /// The device's statistics as flat keys, exactly as `torch.cuda.memory_stats()` names
    /// them: `memory_stats()["allocated_bytes.all.current"]`.
    pub fn memory_stats(&self) -> MemoryStats {
        self.lock().stats().to_flat()
    }

    /// Sets every peak statistic of the device to its current value.
    pub fn reset_peak_memory_stats(&self) {
        self.lock().stats_mut().reset_peak();
    }

    /// Zeroes the accumulated totals and counters of the device.
    pub fn reset_accumulated_memory_stats(&self) {
        self.lock().stats_mut().reset_accumulated();
    }

    /// PyTorch's `memory_summary()` table for the device.
    pub fn memory_summary(&self) -> String {
        memory_summary(self.index.get(), &self.stats(), false)
    }

    /// Free and total memory of the device, as the backend reports them.
    pub fn mem_get_info(&self) -> Result<MemInfo> {
        Ok(self.alloc.shared.backend.mem_get_info(self.index)?)
    }

    /// Caps what the allocator may reserve on this device at `fraction` (in `0.0..=1.0`) of
    /// its capacity, as [`CachingAllocator::set_per_process_memory_fraction`].
    pub fn set_per_process_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.alloc
            .set_per_process_memory_fraction(fraction, self.index)
    }

    /// The fraction of the device's capacity the allocator may reserve, as
    /// [`CachingAllocator::memory_fraction`].
    pub fn memory_fraction(&self) -> Option<f64> {
        self.lock().fraction
    }

    /// Waits for the device's pending deferred frees, then returns each of its wholly free
    /// segments to the device, as [`CachingAllocator::empty_cache`] does for every device.
    pub fn empty_cache(&self) -> Result<()> {
        let shared = &self.alloc.shared;
        let stamp = shared.stamp(ContextLevel::All);
        let mut dev = self.lock();
        dev.observers.set_event_stamp(stamp);
        dev.empty_cache(&shared.backend)
    }

    /// The device's live allocations grouped by site, as [`CachingAllocator::live_snapshot`].
    pub fn live_snapshot(&self) -> crate::leak::LiveSnapshot {
        let entries = self.lock().live_records(|_| true);
        crate::leak::LiveSnapshot::from_allocations(
            self.index,
            super::leaks::describe(&self.alloc.shared.contexts, self.index, entries),
        )
    }

    /// The device's recorded events, oldest first (empty when history is off; see
    /// [`CachingAllocator::record_memory_history`]).
    pub fn history(&self) -> Vec<TraceEvent> {
        self.lock().history()
    }
}

impl<B: Backend> Clone for DeviceView<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for DeviceView<'_, B> {}

impl<B: Backend> fmt::Debug for DeviceView<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceView")
            .field("backend", &self.alloc.shared.backend.name())
            .field("index", &self.index)
            .finish()
    }
}
