//! The flat read-out of `torch.cuda.memory_stats()`: [`DeviceStats::to_flat`] and the
//! [`MemoryStats`] snapshot it returns, with PyTorch's 122 key names in PyTorch's order.

use std::collections::BTreeMap;
use std::ops::Index;
use std::sync::OnceLock;

use super::stat::DeviceStats;

impl DeviceStats {
    /// The flat statistics of `torch.cuda.memory_stats()`: 122 keys, sorted.
    ///
    /// `max_split_size` is exported as the pool stores it; with PyTorch's encoding an unlimited
    /// split size (`usize::MAX` cast to `i64`) reads `-1`.
    pub fn to_flat(&self) -> MemoryStats {
        let counters = [
            self.num_alloc_retries,
            self.num_ooms,
            self.max_split_size,
            self.num_sync_all_streams,
            self.num_device_alloc,
            self.num_device_free,
        ];
        // Same nesting as `flat_keys`, which is what pairs each value with its name.
        let values = self
            .arrays()
            .into_iter()
            .flat_map(|array| array.iter())
            .chain([&self.oversize_allocations, &self.oversize_segments])
            .flat_map(|stat| [stat.current, stat.peak, stat.allocated, stat.freed])
            .chain(counters);
        let keys = flat_keys();
        let map: BTreeMap<_, _> = keys.iter().map(String::as_str).zip(values).collect();
        debug_assert_eq!(
            map.len(),
            MemoryStats::LEN,
            "a flat key is missing or repeated"
        );
        MemoryStats(map)
    }
}

/// Names of the nine per-pool statistics, in the order of [`DeviceStats::arrays`].
const ARRAY_NAMES: [&str; 9] = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
];

/// Pool names, in the order of [`StatArray::iter`](super::StatArray::iter).
const POOL_NAMES: [&str; 3] = ["all", "small_pool", "large_pool"];

/// The four parts of a [`Stat`](super::Stat), in field order.
const STAT_PARTS: [&str; 4] = ["current", "peak", "allocated", "freed"];

/// The plain counters, in the order [`DeviceStats::to_flat`] lists their values.
const COUNTER_NAMES: [&str; 6] = [
    "num_alloc_retries",
    "num_ooms",
    "max_split_size",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
];

/// Every flat key, built once: stats are read in loops and the names never change.
///
/// Order: the nine arrays x pools x parts, then `oversize_allocations` and `oversize_segments`
/// x parts, then the counters. [`DeviceStats::to_flat`] yields its values in this order.
fn flat_keys() -> &'static [String] {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = Vec::with_capacity(MemoryStats::LEN);
        for array in ARRAY_NAMES {
            for pool in POOL_NAMES {
                keys.extend(STAT_PARTS.map(|part| format!("{array}.{pool}.{part}")));
            }
        }
        for stat in ["oversize_allocations", "oversize_segments"] {
            keys.extend(STAT_PARTS.map(|part| format!("{stat}.{part}")));
        }
        keys.extend(COUNTER_NAMES.map(String::from));
        keys
    })
}

/// The flat statistics of one device, keyed as `torch.cuda.memory_stats()` keys them.
///
/// Keys are sorted bytewise, which for these ASCII names is the order of PyTorch's
/// `OrderedDict` (it sorts its items). Built by [`DeviceStats::to_flat`]; a snapshot, not a
/// live view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats(BTreeMap<&'static str, i64>);

impl MemoryStats {
    /// Number of keys in every snapshot: 9 arrays x 3 pools x 4 parts, 2 oversize stats x 4
    /// parts, and 6 counters.
    pub const LEN: usize = ARRAY_NAMES.len() * POOL_NAMES.len() * STAT_PARTS.len()
        + 2 * STAT_PARTS.len()
        + COUNTER_NAMES.len();

    /// The value of `key` (such as `"reserved_bytes.large_pool.peak"`), or `None` when no
    /// statistic has that name.
    pub fn get(&self, key: &str) -> Option<i64> {
        self.0.get(key).copied()
    }

    /// Every key and value, in sorted key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&'static str, i64)> + '_ {
        self.0.iter().map(|(&key, &value)| (key, value))
    }

    /// Number of keys; [`MemoryStats::LEN`] for every snapshot made by `to_flat`.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no keys (only for `MemoryStats::default()`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The underlying sorted map.
    pub fn into_inner(self) -> BTreeMap<&'static str, i64> {
        self.0
    }
}

impl Index<&str> for MemoryStats {
    type Output = i64;

    /// The value of `key`.
    ///
    /// # Panics
    ///
    /// When no statistic is named `key`; use [`MemoryStats::get`] for names that come from
    /// input.
    fn index(&self, key: &str) -> &i64 {
        match self.0.get(key) {
            Some(value) => value,
            None => panic!("no memory statistic named {key:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::test_support::stat;
    use crate::stats::{Stat, StatType};

    #[test]
    fn flat_stats_have_pytorchs_122_keys() {
        let flat = DeviceStats::default().to_flat();
        assert_eq!(MemoryStats::LEN, 122, "9*3*4 + 2*4 + 6 keys");
        assert_eq!(flat.len(), 122, "to_flat should yield every key once");
        for key in [
            "allocated_bytes.all.current",
            "allocation.large_pool.freed",
            "inactive_split_bytes.small_pool.peak",
            "requested_bytes.all.allocated",
            "oversize_allocations.peak",
            "oversize_segments.freed",
            "num_alloc_retries",
            "num_ooms",
            "max_split_size",
            "num_sync_all_streams",
            "num_device_alloc",
            "num_device_free",
        ] {
            assert_eq!(flat.get(key), Some(0), "missing key {key}");
        }
        assert_eq!(
            flat.get("allocated.all.current"),
            None,
            "PyTorch's key is `allocation`"
        );
    }

    #[test]
    fn flat_keys_are_sorted_like_pythons_sort() {
        let flat = DeviceStats::default().to_flat();
        let keys: Vec<&str> = flat.iter().map(|(key, _)| key).collect();
        assert_eq!(keys.first(), Some(&"active.all.allocated"), "first key");
        assert_eq!(keys.last(), Some(&"segment.small_pool.peak"), "last key");
        // `.` sorts before `_`, so `active.*` precedes `active_bytes.*`.
        let active = keys.iter().position(|k| *k == "active.small_pool.peak");
        let active_bytes = keys.iter().position(|k| *k == "active_bytes.all.allocated");
        assert!(
            active < active_bytes,
            "active.* should precede active_bytes.*"
        );
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "keys not strictly sorted"
        );
    }

    #[test]
    fn flat_values_come_from_the_named_fields() {
        let mut stats = DeviceStats::default();
        let mut next = 0;
        let mut fill = |s: &mut Stat| {
            *s = stat(next, next + 1, next + 2, next + 3);
            next += 4;
        };
        for array in stats.arrays_mut() {
            array.iter_mut().for_each(&mut fill);
        }
        fill(&mut stats.oversize_allocations);
        fill(&mut stats.oversize_segments);
        stats.num_alloc_retries = 1001;
        stats.num_ooms = 1002;
        stats.max_split_size = -1;
        stats.num_sync_all_streams = 1003;
        stats.num_device_alloc = 1004;
        stats.num_device_free = 1005;

        let flat = stats.to_flat();
        let fields = [
            ("allocation", stats.allocation),
            ("segment", stats.segment),
            ("active", stats.active),
            ("inactive_split", stats.inactive_split),
            ("allocated_bytes", stats.allocated_bytes),
            ("reserved_bytes", stats.reserved_bytes),
            ("active_bytes", stats.active_bytes),
            ("inactive_split_bytes", stats.inactive_split_bytes),
            ("requested_bytes", stats.requested_bytes),
        ];
        for (name, array) in fields {
            for (pool, ty) in [
                ("all", StatType::Aggregate),
                ("small_pool", StatType::SmallPool),
                ("large_pool", StatType::LargePool),
            ] {
                let s = array[ty];
                let prefix = format!("{name}.{pool}");
                assert_eq!(
                    flat[&format!("{prefix}.current")],
                    s.current,
                    "{prefix}.current"
                );
                assert_eq!(flat[&format!("{prefix}.peak")], s.peak, "{prefix}.peak");
                assert_eq!(
                    flat[&format!("{prefix}.allocated")],
                    s.allocated,
                    "{prefix}"
                );
                assert_eq!(flat[&format!("{prefix}.freed")], s.freed, "{prefix}.freed");
            }
        }
        assert_eq!(
            flat["oversize_allocations.current"],
            stats.oversize_allocations.current
        );
        assert_eq!(
            flat["oversize_segments.freed"],
            stats.oversize_segments.freed
        );
        assert_eq!(flat["num_alloc_retries"], 1001, "num_alloc_retries");
        assert_eq!(flat["num_ooms"], 1002, "num_ooms");
        assert_eq!(flat["max_split_size"], -1, "unlimited split size reads -1");
        assert_eq!(flat["num_sync_all_streams"], 1003, "num_sync_all_streams");
        assert_eq!(flat["num_device_alloc"], 1004, "num_device_alloc");
        assert_eq!(flat["num_device_free"], 1005, "num_device_free");
        let distinct: std::collections::BTreeSet<i64> = flat.iter().map(|(_, v)| v).collect();
        assert_eq!(distinct.len(), MemoryStats::LEN, "two keys share one field");
        assert_eq!(
            flat.clone().into_inner().len(),
            MemoryStats::LEN,
            "into_inner keeps keys"
        );
    }

    #[test]
    #[should_panic(expected = "no memory statistic named \"num_oom\"")]
    fn indexing_an_unknown_key_panics_with_its_name() {
        let _ = DeviceStats::default().to_flat()["num_oom"];
    }
}
