//! Host-backed segments and pinned host memory: real bytes, bounds, alignment.

use super::*;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn host_backed_segments_are_zeroed_aligned_and_round_trip() -> Result<(), BackendError> {
    let sim = SimBackend::builder()
        .devices(2)
        .capacity(1 << 20)
        .host_backed(true)
        .build();
    assert!(sim.is_host_backed());
    let a = sim.alloc_segment(D0, 1000)?;
    let b = sim.alloc_segment(DeviceIndex::new(1), 3000)?;
    assert_eq!((a % 512, b % 512), (0, 0), "addresses are 512-byte aligned");
    assert!(
        a + 1000 <= b || b + 3000 <= a,
        "segments of real memory never overlap"
    );

    let mut bytes = [0xff; 1000];
    sim.read(D0, a, &mut bytes)?;
    assert!(
        bytes.iter().all(|&byte| byte == 0),
        "new segments are zeroed"
    );
    sim.write(D0, a + 996, &[1, 2, 3, 4])?;
    sim.write(DeviceIndex::new(1), b, &[5; 3000])?;
    let mut tail = [0; 6];
    sim.read(D0, a + 994, &mut tail)?;
    assert_eq!(tail, [0, 0, 1, 2, 3, 4]);
    let mut last = [0; 2];
    sim.read(DeviceIndex::new(1), b + 2998, &mut last)?;
    assert_eq!(last, [5, 5]);
    sim.write(D0, a + 1000, &[])?;
    assert_eq!(
        (
            sim.allocated_bytes(D0),
            sim.segment_count(DeviceIndex::new(1))
        ),
        (1000, 1)
    );
    Ok(())
}

#[test]
fn host_backed_out_of_bounds_is_an_unknown_segment() -> Result<(), BackendError> {
    let sim = SimBackend::builder().host_backed(true).build();
    let a = sim.alloc_segment(D0, 1000)?;
    let past_end = BackendError::UnknownSegment {
        device: D0,
        ptr: a + 998,
        size_bytes: 3,
    };
    assert_eq!(sim.write(D0, a + 998, &[1, 2, 3]), Err(past_end));
    let before = BackendError::UnknownSegment {
        device: D0,
        ptr: a - 1,
        size_bytes: 2,
    };
    assert_eq!(sim.read(D0, a - 1, &mut [0; 2]), Err(before));
    let unknown = |ptr| {
        Err(BackendError::UnknownSegment {
            device: D0,
            ptr,
            size_bytes: 1,
        })
    };
    assert_eq!(
        sim.read(D0, a + 1000, &mut [0; 1]),
        unknown(a + 1000),
        "the first byte past the end is outside the segment"
    );
    assert_eq!(
        sim.read(D0, u64::MAX, &mut [0; 1]),
        unknown(u64::MAX),
        "the last address of the address space is in no segment"
    );
    assert_eq!(
        sim.write(DeviceIndex::new(1), a, &[1]),
        Err(BackendError::InvalidDevice {
            device: DeviceIndex::new(1),
            device_count: 1
        }),
        "device 1 does not exist"
    );
    sim.free_segment(D0, a, 1000)?;
    assert_eq!(
        sim.read(D0, a, &mut [0; 1]),
        unknown(a),
        "a freed segment has no bytes"
    );
    Ok(())
}

#[test]
fn fake_segments_have_no_bytes_to_read_or_write() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(D0, 1000)?;
    assert!(matches!(sim.write(D0, a, &[1]),
        Err(BackendError::InjectedFault { device, .. }) if device == D0
    ));
    assert!(matches!(
        sim.read(D0, a, &mut [0]),
        Err(BackendError::InjectedFault { .. })
    ));
    assert!(matches!(
        sim.read(D0, a + 4096, &mut [0]),
        Err(BackendError::UnknownSegment { .. })
    ));
    Ok(())
}

#[test]
fn pinned_host_memory_is_real_aligned_bounded_and_counted() {
    let sim = SimBackend::builder().host_capacity(3 * HOST_PAGE).build();
    let a = sim.alloc_host(100).expect("fits");
    let b = sim.alloc_host(2 * HOST_PAGE).expect("fits");
    assert_eq!(a % HOST_PAGE as u64, 0, "page-aligned");
    assert_eq!(b % HOST_PAGE as u64, 0, "page-aligned");
    assert_ne!(a, b);
    assert_eq!(sim.host_allocated_bytes(), 100 + 2 * HOST_PAGE);
    assert_eq!(
        sim.alloc_host(HOST_PAGE),
        Err(BackendError::HostOutOfMemory {
            requested_bytes: HOST_PAGE
        }),
        "past the host capacity"
    );
    assert!(sim.alloc_host(HOST_PAGE).unwrap_err().is_out_of_memory());
    assert_eq!(
        sim.alloc_host(0),
        Err(BackendError::HostOutOfMemory { requested_bytes: 0 })
    );
    assert_eq!(
        sim.free_host(a, 99),
        Err(BackendError::UnknownHostAllocation {
            ptr: a,
            size_bytes: 99
        }),
        "the size must match"
    );
    sim.free_host(a, 100).expect("frees");
    assert_eq!(
        sim.free_host(a, 100),
        Err(BackendError::UnknownHostAllocation {
            ptr: a,
            size_bytes: 100
        }),
        "twice"
    );
    sim.free_host(b, 2 * HOST_PAGE).expect("frees");
    assert_eq!(sim.host_allocated_bytes(), 0);
    assert_eq!(
        sim.host_calls(),
        SimHostCalls {
            host_allocs: 2,
            failed_host_allocs: 3,
            host_frees: 2,
            failed_host_frees: 2,
        }
    );
}
