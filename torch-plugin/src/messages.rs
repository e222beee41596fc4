//! The two messages a caller reads after a failure: `blockpool_last_oom_message` (the
//! process's last out-of-memory, any thread) and `blockpool_last_error` (this thread's last
//! failure). Neither makes the allocator: both work before it exists and when it cannot.

use std::ffi::c_char;

use crate::boundary::text;
use crate::error::{last_error, last_oom_message};

/// The message of the last out-of-memory failure in the process, laid out as PyTorch's
/// (request, capacity, free, allocated, reserved but unallocated, the settings that help);
/// length 0 when there has been none.
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn blockpool_last_oom_message(buf: *mut c_char, buf_len: usize) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_last_oom_message", buf, buf_len, || {
            Ok(last_oom_message())
        })
    }
}

/// Why the last failing call on this thread failed; length 0 when none has. A call that
/// succeeds leaves it as it was (as `errno`).
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn blockpool_last_error(buf: *mut c_char, buf_len: usize) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe { text("blockpool_last_error", buf, buf_len, || Ok(last_error())) }
}
