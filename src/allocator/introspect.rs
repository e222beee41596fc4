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
        Ok(self.lock_device(device)?.pool.segments())
    }

    fn check_invariants(&self, device: DeviceIndex) -> Result<(), InvariantViolation> {
        match self.lock_device(device) {
            Ok(dev) => dev.pool.check_invariants(),
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
        dev.pool.observers.set_event_stamp(stamp);
        let adopted = dev.pool.adopt_segment(&self.shared.backend, segment)?;
        for block in &adopted {
            // Adopted blocks are not tracked: a record an earlier allocation left in the slot
            // would read as theirs. It was stale, so no live bytes counted it.
            dev.live.remove(block.id.index(), || 0);
        }
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
        let stats = dev.pool.stats();
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
