//! [`Introspect`] for the [`CachingAllocator`]: a device's segments and invariants, adopting
//! the segments and live blocks a trace began with (as raw allocations, freed by address like
//! any other), and a cheap look at the current totals for peak tracking after every event.

use super::caching::CachingAllocator;
use crate::backend::{Backend, DeviceIndex};
use crate::error::Result;
use crate::introspect::{sealed::Sealed, Introspect};
use crate::pool::{AdoptError, AdoptSegment, InvariantViolation, SegmentView};
use crate::stats::StatArray;
use crate::trace::{ContextLevel, MemoryTotals};

impl<B: Backend> Sealed for CachingAllocator<B> {}

impl<B: Backend> Introspect for CachingAllocator<B> {
    fn segments(&self, device: DeviceIndex) -> Result<Vec<SegmentView>> {
        Ok(self.lock_device(device)?.segments())
    }

    fn check_invariants(&self, device: DeviceIndex) -> Result<(), InvariantViolation> {
        match self.lock_device(device) {
            Ok(dev) => dev.check_invariants(),
            Err(e) => Err(InvariantViolation {
                device,
                message: e.to_string(),
            }),
        }
    }

    fn adopt_segment(
        &self,
        device: DeviceIndex,
        segment: &AdoptSegment<'_>,
    ) -> Result<Vec<u64>, AdoptError> {
        let stamp = self.shared.stamp(ContextLevel::State);
        let mut dev = self.lock_device(device)?;
        dev.observers.set_event_stamp(stamp);
        // The live table forgets the stale records of the adopted blocks' slots itself (an
        // `AdoptBlock` event).
        let adopted = dev.adopt_segment(&self.shared.backend, segment)?;
        drop(dev);
        Ok(adopted
            .into_iter()
            .map(|block| {
                self.shared.raw.insert(block.addr, (device, block.id));
                block.addr
            })
            .collect())
    }

    fn device_totals(&self, device: DeviceIndex) -> Result<MemoryTotals> {
        let dev = self.lock_device(device)?;
        let stats = dev.stats();
        let current = |array: &StatArray| array.all.current.max(0) as u64;
        Ok(MemoryTotals {
            allocated_bytes: current(&stats.allocated_bytes),
            active_bytes: current(&stats.active_bytes),
            requested_bytes: current(&stats.requested_bytes),
            reserved_bytes: current(&stats.reserved_bytes),
            allocations: current(&stats.allocation),
            active_blocks: current(&stats.active),
            segments: current(&stats.segment),
        })
    }
}
