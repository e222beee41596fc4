//! The table of `torch.cuda.memory_summary()`: [`memory_summary`], with PyTorch's rows,
//! column widths and unit rules.

use std::fmt::{self, Write as _};

use super::stat::{DeviceStats, Stat};

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
            let all = &array.all;
            Self::row(f, name, all, all, unit)?;
            if !self.abbreviated {
                Self::row(f, "      from large pool", &array.large_pool, all, unit)?;
                Self::row(f, "      from small pool", &array.small_pool, all, unit)?;
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
    use crate::stats::test_support::threshold_stats;

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
}
