//! Behaviour of the simulated device: exact fake addresses, capacity, faults, virtual streams,
//! host-backed bytes and call counters.

use super::*;

const MIB: usize = 1 << 20;
const BASE: u64 = 0x7f00_0000_0000;
const S1: StreamId = StreamId(1);
const S2: StreamId = StreamId(2);

fn sim() -> SimBackend {
    SimBackend::new(1, 1 << 30)
}

#[test]
fn fake_addresses_are_first_fit_from_the_device_base() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(0, 1000)?;
    let b = sim.alloc_segment(0, 2 * MIB)?;
    let c = sim.alloc_segment(0, 512)?;
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

    sim.free_segment(0, a, 1000)?;
    assert_eq!(
        sim.alloc_segment(0, 100)?,
        BASE,
        "freed lowest range is reused first"
    );
    assert_eq!(
        sim.alloc_segment(0, 1)?,
        BASE + 0x200,
        "the rest of the freed range comes next"
    );
    assert_eq!(
        sim.alloc_segment(0, 4 * MIB)?,
        BASE + 0x40_0000,
        "after the 2 MiB segment"
    );
    Ok(())
}

#[test]
fn freed_neighbours_merge_into_one_range() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(0, 1024)?;
    let b = sim.alloc_segment(0, 1024)?;
    let c = sim.alloc_segment(0, 1024)?;
    let d = sim.alloc_segment(0, 1024)?;
    assert_eq!([a, b, c, d], [BASE, BASE + 1024, BASE + 2048, BASE + 3072]);
    sim.free_segment(0, a, 1024)?;
    sim.free_segment(0, c, 1024)?;
    sim.free_segment(0, b, 1024)?;
    assert_eq!(
        sim.alloc_segment(0, 3072)?,
        BASE,
        "a, b and c merged into one 3 KiB range"
    );
    assert_eq!(
        sim.alloc_segment(0, 512)?,
        BASE + 4096,
        "nothing left below d"
    );
    Ok(())
}

#[test]
fn each_device_has_its_own_address_range() -> Result<(), BackendError> {
    let sim = SimBackend::new(3, 1 << 30);
    assert_eq!(sim.alloc_segment(1, 512)?, 0x8000_0000_0000);
    assert_eq!(sim.alloc_segment(2, 512)?, 0x8100_0000_0000);
    assert_eq!(sim.alloc_segment(0, 512)?, BASE);
    assert_eq!(
        sim.segment_count(1),
        1,
        "each device counts only its own segments"
    );
    Ok(())
}

#[test]
fn alloc_past_capacity_is_out_of_memory_and_free_makes_room() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 4096);
    let a = sim.alloc_segment(0, 4000)?;
    assert_eq!(
        sim.alloc_segment(0, 97),
        Err(BackendError::OutOfMemory {
            device: 0,
            requested_bytes: 97
        }),
        "4000 + 97 bytes exceed the 4096-byte capacity"
    );
    assert_eq!(
        sim.alloc_segment(0, 96)?,
        BASE + 4096,
        "exactly filling capacity succeeds"
    );
    assert_eq!(sim.allocated_bytes(0), 4096);
    sim.free_segment(0, a, 4000)?;
    assert_eq!(
        sim.alloc_segment(0, 97)?,
        BASE,
        "freed bytes are available again"
    );
    assert_eq!(sim.calls(0).failed_allocs, 1);
    Ok(())
}

#[test]
fn mem_get_info_reports_capacity_minus_in_use() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 10_000);
    sim.alloc_segment(0, 3000)?;
    let info = sim.mem_get_info(0)?;
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
    sim.alloc_segment(0, 3000)?;
    sim.set_oom_above(0, Some(4000))?;
    assert_eq!(
        sim.mem_get_info(0)?,
        MemInfo {
            free_bytes: 1000,
            total_bytes: 10_000
        }
    );
    assert!(sim
        .alloc_segment(0, 1001)
        .is_err_and(|e| e.is_out_of_memory()));
    sim.alloc_segment(0, 1000)?;
    sim.inject(0, SimFault::OutOfMemoryAbove { limit_bytes: 1 })?;
    assert_eq!(
        sim.mem_get_info(0)?.free_bytes,
        0,
        "limit below in-use saturates at 0"
    );
    sim.set_oom_above(0, None)?;
    assert_eq!(
        sim.mem_get_info(0)?.free_bytes,
        6000,
        "lifting the limit restores capacity"
    );
    sim.set_oom_above(0, Some(usize::MAX))?;
    assert_eq!(
        sim.mem_get_info(0)?.free_bytes,
        6000,
        "a limit above capacity changes nothing"
    );
    Ok(())
}

#[test]
fn free_of_unknown_or_wrong_size_segment_changes_nothing() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(0, 1024)?;
    let wrong_size = BackendError::UnknownSegment {
        device: 0,
        ptr: a,
        size_bytes: 512,
    };
    assert_eq!(sim.free_segment(0, a, 512), Err(wrong_size));
    assert!(
        sim.free_segment(0, a + 512, 512).is_err(),
        "interior address is not a segment"
    );
    assert!(sim.free_segment(0, 0, 0).is_err());
    assert_eq!((sim.segment_count(0), sim.allocated_bytes(0)), (1, 1024));
    sim.free_segment(0, a, 1024)?;
    assert!(
        sim.free_segment(0, a, 1024).is_err(),
        "double free is refused"
    );
    let calls = sim.calls(0);
    assert_eq!((calls.segment_frees, calls.failed_frees), (1, 4));
    Ok(())
}

#[test]
fn zero_byte_alloc_is_an_invalid_value_driver_error() {
    let sim = sim();
    let err = sim
        .alloc_segment(0, 0)
        .expect_err("0 bytes cannot be allocated");
    assert!(
        matches!(err, BackendError::Driver { device: 0, code: 1, ref name, .. }
            if name == "CUDA_ERROR_INVALID_VALUE"),
        "got {err:?}"
    );
    assert!(
        !err.is_out_of_memory(),
        "freeing memory cannot help a 0-byte request"
    );
    assert_eq!(sim.calls(0).failed_allocs, 1);
}

#[test]
fn huge_sizes_are_out_of_memory_without_overflow() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, usize::MAX);
    for size in [usize::MAX, usize::MAX - 100, (1 << 40) + 1] {
        assert_eq!(
            sim.alloc_segment(0, size),
            Err(BackendError::OutOfMemory {
                device: 0,
                requested_bytes: size
            }),
            "{size} bytes do not fit the 1 TiB fake address range"
        );
    }
    assert_eq!(
        sim.alloc_segment(0, 1 << 40)?,
        BASE,
        "exactly the whole range fits"
    );
    assert!(
        sim.alloc_segment(0, 512)
            .is_err_and(|e| e.is_out_of_memory()),
        "range is full"
    );
    assert!(sim
        .alloc_segment(0, usize::MAX)
        .is_err_and(|e| e.is_out_of_memory()));
    assert!(sim.free_segment(0, u64::MAX, usize::MAX).is_err());

    let host = SimBackend::builder()
        .capacity(usize::MAX)
        .host_backed(true)
        .build();
    for size in [usize::MAX, usize::MAX - 511, usize::MAX / 2] {
        assert!(
            host.alloc_segment(0, size)
                .is_err_and(|e| e.is_out_of_memory()),
            "{size}"
        );
    }
    assert_eq!(host.allocated_bytes(0), 0);
    Ok(())
}

#[test]
fn invalid_device_is_an_error_everywhere() {
    let sim = SimBackend::new(2, 1 << 20);
    let invalid = Err(BackendError::InvalidDevice {
        device: 2,
        device_count: 2,
    });
    assert_eq!(sim.alloc_segment(2, 512), invalid.clone().map(|()| 0));
    assert_eq!(sim.free_segment(2, BASE, 512), invalid.clone());
    assert_eq!(
        sim.mem_get_info(usize::MAX),
        Err(BackendError::InvalidDevice {
            device: usize::MAX,
            device_count: 2
        })
    );
    assert_eq!(sim.record_event(2, S1).map(|_| ()), invalid.clone());
    assert_eq!(sim.advance_stream(2, S1, 1).map(|_| ()), invalid.clone());
    assert_eq!(
        sim.inject(2, SimFault::HangStream { stream: S1 }),
        invalid.clone()
    );
    assert_eq!(sim.clear_faults(2), invalid.clone());
    assert_eq!(sim.write(2, BASE, &[1]), invalid.clone());
    assert_eq!(sim.read(2, BASE, &mut [0]), invalid);
    assert_eq!(sim.calls(2), SimCalls::default());
    assert_eq!((sim.allocated_bytes(2), sim.segment_count(2)), (0, 0));

    let none = SimBackend::builder().devices(0).build();
    assert_eq!(none.device_count(), 0);
    assert!(none.alloc_segment(0, 512).is_err());
    assert_eq!(none.complete_all(), 0);
}

#[test]
fn injected_oom_fails_exactly_the_nth_alloc() -> Result<(), BackendError> {
    let sim = sim();
    sim.inject(0, SimFault::AllocOutOfMemory { nth: 3 })?;
    sim.alloc_segment(0, 512)?;
    sim.alloc_segment(0, 512)?;
    assert_eq!(
        sim.alloc_segment(0, 512),
        Err(BackendError::OutOfMemory {
            device: 0,
            requested_bytes: 512
        })
    );
    assert_eq!(
        sim.alloc_segment(0, 512)?,
        BASE + 1024,
        "the fault fired once"
    );
    let calls = sim.calls(0);
    assert_eq!((calls.segment_allocs, calls.failed_allocs), (3, 1));
    Ok(())
}

#[test]
fn injected_error_is_not_out_of_memory_and_counts_from_the_call() -> Result<(), BackendError> {
    let sim = sim();
    sim.alloc_segment(0, 512)?;
    sim.inject(0, SimFault::AllocError { nth: 1 })?;
    sim.inject(0, SimFault::AllocOutOfMemory { nth: 0 })?;
    let err = sim
        .alloc_segment(0, 512)
        .expect_err("both faults target the next alloc");
    assert_eq!(
        err,
        BackendError::InjectedFault {
            device: 0,
            what: "alloc_segment"
        }
    );
    assert!(
        !err.is_out_of_memory(),
        "an injected error is not retryable"
    );
    assert_eq!(
        sim.alloc_segment(0, 512)?,
        BASE + 512,
        "both faults fired on the same call"
    );
    Ok(())
}

#[test]
fn clear_faults_removes_countdowns_limits_and_hangs() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 4096);
    sim.inject(0, SimFault::AllocError { nth: 1 })?;
    sim.set_oom_above(0, Some(512))?;
    sim.inject(0, SimFault::HangStream { stream: S1 })?;
    let event = sim.record_event(0, S1)?;
    sim.clear_faults(0)?;
    assert_eq!(
        sim.alloc_segment(0, 4096)?,
        BASE,
        "no countdown and no limit left"
    );
    assert!(
        !sim.query_event(&event)?,
        "un-hanging does not run the stream's work"
    );
    assert_eq!(sim.advance_stream(0, S1, 1)?, 1);
    assert!(sim.query_event(&event)?);
    Ok(())
}

#[test]
fn event_completes_only_when_its_stream_advances() -> Result<(), BackendError> {
    let sim = sim();
    let events = [
        sim.record_event(0, S1)?,
        sim.record_event(0, S1)?,
        sim.record_event(0, S1)?,
    ];
    let other = sim.record_event(0, S2)?;
    assert_eq!(events.map(|e| e.ticket()), [1, 2, 3]);
    assert_eq!((other.device(), other.stream(), other.ticket()), (0, S2, 1));
    let done = |sim: &SimBackend| events.map(|e| sim.query_event(&e) == Ok(true));
    assert_eq!(
        done(&sim),
        [false; 3],
        "nothing runs until the test advances the stream"
    );
    assert_eq!(sim.advance_stream(0, S1, 2)?, 2);
    assert_eq!(done(&sim), [true, true, false]);
    assert!(
        !sim.query_event(&other)?,
        "advancing one stream leaves the others alone"
    );
    assert_eq!(sim.complete_stream(0, S1)?, 1);
    assert_eq!(sim.complete_stream(0, S1)?, 0, "nothing left to complete");
    assert_eq!(
        sim.advance_stream(0, StreamId(99), 5)?,
        0,
        "a stream with no events"
    );
    assert_eq!(
        sim.complete_all(),
        1,
        "only the event on stream 2 was pending"
    );
    assert!(sim.query_event(&other)?);
    Ok(())
}

#[test]
fn synchronize_runs_the_stream_up_to_the_event() -> Result<(), BackendError> {
    let sim = sim();
    let first = sim.record_event(0, S1)?;
    let second = sim.record_event(0, S1)?;
    let third = sim.record_event(0, S1)?;
    sim.synchronize_event(&second)?;
    assert!(sim.query_event(&first)? && sim.query_event(&second)?);
    assert!(
        !sim.query_event(&third)?,
        "work after the event has not run"
    );
    sim.synchronize_event(&first)?;
    assert!(
        !sim.query_event(&third)?,
        "syncing an earlier event moves nothing back or forth"
    );
    Ok(())
}

#[test]
fn hung_stream_never_completes_and_sync_fails_instead_of_blocking() -> Result<(), BackendError> {
    let sim = sim();
    let before = sim.record_event(0, S1)?;
    sim.complete_stream(0, S1)?;
    let pending = sim.record_event(0, S1)?;
    sim.inject(0, SimFault::HangStream { stream: S1 })?;
    let after = sim.record_event(0, S1)?;
    let healthy = sim.record_event(0, S2)?;

    assert_eq!(sim.advance_stream(0, S1, 10)?, 0);
    assert_eq!(sim.complete_stream(0, S1)?, 0);
    assert_eq!(sim.complete_all(), 1, "only the healthy stream completes");
    let never = Err(BackendError::EventNeverCompletes {
        device: 0,
        stream: S1,
    });
    assert_eq!(sim.synchronize_event(&pending), never.clone());
    assert_eq!(sim.synchronize_event(&after), never);
    assert_eq!(
        [pending, after].map(|e| sim.query_event(&e)),
        [Ok(false), Ok(false)]
    );
    sim.synchronize_event(&before)?;
    assert!(
        sim.query_event(&before)?,
        "events completed before the hang stay complete"
    );
    assert!(sim.query_event(&healthy)?);
    Ok(())
}

#[test]
fn events_from_elsewhere_never_complete_and_never_panic() -> Result<(), BackendError> {
    let big = SimBackend::new(3, 1 << 20);
    let small = SimBackend::new(1, 1 << 20);
    let on_device_2 = big.record_event(2, S1)?;
    assert_eq!(
        small.query_event(&on_device_2),
        Err(BackendError::InvalidDevice {
            device: 2,
            device_count: 1
        })
    );
    big.record_event(0, S1)?;
    let second = big.record_event(0, S1)?;
    assert!(!small.query_event(&second)?);
    let never = Err(BackendError::EventNeverCompletes {
        device: 0,
        stream: S1,
    });
    assert_eq!(
        small.synchronize_event(&second),
        never.clone(),
        "stream unknown to small"
    );
    small.record_event(0, S1)?;
    assert_eq!(
        small.synchronize_event(&second),
        never,
        "ticket 2 was never recorded"
    );
    small.release_event(on_device_2);
    Ok(())
}

#[test]
fn calls_count_every_device_call() -> Result<(), BackendError> {
    let sim = SimBackend::new(2, 4096);
    let a = sim.alloc_segment(0, 4096)?;
    let _ = sim.alloc_segment(0, 1);
    sim.free_segment(0, a, 4096)?;
    let _ = sim.free_segment(0, a, 4096);
    let event = sim.record_event(0, S1)?;
    sim.query_event(&event)?;
    sim.query_event(&event)?;
    sim.synchronize_event(&event)?;
    sim.release_event(event);
    sim.mem_get_info(0)?;
    let expected = SimCalls {
        segment_allocs: 1,
        failed_allocs: 1,
        segment_frees: 1,
        failed_frees: 1,
        events_recorded: 1,
        event_queries: 2,
        event_syncs: 1,
        events_released: 1,
        mem_info_queries: 1,
        ..SimCalls::default()
    };
    assert_eq!(sim.calls(0), expected);
    assert_eq!(sim.calls(1), SimCalls::default(), "device 1 saw no calls");
    Ok(())
}

#[test]
fn clones_share_devices_across_threads() -> Result<(), BackendError> {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<SimBackend>();
    let sim = sim();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let sim = sim.clone();
            std::thread::spawn(move || {
                (0..100).try_for_each(|_| sim.alloc_segment(0, 512).map(drop))
            })
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().ok(), Some(Ok(())), "a thread failed");
    }
    assert_eq!(
        (sim.segment_count(0), sim.allocated_bytes(0)),
        (400, 400 * 512)
    );
    assert_eq!(
        sim.alloc_segment(0, 512)?,
        BASE + 400 * 512,
        "no address handed out twice"
    );
    Ok(())
}

#[test]
fn builder_sets_capacities_per_device() -> Result<(), BackendError> {
    let sim = SimBackend::builder()
        .devices(2)
        .capacity(1000)
        .device_capacity(1, 2000)
        .device_capacity(7, 1)
        .build();
    assert_eq!(sim.mem_get_info(0)?.total_bytes, 1000);
    assert_eq!(sim.mem_get_info(1)?.total_bytes, 2000);
    assert!(!sim.is_host_backed());
    assert_eq!(sim.name(), "sim");
    let default = SimBackend::builder().build();
    assert_eq!(
        (default.device_count(), default.mem_get_info(0)?.total_bytes),
        (1, 16 << 30)
    );
    Ok(())
}

#[test]
fn host_backed_segments_are_zeroed_aligned_and_round_trip() -> Result<(), BackendError> {
    let sim = SimBackend::builder()
        .devices(2)
        .capacity(1 << 20)
        .host_backed(true)
        .build();
    assert!(sim.is_host_backed());
    let a = sim.alloc_segment(0, 1000)?;
    let b = sim.alloc_segment(1, 3000)?;
    assert_eq!((a % 512, b % 512), (0, 0), "addresses are 512-byte aligned");
    assert!(
        a + 1000 <= b || b + 3000 <= a,
        "segments of real memory never overlap"
    );

    let mut bytes = [0xff; 1000];
    sim.read(0, a, &mut bytes)?;
    assert!(
        bytes.iter().all(|&byte| byte == 0),
        "new segments are zeroed"
    );
    sim.write(0, a + 996, &[1, 2, 3, 4])?;
    sim.write(1, b, &[5; 3000])?;
    let mut tail = [0; 6];
    sim.read(0, a + 994, &mut tail)?;
    assert_eq!(tail, [0, 0, 1, 2, 3, 4]);
    let mut last = [0; 2];
    sim.read(1, b + 2998, &mut last)?;
    assert_eq!(last, [5, 5]);
    sim.write(0, a + 1000, &[])?;
    assert_eq!((sim.allocated_bytes(0), sim.segment_count(1)), (1000, 1));
    Ok(())
}

#[test]
fn host_backed_out_of_bounds_is_an_unknown_segment() -> Result<(), BackendError> {
    let sim = SimBackend::builder().host_backed(true).build();
    let a = sim.alloc_segment(0, 1000)?;
    let past_end = BackendError::UnknownSegment {
        device: 0,
        ptr: a + 998,
        size_bytes: 3,
    };
    assert_eq!(sim.write(0, a + 998, &[1, 2, 3]), Err(past_end));
    let before = BackendError::UnknownSegment {
        device: 0,
        ptr: a - 1,
        size_bytes: 2,
    };
    assert_eq!(sim.read(0, a - 1, &mut [0; 2]), Err(before));
    assert!(
        sim.read(0, a + 1000, &mut [0; 1]).is_err(),
        "first byte past the end"
    );
    assert!(sim.read(0, u64::MAX, &mut [0; 1]).is_err());
    assert!(sim.write(1, a, &[1]).is_err(), "device 1 does not exist");
    sim.free_segment(0, a, 1000)?;
    assert!(
        sim.read(0, a, &mut [0; 1]).is_err(),
        "a freed segment has no bytes"
    );
    Ok(())
}

#[test]
fn fake_segments_have_no_bytes_to_read_or_write() -> Result<(), BackendError> {
    let sim = sim();
    let a = sim.alloc_segment(0, 1000)?;
    assert!(matches!(
        sim.write(0, a, &[1]),
        Err(BackendError::InjectedFault { device: 0, .. })
    ));
    assert!(matches!(
        sim.read(0, a, &mut [0]),
        Err(BackendError::InjectedFault { .. })
    ));
    assert!(matches!(
        sim.read(0, a + 4096, &mut [0]),
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
