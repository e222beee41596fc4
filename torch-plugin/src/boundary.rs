//! The edge between C and Rust: every exported function runs its body through [`catch`], so a
//! panic becomes an error (logged, remembered for `blockpool_last_error`) instead of unwinding
//! into C, which would be undefined behaviour; and the helpers here turn a body's `Result`
//! into what the header says each kind of function returns.

use std::any::Any;
use std::ffi::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{remember, Error, BLOCKPOOL_OK};
use crate::text::write_text;

/// Runs `body`, turning a panic into [`Error::Panic`] named after `function` (logged at error
/// level). The default panic hook still prints the panic as it happens; no hook is installed.
///
/// The body is asserted unwind-safe: what it may leave half-done is the allocator's state
/// behind parking_lot mutexes (which do not poison) and the plugin's own maps, whose locks
/// are taken with poisoning ignored; a caught panic is a bug that is reported, not hidden.
pub(crate) fn catch<T>(
    function: &'static str,
    body: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(payload) => {
            let message = panic_message(payload.as_ref());
            // A payload whose drop panics again must not escape either.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
            tracing::error!("{function} panicked: {message}; the call returns an error instead");
            Err(Error::Panic { function, message })
        }
    }
}

/// The text of a panic payload (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a payload that is not text".to_owned()
    }
}

/// For functions returning `int`: 0, or the error's code (the error remembered).
pub(crate) fn status(function: &'static str, body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch(function, body) {
        Ok(()) => BLOCKPOOL_OK,
        Err(error) => remember(&error),
    }
}

/// For functions returning an id (`uint64_t`): the id, or 0 (the error remembered).
pub(crate) fn id(function: &'static str, body: impl FnOnce() -> Result<u64, Error>) -> u64 {
    match catch(function, body) {
        Ok(id) => id,
        Err(error) => {
            remember(&error);
            0
        }
    }
}

/// For functions producing text: the text written `snprintf` style into `buf` and its
/// length, or the error's (negative) code (the error remembered).
///
/// # Safety
///
/// As [`write_text`]: when `buf_len > 0` and `buf` is not NULL, `buf` is valid for writes of
/// `buf_len` bytes and not otherwise accessed during the call.
pub(crate) unsafe fn text(
    function: &'static str,
    buf: *mut c_char,
    buf_len: usize,
    body: impl FnOnce() -> Result<String, Error>,
) -> isize {
    let written = catch(function, || {
        let text = body()?;
        // SAFETY: this function's contract is write_text's, passed on unchanged.
        unsafe { write_text(&text, buf, buf_len) }
    });
    match written {
        Ok(length) => length,
        Err(error) => remember(&error) as isize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{last_error, BLOCKPOOL_ERR_PANIC};

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        let caught: Result<(), Error> = catch("blockpool_test", || panic!("boom {}", 42));
        match caught {
            Err(Error::Panic { function, message }) => {
                assert_eq!((function, message.as_str()), ("blockpool_test", "boom 42"));
            }
            other => panic!("expected a caught panic, got {other:?}"),
        }
    }

    #[test]
    fn each_kind_of_function_returns_its_failure_value_on_a_panic() {
        assert_eq!(
            status("blockpool_test", || panic!("in status")),
            BLOCKPOOL_ERR_PANIC
        );
        assert!(
            last_error().contains("blockpool_test panicked: in status"),
            "the panic is this thread's last error: {}",
            last_error()
        );
        assert_eq!(id("blockpool_test", || panic!("in id")), 0);
        // SAFETY: buf_len is 0, so the NULL buffer is never written.
        let length = unsafe {
            text("blockpool_test", std::ptr::null_mut(), 0, || {
                std::panic::panic_any(7u32)
            })
        };
        assert_eq!(length, BLOCKPOOL_ERR_PANIC as isize);
        assert!(last_error().contains("not text"), "{}", last_error());
    }

    #[test]
    fn success_passes_through() {
        assert_eq!(status("blockpool_test", || Ok(())), BLOCKPOOL_OK);
        assert_eq!(id("blockpool_test", || Ok(9)), 9);
        let mut buf = [0 as c_char; 8];
        // SAFETY: `buf` is a live local array of 8 bytes, not otherwise used during the call.
        let length = unsafe { text("blockpool_test", buf.as_mut_ptr(), 8, || Ok("ok".into())) };
        assert_eq!(length, 2);
        assert_eq!(
            buf[..3].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"ok\0"
        );
    }
}
