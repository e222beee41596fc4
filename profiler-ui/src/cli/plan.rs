//! The arguments of `memtrace plan`: the chain file, the budget or slots, the planner, and the
//! chain file's format in `--help`.

use super::values::parse_positive;
use crate::format::parse_bytes;
use clap::ValueEnum;
use std::path::PathBuf;

/// The arguments of `memtrace plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The chain file: per stage, output bytes, forward and backward times and workspaces.
    #[arg(value_name = "CHAIN.json")]
    pub chain: PathBuf,
    /// The most bytes the plan may hold at once: bytes, or with a K, M, G or T suffix, decimals
    /// allowed (`78.5G`). Selects the budget planner; with another `--planner`, the plan is
    /// checked against it.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub budget: Option<u64>,
    /// Snapshots Revolve may hold, the one holding the chain's input included (at least 1).
    /// Selects the revolve planner.
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub slots: Option<usize>,
    /// The planner: budget (the fastest plan within --budget; default with --budget), revolve
    /// (binomial checkpointing with --slots; default with --slots), store-all (no recompute),
    /// uniform (--segments N segments cut as torch's checkpoint_sequential cuts them), sqrt
    /// (Chen et al.: ceil(sqrt(stages)) balanced segments).
    #[arg(long, value_enum, value_name = "NAME")]
    pub planner: Option<PlannerName>,
    /// With `--planner uniform`: the number of segments (1 to the number of stages).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub segments: Option<usize>,
    /// Also print the plan's schedule, the operations in order: `F3` (stage 3's forward), `S3`
    /// / `D3` (store / drop activation x_3), `B3` (stage 3's backward step).
    #[arg(long)]
    pub schedule: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The planners `memtrace plan` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlannerName {
    /// The fastest plan whose peak fits `--budget`.
    Budget,
    /// Binomial checkpointing with `--slots` snapshots.
    Revolve,
    /// Keep every activation: no recompute.
    StoreAll,
    /// `--segments` segments cut as `checkpoint_sequential` cuts them.
    Uniform,
    /// `ceil(sqrt(stages))` balanced segments.
    Sqrt,
}

impl PlannerName {
    /// The name as the command line spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PlannerName::Budget => "budget",
            PlannerName::Revolve => "revolve",
            PlannerName::StoreAll => "store-all",
            PlannerName::Uniform => "uniform",
            PlannerName::Sqrt => "sqrt",
        }
    }
}

/// `memtrace plan --help`'s epilogue: the chain file's format and what the numbers mean.
pub const PLAN_HELP: &str = concat!(
    "The memory model: blockpool::checkpoint's (README, Checkpointing). A plan's peak counts the \
     chain's input, the activations alive, the gradients of the stage being reversed and its \
     workspace, as the caching allocator would hold them; forward calls count stage forwards \
     outside backward steps (store-all makes stages - 1); time adds every forward call, the last \
     stage's forward before the loss and every backward step, in the file's time_unit. Limits: \
     at most 100000 stages, at most 2048 for the budget planner, at most 2000000 forward calls \
     in a plan.\n\n",
    "Chain file: JSON, one object:\n\n",
    "  {\n",
    "    \"time_unit\": \"us\",\n",
    "    \"input_bytes\": \"8MiB\",\n",
    "    \"stages\": [\n",
    "      {\"name\": \"embed\", \"output_bytes\": 50331648, \"forward_time\": 120, \"backward_time\": 260},\n",
    "      {\"name\": \"block0\", \"output_bytes\": \"48MiB\", \"forward_time\": 850, \"backward_time\": 1900,\n",
    "       \"forward_workspace_bytes\": \"192MiB\", \"backward_workspace_bytes\": \"384MiB\"}\n",
    "    ]\n",
    "  }\n\n",
    "Stage i maps activation x_i to x_{i+1}; x_0 is the chain's input.\n",
    "  input_bytes                 bytes of x_0 (required)\n",
    "  stages                      the stages in order, 1 to 100000 (required), each with:\n",
    "    output_bytes              bytes of its output x_{i+1}, also its gradient's (required)\n",
    "    forward_time              time of one forward call (required)\n",
    "    backward_time             time of its backward step, with whatever of the forward it\n",
    "                              re-runs itself (required)\n",
    "    forward_workspace_bytes   scratch memory its forward allocates and frees (default 0)\n",
    "    backward_workspace_bytes  scratch memory its backward allocates and frees (default 0)\n",
    "    name                      a label for reports (optional)\n",
    "  time_unit                   the label of every time (optional); times are whole\n",
    "                              numbers, so pick a unit fine enough (\"us\" rather than \"ms\")\n\n",
    "Bytes are whole numbers or strings with a K, M, G or T suffix (powers of 1024: \"64MiB\", \
     \"1.5G\"), rounded as the caching allocator rounds them (to multiples of 512; 0 stays 0). \
     Parameters and their gradients are not counted. Any other field is refused; a file is at \
     most 64 MiB. Example: examples/chain.json."
);
