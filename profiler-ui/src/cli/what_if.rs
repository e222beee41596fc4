//! The arguments of the commands that ask what the allocator did and could have done:
//! `memtrace explain` (why memory ran out), `memtrace tune` (which settings would have served
//! best) and `memtrace replay` (the trace run through blockpool's allocator).

use super::values::{parse_config, parse_positive};
use crate::format::parse_bytes;
use blockpool::AllocatorConfig;
use std::path::PathBuf;

/// The arguments of `memtrace explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The trace file.
    pub file: PathBuf,
    /// The device (default: its first out-of-memory event's, else the busiest).
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Explain the device's K-th out-of-memory event (1 is the first).
    #[arg(long, value_name = "K", value_parser = parse_positive, conflicts_with = "peak")]
    pub oom: Option<usize>,
    /// Explain the reserved peak, even when the device ran out of memory.
    #[arg(long)]
    pub peak: bool,
    /// The GPU's total memory, as `replay --capacity` takes sizes (`80G`): with it the report
    /// gives the memory outside the allocator (CUDA context, libraries' workspaces, other
    /// processes), which the trace does not record.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub device_memory: Option<u64>,
    /// The allocator settings the recording ran under, in `PYTORCH_CUDA_ALLOC_CONF` syntax,
    /// when the trace does not record them (they decide rounding and oversize blocks).
    #[arg(long, value_name = "STR", value_parser = parse_config)]
    pub config: Option<AllocatorConfig>,
    /// Name sites by every frame memory_viz shows instead of the user's own code.
    #[arg(long)]
    pub all_frames: bool,
    /// Print every recorded frame of the request's stack, the stack capture and the allocator
    /// included.
    #[arg(long)]
    pub full_stack: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `memtrace tune` costs, after its options in `--help`.
pub const TUNE_HELP: &str = "Cost: one replay per setting (11, or 13 where the device's memory \
is known, plus each --try), --jobs at once. Its time is about the settings / jobs times one \
`memtrace replay` of the file; its memory the trace's as `replay` holds it, plus one \
replay's allocator state (its live blocks and cached segments) per job.";

/// The arguments of `memtrace tune`.
#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// The trace file.
    pub file: PathBuf,
    /// The settings the recording ran under, in `PYTORCH_CUDA_ALLOC_CONF` syntax, when the
    /// trace does not record them (default: the trace's own, else PyTorch's defaults).
    #[arg(long, value_name = "STR", value_parser = parse_config)]
    pub config: Option<AllocatorConfig>,
    /// Capacity of the simulated device, as `replay --capacity` takes it (default: the
    /// recorded device's memory when the trace ran out of memory, else 1T).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub capacity: Option<u64>,
    /// Replay from the live blocks alone instead of the trace's segments, so that the settings
    /// shape every segment.
    #[arg(long)]
    pub fresh: bool,
    /// More settings to try, in `PYTORCH_CUDA_ALLOC_CONF` syntax (repeatable); each is tried
    /// as written, not on top of the recorded settings.
    #[arg(long = "try", value_name = "STR", value_parser = parse_config)]
    pub tries: Vec<AllocatorConfig>,
    /// Replays run at once (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub jobs: Option<usize>,
    /// The device of the trace to replay (default: its first out-of-memory event's, else the
    /// busiest).
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `memtrace replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The trace file.
    pub file: PathBuf,
    /// Allocator settings in `PYTORCH_CUDA_ALLOC_CONF` syntax (default: the trace's own, else
    /// PyTorch's defaults).
    #[arg(long, value_name = "STR", value_parser = parse_config)]
    pub config: Option<AllocatorConfig>,
    /// Capacity of the simulated device: bytes, or with a K, M, G or T suffix, decimals allowed
    /// (`78.5G`). Default: the recorded device's memory when the trace ran out of memory
    /// (`device_free` plus the bytes reserved then), else 1T; the report says which.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub capacity: Option<u64>,
    /// Start from the live blocks alone, allocated first in address order, instead of the
    /// trace's segments.
    #[arg(long)]
    pub fresh: bool,
    /// Also search the smallest capacity (on 2 MiB steps) that replays without out-of-memory,
    /// the requests the recording failed (its `oom` events) included.
    #[arg(long)]
    pub find_capacity: bool,
    /// Put each segment where the trace had it and report how many allocations got the very
    /// address the trace shows (not possible in mapped ranges of expandable segments; the
    /// report says so).
    #[arg(long)]
    pub exact: bool,
    /// The device of the trace to replay (default: its first out-of-memory event's, else the
    /// busiest, with the most events).
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}
