//! Misuse and device failures: typed errors that leave the allocator as it was.

use super::*;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
fn raw_pointer_misuse_is_a_typed_error_that_changes_nothing() {
    let sim = SimBackend::new(2, 1 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    let p = alloc.malloc(0, 4096, S0).unwrap();
    let q = alloc.malloc(1, 4096, S0).unwrap();
    assert_eq!(
        alloc.free(1, p),
        Err(Error::WrongDevice {
            ptr: p,
            given: DeviceIndex::new(1),
            actual: D0
        })
    );
    assert_eq!(
        alloc.record_stream(1, p, S1),
        Err(Error::WrongDevice {
            ptr: p,
            given: DeviceIndex::new(1),
            actual: D0
        })
    );
    assert_eq!(
        alloc.free(0, p + 512),
        Err(Error::UnknownPointer {
            device: D0,
            ptr: p + 512
        })
    );
    assert_eq!(
        alloc.free(0, 12345),
        Err(Error::UnknownPointer {
            device: D0,
            ptr: 12345
        })
    );
    assert_eq!(
        alloc.free(5, p),
        Err(Error::InvalidDevice {
            device: DeviceIndex::new(5),
            device_count: 2
        })
    );
    assert_eq!(
        stat(&alloc, "allocation.all.current"),
        1,
        "nothing was freed"
    );
    alloc.free(0, p).unwrap();
    assert_eq!(
        alloc.free(0, p),
        Err(Error::DoubleFree { device: D0, ptr: p })
    );
    assert_eq!(
        alloc.free(0, q),
        Err(Error::WrongDevice {
            ptr: q,
            given: D0,
            actual: DeviceIndex::new(1)
        })
    );
    alloc.free(1, q).unwrap();
    alloc.check_invariants(D0).unwrap();
    alloc.check_invariants(DeviceIndex::new(1)).unwrap();
    // A handle's block is not a raw allocation.
    let h = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(
        alloc.free(0, h.ptr()),
        Err(Error::UnknownPointer {
            device: D0,
            ptr: h.ptr()
        })
    );
    assert!(matches!(
        alloc.segments(D0).unwrap()[0].blocks[0].state,
        BlockState::Allocated
    ));
}

#[test]
fn injected_device_errors_are_typed_and_leave_the_allocator_valid() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    sim.inject(D0, SimFault::AllocError { nth: 1 }).unwrap();
    let err = alloc.allocate(0, 4096, S0).unwrap_err();
    assert!(
        matches!(err, Error::Backend(BackendError::InjectedFault { .. })),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    valid(&alloc, &sim);
    let a = alloc.allocate(0, 4096, S0).unwrap();
    assert_eq!(a.ptr(), BASE);

    // An injected out-of-memory is retried after releasing the cache.
    sim.inject(D0, SimFault::AllocOutOfMemory { nth: 1 })
        .unwrap();
    let b = alloc.allocate(0, 12 * MIB, S0).unwrap();
    assert_eq!(stat(&alloc, "num_alloc_retries"), 1);
    drop((a, b));
    valid(&alloc, &sim);
}

#[test]
fn invariants_of_a_missing_device_are_an_error() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let err = alloc.check_invariants(DeviceIndex::new(4)).unwrap_err();
    assert_eq!(err.device, DeviceIndex::new(4));
    assert!(err.message.contains("does not exist"), "{err}");
}
