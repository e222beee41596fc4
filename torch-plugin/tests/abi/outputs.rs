//! Text outputs `snprintf` style (length whatever fits, at most buf_len - 1 bytes and a NUL),
//! and the per-thread last error.

use std::ffi::c_char;

use blockpool_torch::*;

use crate::support::*;

/// Calls blockpool_memory_stats_json for device 0 into a buffer of `len` bytes filled with
/// 0x7f, returning what it returned and the buffer.
fn stats_into(len: usize) -> (isize, Vec<u8>) {
    let mut buf = vec![0x7f as c_char; len];
    // SAFETY: `buf` is a live vector of `len` bytes.
    let returned = unsafe { blockpool_memory_stats_json(0, buf.as_mut_ptr(), len) };
    (returned, buf.into_iter().map(|c| c as u8).collect())
}

#[test]
fn text_outputs_follow_snprintf() {
    let _session = session();
    let text = stats_json(0).into_bytes();
    let length = text.len() as isize;
    // SAFETY: a NULL buffer with 0 is only asked for the length.
    let asked = unsafe { blockpool_memory_stats_json(0, std::ptr::null_mut(), 0) };
    assert_eq!(asked, length, "(NULL, 0) gives the length");

    let (returned, exact) = stats_into(text.len() + 1);
    assert_eq!(returned, length);
    assert_eq!(&exact[..text.len()], &text[..], "exact fit: the whole text");
    assert_eq!(exact[text.len()], 0, "and the NUL");

    let (returned, short) = stats_into(text.len());
    assert_eq!(returned, length, "the full length even when truncated");
    assert_eq!(
        &short[..text.len() - 1],
        &text[..text.len() - 1],
        "buf_len - 1 bytes"
    );
    assert_eq!(short[text.len() - 1], 0, "then the NUL");

    let (returned, one) = stats_into(1);
    assert_eq!((returned, one), (length, vec![0]), "room for the NUL only");

    let (returned, roomy) = stats_into(text.len() + 10);
    assert_eq!(returned, length);
    assert_eq!(
        roomy[text.len() + 1..],
        [0x7f; 9],
        "nothing written past the NUL"
    );

    // SAFETY: a NULL buffer with room is refused before any write.
    let null = unsafe { blockpool_memory_stats_json(0, std::ptr::null_mut(), 8) };
    assert_eq!(null, BLOCKPOOL_ERR_INVALID_ARGUMENT as isize);
    assert_eq!(last_error(), "buf is NULL");
}

#[test]
fn last_error_is_this_threads_and_survives_successful_calls() {
    let _session = session();
    let fresh = std::thread::spawn(last_error).join().expect("runs");
    assert_eq!(fresh, "", "a thread with no failure has no last error");
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_ERR_INVALID_ARGUMENT);
    let message = "no annotation tag to pop: this thread has none pushed (blockpool_annotate_push)";
    assert_eq!(last_error(), message);
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
    assert_eq!(last_error(), message, "a success leaves it, as errno");
    // Reading it truncated, snprintf style.
    let mut buf = [0x7f as c_char; 6];
    // SAFETY: `buf` is a live local array of 6 bytes.
    let length = unsafe { blockpool_last_error(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(length, message.len() as isize);
    assert_eq!(buf.map(|c| c as u8), *b"no an\0");
}
