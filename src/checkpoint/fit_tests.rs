//! [`Budget::fit`] against a memory fraction set after the allocator was built
//! (`set_per_process_memory_fraction`), which it must read as the allocator enforces it.

use super::Budget;
use crate::backend::DeviceIndex;
use crate::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};

const GIB: usize = 1 << 30;

#[test]
fn fit_sees_a_fraction_set_after_construction() {
    let alloc = CachingAllocator::new(SimBackend::new(1, 4 * GIB), AllocatorConfig::default());
    assert_eq!(alloc.memory_fraction(0).unwrap(), None);
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        4 * GIB,
        "no fraction: the whole free device"
    );
    alloc.set_per_process_memory_fraction(0.5, 0).unwrap();
    assert_eq!(alloc.memory_fraction(0).unwrap(), Some(0.5));
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        2 * GIB,
        "a fraction set later caps the budget as it caps the allocator"
    );
    // A cached segment counts once: it is inside the fraction's limit already.
    drop(alloc.allocate(0, 3 << 20, StreamId::from_raw(1)).unwrap());
    let cached = alloc.device_stats(0).unwrap().reserved_bytes.all.current;
    assert!(cached > 0, "the freed block's segment stays cached");
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        2 * GIB
    );
    // Nothing more may be reserved: only the cache is left to the plan.
    alloc.set_per_process_memory_fraction(0.0, 0).unwrap();
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        cached as usize,
        "a zero fraction leaves the cached bytes only"
    );
}

#[test]
fn a_fraction_set_later_overrides_the_configured_one() {
    let config = AllocatorConfig::builder()
        .per_process_memory_fraction(0.25)
        .build()
        .unwrap();
    let alloc = CachingAllocator::new(SimBackend::new(2, 4 * GIB), config);
    assert_eq!(alloc.memory_fraction(1).unwrap(), Some(0.25));
    assert_eq!(Budget::fit(&alloc, DeviceIndex::new(1)).unwrap().bytes, GIB);
    alloc.set_per_process_memory_fraction(0.75, 1).unwrap();
    assert_eq!(alloc.memory_fraction(1).unwrap(), Some(0.75));
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(1)).unwrap().bytes,
        3 * GIB,
        "device 1's new fraction"
    );
    assert_eq!(
        Budget::fit(&alloc, DeviceIndex::new(0)).unwrap().bytes,
        GIB,
        "device 0 keeps the configured fraction"
    );
    assert_eq!(alloc.device(1).unwrap().memory_fraction(), Some(0.75));
    assert!(alloc.memory_fraction(2).is_err(), "no device 2");
}
