//! A simulated device for tests, trace replays and docs.
//!
//! [`SimBackend`] plays N devices of a given capacity. By default it hands out fake addresses
//! with no memory behind them, so a replay of a 100 GB trace runs on a laptop; the addresses are
//! deterministic (first fit over a per-device address range, lowest address first, like a
//! driver), aligned as `cudaMalloc` aligns, and never overlap, so tests can assert exact values.
//! A host-backed mode puts real zeroed bytes behind each segment for examples that compute.
//!
//! Streams carry virtual work: an event completes only when the test advances its stream (or
//! synchronizes on it), so deferred frees happen exactly when a test says. Faults can be
//! injected (failed allocations, a lower out-of-memory limit, hung streams) and every device
//! call is counted, so tests can check what the allocator asked of the device.
//!
//! All state sits behind one [`Mutex`] per device, inside an [`Arc`]: a clone is a second handle
//! to the same devices, which tests keep after moving the backend into an allocator.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{Backend, BackendError, DeviceIndex, MemInfo, StreamId};

mod device;
mod device_calls;
mod host;
mod placement;
mod streams;
#[cfg(test)]
mod tests;
mod vmm;

use device::Device;
use host::HostMemory;
pub use host::{SimHostCalls, HOST_PAGE};
pub use vmm::MAPPING_GRANULARITY;

/// Capacity of every device when the builder is not given one, in bytes (16 GiB).
const DEFAULT_CAPACITY: usize = 16 << 30;

/// Most pinned host memory live at once when the builder is not given a limit (4 GiB).
const DEFAULT_HOST_CAPACITY: usize = 4 << 30;

/// Simulated devices: fake or host-backed segments, virtual streams, injected faults, counters.
///
/// Cloning is cheap and gives another handle to the same devices.
///
/// # Addresses
///
/// Device `d` hands out fake addresses from its own 1 TiB range starting at
/// `0x7f00_0000_0000 + d * 2^40`, first fit from the lowest free address. Each segment takes its
/// size rounded up to 512 bytes and starts on a 512-byte boundary, or on a 2 MiB boundary when
/// its size is a multiple of 2 MiB, as `cudaMalloc` places them. Freed ranges merge with their
/// free neighbours. Host-backed segments live at their host memory's address instead.
///
/// ```
/// use blockpool::{Backend, DeviceIndex, SimBackend, StreamId};
///
/// let sim = SimBackend::new(1, 1 << 30);
/// let ptr = sim.alloc_segment(DeviceIndex::new(0), 2 << 20)?;
/// assert_eq!(ptr, 0x7f00_0000_0000);
/// assert_eq!(sim.allocated_bytes(DeviceIndex::new(0)), 2 << 20);
///
/// let event = sim.record_event(DeviceIndex::new(0), StreamId::from_raw(7))?;
/// assert!(!sim.query_event(&event)?, "no work has run on the stream yet");
/// sim.advance_stream(DeviceIndex::new(0), StreamId::from_raw(7), 1)?;
/// assert!(sim.query_event(&event)?);
///
/// sim.free_segment(DeviceIndex::new(0), ptr, 2 << 20)?;
/// assert_eq!(sim.calls(DeviceIndex::new(0)).segment_frees, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SimBackend {
    inner: Arc<Shared>,
}

struct Shared {
    devices: Vec<Mutex<Device>>,
    host_backed: bool,
    host: Mutex<HostMemory>,
    /// Run at the start of every segment allocation ([`SimBackend::set_alloc_hook`]).
    alloc_hook: RwLock<Option<SimAllocHook>>,
}

/// A function [`SimBackend`] calls at the start of every segment allocation, with the device
/// and the size asked for: see [`SimBackend::set_alloc_hook`].
pub type SimAllocHook = Arc<dyn Fn(DeviceIndex, usize) + Send + Sync>;

/// Builds a [`SimBackend`]; start from [`SimBackend::builder`].
///
/// Defaults: one device of 16 GiB, fake addresses.
///
/// ```
/// use blockpool::{Backend, DeviceIndex, SimBackend};
///
/// let sim = SimBackend::builder()
///     .devices(2)
///     .capacity(1 << 30)
///     .device_capacity(DeviceIndex::new(1), 64 << 20)
///     .build();
/// assert_eq!(sim.device_count(), 2);
/// assert_eq!(sim.mem_get_info(DeviceIndex::new(1))?.total_bytes, 64 << 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct SimBackendBuilder {
    device_count: usize,
    capacity_bytes: usize,
    device_capacities: BTreeMap<DeviceIndex, usize>,
    host_backed: bool,
    host_capacity_bytes: usize,
}

/// How many device calls a simulated device has served, for tests to assert.
///
/// Calls naming a device that does not exist are not counted anywhere.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimCalls {
    /// Segment allocations that succeeded.
    pub segment_allocs: u64,
    /// Segment allocations that failed, for any reason (out of memory, injected, 0 bytes).
    pub failed_allocs: u64,
    /// Segment frees that succeeded.
    pub segment_frees: u64,
    /// Segment frees refused because no such segment was handed out.
    pub failed_frees: u64,
    /// Events recorded.
    pub events_recorded: u64,
    /// Calls to [`Backend::query_event`].
    pub event_queries: u64,
    /// Calls to [`Backend::synchronize_event`], including those that failed.
    pub event_syncs: u64,
    /// Events given back with [`Backend::release_event`].
    pub events_released: u64,
    /// Calls to [`Backend::stream_wait_event`] that were accepted.
    pub stream_waits: u64,
    /// Calls to [`Backend::mem_get_info`].
    pub mem_info_queries: u64,
    /// Address ranges reserved ([`Backend::reserve_address_range`]).
    pub address_reservations: u64,
    /// Address ranges released ([`Backend::release_address_range`]).
    pub address_releases: u64,
    /// Memory mapped into reserved ranges ([`Backend::map_memory`]) that succeeded.
    pub maps: u64,
    /// Maps that failed, for any reason (out of memory, injected, a bad range).
    pub failed_maps: u64,
    /// Mappings undone ([`Backend::unmap_memory`]).
    pub unmaps: u64,
    /// Unmaps refused because no such mapping exists.
    pub failed_unmaps: u64,
    /// Reservations and releases refused (bad size, out of address space, unknown range,
    /// memory still mapped).
    pub failed_vmm_calls: u64,
}

/// An event recorded on a simulated stream: the `ticket`-th event recorded there.
///
/// It is complete once the stream's work has advanced to its ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SimEvent {
    device: DeviceIndex,
    stream: StreamId,
    ticket: u64,
}

/// A fault to inject into a simulated device with [`SimBackend::inject`].
///
/// [`SimBackend::clear_faults`] removes every fault of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SimFault {
    /// The `nth` segment allocation or memory mapping from now (1 is the next one; 0 also means
    /// the next one) fails with [`BackendError::OutOfMemory`], whatever the free memory.
    AllocOutOfMemory {
        /// Which future allocation fails, counting from 1.
        nth: u64,
    },
    /// The `nth` segment allocation or memory mapping from now (1 is the next one; 0 also means
    /// the next one) fails with [`BackendError::InjectedFault`], an error freeing memory cannot
    /// cure.
    AllocError {
        /// Which future allocation fails, counting from 1.
        nth: u64,
    },
    /// Allocations fail with [`BackendError::OutOfMemory`] once the bytes in use would pass
    /// `limit_bytes`, as if another process held the rest; same as
    /// [`SimBackend::set_oom_above`].
    OutOfMemoryAbove {
        /// Most bytes the device hands out, in all.
        limit_bytes: usize,
    },
    /// Events on `stream` that have not completed never will: queries answer `false`,
    /// synchronizing fails with [`BackendError::EventNeverCompletes`], and advancing the stream
    /// does nothing until the fault is cleared.
    HangStream {
        /// The stream that hangs.
        stream: StreamId,
    },
    /// The `nth` event record from now (1 is the next one; 0 also means the next one) fails
    /// with [`BackendError::InjectedFault`].
    RecordEventError {
        /// Which future record fails, counting from 1.
        nth: u64,
    },
}

impl SimBackend {
    /// `device_count` fake-address devices of `capacity_bytes` bytes each.
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend};
    ///
    /// let sim = SimBackend::new(2, 1 << 30);
    /// assert_eq!(sim.mem_get_info(DeviceIndex::new(1))?.free_bytes, 1 << 30);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(device_count: usize, capacity_bytes: usize) -> SimBackend {
        SimBackend::builder()
            .devices(device_count)
            .capacity(capacity_bytes)
            .build()
    }

    /// A builder with the defaults: one device of 16 GiB, fake addresses.
    pub fn builder() -> SimBackendBuilder {
        SimBackendBuilder::default()
    }

    /// Whether segments have real host memory behind them ([`SimBackend::read`] and
    /// [`SimBackend::write`] work).
    pub fn is_host_backed(&self) -> bool {
        self.inner.host_backed
    }

    /// Copies `data` into device memory at `addr`, which must lie with the whole range inside
    /// one live segment of a host-backed backend.
    ///
    /// Fails with [`BackendError::UnknownSegment`] (naming `addr` and `data.len()`) when no
    /// segment holds the range, and with [`BackendError::InjectedFault`] on a fake-address
    /// backend, which has no memory to write.
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend};
    ///
    /// let sim = SimBackend::builder().host_backed(true).build();
    /// let ptr = sim.alloc_segment(DeviceIndex::new(0), 1024)?;
    /// sim.write(DeviceIndex::new(0), ptr + 8, &[1, 2, 3])?;
    /// let mut out = [9; 5];
    /// sim.read(DeviceIndex::new(0), ptr + 7, &mut out)?;
    /// assert_eq!(out, [0, 1, 2, 3, 0]);
    /// assert!(sim.write(DeviceIndex::new(0), ptr + 1022, &[1, 2, 3]).is_err(), "past the segment's end");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(&self, device: DeviceIndex, addr: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut dev = self.device(device)?.lock();
        dev.host_bytes(addr, data.len())?.copy_from_slice(data);
        Ok(())
    }

    /// Copies device memory at `addr` into `buf`; the range must lie inside one live segment of
    /// a host-backed backend. Fails as [`SimBackend::write`] does.
    pub fn read(&self, device: DeviceIndex, addr: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        let mut dev = self.device(device)?.lock();
        buf.copy_from_slice(dev.host_bytes(addr, buf.len())?);
        Ok(())
    }

    /// Completes the next `n` recorded but incomplete events of `stream`, and returns how many
    /// completed (fewer when fewer are pending, none while the stream hangs).
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend, StreamId};
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// let s = StreamId::from_raw(1);
    /// let first = sim.record_event(DeviceIndex::new(0), s)?;
    /// let second = sim.record_event(DeviceIndex::new(0), s)?;
    /// assert_eq!(sim.advance_stream(DeviceIndex::new(0), s, 1)?, 1);
    /// assert!(sim.query_event(&first)? && !sim.query_event(&second)?);
    /// assert_eq!(sim.advance_stream(DeviceIndex::new(0), s, 5)?, 1, "only one event was left");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn advance_stream(
        &self,
        device: DeviceIndex,
        stream: StreamId,
        n: u64,
    ) -> Result<u64, BackendError> {
        Ok(self.device(device)?.lock().advance(stream, n))
    }

    /// Events recorded on `stream` of `device` so far. Work queued on the stream now comes
    /// after that many events: at this *position* (see [`SimBackend::is_ordered`]).
    pub fn stream_position(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<u64, BackendError> {
        Ok(self.device(device)?.lock().streams().position(stream))
    }

    /// Whether work queued on `from` at `position` (after its event `position`, as
    /// [`SimBackend::stream_position`] gave it) can no longer race with work queued on `to`
    /// from now on: it has completed, it is `to`'s own earlier work, or a chain of
    /// [`Backend::stream_wait_event`] calls orders it before. The question tests ask of
    /// memory handed from one stream to another.
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend, StreamId};
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// let (a, b) = (StreamId::from_raw(1), StreamId::from_raw(2));
    /// let used_at = sim.stream_position(DeviceIndex::new(0), a)?; // work on `a` uses some memory here
    /// assert!(!sim.is_ordered(DeviceIndex::new(0), a, used_at, b)?);
    /// let event = sim.record_event(DeviceIndex::new(0), a)?;
    /// sim.stream_wait_event(DeviceIndex::new(0), b, &event)?;
    /// assert!(sim.is_ordered(DeviceIndex::new(0), a, used_at, b)?, "b now waits for that work");
    /// assert_eq!(sim.advance_stream(DeviceIndex::new(0), b, 1)?, 0, "b cannot run ahead of a");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_ordered(
        &self,
        device: DeviceIndex,
        from: StreamId,
        position: u64,
        to: StreamId,
    ) -> Result<bool, BackendError> {
        Ok(self
            .device(device)?
            .lock()
            .streams()
            .is_ordered(from, position, to))
    }

    /// Completes every event recorded so far on `stream` (unless it hangs), and returns how
    /// many completed.
    pub fn complete_stream(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<u64, BackendError> {
        self.advance_stream(device, stream, u64::MAX)
    }

    /// Completes every event recorded so far on every stream that does not hang, and returns
    /// how many completed.
    pub fn complete_all(&self) -> u64 {
        let devices = self.inner.devices.iter();
        devices.fold(0, |done, dev| {
            done.saturating_add(dev.lock().complete_all())
        })
    }

    /// Injects `fault` into `device`; faults add up (two countdowns both run).
    ///
    /// ```
    /// use blockpool::backend::SimFault;
    /// use blockpool::{Backend, DeviceIndex, SimBackend};
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// sim.inject(DeviceIndex::new(0), SimFault::AllocOutOfMemory { nth: 2 })?;
    /// assert!(sim.alloc_segment(DeviceIndex::new(0), 4096).is_ok());
    /// assert!(sim.alloc_segment(DeviceIndex::new(0), 4096).unwrap_err().is_out_of_memory());
    /// assert!(sim.alloc_segment(DeviceIndex::new(0), 4096).is_ok(), "a fault fires once");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn inject(&self, device: DeviceIndex, fault: SimFault) -> Result<(), BackendError> {
        self.device(device)?.lock().inject(fault);
        Ok(())
    }

    /// Makes allocations on `device` fail with out-of-memory once the bytes in use would pass
    /// `limit_bytes` (when lower than the capacity); `None` lifts the limit.
    ///
    /// [`Backend::mem_get_info`] then reports free bytes up to the limit, as if another
    /// process held the rest; the total stays the capacity.
    pub fn set_oom_above(
        &self,
        device: DeviceIndex,
        limit_bytes: Option<usize>,
    ) -> Result<(), BackendError> {
        self.device(device)?.lock().set_oom_above(limit_bytes);
        Ok(())
    }

    /// Calls `hook` at the start of every segment allocation from now on (replacing any hook
    /// set before; `None` removes it), on the allocating thread, with the device and the size
    /// asked for, before the device is touched and with none of the backend's locks held.
    ///
    /// It stands in for what a real driver call does meanwhile: a test can block there to
    /// see what other threads may do while a segment is allocated, or a benchmark sleep to
    /// give `cuMemAlloc`'s cost.
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend};
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// let asked = Arc::new(AtomicUsize::new(0));
    /// let seen = Arc::clone(&asked);
    /// sim.set_alloc_hook(Some(Arc::new(move |_device, size| {
    ///     seen.fetch_add(size, Ordering::Relaxed);
    /// })));
    /// sim.alloc_segment(DeviceIndex::new(0), 4096)?;
    /// assert_eq!(asked.load(Ordering::Relaxed), 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_alloc_hook(&self, hook: Option<SimAllocHook>) {
        *self.inner.alloc_hook.write() = hook;
    }

    /// Runs the allocation hook, if one is set, without holding its lock while it runs.
    fn run_alloc_hook(&self, device: DeviceIndex, size_bytes: usize) {
        let hook = self.inner.alloc_hook.read().clone();
        if let Some(hook) = hook {
            hook(device, size_bytes);
        }
    }

    /// Removes every fault injected into `device`. Streams stop hanging, but their pending
    /// events still wait for the stream to advance.
    pub fn clear_faults(&self, device: DeviceIndex) -> Result<(), BackendError> {
        self.device(device)?.lock().clear_faults();
        Ok(())
    }

    /// The calls `device` has served so far; all zero for a device that does not exist.
    pub fn calls(&self, device: DeviceIndex) -> SimCalls {
        self.device(device)
            .map(|d| d.lock().calls)
            .unwrap_or_default()
    }

    /// How many pinned host-memory calls this backend has served.
    pub fn host_calls(&self) -> SimHostCalls {
        self.inner.host.lock().calls
    }

    /// Bytes of live pinned host allocations, as asked for.
    pub fn host_allocated_bytes(&self) -> usize {
        self.inner.host.lock().bytes()
    }

    /// Bytes of live segments and mapped memory on `device`, as the allocator asked for them (0
    /// for a device that does not exist).
    pub fn allocated_bytes(&self, device: DeviceIndex) -> usize {
        self.device(device).map_or(0, |d| d.lock().in_use_bytes())
    }

    /// Number of live segments on `device` (0 for a device that does not exist).
    pub fn segment_count(&self, device: DeviceIndex) -> usize {
        self.device(device).map_or(0, |d| d.lock().segment_count())
    }

    /// Bytes mapped into reserved address ranges on `device` (included in
    /// [`SimBackend::allocated_bytes`]; 0 for a device that does not exist).
    pub fn mapped_bytes(&self, device: DeviceIndex) -> usize {
        self.device(device).map_or(0, |d| d.lock().mapped_bytes())
    }

    /// Number of reserved address ranges on `device` (0 for a device that does not exist).
    pub fn address_range_count(&self, device: DeviceIndex) -> usize {
        self.device(device)
            .map_or(0, |d| d.lock().reservation_count())
    }

    fn device(&self, device: DeviceIndex) -> Result<&Mutex<Device>, BackendError> {
        self.inner
            .devices
            .get(device.get())
            .ok_or(BackendError::InvalidDevice {
                device,
                device_count: self.inner.devices.len(),
            })
    }
}

impl fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimBackend")
            .field("device_count", &self.inner.devices.len())
            .field("host_backed", &self.inner.host_backed)
            .finish_non_exhaustive()
    }
}

impl SimEvent {
    /// Device the event was recorded on.
    pub fn device(&self) -> DeviceIndex {
        self.device
    }

    /// Stream the event was recorded on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Position of the event among those recorded on its stream, counting from 1.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }
}

impl Default for SimBackendBuilder {
    fn default() -> Self {
        SimBackendBuilder {
            device_count: 1,
            capacity_bytes: DEFAULT_CAPACITY,
            device_capacities: BTreeMap::new(),
            host_backed: false,
            host_capacity_bytes: DEFAULT_HOST_CAPACITY,
        }
    }
}

impl SimBackendBuilder {
    /// Number of devices (0 gives a backend where every device call fails).
    pub fn devices(mut self, count: usize) -> Self {
        self.device_count = count;
        self
    }

    /// Capacity of every device not given its own, in bytes.
    pub fn capacity(mut self, bytes: usize) -> Self {
        self.capacity_bytes = bytes;
        self
    }

    /// Capacity of `device`, in bytes; ignored when `device` is not below the device count at
    /// [`SimBackendBuilder::build`].
    pub fn device_capacity(mut self, device: DeviceIndex, bytes: usize) -> Self {
        self.device_capacities.insert(device, bytes);
        self
    }

    /// Whether segments get real zeroed host memory (default `false`: fake addresses).
    ///
    /// Each segment is then allocated and zeroed on the host, so keep the capacity within host
    /// memory. Host-backed addresses are the host memory's own (aligned to 512 bytes), so they
    /// differ from run to run; fake ones are exact.
    pub fn host_backed(mut self, host_backed: bool) -> Self {
        self.host_backed = host_backed;
        self
    }

    /// Most pinned host memory live at once, in bytes (default 4 GiB); past it
    /// [`Backend::alloc_host`] fails with [`BackendError::HostOutOfMemory`].
    pub fn host_capacity(mut self, bytes: usize) -> Self {
        self.host_capacity_bytes = bytes;
        self
    }

    /// The backend.
    pub fn build(self) -> SimBackend {
        let devices = (0..self.device_count)
            .map(DeviceIndex::new)
            .map(|index| {
                let capacity_bytes = *self
                    .device_capacities
                    .get(&index)
                    .unwrap_or(&self.capacity_bytes);
                Mutex::new(Device::new(index, capacity_bytes, self.host_backed))
            })
            .collect();
        SimBackend {
            inner: Arc::new(Shared {
                devices,
                host_backed: self.host_backed,
                host: Mutex::new(HostMemory::new(self.host_capacity_bytes)),
                alloc_hook: RwLock::new(None),
            }),
        }
    }
}
