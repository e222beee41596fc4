//! Injected faults: which call fails, and clearing them.

use super::*;

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
