//! Text out of the C interface, `snprintf` style (the header's conventions): the return value
//! is the text's length in bytes whether or not it fit, and a buffer of `buf_len > 0` bytes
//! gets at most `buf_len - 1` bytes of it and a NUL, so `(NULL, 0)` asks for the length.

use std::ffi::{c_char, CStr};

use crate::error::Error;

/// Copies as much of `text` as fits into `out` with a NUL after it (nothing when `out` is
/// empty) and returns the length of the whole text, as `snprintf` does.
///
/// ```
/// let mut out = [0xffu8; 4];
/// assert_eq!(blockpool_torch::copy_text(b"hello", &mut out), 5);
/// assert_eq!(&out, b"hel\0");
/// assert_eq!(blockpool_torch::copy_text(b"hello", &mut []), 5);
/// ```
pub fn copy_text(text: &[u8], out: &mut [u8]) -> usize {
    if let Some(room) = out.len().checked_sub(1) {
        let n = room.min(text.len());
        out[..n].copy_from_slice(&text[..n]);
        out[n] = 0;
    }
    text.len()
}

/// [`copy_text`] into the caller's buffer `buf` of `buf_len` bytes, returning the length as
/// the C functions return it. A NULL `buf` with `buf_len > 0` is refused.
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len`
/// bytes, and not be read or written by anything else during the call.
pub(crate) unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    buf_len: usize,
) -> Result<isize, Error> {
    // A String is at most isize::MAX bytes long, so the length always fits.
    let length = isize::try_from(text.len()).unwrap_or(isize::MAX);
    if buf_len == 0 {
        return Ok(length);
    }
    if buf.is_null() {
        return Err(Error::NullArgument { argument: "buf" });
    }
    // SAFETY: 1. `buf` is not NULL and, by this function's contract, valid for writes of
    // `buf_len` bytes and not accessed elsewhere during the call, so the slice is valid and
    // unaliased for its lifetime, which ends with this call. 2. `u8` has the size and
    // alignment of `c_char` and every bit pattern is valid for it.
    let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), buf_len) };
    copy_text(text.as_bytes(), out);
    Ok(length)
}

/// Reads a C string argument named `argument` (lossily: bytes that are not UTF-8 become
/// U+FFFD). NULL is refused.
///
/// # Safety
///
/// `text` must be NULL or point to a NUL-terminated string that stays unchanged during the
/// call.
pub(crate) unsafe fn read_text(
    text: *const c_char,
    argument: &'static str,
) -> Result<String, Error> {
    if text.is_null() {
        return Err(Error::NullArgument { argument });
    }
    // SAFETY: `text` is not NULL and, by this function's contract, points to a NUL-terminated
    // string that is not changed during the call; the borrow ends before we return.
    let text = unsafe { CStr::from_ptr(text) };
    Ok(text.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_follows_snprintf() {
        let mut exact = [0xffu8; 6];
        assert_eq!(copy_text(b"hello", &mut exact), 5);
        assert_eq!(&exact, b"hello\0", "5 bytes and the NUL fit in 6");
        let mut short = [0xffu8; 5];
        assert_eq!(copy_text(b"hello", &mut short), 5);
        assert_eq!(
            &short, b"hell\0",
            "one byte short: truncated, still terminated"
        );
        let mut one = [0xffu8; 1];
        assert_eq!(copy_text(b"hello", &mut one), 5);
        assert_eq!(one, [0], "only the NUL fits");
        let mut wide = [0xffu8; 8];
        assert_eq!(copy_text(b"", &mut wide), 0);
        assert_eq!(wide[..2], [0, 0xff], "an empty text writes the NUL only");
    }

    #[test]
    fn write_text_takes_null_and_zero_and_refuses_null_with_room() {
        // SAFETY: buf_len is 0, so the NULL buffer is never touched.
        let length = unsafe { write_text("abc", std::ptr::null_mut(), 0) };
        assert_eq!(length.ok(), Some(3));
        // SAFETY: a NULL buffer with room is refused before any write.
        let refused = unsafe { write_text("abc", std::ptr::null_mut(), 4) };
        assert!(matches!(
            refused,
            Err(Error::NullArgument { argument: "buf" })
        ));
        let mut buf = [0 as c_char; 3];
        // SAFETY: `buf` is a live local array of 3 bytes, not otherwise used during the call.
        let length = unsafe { write_text("abc", buf.as_mut_ptr(), buf.len()) };
        assert_eq!(length.ok(), Some(3));
        assert_eq!(buf.map(|c| c as u8), *b"ab\0");
    }
}
