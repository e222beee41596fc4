//! Statistics JSON, resets, the summary table, empty_cache, the memory fraction and the
//! device count.

use blockpool_torch::*;

use crate::support::*;

#[test]
fn stats_json_has_pytorchs_122_integer_keys_in_order() {
    let _session = session();
    let text = stats_json(0);
    let keys: Vec<String> = match json(&text) {
        serde_json::Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    };
    assert_eq!(keys.len(), 122);
    assert_eq!(
        keys.first().map(String::as_str),
        Some("active.all.allocated")
    );
    assert_eq!(
        keys.last().map(String::as_str),
        Some("segment.small_pool.peak")
    );
    let nonzero: Vec<(String, i64)> = stats(0).into_iter().filter(|(_, v)| *v != 0).collect();
    assert_eq!(
        nonzero,
        [("max_split_size".to_owned(), -1)],
        "a clean allocator has only the unlimited split size (PyTorch's -1)"
    );
    assert!(text.starts_with("{\"active.all.allocated\":0,"), "{text}");
}

#[test]
fn resets_set_peaks_to_current_and_zero_the_totals() {
    let _session = session();
    let a = malloc(1 << 20, 0, 0);
    let b = malloc(1 << 20, 0, 0);
    free(b, 0);
    assert_stats(
        0,
        &[
            ("allocated_bytes.all.peak", 2 * MIB),
            ("allocation.all.allocated", 2),
        ],
    );
    assert_eq!(blockpool_reset_peak_memory_stats(0), BLOCKPOOL_OK);
    assert_stats(
        0,
        &[
            ("allocated_bytes.all.peak", MIB),
            ("allocation.all.allocated", 2),
        ],
    );
    assert_eq!(blockpool_reset_accumulated_memory_stats(0), BLOCKPOOL_OK);
    assert_stats(
        0,
        &[
            ("allocated_bytes.all.peak", MIB),
            ("allocation.all.allocated", 0),
            ("allocation.all.freed", 0),
            ("num_device_alloc", 0),
            ("allocated_bytes.all.current", MIB),
        ],
    );
    assert_eq!(
        blockpool_reset_peak_memory_stats(2),
        BLOCKPOOL_ERR_NO_SUCH_DEVICE
    );
    assert_eq!(
        blockpool_reset_accumulated_memory_stats(-3),
        BLOCKPOOL_ERR_NO_SUCH_DEVICE
    );
    free(a, 0);
}

#[test]
fn empty_cache_gives_every_device_its_memory_back() {
    let _session = session();
    let on_zero = malloc(30 << 20, 0, 0);
    let on_one = malloc(4096, 1, 0);
    free(on_zero, 0);
    free(on_one, 1);
    assert_stats(0, &[("reserved_bytes.all.current", 30 * MIB)]);
    assert_stats(1, &[("reserved_bytes.all.current", 2 * MIB)]);
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
    for device in 0..2 {
        assert_stats(
            device,
            &[
                ("reserved_bytes.all.current", 0),
                ("segment.all.current", 0),
                ("num_device_free", 1),
            ],
        );
    }
}

#[test]
fn memory_fraction_is_set_read_and_checked() {
    let _session = session();
    let mut fraction = 0.0;
    // SAFETY: `fraction` is a live local double.
    let got = unsafe { blockpool_get_memory_fraction(0, &mut fraction) };
    assert_eq!(
        (got, fraction),
        (BLOCKPOOL_OK, -1.0),
        "no test sets one on device 0"
    );
    // SAFETY: as above.
    let got = unsafe { blockpool_get_memory_fraction(1, &mut fraction) };
    assert_eq!((got, fraction), (BLOCKPOOL_OK, 1.0), "the session set 1.0");
    assert_eq!(blockpool_set_memory_fraction(0.25, 1), BLOCKPOOL_OK);
    // SAFETY: as above.
    let got = unsafe { blockpool_get_memory_fraction(1, &mut fraction) };
    assert_eq!((got, fraction), (BLOCKPOOL_OK, 0.25));
    // 300 MiB is more than a quarter of 1 GiB.
    assert_eq!(malloc(300 << 20, 1, 0), 0);
    assert_eq!(
        last_oom(),
        "out of memory: cannot allocate 300.00 MiB on device 1: that is more than the 256.00 MiB \
         the device can ever provide under its memory fraction"
    );
    for bad in [1.5, -0.1, f64::NAN] {
        assert_eq!(
            blockpool_set_memory_fraction(bad, 1),
            BLOCKPOOL_ERR_INVALID_ARGUMENT,
            "{bad}"
        );
    }
    assert!(
        last_error().contains("must be between 0 and 1"),
        "{}",
        last_error()
    );
    assert_eq!(
        blockpool_set_memory_fraction(0.5, 2),
        BLOCKPOOL_ERR_NO_SUCH_DEVICE
    );
    // SAFETY: as above.
    let got = unsafe { blockpool_get_memory_fraction(1, &mut fraction) };
    assert_eq!(
        (got, fraction),
        (BLOCKPOOL_OK, 0.25),
        "a refused fraction changes nothing"
    );
    // SAFETY: NULL is refused before any write.
    let null = unsafe { blockpool_get_memory_fraction(1, std::ptr::null_mut()) };
    assert_eq!(null, BLOCKPOOL_ERR_INVALID_ARGUMENT);
    assert_eq!(last_error(), "fraction is NULL");
    // SAFETY: as above.
    let bad_device = unsafe { blockpool_get_memory_fraction(-1, &mut fraction) };
    assert_eq!(bad_device, BLOCKPOOL_ERR_NO_SUCH_DEVICE);
}

#[test]
fn summary_is_pytorchs_table_and_abbreviated_drops_the_pool_rows() {
    let _session = session();
    let p = malloc(4096, 0, 0);
    // SAFETY: `read` passes a NULL buffer with 0 or a live buffer with its exact length.
    let full = read(|buf, len| unsafe { blockpool_memory_summary(0, 0, buf, len) });
    // SAFETY: as above.
    let short = read(|buf, len| unsafe { blockpool_memory_summary(0, 1, buf, len) });
    let title = "|                  blockpool memory summary, device ID 0                    |";
    assert!(
        full.lines().any(|l| l.contains("from large pool")),
        "{full}"
    );
    assert!(
        !short.lines().any(|l| l.contains("from large pool")),
        "{short}"
    );
    assert!(full.contains(title) && short.contains(title), "{full}");
    assert!(short.lines().count() < full.lines().count());
    let expected = blockpool::stats::memory_summary(
        0,
        &allocator()
            .expect("started")
            .device_stats(0)
            .expect("device 0"),
        false,
    );
    assert_eq!(full, expected, "the library's table, unchanged");
    // SAFETY: a NULL buffer with 0 is only asked for the length.
    let bad = unsafe { blockpool_memory_summary(5, 0, std::ptr::null_mut(), 0) };
    assert_eq!(bad, BLOCKPOOL_ERR_NO_SUCH_DEVICE as isize);
    free(p, 0);
}

#[test]
fn device_count_is_the_simulated_devices() {
    let _session = session();
    assert_eq!(blockpool_device_count(), DEVICES as i32);
}
