//! `CachingAllocator`: the thread-safe allocator over every device of a backend.
//!
//! Each device has its own [`DeviceAllocator`] behind a `parking_lot` mutex, so threads on
//! different devices never contend. Rust callers get an owning [`Allocation`] that frees its
//! block on drop; the raw-pointer API (`malloc` / `free` by address, for the C ABI) keeps live
//! pointers in a sharded `DashMap` instead.

use crate::backend::{Backend, DeviceIndex, MemInfo, StreamId};
use crate::config::AllocatorConfig;
use crate::error::{Error, Result};
use crate::pool::{AllocatedBlock, BlockId, BlockState, DeviceAllocator, SegmentView};
use crate::stats::{memory_summary, DeviceStats, MemoryStats};
use crate::trace::{
    AnnotationSink, Context, ContextId, ContextLevel, EventStamp, HistorySettings, TraceEvent,
};
use dashmap::DashMap;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

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
/// Cloning is cheap and shares the allocator.
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
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for CachingAllocator<B> {
    fn clone(&self) -> Self {
        CachingAllocator {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared<B: Backend> {
    backend: B,
    config: AllocatorConfig,
    devices: Box<[Mutex<DeviceAllocator<B::Event>>]>,
    /// Live raw allocations: address -> (device, block).
    raw: DashMap<u64, (DeviceIndex, BlockId)>,
    callbacks: RwLock<Vec<Arc<FreeMemoryCallback>>>,
    has_callbacks: AtomicBool,
    /// History recording: 0 when off, else 1 + the [`ContextLevel`] (one load on the hot path).
    recording: AtomicU8,
    /// Whether contexts include call stacks ([`Backtraces::Rust`](crate::trace::Backtraces)).
    stacks: AtomicBool,
    /// When recording started, in nanoseconds since [`clock_base`].
    recording_since_ns: AtomicU64,
    /// Serializes `record_memory_history` calls.
    history_settings: Mutex<()>,
}

/// The process's time origin for event times.
fn clock_base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    clock_base().elapsed().as_nanos() as u64
}

const LEVELS: [ContextLevel; 4] = [
    ContextLevel::None,
    ContextLevel::State,
    ContextLevel::Alloc,
    ContextLevel::All,
];

impl<B: Backend> CachingAllocator<B> {
    /// An allocator over every device of `backend`. Nothing is allocated until asked for.
    ///
    /// `expandable_segments` and `release_lock_on_cudamalloc` are accepted but not yet acted
    /// on: segments are fixed-size and the device lock is held while a segment is allocated
    /// (said once through `tracing` at warn level).
    pub fn new(backend: B, config: AllocatorConfig) -> Self {
        if config.expandable_segments() {
            tracing::warn!(
                "expandable_segments is accepted but not implemented yet; using fixed segments"
            );
        }
        if config.release_lock_on_cudamalloc() {
            tracing::warn!("release_lock_on_cudamalloc is accepted but has no effect yet");
        }
        let devices = (0..backend.device_count())
            .map(|d| Mutex::new(DeviceAllocator::new(d, config.clone())))
            .collect();
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
                history_settings: Mutex::new(()),
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

    fn device(&self, device: DeviceIndex) -> Result<MutexGuard<'_, DeviceAllocator<B::Event>>> {
        self.shared.lock(device)
    }

    /// Allocates `size_bytes` bytes on `device` for use on `stream`, returning an owning
    /// handle that frees the block when dropped.
    ///
    /// A zero-byte request is valid: it gets a handle with a null pointer and no device memory.
    pub fn allocate(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
        stream: StreamId,
    ) -> Result<Allocation<B>> {
        let block = if size_bytes == 0 {
            self.shared.check_device(device)?;
            None
        } else {
            Some(self.shared.malloc(device, size_bytes, stream)?)
        };
        Ok(Allocation {
            shared: Arc::clone(&self.shared),
            device,
            block,
            requested: size_bytes,
            stream,
        })
    }

    /// Raw allocation for C callers: returns the device address (0 for a zero-byte request).
    /// Free it with [`CachingAllocator::free`].
    pub fn malloc(&self, device: DeviceIndex, size_bytes: usize, stream: StreamId) -> Result<u64> {
        if size_bytes == 0 {
            self.shared.check_device(device)?;
            return Ok(0);
        }
        let block = self.shared.malloc(device, size_bytes, stream)?;
        self.shared.raw.insert(block.addr, (device, block.id));
        Ok(block.addr)
    }

    /// Frees a pointer returned by [`CachingAllocator::malloc`] on `device`. Freeing 0 does
    /// nothing. Unknown pointers, double frees and the wrong device are errors that change
    /// nothing.
    pub fn free(&self, device: DeviceIndex, ptr: u64) -> Result<()> {
        self.shared.check_device(device)?;
        if ptr == 0 {
            return Ok(());
        }
        match self
            .shared
            .raw
            .remove_if(&ptr, |_, &(owner, _)| owner == device)
        {
            Some((_, (_, id))) => self.shared.free(device, id),
            None => Err(self.shared.explain_bad_pointer(device, ptr)),
        }
    }

    /// Marks the raw allocation `ptr` on `device` as used on `stream`: its memory will not be
    /// reused before the work queued on `stream` by the time it is freed has completed.
    pub fn record_stream(&self, device: DeviceIndex, ptr: u64, stream: StreamId) -> Result<()> {
        self.shared.check_device(device)?;
        if ptr == 0 {
            return Ok(());
        }
        let entry = self.shared.raw.get(&ptr).map(|e| *e.value());
        match entry {
            Some((owner, id)) if owner == device => self.device(device)?.record_stream(id, stream),
            _ => Err(match self.shared.explain_bad_pointer(device, ptr) {
                Error::DoubleFree { device, ptr } => Error::UseAfterFree { device, ptr },
                other => other,
            }),
        }
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
        for device in 0..self.device_count() {
            let stamp = self.shared.stamp(ContextLevel::All);
            let mut dev = self.device(device)?;
            dev.set_event_stamp(stamp);
            let result = dev.empty_cache(&self.shared.backend);
            if first_error.is_ok() {
                first_error = result;
            }
        }
        first_error
    }

    /// A copy of `device`'s statistics.
    pub fn device_stats(&self, device: DeviceIndex) -> Result<DeviceStats> {
        Ok(self.device(device)?.stats().clone())
    }

    /// Statistics of `device` as flat keys, exactly as `torch.cuda.memory_stats()` names them.
    pub fn memory_stats(&self, device: DeviceIndex) -> Result<MemoryStats> {
        Ok(self.device(device)?.stats().to_flat())
    }

    /// Sets every peak statistic of `device` to its current value.
    pub fn reset_peak_memory_stats(&self, device: DeviceIndex) -> Result<()> {
        self.device(device)?.stats_mut().reset_peak();
        Ok(())
    }

    /// Zeroes the accumulated totals and counters of `device`.
    pub fn reset_accumulated_memory_stats(&self, device: DeviceIndex) -> Result<()> {
        self.device(device)?.stats_mut().reset_accumulated();
        Ok(())
    }

    /// PyTorch's `memory_summary()` table for `device`.
    pub fn memory_summary(&self, device: DeviceIndex) -> Result<String> {
        let stats = self.device_stats(device)?;
        Ok(memory_summary(device, &stats, false))
    }

    /// Free and total memory of `device`, as the backend reports them.
    pub fn mem_get_info(&self, device: DeviceIndex) -> Result<MemInfo> {
        self.shared.check_device(device)?;
        Ok(self.shared.backend.mem_get_info(device)?)
    }

    /// Caps what this allocator may reserve on `device` at `fraction` of its capacity; requests
    /// beyond it fail with out-of-memory. Nothing on the device changes.
    pub fn set_per_process_memory_fraction(
        &self,
        fraction: f64,
        device: DeviceIndex,
    ) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidMemoryFraction { fraction });
        }
        self.device(device)?
            .set_memory_fraction(&self.shared.backend, fraction)
    }

    /// Segments of `device` with their blocks, lowest address first.
    pub fn segments(&self, device: DeviceIndex) -> Result<Vec<SegmentView>> {
        Ok(self.device(device)?.segments())
    }

    /// Starts, reconfigures or stops recording the history of every device, as PyTorch's
    /// `torch.cuda.memory._record_memory_history`.
    ///
    /// Each device keeps its newest `settings.max_entries` events in a ring buffer; event times
    /// count microseconds from the call that turned recording on (reconfiguring keeps the
    /// origin and the newest events); an event's time is taken when its call starts, before
    /// it waits for the device lock, and is raised to the previous event's when a waiting
    /// thread brings an earlier one, so each history is in time order. `enabled: false` stops recording and clears every
    /// device's history. Which events carry a context is `settings.context` (see
    /// [`ContextLevel`]); contexts are the thread's [`annotate`](crate::annotate) tags, plus the
    /// call stack with [`Backtraces::Rust`](crate::trace::Backtraces::Rust).
    ///
    /// `max_entries == 0` with `enabled` is refused with
    /// [`Error::InvalidHistorySettings`] and changes nothing (PyTorch clamps it to 1).
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    /// use blockpool::trace::Action;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// drop(alloc.allocate(0, 4096, StreamId::DEFAULT)?);
    /// let actions: Vec<Action> = alloc.history(0)?.iter().map(|e| e.action).collect();
    /// assert_eq!(
    ///     actions,
    ///     [Action::SegmentAlloc, Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
    /// );
    /// alloc.record_memory_history(HistorySettings::DISABLED)?;
    /// assert!(alloc.history(0)?.is_empty(), "turning recording off clears the history");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_memory_history(&self, settings: HistorySettings) -> Result<()> {
        if settings.enabled && settings.max_entries == 0 {
            return Err(Error::InvalidHistorySettings {
                reason: "max_entries must be at least 1",
            });
        }
        let shared = &self.shared;
        let _serial = shared.history_settings.lock();
        let weak: Weak<Shared<B>> = Arc::downgrade(shared);
        let sink: Weak<dyn AnnotationSink> = weak;
        if settings.enabled {
            if shared.recording.load(Ordering::Acquire) == 0 {
                shared.recording_since_ns.store(now_ns(), Ordering::Release);
            }
            let stacks = settings.stacks == crate::trace::Backtraces::Rust;
            shared.stacks.store(stacks, Ordering::Release);
            shared
                .recording
                .store(settings.context as u8 + 1, Ordering::Release);
            for device in shared.devices.iter() {
                device.lock().record_history(&settings);
            }
            crate::trace::register_sink(sink);
        } else {
            crate::trace::unregister_sink(&sink);
            shared.recording.store(0, Ordering::Release);
            for device in shared.devices.iter() {
                device.lock().record_history(&settings);
            }
        }
        Ok(())
    }

    /// The recorded events of `device`, oldest first (empty when history is off).
    pub fn history(&self, device: DeviceIndex) -> Result<Vec<TraceEvent>> {
        Ok(self.device(device)?.history())
    }

    /// The context an event refers to: its annotation tags and call stack. `None` for
    /// [`ContextId::NONE`] and ids never handed out. Contexts are interned process-wide, so an
    /// id means the same in every allocator.
    pub fn context(&self, id: ContextId) -> Option<Context> {
        crate::trace::lookup_context(id)
    }

    /// Checks every bookkeeping invariant of `device` (see `DeviceAllocator::check_invariants`).
    pub fn check_invariants(
        &self,
        device: DeviceIndex,
    ) -> Result<(), crate::pool::InvariantViolation> {
        match self.shared.lock(device) {
            Ok(dev) => dev.check_invariants(),
            Err(e) => Err(crate::pool::InvariantViolation {
                device,
                message: e.to_string(),
            }),
        }
    }
}

impl<B: Backend> Shared<B> {
    fn check_device(&self, device: DeviceIndex) -> Result<()> {
        if device < self.devices.len() {
            Ok(())
        } else {
            Err(Error::InvalidDevice {
                device,
                device_count: self.devices.len(),
            })
        }
    }

    #[inline]
    fn lock(&self, device: DeviceIndex) -> Result<MutexGuard<'_, DeviceAllocator<B::Event>>> {
        match self.devices.get(device) {
            Some(d) => Ok(d.lock()),
            None => Err(Error::InvalidDevice {
                device,
                device_count: self.devices.len(),
            }),
        }
    }

    /// The time and, when the recording level is at least `gather`, the context of a call, for
    /// the events it records. Gathered before taking a device lock: capturing a call stack is
    /// slow. With recording off this is one load and one branch.
    #[inline]
    fn stamp(&self, gather: ContextLevel) -> EventStamp {
        match self.recording.load(Ordering::Relaxed) {
            0 => EventStamp::default(),
            state => self.gather_stamp(state, gather),
        }
    }

    #[inline(never)]
    fn gather_stamp(&self, state: u8, gather: ContextLevel) -> EventStamp {
        let level = LEVELS[usize::from(state - 1).min(LEVELS.len() - 1)];
        let context = if level >= gather {
            crate::trace::current_context(self.stacks.load(Ordering::Relaxed))
        } else {
            ContextId::NONE
        };
        let since = self.recording_since_ns.load(Ordering::Relaxed);
        EventStamp {
            time_us: now_ns().saturating_sub(since) / 1000,
            context,
        }
    }

    fn malloc(&self, device: DeviceIndex, size: usize, stream: StreamId) -> Result<AllocatedBlock> {
        let stamp = self.stamp(ContextLevel::State);
        let mut dev = self.lock(device)?;
        dev.set_event_stamp(stamp);
        if !self.has_callbacks.load(Ordering::Acquire) {
            return dev.malloc(&self.backend, size, stream);
        }
        if IN_CALLBACKS.get() {
            return dev.malloc(&self.backend, size, stream);
        }
        if let Some(block) = dev.malloc_cached(&self.backend, size, stream)? {
            return Ok(block);
        }
        drop(dev);
        // Run the callbacks with no lock held: neither a device's nor the list's, so a callback
        // may free, allocate or register callbacks.
        let callbacks: Vec<Arc<FreeMemoryCallback>> = self.callbacks.read().clone();
        let freed = {
            let _running = CallbacksRunning::enter();
            callbacks
                .iter()
                .fold(false, |freed, callback| callback() | freed)
        };
        tracing::debug!(
            device,
            freed,
            "free-memory callbacks ran after a cache miss"
        );
        let mut dev = self.lock(device)?;
        dev.set_event_stamp(stamp);
        dev.malloc_after_callbacks(&self.backend, size, stream, freed)
    }

    fn free(&self, device: DeviceIndex, id: BlockId) -> Result<()> {
        let stamp = self.stamp(ContextLevel::All);
        let mut dev = self.lock(device)?;
        dev.set_event_stamp(stamp);
        dev.free(&self.backend, id)
    }

    /// Why `ptr` is not a live raw allocation of `device`.
    fn explain_bad_pointer(&self, device: DeviceIndex, ptr: u64) -> Error {
        if let Some(entry) = self.raw.get(&ptr) {
            return Error::WrongDevice {
                ptr,
                given: device,
                actual: entry.value().0,
            };
        }
        for (d, dev) in self.devices.iter().enumerate() {
            let Some((_, state)) = dev.lock().block_at(ptr) else {
                continue;
            };
            if d != device {
                return Error::WrongDevice {
                    ptr,
                    given: device,
                    actual: d,
                };
            }
            if state != BlockState::Allocated {
                return Error::DoubleFree { device, ptr };
            }
        }
        Error::UnknownPointer { device, ptr }
    }
}

impl<B: Backend> AnnotationSink for Shared<B> {
    fn record_annotation(&self) {
        if self.recording.load(Ordering::Acquire) == 0 {
            return;
        }
        let context = crate::trace::current_context(self.stacks.load(Ordering::Relaxed));
        let since = self.recording_since_ns.load(Ordering::Relaxed);
        let stamp = EventStamp {
            time_us: now_ns().saturating_sub(since) / 1000,
            context,
        };
        for device in self.devices.iter() {
            device.lock().record_annotation(stamp);
        }
    }
}

/// An owning handle to device memory from a [`CachingAllocator`]. Dropping it frees the block
/// on its stream (deferred until other streams it was recorded on have finished with it).
pub struct Allocation<B: Backend> {
    shared: Arc<Shared<B>>,
    device: DeviceIndex,
    block: Option<AllocatedBlock>,
    requested: usize,
    stream: StreamId,
}

impl<B: Backend> Allocation<B> {
    /// Device address of the first byte (0 for a zero-byte allocation).
    pub fn ptr(&self) -> u64 {
        self.block.map_or(0, |b| b.addr)
    }

    /// Usable size in bytes: the rounded block size, at least the requested size.
    pub fn size(&self) -> usize {
        self.block.map_or(0, |b| b.size)
    }

    /// Bytes asked for.
    pub fn requested_size(&self) -> usize {
        self.requested
    }

    /// Device of the memory.
    pub fn device(&self) -> DeviceIndex {
        self.device
    }

    /// Stream the memory was allocated on (where it is freed).
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Allocation number on its device, counting from 1 (0 for a zero-byte allocation).
    pub fn id(&self) -> u64 {
        self.block.map_or(0, |b| b.alloc_id)
    }

    /// Marks the memory as used on `stream` too: when freed, it is not reused before the work
    /// queued on `stream` by then has completed.
    pub fn record_stream(&self, stream: StreamId) -> Result<()> {
        match self.block {
            Some(block) => self
                .shared
                .lock(self.device)?
                .record_stream(block.id, stream),
            None => Ok(()),
        }
    }

    /// Frees now, reporting a device failure that dropping would only log.
    pub fn free(mut self) -> Result<()> {
        match self.block.take() {
            Some(block) => self.shared.free(self.device, block.id),
            None => Ok(()),
        }
    }
}

impl<B: Backend> Drop for Allocation<B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            if let Err(e) = self.shared.free(self.device, block.id) {
                tracing::error!(device = self.device, ptr = block.addr, "free failed: {e}");
            }
        }
    }
}

impl<B: Backend> fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocation")
            .field("device", &self.device)
            .field("ptr", &format_args!("{:#x}", self.ptr()))
            .field("size", &self.size())
            .field("requested", &self.requested)
            .field("stream", &self.stream)
            .finish()
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
