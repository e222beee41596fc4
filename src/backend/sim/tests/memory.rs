//! Segments: fake addresses, capacity, out-of-memory limits, bad sizes and devices.

use super::*;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn fake_addresses_are_first_fit_from_the_device_base() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(D0, 1000)?;
    let b = sim.alloc_segment(D0, 2 * MIB)?;
    let c = sim.alloc_segment(D0, 512)?;
    assert_eq!(a, BASE, "first segment starts at the device base");
    assert_eq!(
        b,
        BASE + 0x20_0000,
        "2 MiB segment skips to the next 2 MiB boundary"
    );
    assert_eq!(
        c,
        BASE + 0x400,
        "small segment fills the gap after the first (1000 -> 1024)"
    );

    sim.free_segment(D0, a, 1000)?;
    assert_eq!(
        sim.alloc_segment(D0, 100)?,
        BASE,
        "freed lowest range is reused first"
    );
    assert_eq!(
        sim.alloc_segment(D0, 1)?,
        BASE + 0x200,
        "the rest of the freed range comes next"
    );
    assert_eq!(
        sim.alloc_segment(D0, 4 * MIB)?,
        BASE + 0x40_0000,
        "after the 2 MiB segment"
    );
    Ok(())
}

#[test]
fn freed_neighbours_merge_into_one_range() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(D0, 1024)?;
    let b = sim.alloc_segment(D0, 1024)?;
    let c = sim.alloc_segment(D0, 1024)?;
    let d = sim.alloc_segment(D0, 1024)?;
    assert_eq!([a, b, c, d], [BASE, BASE + 1024, BASE + 2048, BASE + 3072]);
    sim.free_segment(D0, a, 1024)?;
    sim.free_segment(D0, c, 1024)?;
    sim.free_segment(D0, b, 1024)?;
    assert_eq!(
        sim.alloc_segment(D0, 3072)?,
        BASE,
        "a, b and c merged into one 3 KiB range"
    );
    assert_eq!(
        sim.alloc_segment(D0, 512)?,
        BASE + 4096,
        "nothing left below d"
    );
    Ok(())
}

#[test]
fn each_device_has_its_own_address_range() -> Result<(), BackendError> {
    let sim = SimBackend::new(3, 1 << 30);
    assert_eq!(
        sim.alloc_segment(DeviceIndex::new(1), 512)?,
        0x8000_0000_0000
    );
    assert_eq!(
        sim.alloc_segment(DeviceIndex::new(2), 512)?,
        0x8100_0000_0000
    );
    assert_eq!(sim.alloc_segment(D0, 512)?, BASE);
    assert_eq!(
        sim.segment_count(DeviceIndex::new(1)),
        1,
        "each device counts only its own segments"
    );
    Ok(())
}

#[test]
fn alloc_past_capacity_is_out_of_memory_and_free_makes_room() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 4096);
    let a = sim.alloc_segment(D0, 4000)?;
    assert_eq!(
        sim.alloc_segment(D0, 97),
        Err(BackendError::OutOfMemory {
            device: D0,
            requested_bytes: 97
        }),
        "4000 + 97 bytes exceed the 4096-byte capacity"
    );
    assert_eq!(
        sim.alloc_segment(D0, 96)?,
        BASE + 4096,
        "exactly filling capacity succeeds"
    );
    assert_eq!(sim.allocated_bytes(D0), 4096);
    sim.free_segment(D0, a, 4000)?;
    assert_eq!(
        sim.alloc_segment(D0, 97)?,
        BASE,
        "freed bytes are available again"
    );
    assert_eq!(sim.calls(D0).failed_allocs, 1);
    Ok(())
}

#[test]
fn mem_get_info_reports_capacity_minus_in_use() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 10_000);
    sim.alloc_segment(D0, 3000)?;
    let info = sim.mem_get_info(D0)?;
    assert_eq!(
        info,
        MemInfo {
            free_bytes: 7000,
            total_bytes: 10_000
        }
    );
    Ok(())
}

#[test]
fn oom_limit_below_capacity_refuses_and_shows_in_free_bytes() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 10_000);
    sim.alloc_segment(D0, 3000)?;
    sim.set_oom_above(D0, Some(4000))?;
    assert_eq!(
        sim.mem_get_info(D0)?,
        MemInfo {
            free_bytes: 1000,
            total_bytes: 10_000
        }
    );
    assert_eq!(
        sim.alloc_segment(D0, 1001),
        Err(BackendError::OutOfMemory {
            device: D0,
            requested_bytes: 1001
        }),
        "3000 + 1001 bytes pass the 4000-byte limit"
    );
    sim.alloc_segment(D0, 1000)?;
    sim.inject(D0, SimFault::OutOfMemoryAbove { limit_bytes: 1 })?;
    assert_eq!(
        sim.mem_get_info(D0)?.free_bytes,
        0,
        "limit below in-use saturates at 0"
    );
    sim.set_oom_above(D0, None)?;
    assert_eq!(
        sim.mem_get_info(D0)?.free_bytes,
        6000,
        "lifting the limit restores capacity"
    );
    sim.set_oom_above(D0, Some(usize::MAX))?;
    assert_eq!(
        sim.mem_get_info(D0)?.free_bytes,
        6000,
        "a limit above capacity changes nothing"
    );
    Ok(())
}

#[test]
fn free_of_unknown_or_wrong_size_segment_changes_nothing() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(D0, 1024)?;
    let wrong_size = BackendError::UnknownSegment {
        device: D0,
        ptr: a,
        size_bytes: 512,
    };
    assert_eq!(
        sim.free_segment(D0, a, 512),
        Err(wrong_size),
        "a free with the wrong size must be refused as an unknown segment"
    );
    assert_eq!(
        sim.free_segment(D0, a + 512, 512),
        Err(BackendError::UnknownSegment {
            device: D0,
            ptr: a + 512,
            size_bytes: 512
        }),
        "an interior address is not a segment"
    );
    assert_eq!(
        sim.free_segment(D0, 0, 0),
        Err(BackendError::UnknownSegment {
            device: D0,
            ptr: 0,
            size_bytes: 0
        }),
        "address 0 was never handed out"
    );
    assert_eq!((sim.segment_count(D0), sim.allocated_bytes(D0)), (1, 1024));
    sim.free_segment(D0, a, 1024)?;
    assert_eq!(
        sim.free_segment(D0, a, 1024),
        Err(BackendError::UnknownSegment {
            device: D0,
            ptr: a,
            size_bytes: 1024
        }),
        "a double free must be refused as an unknown segment"
    );
    let calls = sim.calls(D0);
    assert_eq!((calls.segment_frees, calls.failed_frees), (1, 4));
    Ok(())
}

#[test]
fn zero_byte_alloc_is_an_invalid_value_driver_error() {
    let sim = sim();
    let err = sim
        .alloc_segment(D0, 0)
        .expect_err("0 bytes cannot be allocated");
    assert!(
        matches!(err, BackendError::Driver { device, code: 1, ref name, .. } if device == D0 && name == "CUDA_ERROR_INVALID_VALUE"),
        "got {err:?}"
    );
    assert!(
        !err.is_out_of_memory(),
        "freeing memory cannot help a 0-byte request"
    );
    assert_eq!(sim.calls(D0).failed_allocs, 1);
}

#[test]
fn huge_sizes_are_out_of_memory_without_overflow() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, usize::MAX);
    for size in [usize::MAX, usize::MAX - 100, (1 << 40) + 1] {
        assert_eq!(
            sim.alloc_segment(D0, size),
            Err(BackendError::OutOfMemory {
                device: D0,
                requested_bytes: size
            }),
            "{size} bytes do not fit the 1 TiB fake address range"
        );
    }
    assert_eq!(
        sim.alloc_segment(D0, 1 << 40)?,
        BASE,
        "exactly the whole range fits"
    );
    let out_of_memory = |requested_bytes| {
        Err(BackendError::OutOfMemory {
            device: D0,
            requested_bytes,
        })
    };
    assert_eq!(
        sim.alloc_segment(D0, 512),
        out_of_memory(512),
        "the fake address range is full"
    );
    assert_eq!(
        sim.alloc_segment(D0, usize::MAX),
        out_of_memory(usize::MAX),
        "the in-use count must not overflow"
    );
    assert_eq!(
        sim.free_segment(D0, u64::MAX, usize::MAX),
        Err(BackendError::UnknownSegment {
            device: D0,
            ptr: u64::MAX,
            size_bytes: usize::MAX
        }),
        "a free at the top of the address space names no segment"
    );

    let host = SimBackend::builder()
        .capacity(usize::MAX)
        .host_backed(true)
        .build();
    for size in [usize::MAX, usize::MAX - 511, usize::MAX / 2] {
        assert_eq!(
            host.alloc_segment(D0, size),
            out_of_memory(size),
            "the host cannot back {size} bytes"
        );
    }
    assert_eq!(host.allocated_bytes(D0), 0);
    Ok(())
}

#[test]
fn invalid_device_is_an_error_everywhere() {
    let sim = SimBackend::new(2, 1 << 20);
    let invalid = Err(BackendError::InvalidDevice {
        device: DeviceIndex::new(2),
        device_count: 2,
    });
    assert_eq!(
        sim.alloc_segment(DeviceIndex::new(2), 512),
        invalid.clone().map(|()| 0)
    );
    assert_eq!(
        sim.free_segment(DeviceIndex::new(2), BASE, 512),
        invalid.clone()
    );
    assert_eq!(
        sim.mem_get_info(DeviceIndex::new(usize::MAX)),
        Err(BackendError::InvalidDevice {
            device: DeviceIndex::new(usize::MAX),
            device_count: 2
        })
    );
    assert_eq!(
        sim.record_event(DeviceIndex::new(2), S1).map(|_| ()),
        invalid.clone()
    );
    assert_eq!(
        sim.advance_stream(DeviceIndex::new(2), S1, 1).map(|_| ()),
        invalid.clone()
    );
    assert_eq!(
        sim.inject(DeviceIndex::new(2), SimFault::HangStream { stream: S1 }),
        invalid.clone()
    );
    assert_eq!(sim.clear_faults(DeviceIndex::new(2)), invalid.clone());
    assert_eq!(sim.write(DeviceIndex::new(2), BASE, &[1]), invalid.clone());
    assert_eq!(sim.read(DeviceIndex::new(2), BASE, &mut [0]), invalid);
    assert_eq!(sim.calls(DeviceIndex::new(2)), SimCalls::default());
    assert_eq!(
        (
            sim.allocated_bytes(DeviceIndex::new(2)),
            sim.segment_count(DeviceIndex::new(2))
        ),
        (0, 0)
    );

    let none = SimBackend::builder().devices(0).build();
    assert_eq!(none.device_count(), 0);
    assert_eq!(
        none.alloc_segment(D0, 512),
        Err(BackendError::InvalidDevice {
            device: D0,
            device_count: 0
        }),
        "a backend without devices has no device 0"
    );
    assert_eq!(none.complete_all(), 0);
}

#[test]
fn builder_sets_capacities_per_device() -> Result<(), BackendError> {
    let sim = SimBackend::builder()
        .devices(2)
        .capacity(1000)
        .device_capacity(DeviceIndex::new(1), 2000)
        .device_capacity(DeviceIndex::new(7), 1)
        .build();
    assert_eq!(sim.mem_get_info(D0)?.total_bytes, 1000);
    assert_eq!(sim.mem_get_info(DeviceIndex::new(1))?.total_bytes, 2000);
    assert!(!sim.is_host_backed());
    assert_eq!(sim.name(), "sim");
    let default = SimBackend::builder().build();
    assert_eq!(
        (
            default.device_count(),
            default.mem_get_info(D0)?.total_bytes
        ),
        (1, 16 << 30)
    );
    Ok(())
}
