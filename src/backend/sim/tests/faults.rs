//! Injected faults: which call fails, and clearing them.

use super::*;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn injected_oom_fails_exactly_the_nth_alloc() -> Result<(), BackendError> {
    let sim = sim();
    sim.inject(D0, SimFault::AllocOutOfMemory { nth: 3 })?;
    sim.alloc_segment(D0, 512)?;
    sim.alloc_segment(D0, 512)?;
    assert_eq!(
        sim.alloc_segment(D0, 512),
        Err(BackendError::OutOfMemory {
            device: D0,
            requested_bytes: 512
        })
    );
    assert_eq!(
        sim.alloc_segment(D0, 512)?,
        BASE + 1024,
        "the fault fired once"
    );
    let calls = sim.calls(D0);
    assert_eq!((calls.segment_allocs, calls.failed_allocs), (3, 1));
    Ok(())
}

#[test]
fn injected_error_is_not_out_of_memory_and_counts_from_the_call() -> Result<(), BackendError> {
    let sim = sim();
    sim.alloc_segment(D0, 512)?;
    sim.inject(D0, SimFault::AllocError { nth: 1 })?;
    sim.inject(D0, SimFault::AllocOutOfMemory { nth: 0 })?;
    let err = sim
        .alloc_segment(D0, 512)
        .expect_err("both faults target the next alloc");
    assert_eq!(
        err,
        BackendError::InjectedFault {
            device: D0,
            what: "alloc_segment"
        }
    );
    assert!(
        !err.is_out_of_memory(),
        "an injected error is not retryable"
    );
    assert_eq!(
        sim.alloc_segment(D0, 512)?,
        BASE + 512,
        "both faults fired on the same call"
    );
    Ok(())
}

#[test]
fn clear_faults_removes_countdowns_limits_and_hangs() -> Result<(), BackendError> {
    let sim = SimBackend::new(1, 4096);
    sim.inject(D0, SimFault::AllocError { nth: 1 })?;
    sim.set_oom_above(D0, Some(512))?;
    sim.inject(D0, SimFault::HangStream { stream: S1 })?;
    let event = sim.record_event(D0, S1)?;
    sim.clear_faults(D0)?;
    assert_eq!(
        sim.alloc_segment(D0, 4096)?,
        BASE,
        "no countdown and no limit left"
    );
    assert!(
        !sim.query_event(&event)?,
        "un-hanging does not run the stream's work"
    );
    assert_eq!(sim.advance_stream(D0, S1, 1)?, 1);
    assert!(sim.query_event(&event)?);
    Ok(())
}
