//! A bare device allocator's own checks, without the `CachingAllocator` around it.

use super::*;
use crate::backend::DeviceIndex;
use crate::backend::{SimBackend, SimEvent};
use crate::config::AllocatorConfig;

const MIB: usize = 1 << 20;

#[test]
fn a_device_allocator_refuses_a_bad_fraction_itself() {
    let sim = SimBackend::new(1, 1 << 30);
    let mut dev: DeviceAllocator<SimEvent> =
        DeviceAllocator::new(DeviceIndex::new(0), AllocatorConfig::default());
    for fraction in [-0.5, 2.0, f64::NAN] {
        let err = dev.set_memory_fraction(&sim, fraction).unwrap_err();
        assert!(
            matches!(err, Error::InvalidMemoryFraction { .. }),
            "{fraction}: {err:?}"
        );
    }
    let block = dev
        .malloc(&sim, 900 * MIB, StreamId::from_raw(0))
        .expect("no limit was set");
    dev.free(&sim, block.id).unwrap();
    dev.check_invariants().unwrap();
}
