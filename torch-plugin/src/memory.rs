//! Allocation through the C interface: `blockpool_malloc` and `blockpool_free` (what
//! PyTorch's `CUDAPluggableAllocator` loads), `blockpool_free_v0` for PyTorch 2.0, and
//! `blockpool_record_stream`.
//!
//! Pointers go through the allocator's raw-pointer API, whose pointer map knows each live
//! pointer's device. The device PyTorch passes is tried first; when the map says the pointer
//! is another device's (or when no device is passed: `free_v0`, `record_stream`), the call is
//! made again on that device, so the map decides, as the header promises.

use std::ffi::{c_int, c_void};

use blockpool::{DeviceIndex, StreamId};

use crate::boundary::{catch, status};
use crate::error::{remember, Error, BLOCKPOOL_ERR_UNKNOWN_POINTER};
use crate::global::allocator;

/// A `cudaStream_t` as the allocator's stream id: its handle value (NULL: the default stream).
pub(crate) fn stream_id(stream: *mut c_void) -> StreamId {
    StreamId::from_raw(stream as usize as u64)
}

/// A device index from C: negative ones are refused here, too large ones by the allocator.
pub(crate) fn device_index(device: c_int) -> Result<DeviceIndex, Error> {
    usize::try_from(device)
        .map(DeviceIndex::new)
        .map_err(|_| Error::NegativeDevice { device })
}

/// Runs `op` on device `first`, and again on the pointer's own device when the allocator
/// says it belongs to another one.
fn on_owning_device<T>(
    first: DeviceIndex,
    op: impl Fn(DeviceIndex) -> blockpool::Result<T>,
) -> blockpool::Result<T> {
    match op(first) {
        Err(blockpool::Error::WrongDevice { actual, .. }) => op(actual),
        other => other,
    }
}

/// Allocates `size` bytes on `device` for use on `stream` (header: `blockpool_malloc`).
///
/// Returns NULL for `size` 0 (no error) and on failure: out of memory (the message in
/// `blockpool_last_oom_message` and `blockpool_last_error`), a negative size or bad device
/// (`blockpool_last_error`).
#[no_mangle]
pub extern "C" fn blockpool_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    let allocated = catch("blockpool_malloc", || {
        if size == 0 {
            return Ok(0);
        }
        let size = usize::try_from(size).map_err(|_| Error::NegativeSize { size })?;
        let device = device_index(device)?;
        // This line is the site of every allocation made through C; the thread's annotation
        // tags tell them apart (crate docs, "Leak sites").
        Ok(allocator()?.malloc(device, size, stream_id(stream))?)
    });
    match allocated {
        Ok(addr) => addr as usize as *mut c_void,
        Err(error) => {
            remember(&error);
            tracing::debug!("blockpool_malloc({size}, {device}): {error}");
            std::ptr::null_mut()
        }
    }
}

/// Frees `ptr` (header: `blockpool_free`). NULL is ignored; an unknown or already freed
/// pointer is logged at warn level and changes nothing. `size` and `stream` are not needed:
/// the allocator knows both.
#[no_mangle]
pub extern "C" fn blockpool_free(
    ptr: *mut c_void,
    size: isize,
    device: c_int,
    stream: *mut c_void,
) {
    let _ = (size, stream);
    free_pointer("blockpool_free", ptr, Some(device));
}

/// PyTorch 2.0's free, which has no device argument (header: `blockpool_free_v0`): the
/// pointer map finds the device.
#[no_mangle]
pub extern "C" fn blockpool_free_v0(ptr: *mut c_void, size: isize, stream: *mut c_void) {
    let _ = (size, stream);
    free_pointer("blockpool_free_v0", ptr, None);
}

fn free_pointer(function: &'static str, ptr: *mut c_void, device: Option<c_int>) {
    if ptr.is_null() {
        tracing::debug!("{function}(NULL) ignored");
        return;
    }
    let addr = ptr as usize as u64;
    let freed = catch(function, || {
        let alloc = allocator()?;
        // A device PyTorch names is the likely owner; a bad one only costs the second try.
        let first = device
            .and_then(|d| usize::try_from(d).ok())
            .filter(|&d| d < alloc.device_count())
            .map(DeviceIndex::new)
            .unwrap_or(DeviceIndex::new(0));
        Ok(on_owning_device(first, |d| alloc.free(d, addr))?)
    });
    if let Err(error) = freed {
        log_refused(function, addr, &error);
    }
}

/// Remembers why a pointer call failed and logs it: warn for a pointer that is not live (the
/// header's "logged and changes nothing"), error for anything else.
fn log_refused(function: &'static str, addr: u64, error: &Error) {
    if remember(error) == BLOCKPOOL_ERR_UNKNOWN_POINTER {
        tracing::warn!("{function}({addr:#x}): {error}; nothing changed");
    } else {
        tracing::error!("{function}({addr:#x}): {error}");
    }
}

/// Marks `ptr` as also used on `stream` (header: `blockpool_record_stream`): when it is
/// freed, its memory is reused only after the work queued on `stream` by then has run. NULL
/// is accepted and does nothing (an empty tensor has no memory to protect).
#[no_mangle]
pub extern "C" fn blockpool_record_stream(ptr: *mut c_void, stream: *mut c_void) -> c_int {
    let addr = ptr as usize as u64;
    let stream = stream_id(stream);
    let code = status("blockpool_record_stream", || {
        let alloc = allocator()?;
        Ok(on_owning_device(DeviceIndex::new(0), |d| {
            alloc.record_stream(d, addr, stream)
        })?)
    });
    if code == BLOCKPOOL_ERR_UNKNOWN_POINTER {
        tracing::warn!(
            "blockpool_record_stream({addr:#x}, {stream}): {}; nothing changed",
            crate::error::last_error()
        );
    }
    code
}
