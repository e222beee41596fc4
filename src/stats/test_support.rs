//! Helpers shared by the statistics tests in every file of this module.

use super::{DeviceStats, Stat, StatArray};

pub(super) fn stat(current: i64, peak: i64, allocated: i64, freed: i64) -> Stat {
    Stat {
        current,
        peak,
        allocated,
        freed,
    }
}

/// A [`StatArray`] given in the summary's order (all, large, small).
fn pools(all: Stat, large: Stat, small: Stat) -> StatArray {
    StatArray {
        all,
        small_pool: small,
        large_pool: large,
    }
}

/// Values picked to sit on both sides of every unit threshold, not taken from a real run.
pub(super) fn threshold_stats() -> DeviceStats {
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
