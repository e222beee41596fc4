//! A fake NVIDIA driver library for tests on machines without a GPU.
//!
//! The build script compiles [`src/driver.rs`](../driver.rs) into `libcuda.so` (the name
//! cudarc's loader tries first) in a folder of its own, [`LIBRARY_DIR`]. A process started
//! with that folder in `LD_LIBRARY_PATH` loads the fake and runs blockpool's real CUDA code
//! paths against it: contexts, `cuMemAlloc`/`cuMemFree`, events, streams, copies, pinned
//! host memory and virtual memory management (`cuMemAddressReserve`, `cuMemCreate`,
//! `cuMemMap`: expandable segments), with device memory backed by host memory so copies
//! round-trip. Kernels are
//! the one thing it cannot run (`cuModuleLoadData` answers `CUDA_ERROR_NOT_SUPPORTED`).
//!
//! It checks what a driver checks, so the tests find protocol mistakes: calls before `cuInit`,
//! with no current context, on destroyed events or streams, an event recorded on another
//! context's stream, frees of unknown pointers, copies outside an allocation or into another
//! device's memory are errors with the real driver's codes. Each thread has its own context
//! stack (`cuCtxGetCurrent`/`SetCurrent`/`Push`/`Pop`), primary contexts count their retains,
//! and `cuPointerGetAttribute` says what an address is (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`,
//! `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`), so a test can check that a caller's context
//! survives a call and that a pointer is device memory of the device asked for.
//!
//! # Knobs (environment variables, read at `cuInit`)
//! | variable | default | effect |
//! |---|---|---|
//! | `BLOCKPOOL_FAKE_CUDA_DEVICES` | 1 | device count |
//! | `BLOCKPOOL_FAKE_CUDA_MEMORY_MIB` | 4096 | memory of each device |
//! | `BLOCKPOOL_FAKE_CUDA_DRIVER_VERSION` | 12080 | what `cuDriverGetVersion` says |
//! | `BLOCKPOOL_FAKE_CUDA_INIT_ERROR` | 0 | the code `cuInit` returns (100: no device) |
//! | `BLOCKPOOL_FAKE_CUDA_RETAIN_ERROR` | 0 | the code `cuDevicePrimaryCtxRetain` returns (46: device busy) |
//! | `BLOCKPOOL_FAKE_CUDA_EVENT_DELAY` | 0 | `cuEventQuery` answers not-ready this many times per record |
//! | `BLOCKPOOL_FAKE_CUDA_VMM` | 1 | whether devices support virtual memory management (expandable segments) |
//!
//! # A driver without a symbol
//! The build script also builds a copy that does not export `cuMemCreate`
//! ([`MISSING_SYMBOL`]), into [`LIBRARY_WITHOUT_SYMBOL_DIR`]: a driver library older than a
//! function blockpool calls, which the probe and `CudaBackend::new` must refuse by name (a
//! symbol cannot be hidden at run time, so this is a second library, not a knob).
//!
//! # Its own entry points
//! - `blockpoolFakeCudaCounts(*mut` [`FakeCudaCounts`]`)` fills in what is live and how many
//!   calls were made, so a test can check that everything was given back.
//! - `blockpoolFakeCudaSetEventDelay(u32)` sets the event delay at run time (`u32::MAX`: pending
//!   until synchronized), so a test can hold a stream busy. A stream that waits on a pending
//!   event (`cuStreamWaitEvent`) holds back the events recorded on it afterwards until that
//!   record completes, as the device would: a test can see whether a wait was made.
//! - `blockpoolFakeCudaFailNext(const char *call, u32 code, u32 times)` makes the next `times`
//!   calls of the driver function `call` fail with `code` (one of the driver's codes), so a
//!   test reaches its caller's error paths: `cuMemAlloc_v2`, `cuMemFree_v2`, `cuEventCreate`,
//!   `cuEventRecord`, `cuMemHostAlloc`, `cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`.

// The driver is compiled on its own by the build script; clippy (and rustfmt) see it here.
#[cfg(clippy)]
#[path = "driver.rs"]
mod driver;

/// The folder holding the fake `libcuda.so`: put it first in `LD_LIBRARY_PATH`.
pub const LIBRARY_DIR: &str = env!("FAKE_LIBCUDA_DIR");

/// The folder holding the fake `libcuda.so` built without [`MISSING_SYMBOL`].
pub const LIBRARY_WITHOUT_SYMBOL_DIR: &str = env!("FAKE_LIBCUDA_WITHOUT_MEM_CREATE_DIR");

/// The driver function the library in [`LIBRARY_WITHOUT_SYMBOL_DIR`] does not export.
pub const MISSING_SYMBOL: &str = "cuMemCreate";

/// The environment variable the dynamic loader searches first on Linux.
pub const LIBRARY_PATH_VARIABLE: &str = "LD_LIBRARY_PATH";

/// The name of the fake's counter function: `u32 blockpoolFakeCudaCounts(FakeCudaCounts*)`.
pub const COUNTS_SYMBOL: &[u8] = b"blockpoolFakeCudaCounts";

/// What `blockpoolFakeCudaCounts` reports; same layout as the driver's own struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FakeCudaCounts {
    /// Live `cuMemAlloc_v2` / `cuMemAllocAsync` allocations.
    pub live_allocations: u64,
    /// Bytes in them.
    pub live_bytes: u64,
    /// Live `cuMemHostAlloc` allocations.
    pub live_host_allocations: u64,
    /// Live events.
    pub live_events: u64,
    /// Live streams.
    pub live_streams: u64,
    /// Primary contexts retained and not yet released (summed over devices).
    pub retained_contexts: u64,
    /// `cuMemAlloc_v2` / `cuMemAllocAsync` calls that succeeded.
    pub device_allocs: u64,
    /// `cuMemFree_v2` / `cuMemFreeAsync` calls that succeeded.
    pub device_frees: u64,
    /// `cuEventRecord` calls that succeeded.
    pub event_records: u64,
    /// Calls that returned an error.
    pub errors: u64,
    /// Live `cuMemAddressReserve` ranges.
    pub live_reservations: u64,
    /// Bytes of live `cuMemCreate` allocations (mapped or not).
    pub created_bytes: u64,
}

// The driver's `Counts` (in `driver.rs`, built into the library apart) asserts the same size.
const _: () = assert!(std::mem::size_of::<FakeCudaCounts>() == 12 * 8);

/// The value of `LD_LIBRARY_PATH` that puts the fake first, before `current` (the value the
/// variable has now, if any).
pub fn library_path_with_fake(current: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    library_path_with(LIBRARY_DIR, current)
}

/// The value of `LD_LIBRARY_PATH` that puts the library folder `dir` ([`LIBRARY_DIR`] or
/// [`LIBRARY_WITHOUT_SYMBOL_DIR`]) first, before `current`.
pub fn library_path_with(dir: &str, current: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    let mut value = std::ffi::OsString::from(dir);
    if let Some(current) = current.filter(|c| !c.is_empty()) {
        value.push(":");
        value.push(current);
    }
    value
}
