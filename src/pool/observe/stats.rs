//! The statistics as an observer of the pool's events: every change is counted in the
//! aggregate entry and in the small or large pool's, as PyTorch's `StatTypes` do.

use super::{Place, PoolEvent, PoolObserver};
use crate::stats::{DeviceStats, StatArray};

#[inline(always)]
fn increase(array: &mut StatArray, small: bool, amount: u64) {
    array.all.increase(amount);
    array.pool_mut(small).increase(amount);
}

#[inline(always)]
fn decrease(array: &mut StatArray, small: bool, amount: u64) {
    array.all.decrease(amount);
    array.pool_mut(small).decrease(amount);
}

/// Adds `net` (which may be negative) to the aggregate and the small or large pool entry.
#[inline(always)]
fn apply_net(array: &mut StatArray, small: bool, net: i64) {
    if net > 0 {
        increase(array, small, net as u64);
    } else if net < 0 {
        decrease(array, small, net.unsigned_abs());
    }
}

impl DeviceStats {
    /// Counts a block of `at.size` bytes handed out for `requested` bytes: allocations,
    /// allocated, active and requested bytes, and an oversize allocation.
    #[inline(always)]
    fn count_allocation(&mut self, at: &Place, requested: usize, oversize: bool) {
        let (small, size) = (at.small, at.size as u64);
        increase(&mut self.allocation, small, 1);
        increase(&mut self.allocated_bytes, small, size);
        increase(&mut self.active, small, 1);
        increase(&mut self.active_bytes, small, size);
        increase(&mut self.requested_bytes, small, requested as u64);
        if oversize {
            self.oversize_allocations.increase(1);
        }
    }

    /// Counts a segment of `at.size` bytes in the segment and reserved statistics.
    #[inline(always)]
    fn count_segment(&mut self, at: &Place, oversize: bool) {
        increase(&mut self.segment, at.small, 1);
        increase(&mut self.reserved_bytes, at.small, at.size as u64);
        if oversize {
            self.oversize_segments.increase(1);
        }
    }
}

impl PoolObserver for DeviceStats {
    #[inline(always)]
    fn observe(&mut self, event: &PoolEvent) {
        match *event {
            PoolEvent::Alloc {
                ref at,
                requested,
                oversize,
                ..
            }
            | PoolEvent::AdoptBlock {
                ref at,
                requested,
                oversize,
                ..
            } => self.count_allocation(at, requested, oversize),
            PoolEvent::FreeRequested { at, oversize, .. } => {
                decrease(&mut self.allocation, at.small, 1);
                decrease(&mut self.allocated_bytes, at.small, at.size as u64);
                if oversize {
                    self.oversize_allocations.decrease(1);
                }
            }
            PoolEvent::FreeCompleted { at, requested, .. } => {
                decrease(&mut self.active, at.small, 1);
                decrease(&mut self.active_bytes, at.small, at.size as u64);
                decrease(&mut self.requested_bytes, at.small, requested as u64);
            }
            PoolEvent::SegmentAlloc { ref at, oversize } => {
                self.count_segment(at, oversize);
                self.num_device_alloc += 1;
            }
            PoolEvent::AdoptSegment { ref at, oversize } => self.count_segment(at, oversize),
            PoolEvent::SegmentFree { at, oversize, .. } => {
                self.num_device_free += 1;
                decrease(&mut self.segment, at.small, 1);
                decrease(&mut self.reserved_bytes, at.small, at.size as u64);
                if oversize {
                    self.oversize_segments.decrease(1);
                }
            }
            PoolEvent::SegmentMap { at } => {
                increase(&mut self.reserved_bytes, at.small, at.size as u64);
                self.num_device_alloc += 1;
            }
            PoolEvent::SegmentUnmap { at, .. } => {
                decrease(&mut self.reserved_bytes, at.small, at.size as u64);
                self.num_device_free += 1;
            }
            PoolEvent::Oom { .. } => self.num_ooms += 1,
            PoolEvent::InactiveSplit {
                small,
                blocks,
                bytes,
            } => {
                apply_net(&mut self.inactive_split, small, blocks);
                apply_net(&mut self.inactive_split_bytes, small, bytes);
            }
            PoolEvent::AllocRetry => self.num_alloc_retries += 1,
            PoolEvent::SyncAllStreams => self.num_sync_all_streams += 1,
            PoolEvent::Snapshot { .. } | PoolEvent::Annotate => {}
        }
    }
}
