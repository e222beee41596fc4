//! Device capacities: the one a replay gets unless `--capacity` says otherwise, and the search
//! for the smallest capacity a trace replays in without running out of memory
//! (`--find-capacity`).

use super::engine::{self, Outcome, Settings, Workload};
use indicatif::ProgressBar;
use serde::Serialize;

/// The capacity when none is given and the trace does not tell the device's: 1 TiB, the whole
/// fake address range of the simulated device, so that nothing runs out of memory.
pub const DEFAULT_CAPACITY: u64 = 1 << 40;

/// The granularity of the capacity search, in bytes (2 MiB, the smallest segment).
pub const SEARCH_STEP: u64 = 2 << 20;

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
