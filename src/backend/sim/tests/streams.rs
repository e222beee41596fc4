//! Virtual streams and events, call counters, clones shared across threads.

use super::*;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn event_completes_only_when_its_stream_advances() -> Result<(), BackendError> {
    let sim = sim();
    let events = [
        sim.record_event(D0, S1)?,
        sim.record_event(D0, S1)?,
        sim.record_event(D0, S1)?,
    ];
    let other = sim.record_event(D0, S2)?;
    assert_eq!(events.map(|e| e.ticket()), [1, 2, 3]);
    assert_eq!(
        (other.device(), other.stream(), other.ticket()),
        (D0, S2, 1)
    );
    let done = |sim: &SimBackend| events.map(|e| sim.query_event(&e) == Ok(true));
    assert_eq!(
        done(&sim),
        [false; 3],
        "nothing runs until the test advances the stream"
    );
    assert_eq!(sim.advance_stream(D0, S1, 2)?, 2);
    assert_eq!(done(&sim), [true, true, false]);
    assert!(
        !sim.query_event(&other)?,
        "advancing one stream leaves the others alone"
    );
    assert_eq!(sim.complete_stream(D0, S1)?, 1);
    assert_eq!(sim.complete_stream(D0, S1)?, 0, "nothing left to complete");
    assert_eq!(
        sim.advance_stream(D0, StreamId::from_raw(99), 5)?,
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
    let first = sim.record_event(D0, S1)?;
    let second = sim.record_event(D0, S1)?;
    let third = sim.record_event(D0, S1)?;
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
    let before = sim.record_event(D0, S1)?;
    sim.complete_stream(D0, S1)?;
    let pending = sim.record_event(D0, S1)?;
    sim.inject(D0, SimFault::HangStream { stream: S1 })?;
    let after = sim.record_event(D0, S1)?;
    let healthy = sim.record_event(D0, S2)?;

    assert_eq!(sim.advance_stream(D0, S1, 10)?, 0);
    assert_eq!(sim.complete_stream(D0, S1)?, 0);
    assert_eq!(sim.complete_all(), 1, "only the healthy stream completes");
    let never = Err(BackendError::EventNeverCompletes {
        device: D0,
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
    let on_device_2 = big.record_event(DeviceIndex::new(2), S1)?;
    assert_eq!(
        small.query_event(&on_device_2),
        Err(BackendError::InvalidDevice {
            device: DeviceIndex::new(2),
            device_count: 1
        })
    );
    big.record_event(D0, S1)?;
    let second = big.record_event(D0, S1)?;
    assert!(!small.query_event(&second)?);
    let never = Err(BackendError::EventNeverCompletes {
        device: D0,
        stream: S1,
    });
    assert_eq!(
        small.synchronize_event(&second),
        never.clone(),
        "stream unknown to small"
    );
    small.record_event(D0, S1)?;
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
    let a = sim.alloc_segment(D0, 4096)?;
    let _ = sim.alloc_segment(D0, 1);
    sim.free_segment(D0, a, 4096)?;
    let _ = sim.free_segment(D0, a, 4096);
    let event = sim.record_event(D0, S1)?;
    sim.query_event(&event)?;
    sim.query_event(&event)?;
    sim.synchronize_event(&event)?;
    sim.release_event(event);
    sim.mem_get_info(D0)?;
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
    assert_eq!(sim.calls(D0), expected);
    assert_eq!(
        sim.calls(DeviceIndex::new(1)),
        SimCalls::default(),
        "device 1 saw no calls"
    );
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
                (0..100).try_for_each(|_| sim.alloc_segment(D0, 512).map(drop))
            })
        })
        .collect();
    for handle in handles {
        assert_eq!(handle.join().ok(), Some(Ok(())), "a thread failed");
    }
    assert_eq!(
        (sim.segment_count(D0), sim.allocated_bytes(D0)),
        (400, 400 * 512)
    );
    assert_eq!(
        sim.alloc_segment(D0, 512)?,
        BASE + 400 * 512,
        "no address handed out twice"
    );
    Ok(())
}

#[test]
fn stream_waits_and_order_questions_refuse_bad_devices_and_foreign_events() {
    let sim = SimBackend::new(2, 1 << 30);
    let bad = BackendError::InvalidDevice {
        device: DeviceIndex::new(5),
        device_count: 2,
    };
    let on_1 = sim.record_event(DeviceIndex::new(1), S1).unwrap();
    assert_eq!(
        sim.stream_wait_event(DeviceIndex::new(5), S2, &on_1),
        Err(bad.clone())
    );
    assert_eq!(
        sim.stream_position(DeviceIndex::new(5), S1),
        Err(bad.clone())
    );
    assert_eq!(sim.is_ordered(DeviceIndex::new(5), S1, 0, S2), Err(bad));
    assert_eq!(
        sim.stream_wait_event(D0, S2, &on_1),
        Err(BackendError::Unsupported {
            device: D0,
            what: "waiting on another simulated device's event",
        })
    );
    // Nothing was recorded as a wait: stream 2 of device 0 runs free.
    assert_eq!(sim.calls(D0).stream_waits, 0);
    let on_0 = sim.record_event(D0, S2).unwrap();
    assert_eq!(sim.advance_stream(D0, S2, 1), Ok(1));
    assert!(sim.query_event(&on_0).unwrap());
}
