//! The fake driver's setup: `cuInit` and the version, the error texts, what the fake cannot
//! do, and its own controls (counts, failure injection, the event delay).

use super::*;

/// Names and descriptions for `cuGetErrorName` / `cuGetErrorString`, NUL-terminated.
pub(crate) const ERRORS: [(u32, &str, &str); 13] = [
    (code::SUCCESS, "CUDA_SUCCESS\0", "no error\0"),
    (
        code::INVALID_VALUE,
        "CUDA_ERROR_INVALID_VALUE\0",
        "invalid argument\0",
    ),
    (
        code::OUT_OF_MEMORY,
        "CUDA_ERROR_OUT_OF_MEMORY\0",
        "out of memory\0",
    ),
    (
        code::NOT_INITIALIZED,
        "CUDA_ERROR_NOT_INITIALIZED\0",
        "initialization error\0",
    ),
    (
        code::DEVICE_UNAVAILABLE,
        "CUDA_ERROR_DEVICE_UNAVAILABLE\0",
        "CUDA-capable device(s) is/are busy or unavailable\0",
    ),
    (
        code::NO_DEVICE,
        "CUDA_ERROR_NO_DEVICE\0",
        "no CUDA-capable device is detected\0",
    ),
    (
        code::INVALID_DEVICE,
        "CUDA_ERROR_INVALID_DEVICE\0",
        "invalid device ordinal\0",
    ),
    (
        code::INVALID_CONTEXT,
        "CUDA_ERROR_INVALID_CONTEXT\0",
        "invalid device context\0",
    ),
    (
        code::INVALID_HANDLE,
        "CUDA_ERROR_INVALID_HANDLE\0",
        "invalid resource handle\0",
    ),
    (
        code::NOT_READY,
        "CUDA_ERROR_NOT_READY\0",
        "device not ready\0",
    ),
    (
        code::ILLEGAL_ADDRESS,
        "CUDA_ERROR_ILLEGAL_ADDRESS\0",
        "an illegal memory access was encountered\0",
    ),
    (
        code::NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED\0",
        "operation not supported\0",
    ),
    (code::UNKNOWN, "CUDA_ERROR_UNKNOWN\0", "unknown error\0"),
];

// ---- initialization and version ----

/// `cuInit`.
#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> u32 {
    if flags != 0 {
        return code::INVALID_VALUE;
    }
    let knobs = match read_knobs() {
        Ok(knobs) => knobs,
        Err(code) => return code,
    };
    if knobs.init_error != code::SUCCESS {
        return knobs.init_error;
    }
    let mut guard = lock();
    if guard.is_none() {
        *guard = Some(Driver::new(&knobs));
    }
    code::SUCCESS
}

/// `cuDriverGetVersion`; needs no `cuInit`.
///
/// # Safety
/// `version` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    let value = match read_knobs() {
        Ok(knobs) => knobs.driver_version,
        Err(code) => return code,
    };
    let value = lock().as_ref().map_or(value, |d| d.driver_version);
    match write(version, value) {
        Ok(()) => code::SUCCESS,
        Err(code) => code,
    }
}

/// One of the entry's static texts.
type Pick = fn(&(u32, &'static str, &'static str)) -> &'static str;

fn error_text(error: u32, text: *mut *const c_char, pick: Pick) -> u32 {
    match ERRORS.iter().find(|e| e.0 == error) {
        Some(entry) => match write(text, pick(entry).as_ptr().cast()) {
            Ok(()) => code::SUCCESS,
            Err(code) => code,
        },
        None => {
            let _ = write(text, std::ptr::null());
            code::INVALID_VALUE
        }
    }
}

/// `cuGetErrorName`: a static NUL-terminated name.
///
/// # Safety
/// `name` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: u32, name: *mut *const c_char) -> u32 {
    error_text(error, name, |e| e.1)
}

/// `cuGetErrorString`: a static NUL-terminated description.
///
/// # Safety
/// `text` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: u32, text: *mut *const c_char) -> u32 {
    error_text(error, text, |e| e.2)
}

// ---- what the fake cannot do ----

/// `cuModuleLoadData`: the fake runs no kernels.
#[no_mangle]
pub extern "C" fn cuModuleLoadData(_module: *mut *mut c_void, _image: *const c_void) -> u32 {
    with_driver(|_| Err(code::NOT_SUPPORTED))
}

// ---- the fake's own ----

/// Fills in what is live and how many calls were made (`FakeCudaCounts` in the crate).
///
/// # Safety
/// `counts` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn blockpoolFakeCudaCounts(counts: *mut Counts) -> u32 {
    with_driver(|d| write(counts, d.counts()))
}

/// Makes the next `times` calls of the driver function `call` (its exported name, such as
/// `cuEventCreate`) fail with `error`, a code of the driver's list, so a test reaches the error
/// paths of its caller. Functions that honour it: `cuMemAlloc_v2`, `cuMemFree_v2`,
/// `cuEventCreate`, `cuEventRecord`, `cuMemHostAlloc`, `cuMemAddressReserve`, `cuMemCreate`,
/// `cuMemMap`.
///
/// # Safety
/// `call` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn blockpoolFakeCudaFailNext(
    call: *const c_char,
    error: u32,
    times: u32,
) -> u32 {
    with_driver(|d| {
        if call.is_null() || !ERRORS.iter().any(|e| e.0 == error) {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: not null, and NUL-terminated by the caller's promise.
        let name = unsafe { std::ffi::CStr::from_ptr(call) };
        let name = name.to_str().map_err(|_| code::INVALID_VALUE)?;
        d.failures.insert(name.to_owned(), (error, times));
        Ok(())
    })
}

/// Sets how many times each event recorded from now on answers not-ready before completing
/// (`BLOCKPOOL_FAKE_CUDA_EVENT_DELAY` at run time); `u32::MAX` keeps events pending until
/// their stream, their context or the event itself is synchronized.
#[no_mangle]
pub extern "C" fn blockpoolFakeCudaSetEventDelay(queries: u32) -> u32 {
    with_driver(|d| {
        d.event_delay = queries;
        Ok(())
    })
}
