//! A fake NVIDIA driver: the subset of the CUDA driver API that blockpool and cudarc's safe
//! layer call, with device memory backed by host memory. Built into `libcuda.so` by the build
//! script; see the crate docs (`lib.rs`) for what it models and its knobs.
//!
//! Every entry point returns a code from the driver's own list (cudarc reads the result as an
//! enum, so an unknown code would be undefined behaviour on its side) and never unwinds.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

// The entry points, one module a part of the API. `#[path]` because this file is both a crate
// root (the build script's rustc) and a module (`lib.rs` under clippy).
/// Devices and contexts.
#[path = "devices.rs"]
pub mod devices;
/// Device and pinned host memory, copies.
#[path = "memory.rs"]
pub mod memory;
/// Initialization, the version, error texts, and the fake's own controls.
#[path = "setup.rs"]
pub mod setup;
/// Streams and events.
#[path = "streams.rs"]
pub mod streams;
/// Virtual memory management (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, ...).
#[path = "vmm.rs"]
pub mod vmm;
use setup::ERRORS;

/// `CUresult` values this driver returns.
mod code {
    pub const SUCCESS: u32 = 0;
    pub const INVALID_VALUE: u32 = 1;
    pub const OUT_OF_MEMORY: u32 = 2;
    pub const NOT_INITIALIZED: u32 = 3;
    pub const DEVICE_UNAVAILABLE: u32 = 46;
    pub const NO_DEVICE: u32 = 100;
    pub const INVALID_DEVICE: u32 = 101;
    pub const INVALID_CONTEXT: u32 = 201;
    pub const INVALID_HANDLE: u32 = 400;
    pub const NOT_READY: u32 = 600;
    pub const ILLEGAL_ADDRESS: u32 = 700;
    pub const NOT_SUPPORTED: u32 = 801;
    pub const UNKNOWN: u32 = 999;
}

/// `CUdevice_attribute` values with an answer other than 0.
const ATTRIBUTE_MULTIPROCESSOR_COUNT: c_uint = 16;
const ATTRIBUTE_UNIFIED_ADDRESSING: c_uint = 41;
const ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_uint = 75;
const ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_uint = 76;
const ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_uint = 115;
const ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: c_uint = 102;

/// Alignment of device and host allocations (the real driver gives at least 256 bytes).
const ALIGNMENT: usize = 4096;

/// Handle values: opaque non-null numbers, never dereferenced.
const CONTEXT_BASE: usize = 0x1000_0000;
const STREAM_BASE: usize = 0x2000_0000;
const EVENT_BASE: usize = 0x3000_0000;
const POOL_BASE: usize = 0x4000_0000;
const HANDLE_STEP: usize = 16;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`, usable like the null stream.
const STREAM_LEGACY: usize = 0x1;
const STREAM_PER_THREAD: usize = 0x2;

/// What `blockpoolFakeCudaCounts` fills in (the crate's `FakeCudaCounts`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Counts {
    live_allocations: u64,
    live_bytes: u64,
    live_host_allocations: u64,
    live_events: u64,
    live_streams: u64,
    retained_contexts: u64,
    device_allocs: u64,
    device_frees: u64,
    event_records: u64,
    errors: u64,
    live_reservations: u64,
    created_bytes: u64,
}

/// The size `FakeCudaCounts` has in `lib.rs` (which asserts the same): the two structs must
/// agree, or the tests' reads would run past what the driver writes.
const _: () = assert!(std::mem::size_of::<Counts>() == 12 * 8);

/// A device: its memory and its primary context's reference count.
struct Device {
    capacity: usize,
    used: usize,
    primary_refs: u32,
}

/// `CUmemorytype`, as `cuPointerGetAttribute` reports it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryType {
    Host = 1,
    Device = 2,
}

/// Pinned host memory: its size, and the device whose context was current at allocation.
struct HostAllocation {
    size: usize,
    device: usize,
}

/// Device memory: host memory of the same size.
struct Allocation {
    device: usize,
    size: usize,
}

struct Event {
    device: usize,
    /// The stream of the last record, if any.
    stream: Option<usize>,
    /// The last record (an index into `Driver::records`), if any.
    record: Option<usize>,
}

/// One `cuEventRecord`: the work before it, as the fake sees it. A wait on an event
/// (`cuStreamWaitEvent`) holds on to the record it was made for, as CUDA does, so an event
/// recorded again for something else does not change what a stream waits for.
///
/// Only records still pending are kept: an id with no record is complete.
struct Record {
    device: usize,
    stream: usize,
    /// How many more queries answer not-ready.
    pending: u32,
    /// Records the stream waited for before this one was made: it completes after them.
    after: Vec<usize>,
}

struct Driver {
    devices: Vec<Device>,
    driver_version: c_int,
    event_delay: u32,
    /// What `cuDevicePrimaryCtxRetain` answers instead of a context, if not success.
    retain_error: u32,
    /// Whether the devices say they support virtual memory management.
    vmm_supported: bool,
    vmm: vmm::AddressSpace,
    allocations: BTreeMap<u64, Allocation>,
    host: HashMap<usize, HostAllocation>,
    events: HashMap<usize, Event>,
    /// The event records not known to be complete, by id.
    records: HashMap<usize, Record>,
    next_record: usize,
    /// Stream handle -> the records its later work waits for (`cuStreamWaitEvent`).
    waits: HashMap<usize, Vec<usize>>,
    /// Stream handle -> device.
    streams: HashMap<usize, usize>,
    next_handle: usize,
    counts: Counts,
    /// Calls made to fail by `blockpoolFakeCudaFailNext`: function name -> (code, calls left).
    failures: HashMap<String, (u32, u32)>,
}

/// Knob values read at `cuInit`.
struct Knobs {
    devices: usize,
    memory_mib: usize,
    driver_version: c_int,
    init_error: u32,
    retain_error: u32,
    event_delay: u32,
    vmm: u32,
}

static DRIVER: Mutex<Option<Driver>> = Mutex::new(None);

thread_local! {
    /// This thread's context stack (context handles), top last.
    static CONTEXTS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn lock() -> MutexGuard<'static, Option<Driver>> {
    DRIVER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` on the initialized driver; counts failures.
fn with_driver(f: impl FnOnce(&mut Driver) -> Result<(), u32>) -> u32 {
    let mut guard = lock();
    let Some(driver) = guard.as_mut() else {
        return code::NOT_INITIALIZED;
    };
    match f(driver) {
        Ok(()) => code::SUCCESS,
        Err(code) => {
            driver.counts.errors += 1;
            code
        }
    }
}

fn knob<T: std::str::FromStr>(name: &str, default: T) -> Result<T, u32> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(value) => value.trim().parse().map_err(|_| {
            eprintln!("fake libcuda: {name}={value:?} is not a number");
            code::INVALID_VALUE
        }),
    }
}

fn read_knobs() -> Result<Knobs, u32> {
    let knobs = Knobs {
        devices: knob("BLOCKPOOL_FAKE_CUDA_DEVICES", 1)?,
        memory_mib: knob("BLOCKPOOL_FAKE_CUDA_MEMORY_MIB", 4096)?,
        driver_version: knob("BLOCKPOOL_FAKE_CUDA_DRIVER_VERSION", 12080)?,
        init_error: knob("BLOCKPOOL_FAKE_CUDA_INIT_ERROR", code::SUCCESS)?,
        retain_error: knob("BLOCKPOOL_FAKE_CUDA_RETAIN_ERROR", code::SUCCESS)?,
        event_delay: knob("BLOCKPOOL_FAKE_CUDA_EVENT_DELAY", 0)?,
        vmm: knob("BLOCKPOOL_FAKE_CUDA_VMM", 1)?,
    };
    for (name, value) in [
        ("BLOCKPOOL_FAKE_CUDA_INIT_ERROR", knobs.init_error),
        ("BLOCKPOOL_FAKE_CUDA_RETAIN_ERROR", knobs.retain_error),
    ] {
        if !ERRORS.iter().any(|e| e.0 == value) {
            eprintln!("fake libcuda: {name}={value} is not a code this driver knows");
            return Err(code::INVALID_VALUE);
        }
    }
    Ok(knobs)
}

/// Writes `value` through an out-pointer the caller passed; null is `CUDA_ERROR_INVALID_VALUE`.
fn write<T>(out: *mut T, value: T) -> Result<(), u32> {
    if out.is_null() {
        return Err(code::INVALID_VALUE);
    }
    // SAFETY: the caller of the driver entry point passed `out` as a writable `T` (the API's
    // contract for out-parameters); it is non-null.
    unsafe { out.write(value) };
    Ok(())
}

fn context_handle(device: usize) -> usize {
    CONTEXT_BASE + device * HANDLE_STEP
}

impl Driver {
    fn new(knobs: &Knobs) -> Driver {
        let device = || Device {
            capacity: knobs.memory_mib << 20,
            used: 0,
            primary_refs: 0,
        };
        Driver {
            devices: (0..knobs.devices).map(|_| device()).collect(),
            driver_version: knobs.driver_version,
            event_delay: knobs.event_delay,
            retain_error: knobs.retain_error,
            vmm_supported: knobs.vmm != 0,
            vmm: vmm::AddressSpace::default(),
            allocations: BTreeMap::new(),
            host: HashMap::new(),
            events: HashMap::new(),
            records: HashMap::new(),
            next_record: 0,
            waits: HashMap::new(),
            streams: HashMap::new(),
            next_handle: 0,
            counts: Counts::default(),
            failures: HashMap::new(),
        }
    }

    /// The code `blockpoolFakeCudaFailNext` set for the next call of `call`, if any is left.
    pub(crate) fn injected(&mut self, call: &str) -> Result<(), u32> {
        match self.failures.get_mut(call) {
            Some((code, left)) if *left > 0 => {
                *left -= 1;
                Err(*code)
            }
            _ => Ok(()),
        }
    }

    fn device(&self, ordinal: c_int) -> Result<usize, u32> {
        usize::try_from(ordinal)
            .ok()
            .filter(|&d| d < self.devices.len())
            .ok_or(code::INVALID_DEVICE)
    }

    /// The device of a live (retained) primary context handle.
    fn context_device(&self, handle: usize) -> Result<usize, u32> {
        let offset = handle
            .checked_sub(CONTEXT_BASE)
            .ok_or(code::INVALID_CONTEXT)?;
        let device = offset / HANDLE_STEP;
        match self.devices.get(device) {
            Some(d) if offset % HANDLE_STEP == 0 && d.primary_refs > 0 => Ok(device),
            _ => Err(code::INVALID_CONTEXT),
        }
    }

    /// The device of this thread's current context, which must be live.
    fn current_device(&self) -> Result<usize, u32> {
        let top = CONTEXTS.with(|stack| stack.borrow().last().copied());
        self.context_device(top.ok_or(code::INVALID_CONTEXT)?)
    }

    /// The device of a stream handle: the null/legacy/per-thread stream is the current
    /// context's. A stream of a released primary context is gone with it.
    fn stream_device(&self, stream: usize) -> Result<usize, u32> {
        match stream {
            0 | STREAM_LEGACY | STREAM_PER_THREAD => self.current_device(),
            s => self.live(self.streams.get(&s).copied().ok_or(code::INVALID_HANDLE)?),
        }
    }

    /// `device`, if its primary context is still retained: handles made in a context (its
    /// streams and events) are unusable once it is released, as in the real driver, so a
    /// backend that releases its context before them fails here and not only on a GPU.
    pub(crate) fn live(&self, device: usize) -> Result<usize, u32> {
        match self.devices.get(device) {
            Some(d) if d.primary_refs > 0 => Ok(device),
            _ => Err(code::INVALID_CONTEXT),
        }
    }

    /// The device of a live event of a live context.
    pub(crate) fn event_device(&self, event: usize) -> Result<usize, u32> {
        self.live(self.events.get(&event).ok_or(code::INVALID_HANDLE)?.device)
    }

    fn new_handle(&mut self, base: usize) -> usize {
        self.next_handle += 1;
        base + self.next_handle * HANDLE_STEP
    }

    fn allocate(&mut self, size: usize) -> Result<u64, u32> {
        let device = self.current_device()?;
        if size == 0 {
            return Err(code::INVALID_VALUE);
        }
        let d = &self.devices[device];
        if size > d.capacity - d.used {
            return Err(code::OUT_OF_MEMORY);
        }
        let layout = std::alloc::Layout::from_size_align(size, ALIGNMENT)
            .map_err(|_| code::OUT_OF_MEMORY)?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(code::OUT_OF_MEMORY);
        }
        self.devices[device].used += size;
        self.allocations
            .insert(ptr as u64, Allocation { device, size });
        self.counts.device_allocs += 1;
        Ok(ptr as u64)
    }

    fn free(&mut self, ptr: u64) -> Result<(), u32> {
        self.current_device()?;
        let allocation = self.allocations.remove(&ptr).ok_or(code::INVALID_VALUE)?;
        self.devices[allocation.device].used -= allocation.size;
        let layout = std::alloc::Layout::from_size_align(allocation.size, ALIGNMENT)
            .map_err(|_| code::UNKNOWN)?;
        // SAFETY: `ptr` came from `std::alloc::alloc` with this layout in `allocate` and was
        // still in `allocations`, from which it is now removed.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        self.counts.device_frees += 1;
        Ok(())
    }

    /// Checks that `[ptr, ptr + len)` lies inside one live allocation.
    fn check_range(&self, ptr: u64, len: usize) -> Result<(), u32> {
        if self.vmm.covers(ptr, len) {
            return Ok(());
        }
        let (&start, allocation) = self
            .allocations
            .range(..=ptr)
            .next_back()
            .ok_or(code::ILLEGAL_ADDRESS)?;
        let end = ptr.checked_add(len as u64).ok_or(code::ILLEGAL_ADDRESS)?;
        if end > start + allocation.size as u64 {
            return Err(code::ILLEGAL_ADDRESS);
        }
        Ok(())
    }

    /// Marks every event recorded on `device` (on `stream`, when given) complete, with what
    /// their streams waited for.
    fn complete_events(&mut self, device: usize, stream: Option<usize>) {
        let records: Vec<usize> = self
            .records
            .iter()
            .filter(|(_, r)| r.device == device && stream.map_or(true, |s| r.stream == s))
            .map(|(&id, _)| id)
            .collect();
        for record in records {
            self.complete_record(record);
        }
    }

    /// Completes `record` and every record it waits for.
    fn complete_record(&mut self, record: usize) {
        let mut todo = vec![record];
        while let Some(id) = todo.pop() {
            if let Some(r) = self.records.remove(&id) {
                todo.extend(r.after);
            }
        }
    }

    /// A query of `record`: each record on the way that still counts down answers not-ready
    /// once more; complete when it and everything it waits for are.
    fn query_record(&mut self, record: usize) -> bool {
        let mut done = true;
        let mut todo = vec![record];
        // A record two waits lead to counts one query, not two.
        let mut seen = std::collections::HashSet::new();
        while let Some(id) = todo.pop() {
            if !seen.insert(id) {
                continue;
            }
            let Some(r) = self.records.get_mut(&id) else {
                continue;
            };
            if r.pending > 0 {
                r.pending -= 1;
                done = false;
            }
            todo.extend(r.after.iter().copied());
        }
        if done {
            // Nothing before it can be pending again: forget the chain.
            self.complete_record(record);
        }
        done
    }

    /// Whether `record` and what it waits for are complete, without counting a query.
    fn record_done(&self, record: usize) -> bool {
        let mut todo = vec![record];
        while let Some(id) = todo.pop() {
            match self.records.get(&id) {
                Some(r) if r.pending > 0 => return false,
                Some(r) => todo.extend(r.after.iter().copied()),
                None => {}
            }
        }
        true
    }

    fn counts(&self) -> Counts {
        Counts {
            live_allocations: self.allocations.len() as u64,
            live_bytes: self.allocations.values().map(|a| a.size as u64).sum(),
            live_host_allocations: self.host.len() as u64,
            live_events: self.events.len() as u64,
            live_streams: self.streams.len() as u64,
            retained_contexts: self.devices.iter().map(|d| u64::from(d.primary_refs)).sum(),
            live_reservations: self.vmm.reservation_count(),
            created_bytes: self.vmm.created_bytes(),
            ..self.counts
        }
    }
}
