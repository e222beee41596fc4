//! blockpool_malloc, blockpool_free, blockpool_free_v0 and blockpool_record_stream: threads,
//! exact statistics after a script, bad pointers, NULL, size 0, out of memory.

use std::ffi::c_void;

use blockpool::StreamId;
use blockpool_torch::*;

use crate::support::*;
use blockpool::DeviceIndex;

const SIZES: [isize; 4] = [512, 4096, 100_000, 1 << 20];
/// Each size as the allocator rounds it (to 512 bytes).
const ROUNDED: [i64; 4] = [512, 4096, 100_352, 1 << 20];

#[test]
fn malloc_and_free_from_eight_threads_on_their_own_streams() {
    let _session = session();
    const THREADS: usize = 8;
    const ROUNDS: usize = 100;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let stream = t + 1;
                for _ in 0..ROUNDS {
                    let ptrs: Vec<usize> = SIZES.iter().map(|&s| malloc(s, 0, stream)).collect();
                    assert!(
                        ptrs.iter().all(|&p| p != 0),
                        "an allocation failed: {}",
                        last_error()
                    );
                    for &p in ptrs.iter().rev() {
                        free(p, 0);
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a thread panicked");
    }
    let per_round: i64 = ROUNDED.iter().sum();
    let count = (THREADS * ROUNDS) as i64;
    // A stream's four blocks (1.1 MiB) fit one 2 MiB small segment, and a block freed on one
    // stream is never handed to another: one segment per stream, whatever the interleaving.
    assert_stats(
        0,
        &[
            ("allocation.all.allocated", count * 4),
            ("allocation.all.freed", count * 4),
            ("allocation.all.current", 0),
            ("allocated_bytes.all.allocated", count * per_round),
            ("allocated_bytes.all.freed", count * per_round),
            ("allocated_bytes.all.current", 0),
            ("allocated_bytes.large_pool.allocated", 0),
            ("segment.all.current", THREADS as i64),
            ("segment.small_pool.current", THREADS as i64),
            ("reserved_bytes.all.current", THREADS as i64 * 2 * MIB),
            ("num_device_alloc", THREADS as i64),
            ("num_device_free", 0),
            ("num_alloc_retries", 0),
            ("num_ooms", 0),
        ],
    );
    let peak = stats(0)["allocated_bytes.all.peak"];
    assert!(
        (per_round..=THREADS as i64 * per_round).contains(&peak),
        "peak {peak} should be between one thread's round and all threads' at once"
    );
    assert!(
        take_logs().iter().all(|l| !l.starts_with("WARN")),
        "no warning"
    );
}

#[test]
fn statistics_after_a_script_are_exact_and_a_retry_is_counted() {
    let _session = session();
    let a = malloc(1000, 0, 0); // 1024 bytes in a 2 MiB small segment
    let b = malloc(3 << 20, 0, 0); // a 20 MiB large segment, split: 3 MiB + 17 MiB free
    let c = malloc(24 << 20, 0, 0); // more than the 17 MiB free: its own 24 MiB segment
    assert!(a != 0 && b != 0 && c != 0, "{}", last_error());
    free(b, 0); // merges back: the 20 MiB segment is wholly free, cached
    assert_stats(
        0,
        &[
            ("allocation.all.current", 2),
            ("allocation.small_pool.current", 1),
            ("allocation.large_pool.current", 1),
            ("allocation.all.allocated", 3),
            ("allocation.all.freed", 1),
            ("allocation.all.peak", 3),
            ("allocated_bytes.all.current", 1024 + 24 * MIB),
            ("allocated_bytes.all.peak", 1024 + 27 * MIB),
            ("allocated_bytes.all.freed", 3 * MIB),
            ("requested_bytes.all.current", 1000 + 24 * MIB),
            ("segment.all.current", 3),
            ("segment.small_pool.current", 1),
            ("segment.large_pool.current", 2),
            ("reserved_bytes.all.current", 46 * MIB),
            ("active.all.current", 2),
            ("inactive_split.small_pool.current", 1),
            ("inactive_split.large_pool.current", 0),
            ("inactive_split_bytes.small_pool.current", 2 * MIB - 1024),
            ("num_device_alloc", 3),
            ("num_device_free", 0),
            ("num_alloc_retries", 0),
            ("num_ooms", 0),
        ],
    );
    // 990 MiB: the device has 1024 - 46 = 978 MiB free, so the allocator releases the cached
    // 20 MiB segment and retries (998 MiB free then).
    let big = malloc(990 << 20, 0, 0);
    assert_ne!(big, 0, "{}", last_error());
    assert_stats(
        0,
        &[
            ("num_alloc_retries", 1),
            ("num_device_free", 1),
            ("num_device_alloc", 4),
            ("num_ooms", 0),
            ("segment.all.current", 3),
            ("reserved_bytes.all.current", (2 + 24 + 990) * MIB),
        ],
    );
    for p in [big, a, c] {
        free(p, 0);
    }
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
    assert_stats(
        0,
        &[
            ("reserved_bytes.all.current", 0),
            ("segment.all.current", 0),
            ("allocated_bytes.all.current", 0),
            ("num_device_free", 4),
        ],
    );
}

#[test]
fn double_free_and_unknown_pointers_are_logged_and_change_nothing() {
    let _session = session();
    let p = malloc(4096, 0, 0);
    let kept = malloc(8192, 0, 0);
    free(p, 0);
    let before = (stats_json(0), stats_json(1));
    free(p, 0);
    blockpool_free_v0(p as *mut c_void, 4096, std::ptr::null_mut());
    free(0xdead_0000, 0);
    free(0xdead_0000, 7); // a bad device too: still only logged
    assert_eq!(
        (stats_json(0), stats_json(1)),
        before,
        "statistics unchanged"
    );
    let warnings: Vec<String> = take_logs()
        .into_iter()
        .filter(|l| l.starts_with("WARN"))
        .collect();
    assert_eq!(
        warnings,
        [
            format!("WARN blockpool_free({p:#x}): double free: pointer {p:#x} on device 0 was already freed; nothing changed"),
            format!("WARN blockpool_free_v0({p:#x}): double free: pointer {p:#x} on device 0 was already freed; nothing changed"),
            "WARN blockpool_free(0xdead0000): pointer 0xdead0000 is not a live allocation of this allocator on device 0; nothing changed".to_owned(),
            "WARN blockpool_free(0xdead0000): pointer 0xdead0000 is not a live allocation of this allocator on device 0; nothing changed".to_owned(),
        ]
    );
    assert!(
        last_error().starts_with("pointer 0xdead0000 is not a live allocation"),
        "{}",
        last_error()
    );
    // The pointer that is live is still freed normally.
    free(kept, 0);
    assert_stats(
        0,
        &[("allocation.all.current", 0), ("allocation.all.freed", 2)],
    );
}

#[test]
fn the_pointer_map_finds_the_device_whatever_device_free_is_given() {
    let _session = session();
    let on_one = malloc(4096, 1, 0);
    let also_on_one = malloc(4096, 1, 0);
    assert!(on_one != 0 && also_on_one != 0, "{}", last_error());
    free(on_one, 0); // PyTorch passing the wrong device
    blockpool_free_v0(also_on_one as *mut c_void, 4096, std::ptr::null_mut()); // PyTorch 2.0
    assert_stats(
        1,
        &[("allocation.all.current", 0), ("allocation.all.freed", 2)],
    );
    assert_stats(0, &[("allocation.all.allocated", 0)]);
    assert!(
        take_logs().iter().all(|l| !l.starts_with("WARN")),
        "nothing to warn about"
    );
}

#[test]
fn null_free_is_ignored_and_size_zero_is_null_without_error() {
    let _session = session();
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_ERR_INVALID_ARGUMENT);
    let error = last_error();
    let before = stats_json(0);
    blockpool_free(std::ptr::null_mut(), 0, 0, std::ptr::null_mut());
    blockpool_free_v0(std::ptr::null_mut(), 0, std::ptr::null_mut());
    assert_eq!(malloc(0, 0, 0), 0, "size 0 gives NULL");
    assert_eq!(malloc(0, 5, 0), 0, "size 0 gives NULL on any device");
    assert_eq!(stats_json(0), before, "nothing changed");
    assert_eq!(last_error(), error, "and no call failed");
    let logs = take_logs();
    assert!(
        logs.iter().all(|l| !l.starts_with("WARN")),
        "NULL is not a warning: {logs:?}"
    );
    assert!(
        logs.contains(&"DEBUG blockpool_free(NULL) ignored".to_owned()),
        "{logs:?}"
    );
}

#[test]
fn bad_sizes_and_devices_are_null_with_the_reason() {
    let _session = session();
    assert_eq!(malloc(-5, 0, 0), 0);
    assert_eq!(last_error(), "cannot allocate a negative size (-5 bytes)");
    assert_eq!(malloc(16, 2, 0), 0);
    assert_eq!(
        last_error(),
        "device 2 does not exist: this allocator manages 2 device(s)"
    );
    assert_eq!(malloc(16, -1, 0), 0);
    assert_eq!(
        last_error(),
        "device -1 does not exist: device indices count from 0"
    );
    assert_eq!(last_oom(), "", "none of these is out of memory");
}

#[test]
fn out_of_memory_is_null_with_pytorchs_message_for_every_thread() {
    let _session = session();
    let first = malloc(600 << 20, 0, 0);
    assert_ne!(first, 0, "{}", last_error());
    assert_eq!(
        malloc(600 << 20, 0, 0),
        0,
        "the second 600 MiB does not fit in 1 GiB"
    );
    let message = "out of memory: tried to allocate 600.00 MiB. Device 0 has a total capacity of \
                   1024.00 MiB of which 424.00 MiB is free. Of the allocated memory 600.00 MiB \
                   is allocated by blockpool, and 0 bytes is reserved by blockpool but \
                   unallocated. If reserved but unallocated memory is large try setting \
                   max_split_size_mb or expandable_segments:True in BLOCKPOOL_ALLOC_CONF to \
                   avoid fragmentation.";
    assert_eq!(last_oom(), message);
    assert_eq!(last_error(), message, "also this thread's last error");
    let elsewhere = std::thread::spawn(|| (last_oom(), last_error()))
        .join()
        .expect("runs");
    assert_eq!(
        elsewhere,
        (message.to_owned(), String::new()),
        "process-wide, not per thread"
    );
    assert_stats(0, &[("num_ooms", 1), ("allocation.all.current", 1)]);
    // More than the device has at all: PyTorch calls this out of memory too.
    assert_eq!(malloc(2 << 30, 0, 0), 0);
    assert_eq!(
        last_oom(),
        "out of memory: cannot allocate 2.00 GiB on device 0: that is more than the 1024.00 MiB \
         the device can ever provide"
    );
    free(first, 0);
}

#[test]
fn record_stream_defers_the_free_until_the_stream_is_done() {
    let _session = session();
    let side = 0x1234usize;
    let p = malloc(4096, 0, 0);
    assert_eq!(
        blockpool_record_stream(p as *mut c_void, side as *mut c_void),
        BLOCKPOOL_OK
    );
    free(p, 0);
    // Freed by the caller (not allocated), but still active until stream 0x1234 is done.
    assert_stats(
        0,
        &[
            ("allocated_bytes.all.current", 0),
            ("active.all.current", 1),
            ("active_bytes.all.current", 4096),
        ],
    );
    let q = malloc(4096, 0, 0);
    assert_ne!(q, p, "the pending block is not reused");
    sim()
        .complete_stream(DeviceIndex::new(0), StreamId::from_raw(side as u64))
        .expect("a stream of device 0");
    let r = malloc(4096, 0, 0);
    assert_eq!(r, p, "once the stream is done the block comes back");
    for ptr in [q, r] {
        free(ptr, 0);
    }
    // On device 1, with record_stream finding the device itself; empty_cache waits.
    let on_one = malloc(4096, 1, 0);
    assert_eq!(
        blockpool_record_stream(on_one as *mut c_void, side as *mut c_void),
        BLOCKPOOL_OK
    );
    free(on_one, 1);
    assert_stats(1, &[("active_bytes.all.current", 4096)]);
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
    assert_stats(
        1,
        &[
            ("active_bytes.all.current", 0),
            ("reserved_bytes.all.current", 0),
        ],
    );
    assert_stats(0, &[("reserved_bytes.all.current", 0)]);
}

#[test]
fn record_stream_takes_null_and_refuses_a_dead_pointer() {
    let _session = session();
    assert_eq!(
        blockpool_record_stream(std::ptr::null_mut(), 5 as *mut c_void),
        BLOCKPOOL_OK
    );
    let p = malloc(4096, 0, 0);
    free(p, 0);
    assert_eq!(
        blockpool_record_stream(p as *mut c_void, 5 as *mut c_void),
        BLOCKPOOL_ERR_UNKNOWN_POINTER
    );
    assert_eq!(
        last_error(),
        format!("use after free: pointer {p:#x} on device 0 was already freed")
    );
    let warnings: Vec<String> = take_logs()
        .into_iter()
        .filter(|l| l.starts_with("WARN"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}
