//! Device capacities: reading `--capacity`, and the search for the smallest capacity a trace
//! replays in without running out of memory.

use super::engine::{self, Outcome, Settings, Workload};
use indicatif::ProgressBar;
use serde::Serialize;

/// The capacity when none is given and the trace does not tell the device's: 1 TiB, the whole
/// fake address range of the simulated device, so that nothing runs out of memory.
pub const DEFAULT_CAPACITY: u64 = 1 << 40;

/// The granularity of the capacity search, in bytes (2 MiB, the smallest segment).
pub const SEARCH_STEP: u64 = 2 << 20;

/// Reads a byte count: digits, optionally followed by `K`, `M`, `G` or `T` (powers of 1024,
/// with or without `iB` or `B`), as `--capacity` takes it.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "`{text}` is not a byte count: use digits with an optional K, M, G or T suffix \
                 (powers of 1024), e.g. 80G"
            ))
        }
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a byte count: it needs digits, e.g. 80G"))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{text}` is more bytes than 2^64"))
}

/// The outcome of the capacity search.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CapacitySearch {
    /// The smallest multiple of 2 MiB the trace replays in without out-of-memory; `None` when
    /// even [`DEFAULT_CAPACITY`] is not enough.
    pub min_capacity_bytes: Option<u64>,
    /// Replays the search ran.
    pub replays: u64,
}

/// Binary-searches the smallest capacity, on a [`SEARCH_STEP`] grid, at which `workload`
/// replays without out-of-memory. `unconstrained` is the replay at [`DEFAULT_CAPACITY`]: its
/// peak bounds the search, since a replay at its own peak capacity runs exactly as it did.
/// The search assumes more capacity never causes an out-of-memory; a replay where it does
/// gets a boundary, not necessarily the smallest capacity.
pub fn search(
    workload: &Workload<'_>,
    settings: &Settings,
    unconstrained: &Outcome,
    progress: &ProgressBar,
) -> anyhow::Result<CapacitySearch> {
    if unconstrained.out_of_memory_events() > 0 {
        return Ok(CapacitySearch {
            min_capacity_bytes: None,
            replays: 0,
        });
    }
    let mut high = unconstrained.peak_reserved_bytes.div_ceil(SEARCH_STEP);
    let mut low = 0u64;
    let mut replays = 0;
    if high == 0 {
        return Ok(CapacitySearch {
            min_capacity_bytes: Some(0),
            replays,
        });
    }
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        let probe = Settings {
            capacity_bytes: middle * SEARCH_STEP,
            ..settings.clone()
        };
        replays += 1;
        if engine::run(workload, &probe, progress)?.out_of_memory_events() == 0 {
            high = middle;
        } else {
            low = middle;
        }
    }
    Ok(CapacitySearch {
        min_capacity_bytes: Some(high * SEARCH_STEP),
        replays,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_read_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("80G"), Ok(80 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("2kb"), Ok(2048));
        assert_eq!(parse_bytes("1T"), Ok(1 << 40));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("1.5G").is_err());
        assert_eq!(
            parse_bytes("12 parsecs"),
            Err(
                "`12 parsecs` is not a byte count: use digits with an optional K, M, G or T \
                 suffix (powers of 1024), e.g. 80G"
                    .to_string()
            )
        );
        assert_eq!(
            parse_bytes("99999999999T"),
            Err("`99999999999T` is more bytes than 2^64".to_string())
        );
    }
}
