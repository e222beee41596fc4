//! The [`CachingAllocator`] itself and the state its clones and handles share: one
//! [`DeviceAllocator`] per device behind a mutex, the live raw pointers, and the free-memory
//! callbacks run (with no lock held) when a request misses the cache. History recording lives
//! in `history.rs`, the owning [`Allocation`] handle in `handle.rs`, the raw-pointer API
//! (`malloc`, `free`, `record_stream` by address) in `raw.rs`.

#[cfg(doc)]
use super::device_view::DeviceView;
use super::handle::Allocation;
use crate::backend::{Backend, DeviceIndex, MemInfo, StreamId};
use crate::config::AllocatorConfig;
use crate::error::{Error, Result};
use crate::event::{ContextId, ContextLevel, EventStamp};
use crate::leak::{LeakTracking, Origin, TeardownReport};
use crate::pool::{AllocatedBlock, BlockId, DeviceAllocator, MallocStep};
use crate::stats::{DeviceStats, MemoryStats};
use dashmap::DashMap;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// A callback run when a request misses the cache, before the allocator asks the device for
/// more memory: it should drop whatever memory its owner can spare and return whether it freed
/// anything. It runs without any allocator lock held, so it may free allocations.
///
/// A callback runs at most once per request: an allocation made from inside a callback does not
/// run the callbacks again.
pub type FreeMemoryCallback = Box<dyn Fn() -> bool + Send + Sync>;

thread_local! {
    /// Set while this thread runs free-memory callbacks, so that they are not re-entered.
    static IN_CALLBACKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as running callbacks until dropped, even if a callback panics.
struct CallbacksRunning;

impl CallbacksRunning {
    fn enter() -> Self {
        IN_CALLBACKS.set(true);
        CallbacksRunning
    }
}

impl Drop for CallbacksRunning {
    fn drop(&mut self) {
        IN_CALLBACKS.set(false);
    }
}

/// A block-pool caching allocator with PyTorch's semantics, over every device of `B`.
///
/// Cloning is cheap and shares the allocator. When the last clone and the last handle are
/// gone, every cached segment goes back to the backend (after waiting for pending deferred
/// frees), so dropping an allocator leaks no device memory; only raw allocations from
/// [`malloc`](Self::malloc) never given to [`free`](Self::free) are left, with a warning.
///
/// Dropping the last `CachingAllocator` value (handles may outlive it) with allocations still
/// live reports them, grouped by site, through `tracing` at warn level
/// ([`set_teardown_report`](Self::set_teardown_report); [`shutdown`](Self::shutdown) returns
/// the report instead). Leak tracking is on by default at [`LeakTracking::Sites`]
/// ([`set_leak_tracking`](Self::set_leak_tracking)).
///
/// Methods that take a device index mirror PyTorch's `torch.cuda.*(device)` functions; the
/// [`DeviceView`] from [`device`](Self::device) has the same calls without the index, and
/// returns plain values where the index was the only thing that could fail.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 80 << 30), AllocatorConfig::default());
/// let a = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
/// assert_eq!(a.size(), 4096);
/// let ptr = a.ptr();
/// drop(a);
/// // The block went back to the cache and is handed out again without a device call.
/// let b = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
/// assert_eq!(b.ptr(), ptr);
/// let stats = alloc.memory_stats(0)?;
/// assert_eq!(stats["num_device_alloc"], 1);
/// drop(b);
/// alloc.empty_cache()?;
/// assert_eq!(alloc.memory_stats(0)?["reserved_bytes.all.current"], 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CachingAllocator<B: Backend> {
    pub(super) shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for CachingAllocator<B> {
    fn clone(&self) -> Self {
        // Relaxed: the count only has to reach zero once, on the last drop (`leaks.rs`).
        self.shared.owners.fetch_add(1, Ordering::Relaxed);
        CachingAllocator {
            shared: Arc::clone(&self.shared),
        }
    }
}

pub(super) struct Shared<B: Backend> {
    pub(super) backend: B,
    pub(super) config: AllocatorConfig,
    pub(super) devices: Box<[Mutex<DeviceAllocator<B::Event>>]>,
    /// Live raw allocations: address -> (device, block).
    pub(super) raw: DashMap<u64, (DeviceIndex, BlockId)>,
    pub(super) callbacks: RwLock<Vec<Arc<FreeMemoryCallback>>>,
    pub(super) has_callbacks: AtomicBool,
    /// History recording: 0 when off, else 1 + the [`ContextLevel`] (one load on the hot path).
    pub(super) recording: AtomicU8,
    /// Whether contexts include call stacks ([`Backtraces::Rust`](crate::trace::Backtraces)).
    pub(super) stacks: AtomicBool,
    /// When recording started, in nanoseconds since [`clock_base`].
    pub(super) recording_since_ns: AtomicU64,
    /// When recording started, in microseconds since the Unix epoch (for trace files).
    pub(super) recording_since_unix_us: AtomicU64,
    /// What the live tables record: a [`LeakTracking`] as its index in `LeakTracking::ALL`.
    pub(super) leak_tracking: AtomicU8,
    /// What dropping the last `CachingAllocator` says: a [`TeardownReport`] by index.
    pub(super) teardown: AtomicU8,
    /// Number of `CachingAllocator` values (not handles) sharing this state: the teardown
    /// report is made when the last one drops, whatever handles still hold the state.
    pub(super) owners: AtomicUsize,
    /// The contexts this allocator's events, blocks and live allocations refer to.
    pub(super) contexts: Arc<crate::event::ContextTable>,
    /// Serializes `record_memory_history` and `stream_history_to` calls.
    pub(super) history_settings: Mutex<()>,
    /// The stream the devices buffer events for, while one runs (`sink.rs`).
    #[cfg(feature = "trace-files")]
    pub(super) stream: Mutex<Option<Arc<crate::trace::jsonl::StreamState>>>,
}

impl<B: Backend> CachingAllocator<B> {
    /// An allocator over every device of `backend`. Nothing is allocated until asked for.
    ///
    /// With `expandable_segments:True`, devices whose backend cannot map memory
    /// ([`Backend::supports_expandable_segments`]) fall back to fixed segments, said once
    /// through `tracing` at warn level; when no device can, the configuration the allocator
    /// reports (in snapshots and traces) has expandable segments off, as PyTorch's does.
    /// With `release_lock_on_cudamalloc:True`, a device's lock is released while its fixed
    /// segments are allocated, as PyTorch releases its lock around `cudaMalloc`.
    pub fn new(backend: B, config: AllocatorConfig) -> Self {
        let device_count = backend.device_count();
        let unsupported: Vec<DeviceIndex> = (0..device_count)
            .map(DeviceIndex::new)
            .filter(|&d| config.expandable_segments() && !backend.supports_expandable_segments(d))
            .collect();
        if !unsupported.is_empty() {
            tracing::warn!(
                "expandable_segments:True, but the {} backend cannot map memory on device(s) \
                 {unsupported:?}; those use fixed segments",
                backend.name()
            );
        }
        let devices = (0..device_count)
            .map(DeviceIndex::new)
            .map(|d| {
                let device_config = if unsupported.contains(&d) {
                    config.without_expandable_segments()
                } else {
                    config.clone()
                };
                Mutex::new(DeviceAllocator::new(d, device_config))
            })
            .collect();
        let config = if device_count > 0 && unsupported.len() == device_count {
            config.without_expandable_segments()
        } else {
            config
        };
        CachingAllocator {
            shared: Arc::new(Shared {
                backend,
                config,
                devices,
                raw: DashMap::new(),
                callbacks: RwLock::new(Vec::new()),
                has_callbacks: AtomicBool::new(false),
                recording: AtomicU8::new(0),
                stacks: AtomicBool::new(false),
                recording_since_ns: AtomicU64::new(0),
                recording_since_unix_us: AtomicU64::new(0),
                leak_tracking: AtomicU8::new(LeakTracking::default().index()),
                teardown: AtomicU8::new(TeardownReport::default().index()),
                owners: AtomicUsize::new(1),
                contexts: Arc::default(),
                history_settings: Mutex::new(()),
                #[cfg(feature = "trace-files")]
                stream: Mutex::new(None),
            }),
        }
    }

    /// The backend this allocator draws memory from.
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }

    /// The settings this allocator runs with.
    pub fn config(&self) -> &AllocatorConfig {
        &self.shared.config
    }

    /// Number of devices.
    pub fn device_count(&self) -> usize {
        self.shared.devices.len()
    }

    pub(super) fn lock_device(
        &self,
        device: DeviceIndex,
    ) -> Result<MutexGuard<'_, DeviceAllocator<B::Event>>> {
        self.shared.lock(device)
    }

    /// Allocates `size_bytes` bytes on `device` for use on `stream`, returning an owning
    /// handle that frees the block when dropped.
    ///
    /// A zero-byte request is valid: it gets a handle with a null pointer and no device memory.
    ///
    /// The handle's site ([`Allocation::site`]) is the caller's source location: leak reports
    /// group by it.
    #[track_caller]
    #[inline]
    pub fn allocate(
        &self,
        device: impl Into<DeviceIndex>,
        size_bytes: usize,
        stream: StreamId,
    ) -> Result<Allocation<B>> {
        let device = device.into();
        self.allocate_at(device, size_bytes, stream, None, Location::caller())
    }

    /// [`allocate`](Self::allocate) for a call made at `site`.
    #[inline]
    pub(super) fn allocate_at(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
        stream: StreamId,
        name: Option<Arc<str>>,
        site: &'static Location<'static>,
    ) -> Result<Allocation<B>> {
        let created = self.shared.recording_stamp(ContextLevel::State);
        let details = self.shared.details(name.as_ref(), created);
        let (created_ns, leak_context) = details
            .as_ref()
            .map_or((0, ContextId::NONE), |d| (d.created_ns, d.context));
        let origin = Origin {
            site,
            raw: false,
            details,
        };
        let block = if size_bytes == 0 {
            self.shared.check_device(device)?;
            None
        } else {
            Some(
                self.shared
                    .malloc(device, size_bytes, stream, created, origin)?,
            )
        };
        Ok(Allocation {
            shared: Arc::clone(&self.shared),
            device,
            block,
            requested: size_bytes,
            stream,
            created,
            site,
            name,
            created_ns,
            leak_context,
        })
    }

    /// Registers a callback run when a request misses the cache (see [`FreeMemoryCallback`]).
    pub fn add_free_memory_callback(&self, callback: FreeMemoryCallback) {
        self.shared.callbacks.write().push(Arc::new(callback));
        self.shared.has_callbacks.store(true, Ordering::Release);
    }

    /// Waits for pending deferred frees, then returns every wholly free segment of every
    /// device to the device. Segments holding a live block stay.
    pub fn empty_cache(&self) -> Result<()> {
        let mut first_error = Ok(());
        for device in self.devices() {
            let result = device.empty_cache();
            if first_error.is_ok() {
                first_error = result;
            }
        }
        first_error
    }

    /// A copy of `device`'s statistics ([`DeviceView::stats`]).
    pub fn device_stats(&self, device: impl Into<DeviceIndex>) -> Result<DeviceStats> {
        let device = device.into();
        Ok(self.device(device)?.stats())
    }

    /// Statistics of `device` as flat keys, exactly as `torch.cuda.memory_stats()` names them
    /// ([`DeviceView::memory_stats`]).
    pub fn memory_stats(&self, device: impl Into<DeviceIndex>) -> Result<MemoryStats> {
        let device = device.into();
        Ok(self.device(device)?.memory_stats())
    }

    /// Sets every peak statistic of `device` to its current value.
    pub fn reset_peak_memory_stats(&self, device: impl Into<DeviceIndex>) -> Result<()> {
        let device = device.into();
        self.device(device)?.reset_peak_memory_stats();
        Ok(())
    }

    /// Zeroes the accumulated totals and counters of `device`.
    pub fn reset_accumulated_memory_stats(&self, device: impl Into<DeviceIndex>) -> Result<()> {
        let device = device.into();
        self.device(device)?.reset_accumulated_memory_stats();
        Ok(())
    }

    /// PyTorch's `memory_summary()` table for `device` ([`DeviceView::memory_summary`]).
    pub fn memory_summary(&self, device: impl Into<DeviceIndex>) -> Result<String> {
        let device = device.into();
        Ok(self.device(device)?.memory_summary())
    }

    /// Free and total memory of `device`, as the backend reports them.
    pub fn mem_get_info(&self, device: impl Into<DeviceIndex>) -> Result<MemInfo> {
        let device = device.into();
        self.device(device)?.mem_get_info()
    }

    /// Caps what this allocator may reserve on `device` at `fraction` of its capacity; requests
    /// beyond it fail with out-of-memory. Nothing on the device changes.
    pub fn set_per_process_memory_fraction(
        &self,
        fraction: f64,
        device: impl Into<DeviceIndex>,
    ) -> Result<()> {
        let device = device.into();
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidMemoryFraction { fraction });
        }
        self.lock_device(device)?
            .set_memory_fraction(&self.shared.backend, fraction)
    }

    /// The fraction of `device`'s capacity this allocator may reserve: the one
    /// [`set_per_process_memory_fraction`](Self::set_per_process_memory_fraction) set last,
    /// else the configuration's `per_process_memory_fraction`; `None` when neither caps it.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// assert_eq!(alloc.memory_fraction(0)?, None);
    /// alloc.set_per_process_memory_fraction(0.5, 0)?;
    /// assert_eq!(alloc.memory_fraction(0)?, Some(0.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_fraction(&self, device: impl Into<DeviceIndex>) -> Result<Option<f64>> {
        let device = device.into();
        Ok(self.lock_device(device)?.fraction)
    }
}

impl<B: Backend> Shared<B> {
    pub(super) fn check_device(&self, device: DeviceIndex) -> Result<()> {
        if device < DeviceIndex::new(self.devices.len()) {
            Ok(())
        } else {
            Err(Error::InvalidDevice {
                device,
                device_count: self.devices.len(),
            })
        }
    }

    #[inline]
    pub(super) fn lock(
        &self,
        device: DeviceIndex,
    ) -> Result<MutexGuard<'_, DeviceAllocator<B::Event>>> {
        match self.devices.get(device.get()) {
            Some(d) => Ok(d.lock()),
            None => Err(Error::InvalidDevice {
                device,
                device_count: self.devices.len(),
            }),
        }
    }

    /// Allocates a block for a call stamped `stamp` ([`Shared::recording_stamp`]) made at
    /// `origin`, recording it in the device's live table unless tracking is off.
    #[inline]
    pub(super) fn malloc(
        &self,
        device: DeviceIndex,
        size: usize,
        stream: StreamId,
        stamp: Option<EventStamp>,
        origin: Origin,
    ) -> Result<AllocatedBlock> {
        let stamp = stamp.unwrap_or_default();
        let mut dev = self.lock(device)?;
        self.set_call(&mut dev, stamp, &origin);
        if let Some(block) = dev.malloc_cached(&self.backend, size, stream)? {
            return Ok(block);
        }
        self.malloc_missed(device, dev, size, stream, stamp, &origin)
    }

    /// Hands a call's stamp and origin to the device's observers each time the call takes
    /// the device lock: the origin only while leak tracking is on, read here under the lock
    /// (`Shared::tracks`).
    #[inline(always)]
    fn set_call(&self, dev: &mut DeviceAllocator<B::Event>, stamp: EventStamp, origin: &Origin) {
        let origin = self.tracks().then(|| origin.clone());
        dev.observers.set_call(stamp, origin);
    }

    /// The rest of [`Shared::malloc`] after the cache had no block: callbacks, then the
    /// device. Kept out of line so the cache-hit path stays small.
    #[inline(never)]
    fn malloc_missed<'a>(
        &'a self,
        device: DeviceIndex,
        mut dev: MutexGuard<'a, DeviceAllocator<B::Event>>,
        size: usize,
        stream: StreamId,
        stamp: EventStamp,
        origin: &Origin,
    ) -> Result<AllocatedBlock> {
        // A miss. Free-memory callbacks run first (unless there are none, or this allocation
        // is made inside one); as in PyTorch, the cache is searched again only if one of them
        // freed something.
        let mut search_again = false;
        if self.has_callbacks.load(Ordering::Acquire) && !IN_CALLBACKS.get() {
            drop(dev);
            search_again = self.run_free_memory_callbacks(device);
            dev = self.lock(device)?;
            self.set_call(&mut dev, stamp, origin);
        }
        let step = dev.start_malloc(&self.backend, size, stream, search_again)?;
        if dev.config().release_lock_on_cudamalloc() {
            self.finish_unlocked(device, dev, step, stamp, origin)
        } else {
            dev.finish_malloc(&self.backend, step)
        }
    }

    /// Runs every free-memory callback with no lock held (neither a device's nor the list's,
    /// so a callback may free, allocate or register callbacks); whether one freed memory.
    fn run_free_memory_callbacks(&self, device: DeviceIndex) -> bool {
        let callbacks: Vec<Arc<FreeMemoryCallback>> = self.callbacks.read().clone();
        let freed = {
            let _running = CallbacksRunning::enter();
            callbacks
                .iter()
                .fold(false, |freed, callback| callback() | freed)
        };
        tracing::debug!(
            device = device.get(),
            freed,
            "free-memory callbacks ran after a cache miss"
        );
        freed
    }

    /// `release_lock_on_cudamalloc`: drives `step` to its end as
    /// [`DeviceAllocator::finish_malloc`] does, but with the device lock released around each
    /// segment allocation, as PyTorch releases its mutex around `cudaMalloc`, so other threads
    /// allocate and free from the cache meanwhile.
    fn finish_unlocked(
        &self,
        device: DeviceIndex,
        mut dev: MutexGuard<'_, DeviceAllocator<B::Event>>,
        mut step: MallocStep,
        stamp: EventStamp,
        origin: &Origin,
    ) -> Result<AllocatedBlock> {
        loop {
            let request = match step {
                MallocStep::Done(block) => return Ok(block),
                MallocStep::Device(request) => request,
            };
            let size = request.segment_size;
            let answer =
                MutexGuard::unlocked(&mut dev, || self.backend.alloc_segment(device, size));
            // Another thread's call may have set its stamp and origin while the lock was down.
            self.set_call(&mut dev, stamp, origin);
            step = dev.finish_segment(&self.backend, request, answer)?;
        }
    }

    /// Frees block `id` of `device`. It stops being live here, at the free request, even when
    /// the free itself waits for other streams (`record_stream`): the caller let it go.
    #[inline]
    pub(super) fn free(&self, device: DeviceIndex, id: BlockId) -> Result<()> {
        let stamp = self.stamp(ContextLevel::All);
        let mut dev = self.lock(device)?;
        dev.observers.set_event_stamp(stamp);
        dev.free(&self.backend, id)
    }
}

impl<B: Backend> Drop for Shared<B> {
    /// Gives every cached segment back to the backend (after waiting for pending deferred
    /// frees), as `empty_cache` does, so dropping an allocator leaks no device memory; then
    /// hands a running stream the events the devices still buffer, so dropping the allocator
    /// before its stream loses nothing (the releases included).
    ///
    /// Only raw allocations (`malloc` without `free`) can still be live here: their segments
    /// are left to the backend, with a warning.
    fn drop(&mut self) {
        let stamp = self.stamp(ContextLevel::All);
        for (device, allocator) in self.devices.iter_mut().enumerate() {
            let allocator = allocator.get_mut();
            allocator.observers.set_event_stamp(stamp);
            if let Err(e) = allocator.empty_cache(&self.backend) {
                tracing::warn!(
                    device,
                    "cached segments could not all be given back when the allocator was \
                     dropped: {e}"
                );
            }
        }
        if !self.raw.is_empty() {
            tracing::warn!(
                "{} raw allocation(s) never freed are left to the backend with their segments",
                self.raw.len()
            );
        }
        #[cfg(feature = "trace-files")]
        self.end_stream();
    }
}

impl<B: Backend> fmt::Debug for CachingAllocator<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingAllocator")
            .field("backend", &self.shared.backend.name())
            .field("devices", &self.device_count())
            .finish()
    }
}
