//! What `torch.cuda` loses with a pluggable allocator, per device: statistics as JSON with
//! `torch.cuda.memory_stats()`'s keys, their resets, the `memory_summary()` table,
//! `empty_cache`, the memory fraction, and the device count.

use std::ffi::{c_char, c_double, c_int};

use crate::boundary::{status, text};
use crate::error::Error;
use crate::global::allocator;
use crate::memory::device_index;

/// `torch.cuda.memory_stats(device)` as one JSON object of integers, keys sorted as PyTorch's
/// `OrderedDict` sorts them, written `snprintf` style (header:
/// `blockpool_memory_stats_json`).
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes
/// (as for `snprintf`).
#[no_mangle]
pub unsafe extern "C" fn blockpool_memory_stats_json(
    device: c_int,
    buf: *mut c_char,
    buf_len: usize,
) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_memory_stats_json", buf, buf_len, || {
            let stats = allocator()?.memory_stats(device_index(device)?)?;
            let object: serde_json::Map<String, serde_json::Value> = stats
                .iter()
                .map(|(key, value)| (key.to_owned(), value.into()))
                .collect();
            Ok(serde_json::to_string(&object)?)
        })
    }
}

/// `torch.cuda.reset_peak_memory_stats(device)`: every peak becomes its current value.
#[no_mangle]
pub extern "C" fn blockpool_reset_peak_memory_stats(device: c_int) -> c_int {
    status("blockpool_reset_peak_memory_stats", || {
        Ok(allocator()?.reset_peak_memory_stats(device_index(device)?)?)
    })
}

/// `torch.cuda.reset_accumulated_memory_stats(device)`: the allocated / freed totals and the
/// counters (`num_alloc_retries`, `num_ooms`, ...) go to 0.
#[no_mangle]
pub extern "C" fn blockpool_reset_accumulated_memory_stats(device: c_int) -> c_int {
    status("blockpool_reset_accumulated_memory_stats", || {
        Ok(allocator()?.reset_accumulated_memory_stats(device_index(device)?)?)
    })
}

/// `torch.cuda.memory_summary(device, abbreviated)`: PyTorch's table (abbreviated leaves out
/// the per-pool rows, as PyTorch's does), written `snprintf` style.
///
/// # Safety
///
/// As [`blockpool_memory_stats_json`].
#[no_mangle]
pub unsafe extern "C" fn blockpool_memory_summary(
    device: c_int,
    abbreviated: c_int,
    buf: *mut c_char,
    buf_len: usize,
) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_memory_summary", buf, buf_len, || {
            let device = device_index(device)?;
            let stats = allocator()?.device_stats(device)?;
            Ok(blockpool::stats::memory_summary(
                device.get(),
                &stats,
                abbreviated != 0,
            ))
        })
    }
}

/// `torch.cuda.empty_cache()` on every device: waits for pending deferred frees, then gives
/// every wholly free segment back to the device.
#[no_mangle]
pub extern "C" fn blockpool_empty_cache() -> c_int {
    status("blockpool_empty_cache", || Ok(allocator()?.empty_cache()?))
}

/// `torch.cuda.set_per_process_memory_fraction(fraction, device)`: caps what the allocator
/// may reserve on `device`; `fraction` must be in [0, 1] (NaN is refused).
#[no_mangle]
pub extern "C" fn blockpool_set_memory_fraction(fraction: c_double, device: c_int) -> c_int {
    status("blockpool_set_memory_fraction", || {
        Ok(allocator()?.set_per_process_memory_fraction(fraction, device_index(device)?)?)
    })
}

/// The fraction in force on `device` into `*fraction`, or -1.0 when none is set.
///
/// # Safety
///
/// `fraction` must be NULL (refused) or valid for a write of one `double`.
#[no_mangle]
pub unsafe extern "C" fn blockpool_get_memory_fraction(
    device: c_int,
    fraction: *mut c_double,
) -> c_int {
    status("blockpool_get_memory_fraction", || {
        if fraction.is_null() {
            return Err(Error::NullArgument {
                argument: "fraction",
            });
        }
        let value = allocator()?
            .memory_fraction(device_index(device)?)?
            .unwrap_or(-1.0);
        // SAFETY: `fraction` is not NULL and, by this function's contract, valid for a write
        // of one double; `write_unaligned` asks nothing of its alignment.
        unsafe { fraction.write_unaligned(value) };
        Ok(())
    })
}

/// The number of devices the allocator manages, or a negative `BLOCKPOOL_ERR_*` code when it
/// could not start.
#[no_mangle]
pub extern "C" fn blockpool_device_count() -> c_int {
    let mut count = 0;
    let code = status("blockpool_device_count", || {
        count = c_int::try_from(allocator()?.device_count()).unwrap_or(c_int::MAX);
        Ok(())
    });
    if code < 0 {
        code
    } else {
        count
    }
}
