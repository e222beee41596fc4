//! The one path into NVIDIA's driver: every driver function blockpool calls is called here
//! (the virtual memory management ones in `driver/vmm.rs`), through cudarc's `sys` layer, and
//! named in [`REQUIRED_SYMBOLS`]. The backend and the probe both come through here; nothing
//! else in the crate calls cudarc's `sys` or `result` functions (`driver/tests.rs` reads the
//! crate's files and checks both).
//!
//! cudarc loads libcuda on the first call of any driver function and panics when it cannot, or
//! when the library lacks that function (and formatting its `DriverError` calls the driver
//! too). So the calls are methods of [`Driver`], a token that only [`Library::driver`] makes,
//! once [`Library::open`] found that the library loads and every symbol of the list is in it:
//! holding one is the proof each call needs that cudarc will not panic. Calls whose soundness
//! also depends on a handle (a live event, a pointer this process allocated) are `unsafe fn`s
//! whose callers say why it holds.
//!
//! A failure is a [`CallError`], the function and the code it returned; what it means (a typed
//! [`BackendError`](crate::backend::BackendError), a probe's `DriverCallError`) is the caller's to say.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::{self, CUresult};

mod vmm;

/// Every driver function blockpool calls: exactly those this file and `driver/vmm.rs` call (a
/// unit test compares the list with the files), which include every one that cudarc's
/// `CudaContext::new` and its drop call for the backend's primary contexts. A library without
/// one of them predates what blockpool needs. The probe reports the first one missing, in this
/// order (the first 21 are the probe's list of old, so a driver it refused is named as
/// before); `CudaBackend::new` refuses such a library before calling any of them.
///
/// `DeviceBuffer`'s copies go through cudarc's safe layer, as the caller's own cudarc calls do;
/// those are cudarc's to load.
pub(crate) const REQUIRED_SYMBOLS: [&str; 36] = [
    "cuDriverGetVersion",
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuMemGetAllocationGranularity",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemSetAccess",
    "cuMemUnmap",
    "cuStreamGetCtx",
    "cuStreamWaitEvent",
];

/// Longest device name read, in bytes with the terminating NUL (the driver's names are < 100).
const NAME_CAPACITY: usize = 256;

/// A failed driver call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CallError {
    /// The driver function, such as `cuMemAlloc_v2`.
    pub(crate) call: &'static str,
    /// What it returned.
    pub(crate) code: CUresult,
}

/// `Ok` for `CUDA_SUCCESS`, else the [`CallError`] of `call`.
pub(crate) fn check(call: &'static str, code: CUresult) -> Result<(), CallError> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(CallError { call, code }),
    }
}

/// The driver library, known to load in this process.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Library {
    _loads: (),
}

/// libcuda with every symbol of [`REQUIRED_SYMBOLS`]: the token every driver call takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Driver {
    _checked: (),
}

/// Set once a [`Library::driver`] call has found every symbol, in this process.
static CHECKED: AtomicBool = AtomicBool::new(false);

impl Library {
    /// The library names cudarc's loader tries, in order.
    pub(crate) fn candidates() -> Vec<String> {
        ["cuda", "nvcuda"]
            .iter()
            .flat_map(|name| cudarc::get_lib_name_candidates(name))
            .collect()
    }

    /// The library, if it loads under one of the [`candidates`](Self::candidates).
    pub(crate) fn open() -> Option<Library> {
        // SAFETY: loading the driver library runs its initializers, which is what every use of
        // CUDA does first; the function only tries names and never calls into the library.
        unsafe { sys::is_culib_present() }.then_some(Library { _loads: () })
    }

    /// The file the library was loaded from, when the platform tells (Linux: the first mapping
    /// in `/proc/self/maps` named `libcuda.so*` or `libcuda64*`).
    pub(crate) fn path(self) -> Option<String> {
        // `is_culib_present` closed the library again; cudarc's loader keeps it open, so the
        // file is mapped while `/proc/self/maps` is read.
        // SAFETY: the library loads (a `Library` exists), so `culib` loads it instead of
        // panicking; loading runs only the library's initializers.
        let _library = unsafe { sys::culib() };
        loaded_library_path()
    }

    /// The first of [`REQUIRED_SYMBOLS`] the library lacks, if any.
    fn missing_symbol(self) -> Option<&'static str> {
        // SAFETY: the library loads (a `Library` exists), so `culib` loads it instead of
        // panicking.
        let library = unsafe { sys::culib() };
        REQUIRED_SYMBOLS.into_iter().find(|name| {
            // SAFETY: looking a symbol up never calls it, and the pointer type is only a
            // placeholder: the symbol is dropped without being used.
            unsafe { library.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err()
        })
    }

    /// The driver, or the first symbol it lacks.
    pub(crate) fn driver(self) -> Result<Driver, &'static str> {
        match self.missing_symbol() {
            Some(symbol) => Err(symbol),
            None => {
                CHECKED.store(true, Ordering::Release);
                Ok(Driver { _checked: () })
            }
        }
    }
}

/// The file the driver library was loaded from (see [`Library::path`]).
#[cfg(target_os = "linux")]
fn loaded_library_path() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        // The path is the last field and the only one starting with `/` (it may hold spaces).
        .filter_map(|line| line.find('/').map(|start| &line[start..]))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or(path);
            file == "libcuda.so" || file.starts_with("libcuda.so.") || file.starts_with("libcuda64")
        })
        .map(str::to_owned)
}

/// Not known on this platform.
#[cfg(not(target_os = "linux"))]
fn loaded_library_path() -> Option<String> {
    None
}

/// A C string the driver returned (`cuGetErrorName`, `cuGetErrorString`), copied.
///
/// # Safety
///
/// `text` is null or points to a NUL-terminated string that lives through the call.
unsafe fn copy_c_string(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: not null (checked above), and NUL-terminated by the caller's promise.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

/// Library, devices and contexts.
impl Driver {
    /// The driver, once a [`Library::driver`] call in this process has found every symbol.
    pub(crate) fn checked() -> Option<Driver> {
        CHECKED
            .load(Ordering::Acquire)
            .then_some(Driver { _checked: () })
    }

    /// The driver's name for `code` (`cuGetErrorName`), such as `CUDA_ERROR_OUT_OF_MEMORY`.
    pub(crate) fn error_name(self, code: CUresult) -> Option<String> {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: 1. the library has the symbol (a `Driver` exists); 2. `name` is a valid
        // out-pointer.
        let code = unsafe { sys::cuGetErrorName(code, &mut name) };
        check("cuGetErrorName", code).ok()?;
        // SAFETY: on success the driver stores a pointer to a static C string (or null).
        unsafe { copy_c_string(name) }
    }

    /// The driver's one-line description of `code` (`cuGetErrorString`).
    pub(crate) fn error_string(self, code: CUresult) -> Option<String> {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: as in `error_name`.
        let code = unsafe { sys::cuGetErrorString(code, &mut text) };
        check("cuGetErrorString", code).ok()?;
        // SAFETY: on success the driver stores a pointer to a static C string (or null).
        unsafe { copy_c_string(text) }
    }

    /// `cuInit(0)`; may be called any number of times, from any thread.
    pub(crate) fn init(self) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; flags must be 0.
        check("cuInit", unsafe { sys::cuInit(0) })
    }

    /// `cuDriverGetVersion`: 1000 x major + 10 x minor. Needs no `cuInit`.
    pub(crate) fn driver_version(self) -> Result<i32, CallError> {
        let mut version: c_int = 0;
        // SAFETY: the library has the symbol; `version` is a valid out-pointer.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        Ok(version)
    }

    /// `cuDeviceGetCount`, as the driver reports it.
    pub(crate) fn device_count(self) -> Result<c_int, CallError> {
        let mut count: c_int = 0;
        // SAFETY: the library has the symbol; `count` is a valid out-pointer.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        Ok(count)
    }

    /// The driver's handle for device `ordinal` (`cuDeviceGet`).
    pub(crate) fn device(self, ordinal: c_int) -> Result<sys::CUdevice, CallError> {
        let mut device: sys::CUdevice = 0;
        // SAFETY: the library has the symbol; `device` is a valid out-pointer.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, ordinal)
        })?;
        Ok(device)
    }

    /// `cuDeviceGetName`, read without trusting the driver to NUL-terminate.
    pub(crate) fn device_name(self, device: sys::CUdevice) -> Result<String, CallError> {
        let mut buf = [0u8; NAME_CAPACITY];
        // SAFETY: the library has the symbol; `buf` is writable for the length passed (a small
        // constant, fits an int). A bad `device` is an error code, not undefined behaviour.
        let code = unsafe {
            sys::cuDeviceGetName(buf.as_mut_ptr().cast(), NAME_CAPACITY as c_int, device)
        };
        check("cuDeviceGetName", code)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// One integer attribute of `device` (`cuDeviceGetAttribute`).
    pub(crate) fn device_attribute(
        self,
        device: sys::CUdevice,
        attribute: sys::CUdevice_attribute,
    ) -> Result<c_int, CallError> {
        let mut value: c_int = 0;
        // SAFETY: the library has the symbol; `value` is a valid out-pointer.
        check("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        Ok(value)
    }

    /// Memory on `device`, in bytes (`cuDeviceTotalMem_v2`).
    pub(crate) fn device_total_bytes(self, device: sys::CUdevice) -> Result<usize, CallError> {
        let mut total = 0usize;
        // SAFETY: the library has the symbol; `total` is a valid out-pointer.
        check("cuDeviceTotalMem_v2", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total, device)
        })?;
        Ok(total)
    }

    /// Free bytes of `device`, read in its primary context, retained for the call and released
    /// after, with the context current for the read only: whatever context this thread had is
    /// current again afterwards.
    pub(crate) fn primary_context_free_bytes(
        self,
        device: sys::CUdevice,
    ) -> Result<usize, CallError> {
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the library has the symbol; `context` is a valid out-pointer. A successful
        // retain is balanced by the release below on every path.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        let free = self.free_bytes_in(context);
        // SAFETY: balances the successful retain above; the context is no longer current
        // (`free_bytes_in` popped it).
        let released = check("cuDevicePrimaryCtxRelease_v2", unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(device)
        });
        let free = free?;
        released?;
        Ok(free)
    }

    /// `cuMemGetInfo_v2` with `context` pushed current for the call and popped after.
    fn free_bytes_in(self, context: sys::CUcontext) -> Result<usize, CallError> {
        // SAFETY: the library has the symbol; `context` is a retained primary context, alive
        // until its release after this function returns.
        check("cuCtxPushCurrent_v2", unsafe {
            sys::cuCtxPushCurrent_v2(context)
        })?;
        let info = self.mem_get_info();
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the library has the symbol; the push above succeeded, so there is a context
        // to pop; `popped` is a valid out-pointer.
        let pop = check("cuCtxPopCurrent_v2", unsafe {
            sys::cuCtxPopCurrent_v2(&mut popped)
        });
        let (free, _total) = info?;
        pop?;
        Ok(free)
    }

    /// The context current on this thread (`cuCtxGetCurrent`; null for none).
    pub(crate) fn current_context(self) -> Result<sys::CUcontext, CallError> {
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the library has the symbol; `current` is a valid out-pointer.
        check("cuCtxGetCurrent", unsafe {
            sys::cuCtxGetCurrent(&mut current)
        })?;
        Ok(current)
    }

    /// Makes `context` current on this thread (`cuCtxSetCurrent`).
    ///
    /// # Safety
    ///
    /// `context` is a live context (retained by the caller).
    pub(crate) unsafe fn set_current_context(
        self,
        context: sys::CUcontext,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; `context` is live (the caller's promise).
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context) })
    }

    /// Waits for all work queued in the current context (`cuCtxSynchronize`).
    pub(crate) fn synchronize_context(self) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the call takes no pointers.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    /// Free and total bytes of the current context's device (`cuMemGetInfo_v2`).
    pub(crate) fn mem_get_info(self) -> Result<(usize, usize), CallError> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the library has the symbol; both out-pointers are valid. Without a current
        // context the driver returns an error code.
        check("cuMemGetInfo_v2", unsafe {
            sys::cuMemGetInfo_v2(&mut free, &mut total)
        })?;
        Ok((free, total))
    }
}

/// Memory and events.
impl Driver {
    /// `size_bytes` of device memory in the current context (`cuMemAlloc_v2`).
    pub(crate) fn mem_alloc(self, size_bytes: usize) -> Result<sys::CUdeviceptr, CallError> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the library has the symbol; `ptr` is a valid out-pointer.
        check("cuMemAlloc_v2", unsafe {
            sys::cuMemAlloc_v2(&mut ptr, size_bytes)
        })?;
        Ok(ptr)
    }

    /// Frees device memory (`cuMemFree_v2`).
    ///
    /// # Safety
    ///
    /// 1. `ptr` came from [`mem_alloc`](Self::mem_alloc) and is freed once. 2. No queued or
    ///    running work still uses it.
    pub(crate) unsafe fn mem_free(self, ptr: sys::CUdeviceptr) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(ptr) })
    }

    /// `size_bytes` of pinned host memory, pinned for every context (`cuMemHostAlloc` with
    /// `CU_MEMHOSTALLOC_PORTABLE`); needs a current context.
    pub(crate) fn host_alloc_portable(self, size_bytes: usize) -> Result<*mut c_void, CallError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the library has the symbol; `ptr` is a valid out-pointer.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut ptr, size_bytes, sys::CU_MEMHOSTALLOC_PORTABLE)
        })?;
        Ok(ptr)
    }

    /// Frees pinned host memory (`cuMemFreeHost`).
    ///
    /// # Safety
    ///
    /// 1. `ptr` came from [`host_alloc_portable`](Self::host_alloc_portable) and is freed once.
    ///    2. No asynchronous copy still uses it, and nothing reads or writes it afterwards.
    pub(crate) unsafe fn free_host(self, ptr: *mut c_void) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) })
    }

    /// An event of the current context without timing (`cuEventCreate`,
    /// `CU_EVENT_DISABLE_TIMING`).
    pub(crate) fn event_create(self) -> Result<sys::CUevent, CallError> {
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: the library has the symbol; `event` is a valid out-pointer.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut event, flags)
        })?;
        Ok(event)
    }

    /// Records `event` on `stream` (`cuEventRecord`).
    ///
    /// # Safety
    ///
    /// `event` is a live event; `stream` is the legacy default stream (null) or a stream the
    /// caller keeps alive while it has work queued.
    pub(crate) unsafe fn event_record(
        self,
        event: sys::CUevent,
        stream: sys::CUstream,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuEventRecord", unsafe {
            sys::cuEventRecord(event, stream)
        })
    }

    /// Makes the work queued on `stream` from now on wait until the work before `event` has
    /// completed, on the device, without blocking the host (`cuStreamWaitEvent`, flags 0).
    ///
    /// # Safety
    ///
    /// `event` is a live, recorded event; `stream` is the legacy default stream (null) or a
    /// stream the caller keeps alive while it has work queued.
    pub(crate) unsafe fn stream_wait_event(
        self,
        stream: sys::CUstream,
        event: sys::CUevent,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream, event, 0)
        })
    }

    /// The context `stream` belongs to (`cuStreamGetCtx`); for the null, legacy and per-thread
    /// default streams, the calling thread's current context.
    ///
    /// # Safety
    ///
    /// `stream` is a default stream's handle or a stream the caller keeps alive.
    pub(crate) unsafe fn stream_context(
        self,
        stream: sys::CUstream,
    ) -> Result<sys::CUcontext, CallError> {
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the library has the symbol; `context` is a valid out-pointer; the stream is
        // the caller's promise.
        check("cuStreamGetCtx", unsafe {
            sys::cuStreamGetCtx(stream, &mut context)
        })?;
        Ok(context)
    }

    /// Whether the work before `event` has completed (`cuEventQuery`; not ready is `false`).
    ///
    /// # Safety
    ///
    /// `event` is a live event.
    pub(crate) unsafe fn event_query(self, event: sys::CUevent) -> Result<bool, CallError> {
        // SAFETY: the library has the symbol; `event` is live (the caller's promise).
        match unsafe { sys::cuEventQuery(event) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            code => Err(CallError {
                call: "cuEventQuery",
                code,
            }),
        }
    }

    /// Blocks until the work before `event` has completed (`cuEventSynchronize`).
    ///
    /// # Safety
    ///
    /// `event` is a live event.
    pub(crate) unsafe fn event_synchronize(self, event: sys::CUevent) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; `event` is live (the caller's promise).
        check("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(event)
        })
    }

    /// Destroys `event` (`cuEventDestroy_v2`).
    ///
    /// # Safety
    ///
    /// `event` is a live, idle event of the current context, destroyed once.
    pub(crate) unsafe fn event_destroy(self, event: sys::CUevent) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuEventDestroy_v2", unsafe {
            sys::cuEventDestroy_v2(event)
        })
    }
}

#[cfg(test)]
mod tests;
