//! The record the pool keeps: [`Stat`] (current, peak and totals of one quantity), its
//! per-pool [`StatArray`], and [`DeviceStats`], every statistic of one device with its resets.

use std::ops::{Index, IndexMut};

/// One statistic: its current value, its peak since the last peak reset, and the totals added
/// and removed since the last accumulated reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest `current` since the last peak reset.
    pub peak: i64,
    /// Sum of all increases since the last accumulated reset.
    pub allocated: i64,
    /// Sum of all decreases since the last accumulated reset.
    pub freed: i64,
}

impl Stat {
    /// Adds `amount` to the current value.
    #[inline]
    pub fn increase(&mut self, amount: u64) {
        self.current += amount as i64;
        self.peak = self.peak.max(self.current);
        self.allocated += amount as i64;
    }

    /// Removes `amount` from the current value.
    #[inline]
    pub fn decrease(&mut self, amount: u64) {
        self.current -= amount as i64;
        debug_assert!(self.current >= 0, "statistic went negative");
        self.freed += amount as i64;
    }

    /// Sets the peak to the current value.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// Zeroes the accumulated totals.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// Which pool a statistic covers: the index of a [`StatArray`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatType {
    /// Both pools together (`all`).
    Aggregate = 0,
    /// The small pool (blocks of at most 1 MiB).
    SmallPool = 1,
    /// The large pool.
    LargePool = 2,
}

/// One quantity for both pools together and for each pool, as PyTorch's `StatArray`: read
/// `stats.allocated_bytes.all.current` where PyTorch's flat key is
/// `allocated_bytes.all.current`. Also indexed by [`StatType`].
///
/// ```
/// use blockpool::stats::{StatArray, StatType};
///
/// let mut array = StatArray::default();
/// array.all.increase(4096);
/// array.large_pool.increase(4096);
/// assert_eq!(array[StatType::LargePool].current, 4096);
/// assert_eq!(array.iter().map(|s| s.current).collect::<Vec<_>>(), [4096, 0, 4096]);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// The small pool (blocks of at most 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    /// The entry of the small pool when `small`, else of the large pool.
    #[inline]
    pub(crate) fn pool_mut(&mut self, small: bool) -> &mut Stat {
        if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        }
    }

    /// `all`, `small_pool` and `large_pool`, in that order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &Stat> + '_ {
        [&self.all, &self.small_pool, &self.large_pool].into_iter()
    }

    /// Mutable [`StatArray::iter`].
    pub fn iter_mut(&mut self) -> impl ExactSizeIterator<Item = &mut Stat> + '_ {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool].into_iter()
    }
}

impl Index<StatType> for StatArray {
    type Output = Stat;

    #[inline]
    fn index(&self, pool: StatType) -> &Stat {
        match pool {
            StatType::Aggregate => &self.all,
            StatType::SmallPool => &self.small_pool,
            StatType::LargePool => &self.large_pool,
        }
    }
}

impl IndexMut<StatType> for StatArray {
    #[inline]
    fn index_mut(&mut self, pool: StatType) -> &mut Stat {
        match pool {
            StatType::Aggregate => &mut self.all,
            StatType::SmallPool => &mut self.small_pool,
            StatType::LargePool => &mut self.large_pool,
        }
    }
}

/// Every statistic of one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Live allocations (count).
    pub allocation: StatArray,
    /// Segments obtained from the device (count).
    pub segment: StatArray,
    /// Active blocks: allocated, or freed but waiting for stream events (count).
    pub active: StatArray,
    /// Free blocks inside split segments, which cannot be released (count).
    pub inactive_split: StatArray,
    /// Bytes of live allocations (block sizes).
    pub allocated_bytes: StatArray,
    /// Bytes of segments obtained from the device.
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks.
    pub active_bytes: StatArray,
    /// Bytes of free blocks inside split segments.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for, before rounding, of active blocks.
    pub requested_bytes: StatArray,
    /// Live allocations of at least `max_split_size` bytes (count).
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes (count).
    pub oversize_segments: Stat,
    /// Device allocations retried after releasing every cached block.
    pub num_alloc_retries: i64,
    /// Requests that failed with out-of-memory.
    pub num_ooms: i64,
    /// Times every pending event was synchronized (empty_cache and the retry).
    pub num_sync_all_streams: i64,
    /// Segment allocations made on the device.
    pub num_device_alloc: i64,
    /// Segment frees made on the device.
    pub num_device_free: i64,
    /// The `max_split_size` setting in bytes (`-1`... as PyTorch: `usize::MAX` reads as -1).
    pub max_split_size: i64,
}

impl DeviceStats {
    /// Zeroes every accumulated total and counter (`reset_accumulated_memory_stats`).
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            array.iter_mut().for_each(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// Sets every peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            array.iter_mut().for_each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    pub(super) fn arrays(&self) -> [&StatArray; 9] {
        [
            &self.allocation,
            &self.segment,
            &self.active,
            &self.inactive_split,
            &self.allocated_bytes,
            &self.reserved_bytes,
            &self.active_bytes,
            &self.inactive_split_bytes,
            &self.requested_bytes,
        ]
    }

    pub(super) fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_support::{stat, threshold_stats};

    #[test]
    fn stat_tracks_peak_and_totals() {
        let mut s = Stat::default();
        s.increase(100);
        s.increase(50);
        s.decrease(120);
        assert_eq!(s, stat(30, 150, 150, 120), "after +100 +50 -120");
        s.increase(10);
        assert_eq!(s.peak, 150, "peak only moves when current passes it");
        s.reset_peak();
        assert_eq!(s, stat(40, 40, 160, 120), "reset_peak sets peak to current");
        s.reset_accumulated();
        assert_eq!(
            s,
            stat(40, 40, 0, 0),
            "reset_accumulated zeroes the totals only"
        );
    }

    #[test]
    fn device_resets_cover_every_stat_and_counter() {
        let mut stats = threshold_stats();
        stats.num_sync_all_streams = 4;
        stats.num_device_alloc = 5;
        stats.num_device_free = 6;
        stats.max_split_size = 1 << 30;
        stats.reset_peak();
        stats.reset_accumulated();
        for (key, value) in stats.to_flat().iter() {
            if key.ends_with(".allocated") || key.ends_with(".freed") || key.starts_with("num_") {
                assert_eq!(value, 0, "{key} should be zeroed by reset_accumulated");
            } else if let Some(base) = key.strip_suffix(".peak") {
                let current = stats.to_flat()[&format!("{base}.current")];
                assert_eq!(
                    value, current,
                    "{key} should equal current after reset_peak"
                );
            }
        }
        assert_eq!(stats.max_split_size, 1 << 30, "resets keep the setting");
        assert_eq!(
            stats.allocation.all.current, 749_999,
            "resets keep current values"
        );
    }
}
