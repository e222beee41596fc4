//! Updates of the per-pool statistics arrays: every change is counted in the aggregate entry
//! and in the small or large pool's, as PyTorch's `StatTypes` do. Kept apart from the
//! allocator's logic so that `device.rs` and `release.rs` read as the rules they implement, not
//! as the counting around them.

use crate::stats::{StatArray, StatType};

pub(crate) fn stat_types(small: bool) -> [usize; 2] {
    [
        StatType::Aggregate as usize,
        if small {
            StatType::SmallPool
        } else {
            StatType::LargePool
        } as usize,
    ]
}

#[inline]
pub(crate) fn increase(array: &mut StatArray, small: bool, amount: u64) {
    for t in stat_types(small) {
        array[t].increase(amount);
    }
}

#[inline]
pub(crate) fn decrease(array: &mut StatArray, small: bool, amount: u64) {
    for t in stat_types(small) {
        array[t].decrease(amount);
    }
}

/// Adds `net` (which may be negative) to the aggregate and the small or large pool entry.
pub(crate) fn apply_net(array: &mut StatArray, small: bool, net: i64) {
    if net > 0 {
        increase(array, small, net as u64);
    } else if net < 0 {
        decrease(array, small, net.unsigned_abs());
    }
}
