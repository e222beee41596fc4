//! Updates of the per-pool statistics arrays: every change is counted in the aggregate entry
//! and in the small or large pool's, as PyTorch's `StatTypes` do. Kept apart from the
//! allocator's logic so that `malloc.rs`, `device.rs` and `release.rs` read as the rules they
//! implement, not as the counting around them.

use crate::stats::{DeviceStats, StatArray};

#[inline]
pub(crate) fn increase(array: &mut StatArray, small: bool, amount: u64) {
    array.all.increase(amount);
    array.pool_mut(small).increase(amount);
}

#[inline]
pub(crate) fn decrease(array: &mut StatArray, small: bool, amount: u64) {
    array.all.decrease(amount);
    array.pool_mut(small).decrease(amount);
}

/// Adds `net` (which may be negative) to the aggregate and the small or large pool entry.
pub(crate) fn apply_net(array: &mut StatArray, small: bool, net: i64) {
    if net > 0 {
        increase(array, small, net as u64);
    } else if net < 0 {
        decrease(array, small, net.unsigned_abs());
    }
}

/// Counts a block of `size` bytes handed out for a request of `requested` bytes: allocations,
/// allocated, active and requested bytes, and an oversize allocation when `oversize` (the
/// policy's `is_oversize`).
#[inline]
pub(crate) fn count_allocation(
    stats: &mut DeviceStats,
    small: bool,
    (size, requested): (usize, usize),
    oversize: bool,
) {
    increase(&mut stats.allocation, small, 1);
    increase(&mut stats.allocated_bytes, small, size as u64);
    increase(&mut stats.active, small, 1);
    increase(&mut stats.active_bytes, small, size as u64);
    increase(&mut stats.requested_bytes, small, requested as u64);
    if oversize {
        stats.oversize_allocations.increase(1);
    }
}
