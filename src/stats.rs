//! Allocator statistics with the meaning and key names of `torch.cuda.memory_stats()`.
//!
//! The pool updates a [`DeviceStats`] as it allocates, frees, splits and releases; this file
//! holds that record and its two read-outs. [`DeviceStats::to_flat`] gives the 122 flat keys of
//! `torch.cuda.memory_stats()` (`allocated_bytes.all.current`, `num_ooms`, ...), sorted as
//! PyTorch sorts them, so scripts written against PyTorch read our numbers unchanged.
//! [`memory_summary`] prints the table of `torch.cuda.memory_summary()`, with the same rows,
//! column widths and unit rules, so two summaries can be compared line by line.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::ops::Index;
use std::sync::OnceLock;

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

/// Which pool a statistic covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatType {
    /// Both pools together (`all`).
    Aggregate = 0,
    /// The small pool (blocks of at most 1 MiB).
    SmallPool = 1,
    /// The large pool.
    LargePool = 2,
}

/// A statistic for `all`, `small_pool` and `large_pool`, indexed by [`StatType`].
pub type StatArray = [Stat; 3];

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

    fn arrays(&self) -> [&StatArray; 9] {
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

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
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

/// Pool names, indexed by [`StatType`].
const POOL_NAMES: [&str; 3] = ["all", "small_pool", "large_pool"];

/// The four parts of a [`Stat`], in field order.
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

/// Width of the summary table between its outer `|` borders, as in PyTorch.
const SUMMARY_WIDTH: usize = 75;

/// PyTorch's `torch.cuda.memory_summary()` table for `stats`.
///
/// Rows, column widths and units match PyTorch's, so summaries can be diffed against
/// PyTorch's; only the title names blockpool. Each cell scales its value by the unit that the
/// pool-wide (`all`) value of its column selects, and truncates, as PyTorch does: sizes move
/// from B to KiB at 768 KiB and so on up to PiB, counts move to K at 750 000 and to M at
/// 750 000 000. With `abbreviated` the `from large pool` / `from small pool` rows are left
/// out. Every line ends in `|` and `\n`; a line grows past the table width only when a
/// counter in the header outgrows its column, which PyTorch also allows.
pub fn memory_summary(device: usize, stats: &DeviceStats, abbreviated: bool) -> String {
    Summary {
        device,
        stats,
        abbreviated,
    }
    .to_string()
}

/// How a summary column scales its numbers.
#[derive(Clone, Copy)]
enum Unit {
    /// Byte sizes: `B`, `KiB`, ... in steps of 1024.
    Bytes,
    /// Counts: none, `K`, `M` in steps of 1000.
    Count,
}

impl Unit {
    /// The 10-character cell for `value`, in the unit that `reference` selects.
    fn cell(self, value: i64, reference: i64) -> Cell {
        const BYTE_PREFIXES: &[&str] = &["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
        const COUNT_PREFIXES: &[&str] = &[" ", "K", "M"];
        let (prefixes, step, threshold) = match self {
            Unit::Bytes => (BYTE_PREFIXES, 1024, 768.0 * 1024.0),
            Unit::Count => (COUNT_PREFIXES, 1000, 750.0 * 1000.0),
        };
        // PyTorch divides the reference with Python's true division, so it is a float after
        // the first step; doing the same keeps the unit choice identical near a threshold
        // (for example 768 TiB - 1 B rounds up and prints in PiB). Values use floor division.
        let mut reference = reference as f64;
        let mut value = value;
        let mut chosen = prefixes[0];
        for &prefix in &prefixes[1..] {
            if reference < threshold {
                break;
            }
            chosen = prefix;
            value = value.div_euclid(step);
            reference /= step as f64;
        }
        Cell {
            unit: self,
            value,
            prefix: chosen,
        }
    }
}

/// One formatted number of the summary table.
struct Cell {
    unit: Unit,
    value: i64,
    prefix: &'static str,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.unit {
            Unit::Bytes => write!(f, "{:6} {}", self.value, self.prefix),
            Unit::Count => write!(f, "{:7} {} ", self.value, self.prefix),
        }
    }
}

/// The summary table; [`memory_summary`] renders it.
struct Summary<'a> {
    device: usize,
    stats: &'a DeviceStats,
    abbreviated: bool,
}

impl Summary<'_> {
    /// Writes one table line between the `|` borders.
    fn line(f: &mut fmt::Formatter<'_>, body: impl fmt::Display) -> fmt::Result {
        writeln!(f, "|{body}|")
    }

    /// Writes a full-width line of `fill`.
    fn rule(f: &mut fmt::Formatter<'_>, fill: char) -> fmt::Result {
        f.write_char('|')?;
        for _ in 0..SUMMARY_WIDTH {
            f.write_char(fill)?;
        }
        f.write_str("|\n")
    }

    /// One metric row; `reference` picks each column's unit.
    fn row(
        f: &mut fmt::Formatter<'_>,
        name: &str,
        stat: &Stat,
        reference: &Stat,
        unit: Unit,
    ) -> fmt::Result {
        Self::line(
            f,
            format_args!(
                " {name:<21} | {} | {} | {} | {} ",
                unit.cell(stat.current, reference.current),
                unit.cell(stat.peak, reference.peak),
                unit.cell(stat.allocated, reference.allocated),
                unit.cell(stat.freed, reference.freed),
            ),
        )
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.stats;
        // PyTorch's title is "PyTorch CUDA memory summary, device ID {:<17}"; ours is three
        // characters shorter, so the ID gets 20 columns, enough for any usize.
        Self::rule(f, '=')?;
        Self::line(
            f,
            format_args!(
                " {:16} blockpool memory summary, device ID {:<20} ",
                "", self.device
            ),
        )?;
        Self::rule(f, '-')?;
        Self::line(
            f,
            format_args!(
                "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
                "", s.num_ooms, "", s.num_alloc_retries
            ),
        )?;
        Self::rule(f, '=')?;
        Self::line(
            f,
            "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
        )?;
        let pooled = [
            ("Allocated memory", &s.allocated_bytes, Unit::Bytes),
            ("Active memory", &s.active_bytes, Unit::Bytes),
            ("Requested memory", &s.requested_bytes, Unit::Bytes),
            ("GPU reserved memory", &s.reserved_bytes, Unit::Bytes),
            (
                "Non-releasable memory",
                &s.inactive_split_bytes,
                Unit::Bytes,
            ),
            ("Allocations", &s.allocation, Unit::Count),
            ("Active allocs", &s.active, Unit::Count),
            ("GPU reserved segments", &s.segment, Unit::Count),
            ("Non-releasable allocs", &s.inactive_split, Unit::Count),
        ];
        for (name, array, unit) in pooled {
            Self::rule(f, '-')?;
            let all = &array[StatType::Aggregate as usize];
            Self::row(f, name, all, all, unit)?;
            if !self.abbreviated {
                let large = &array[StatType::LargePool as usize];
                let small = &array[StatType::SmallPool as usize];
                Self::row(f, "      from large pool", large, all, unit)?;
                Self::row(f, "      from small pool", small, all, unit)?;
            }
        }
        for (name, stat) in [
            ("Oversize allocations", &s.oversize_allocations),
            ("Oversize GPU segments", &s.oversize_segments),
        ] {
            Self::rule(f, '-')?;
            Self::row(f, name, stat, stat, Unit::Count)?;
        }
        Self::rule(f, '=')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(current: i64, peak: i64, allocated: i64, freed: i64) -> Stat {
        Stat {
            current,
            peak,
            allocated,
            freed,
        }
    }

    /// `[all, small_pool, large_pool]`, given in the summary's order (all, large, small).
    fn pools(all: Stat, large: Stat, small: Stat) -> StatArray {
        [all, small, large]
    }

    /// Values picked to sit on both sides of every unit threshold, not taken from a real run.
    fn threshold_stats() -> DeviceStats {
        let zero = Stat::default();
        DeviceStats {
            allocated_bytes: pools(
                stat(1_572_864, 3_221_225_472, 1 << 40, 1_099_510_054_912),
                stat(
                    1_048_576,
                    3_219_128_320,
                    1_099_510_579_200,
                    1_099_509_530_624,
                ),
                stat(524_288, 2_097_152, 1_048_576, 524_288),
            ),
            active_bytes: pools(
                stat(786_432, 786_432, 786_431, 0),
                zero,
                stat(786_432, 786_432, 786_431, 0),
            ),
            requested_bytes: pools(
                stat(1_500_000, 3_000_000_000, 999, 805_306_367),
                stat(1_000_000, 2_999_000_000, 0, 805_306_367),
                stat(500_000, 1_000_000, 999, 0),
            ),
            reserved_bytes: pools(
                stat(1 << 50, 1 << 60, i64::MAX, 864_691_128_455_135_231),
                stat(1 << 50, 1 << 60, i64::MAX, 864_691_128_455_135_231),
                zero,
            ),
            allocation: pools(
                stat(749_999, 750_000, 1_000_000_000, 749_999_999),
                stat(0, 250_000, 999_999_999, 0),
                stat(749_999, 500_000, 1, 749_999_999),
            ),
            active: pools(
                stat(12, 40, 1234, 1222),
                stat(2, 10, 34, 32),
                stat(10, 30, 1200, 1190),
            ),
            segment: pools(stat(3, 5, 8, 5), stat(2, 3, 5, 3), stat(1, 2, 3, 2)),
            oversize_allocations: stat(1, 2, 3_000_000, 2_999_999),
            num_ooms: 2,
            num_alloc_retries: 3,
            ..DeviceStats::default()
        }
    }

    const EXPECTED_SUMMARY: &str = "\
|===========================================================================|
|                  blockpool memory summary, device ID 7                    |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 2            |        cudaMalloc retries: 3         |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   1536 KiB |   3072 MiB |   1024 GiB |   1023 GiB |
|       from large pool |   1024 KiB |   3070 MiB |   1023 GiB |   1023 GiB |
|       from small pool |    512 KiB |      2 MiB |      0 GiB |      0 GiB |
|---------------------------------------------------------------------------|
| Active memory         |    768 KiB |    768 KiB | 786431 B   |      0 B   |
|       from large pool |      0 KiB |      0 KiB |      0 B   |      0 B   |
|       from small pool |    768 KiB |    768 KiB | 786431 B   |      0 B   |
|---------------------------------------------------------------------------|
| Requested memory      |   1464 KiB |   2861 MiB |    999 B   | 786431 KiB |
|       from large pool |    976 KiB |   2860 MiB |      0 B   | 786431 KiB |
|       from small pool |    488 KiB |      0 MiB |    999 B   |      0 KiB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   1024 TiB |   1024 PiB |   8191 PiB |    767 PiB |
|       from large pool |   1024 TiB |   1024 PiB |   8191 PiB |    767 PiB |
|       from small pool |      0 TiB |      0 PiB |      0 PiB |      0 PiB |
|---------------------------------------------------------------------------|
| Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |
|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
|       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
|---------------------------------------------------------------------------|
| Allocations           |  749999    |     750 K  |    1000 M  |  749999 K  |
|       from large pool |       0    |     250 K  |     999 M  |       0 K  |
|       from small pool |  749999    |     500 K  |       0 M  |  749999 K  |
|---------------------------------------------------------------------------|
| Active allocs         |      12    |      40    |    1234    |    1222    |
|       from large pool |       2    |      10    |      34    |      32    |
|       from small pool |      10    |      30    |    1200    |    1190    |
|---------------------------------------------------------------------------|
| GPU reserved segments |       3    |       5    |       8    |       5    |
|       from large pool |       2    |       3    |       5    |       3    |
|       from small pool |       1    |       2    |       3    |       2    |
|---------------------------------------------------------------------------|
| Non-releasable allocs |       0    |       0    |       0    |       0    |
|       from large pool |       0    |       0    |       0    |       0    |
|       from small pool |       0    |       0    |       0    |       0    |
|---------------------------------------------------------------------------|
| Oversize allocations  |       1    |       2    |    3000 K  |    2999 K  |
|---------------------------------------------------------------------------|
| Oversize GPU segments |       0    |       0    |       0    |       0    |
|===========================================================================|
";

    #[test]
    fn summary_matches_pytorch_layout_and_units() {
        let summary = memory_summary(7, &threshold_stats(), false);
        for (got, want) in summary.lines().zip(EXPECTED_SUMMARY.lines()) {
            assert_eq!(got, want, "summary line differs");
        }
        assert_eq!(
            summary, EXPECTED_SUMMARY,
            "summary differs (line count or ending)"
        );
    }

    #[test]
    fn abbreviated_summary_drops_only_the_pool_rows() {
        let summary = memory_summary(7, &threshold_stats(), true);
        let expected: String = EXPECTED_SUMMARY
            .lines()
            .filter(|line| !line.starts_with("|       from "))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(
            summary, expected,
            "abbreviated summary should only lose pool rows"
        );
    }

    #[test]
    fn summary_keeps_table_width_for_any_device_id() {
        for device in [0, 7, usize::MAX] {
            let summary = memory_summary(device, &DeviceStats::default(), false);
            for line in summary.lines() {
                assert_eq!(
                    line.len(),
                    SUMMARY_WIDTH + 2,
                    "line {line:?} for device {device}"
                );
            }
            let title = format!(" device ID {device} ");
            assert!(
                summary.contains(&title),
                "title lacks the device ID {device}"
            );
        }
    }

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
                let s = array[ty as usize];
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
            stats.allocation[0].current, 749_999,
            "resets keep current values"
        );
    }
}
