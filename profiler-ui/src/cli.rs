//! The command line: subcommands and their arguments (clap; `plan`'s in `cli/plan.rs`, those of
//! `explain`, `tune` and `replay` in `cli/what_if.rs`), the readers of the values clap cannot
//! read itself (`cli/values.rs`; byte sizes are
//! [`parse_bytes`](crate::format::parse_bytes)'s, in `format`), and how usage
//! errors exit.

use crate::analysis::gate::Rule;
use crate::analysis::sites::SiteOrder;
use crate::analysis::timeline::EventPoint;
use crate::serve::server::DEFAULT_MAX_CONNECTIONS;
use clap::error::ErrorKind;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use values::{parse_connections, parse_depth, parse_percent, parse_seconds};

mod plan;
mod values;
mod what_if;

pub use plan::{PlanArgs, PlannerName, PLAN_HELP};
pub use what_if::{ExplainArgs, ReplayArgs, TuneArgs, TUNE_HELP};

/// Look at GPU memory traces: blockpool's JSON Lines files (`.jsonl`, `.jsonl.gz`), PyTorch's
/// memory snapshots (`torch.cuda.memory._dump_snapshot` pickles) and RMM's CSV logs. The format
/// is detected from the content, not the name.
#[derive(Debug, Parser)]
#[command(
    name = "memtrace",
    version,
    about,
    after_help = "Event numbers: an event is named by its index in its device's list in the file \
                  (for PyTorch snapshots `device_traces[device][N]`, 0-based, as _memory_viz \
                  counts; annotations inserted from `external_annotations` have no number and \
                  show as `annotation after event N`). A state is `after event N`, the memory \
                  once event N has happened; `--at N` shows it and `--at start` the state \
                  before event 0.\n\nEnvironment: BLOCKPOOL_MAX_CONTEXT_BYTES=<bytes> raises the import limit on what \
                  a trace's call stacks and tags may spell out (default 1 GiB; a file that \
                  names one frame millions of times is refused above it); \
                  BLOCKPOOL_MAX_DECOMPRESSION_RATIO=<ratio> raises how many times its size a \
                  .gz trace may decompress to (default 200, and at least 1 GiB).\n\nExit \
                  status: 0 on success, 1 when a rule of `memtrace diff --fail-if` failed, 2 \
                  on bad input or usage."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What a site is, after the help of every command that names sites.
pub const SITE_HELP: &str = "\
A site is where a block was allocated: its annotation tags joined by `/`; else the innermost
frame of the user's own code: a Python frame outside torch, installed packages (site-packages,
dist-packages) and the standard library; else the innermost Python frame; else the innermost C++
frame outside the caching allocator and the operator dispatcher. memory_viz's hidden frames
(stack capture, interpreter internals) never name one. The autograd node the allocation ran
under is shown beside it, e.g. `model.py:42:forward (BmmBackward0)`. With --all-frames, torch's
wrappers and the allocator can name sites (the innermost Python frame, else the innermost frame
memory_viz shows). A block with no recorded stack alive before the first event is `<allocated
before _record_memory_history was enabled>`; one allocated later without a stack is `<no stack
recorded>`.";

/// `memtrace diff --help`'s epilogue: the gate's rules and exit status, then sites.
pub const DIFF_HELP: &str = "\
--fail-if METRIC:LIMIT fails (exit status 1) when B grew more than LIMIT from A; a growth of
exactly LIMIT passes. METRIC (`-` and `_` alike):
  peak_allocated  the allocated peak of each trace's device
  peak_reserved   the reserved peak (bytes in segments) of each trace's device
  site-growth     any one site's live bytes, at the allocated peak or at the end of each trace,
                  whichever grew more; in percent of that site's bytes in A, so a site new in B
                  fails any percentage
LIMIT is a percentage of A (+5%, 2.5%) or a size (+64MiB, 1.5G, 4096), the `+` optional.
Every rule is judged; the report is printed as usual, and each failed rule is one line on
standard error: the rule, what it measured, and the limit. Exit status: 0 when every rule passed,
1 when one failed, 2 on bad input or usage (an unreadable rule included).

A site is where a block was allocated: its annotation tags joined by `/`; else the innermost
frame of the user's own code (see `memtrace top --help`). With --all-frames, torch's wrappers and
the allocator can name sites.";

/// `memtrace leaks --help`'s epilogue: what a step is, growing, persistent, then sites.
pub const LEAKS_HELP: &str = "\
Memory is measured before the first step begins and at the end of each step: a step is a range
of the annotation named by --step (default `ProfilerStep#`, the steps PyTorch's profiler marks).
Without one, the outermost annotation ranges are the steps, and the report says so; without any
annotation, memory is measured at the start and the end of the trace. A site is growing when its
live bytes or blocks rose (and neither fell) at each of the last K measurements (--growth-steps,
default 3), so a cache that fills in fewer steps and then stays flat is not. A site is persistent
when its live bytes and blocks were the same at every measurement since one of the first two:
weights, optimizer state. Inside a step a site is named without the step's own tag.

A site is where a block was allocated: its annotation tags joined by `/`; else the innermost
frame of the user's own code (see `memtrace top --help`). With --all-frames, torch's wrappers and
the allocator can name sites.";

/// `memtrace streams --help`'s epilogue: how bytes are given to streams.
pub const STREAMS_HELP: &str = "\
A block belongs to the stream it was allocated on and a segment to the stream it was created for,
as PyTorch's caching allocator owns them; a stream's cached bytes are its segments' bytes less its
active blocks', and only that stream can reuse them. Stranded: cached on a stream after its last
allocation in the trace, while another stream still allocates. Waiting: freed (free_requested)
but not yet reusable (free_completed) because the block was used on other streams
(record_stream). The what-if replays the trace twice on a simulated device, as `memtrace replay`
does: under the recording's settings, then with stream_reuse:ordered, where a block cached on one
stream serves another after an event wait instead of a host sync, and a record_stream free is
reusable at once.";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a training-like workload through blockpool (on GPU 0 when CUDA is usable, else on a
    /// simulated 80 GiB device; `BLOCKPOOL_BACKEND=cuda|sim` forces one), record it, write the
    /// trace and report what it holds; with `--serve`, then show it in the web viewer.
    #[command(group(clap::ArgGroup::new("viewer").multiple(true).args(["serve", "open"])))]
    Demo {
        /// Where to write the trace (`.gz`: compressed).
        #[arg(long, short = 'o', default_value = "blockpool-demo.jsonl.gz")]
        out: PathBuf,
        /// Then serve the trace in the web viewer, as `memtrace serve` does (until Ctrl-C).
        #[arg(long)]
        serve: bool,
        /// With `--serve` or `--open`: the port (0: any free one).
        #[arg(long, default_value_t = 8700, requires = "viewer")]
        port: u16,
        /// Then serve the trace and open the viewer in the browser (implies `--serve`).
        #[arg(long)]
        open: bool,
    },
    /// Peaks of allocated, reserved and requested memory and when, fragmentation and the top
    /// allocation sites at the peak, and each out-of-memory event explained.
    #[command(after_help = SITE_HELP)]
    Summary {
        /// The trace file. Several files, a folder (its .pickle, .pkl, .jsonl and .csv files,
        /// each optionally .gz) or a rank pattern (`run-{rank}.pickle`) give one line per file
        /// instead (the events, peaks and out-of-memory events of the device it opens on), how the
        /// peaks spread across the files, and the outliers (a peak more than 10% above the
        /// mean); up to 4096 files, read one at a time.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Name sites by every frame memory_viz shows (torch's wrappers, installed packages,
        /// the allocator itself) instead of the user's own code.
        #[arg(long)]
        all_frames: bool,
        /// Print every recorded frame of a failing request's stack, the stack capture and the
        /// allocator included (by default they are left out, so the user's code comes first).
        #[arg(long)]
        full_stack: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The sites whose live memory grows step after step, the persistent memory (weights,
    /// optimizer state) apart, and what was allocated during the trace and is alive at its end.
    #[command(after_help = LEAKS_HELP)]
    Leaks {
        /// The trace file.
        file: PathBuf,
        /// Name sites by every frame memory_viz shows (torch's wrappers, installed packages,
        /// the allocator itself) instead of the user's own code.
        #[arg(long)]
        all_frames: bool,
        /// Only this device (default: every device).
        #[arg(long)]
        device: Option<u32>,
        /// The prefix of the annotation that marks one step of the loop (PyTorch's profiler:
        /// `ProfilerStep#N`; your own `record_function` or `annotate` name otherwise). Empty:
        /// the outermost annotation ranges.
        #[arg(long, value_name = "PREFIX", default_value = crate::analysis::steps::DEFAULT_STEP_PREFIX)]
        step: String,
        /// Consecutive growing steps that flag a site as growing (at least 1).
        #[arg(long, value_name = "K", default_value_t = blockpool::leak::GrowthSettings::DEFAULT_MIN_GROWTH_STEPS)]
        growth_steps: u32,
        /// Steps after the first measurement by which memory must have reached its size to
        /// count as persistent (weights loaded before the loop: 0; optimizer state made in the
        /// first step: 1).
        #[arg(long, value_name = "N", default_value_t = blockpool::leak::GrowthSettings::DEFAULT_WARMUP_STEPS)]
        warmup_steps: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Live allocated memory by site at one point (the end by default).
    #[command(after_help = SITE_HELP)]
    Top {
        /// The trace file.
        file: PathBuf,
        /// Which point.
        #[command(flatten)]
        at: AtOrPeak,
        /// The device (default: its first out-of-memory event's, else the busiest: the most
        /// events, then the most reserved bytes).
        #[arg(long)]
        device: Option<u32>,
        /// Order of the sites.
        #[arg(long, value_enum, default_value = "bytes")]
        sort: SiteOrder,
        /// Show at most this many sites.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Name sites by every frame memory_viz shows (torch's wrappers, installed packages,
        /// the allocator itself) instead of the user's own code.
        #[arg(long)]
        all_frames: bool,
        /// Print the stack tree of live allocated memory instead (the flame graph of
        /// `python -m torch.cuda._memory_viz memory`): every block under its tags and frames,
        /// outermost first, with bytes and share per node.
        #[arg(long)]
        tree: bool,
        /// With `--tree`: levels below the root to print; deeper frames count in their
        /// ancestor at this depth (1 to 256).
        #[arg(long, value_name = "N", default_value_t = 12, requires = "tree",
              value_parser = parse_depth)]
        depth: usize,
        /// With `--tree`: the smallest share of allocated bytes, in percent, a node gets its own
        /// row for; smaller siblings are one `<N smaller>` row.
        #[arg(long, value_name = "PERCENT", default_value_t = 1.0, requires = "tree",
              value_parser = parse_percent)]
        min_share: f64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A text map of segments and blocks at one point (the end by default): allocated, pending
    /// free, free, and lost to rounding.
    #[command(after_help = SITE_HELP)]
    Segments {
        /// The trace file.
        file: PathBuf,
        /// Name sites by every frame memory_viz shows (torch's wrappers, installed packages,
        /// the allocator itself) instead of the user's own code.
        #[arg(long)]
        all_frames: bool,
        /// Which point.
        #[command(flatten)]
        at: AtOrPeak,
        /// The device (default: its first out-of-memory event's, else the busiest: the most
        /// events, then the most reserved bytes).
        #[arg(long)]
        device: Option<u32>,
        /// Print the segments and blocks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Memory by stream: what each stream reserved and cached over the trace, the cache
    /// stranded on streams that never allocate again, the frees that waited for other streams
    /// (`record_stream`), and what the stream-ordered policy (`stream_reuse:ordered`) would have
    /// reserved instead.
    #[command(after_help = STREAMS_HELP)]
    Streams {
        /// The trace file.
        file: PathBuf,
        /// The device (default: its first out-of-memory event's, else the busiest: the most
        /// events, then the most reserved bytes).
        #[arg(long)]
        device: Option<u32>,
        /// The settings the replays start from (default: the trace's own, else PyTorch's
        /// defaults); the second replay adds `stream_reuse:ordered` to them.
        #[arg(long, value_name = "STR", value_parser = values::parse_config)]
        config: Option<blockpool::AllocatorConfig>,
        /// Leave out the two replays (the policy's what-if).
        #[arg(long)]
        no_replay: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Allocated, reserved and requested memory over time as an SVG chart, steps marked.
    Timeline {
        /// The trace file.
        file: PathBuf,
        /// The SVG file to write.
        #[arg(long, short = 'o')]
        out: PathBuf,
        /// The device (default: its first out-of-memory event's, else the busiest: the most
        /// events, then the most reserved bytes).
        #[arg(long)]
        device: Option<u32>,
    },
    /// Per-site differences in live bytes at the allocated peak and at the end of two traces,
    /// and the allocated and reserved peaks of each; with `--fail-if`, a gate for CI.
    #[command(after_help = DIFF_HELP)]
    Diff {
        /// The first trace.
        a: PathBuf,
        /// The second trace.
        b: PathBuf,
        /// The device in both (default: in each, its first out-of-memory event's, else the
        /// busiest).
        #[arg(long)]
        device: Option<u32>,
        /// The device of the first trace, overriding `--device` (one rank's GPU against
        /// another's).
        #[arg(long, value_name = "N")]
        device_a: Option<u32>,
        /// The device of the second trace, overriding `--device`.
        #[arg(long, value_name = "N")]
        device_b: Option<u32>,
        /// Name sites by every frame memory_viz shows (torch's wrappers, installed packages,
        /// the allocator itself) instead of the user's own code.
        #[arg(long)]
        all_frames: bool,
        /// Exit with status 1 when B grew more than LIMIT from A: METRIC:LIMIT, the metric
        /// peak_allocated, peak_reserved or site-growth, the limit a percentage of A (+5%) or a
        /// size (+64MiB); repeatable, every rule is judged (see below).
        #[arg(long = "fail-if", value_name = "RULE", value_parser = Rule::parse)]
        fail_if: Vec<Rule>,
        /// Print the report as JSON (with `--fail-if`, a `gate` object: each rule's verdict).
        #[arg(long)]
        json: bool,
        /// Print the report as GitHub-flavoured Markdown, for a CI job to post on a pull
        /// request: the gate's verdicts, the peaks, and a table of the sites that changed.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
        /// List at most N changed sites, the rest counted (default: all; 30 with
        /// `--markdown`; JSON lists every site).
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Format, devices, events per device by action, segments and time span of a trace.
    Info {
        /// The trace file.
        file: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert a trace to another format, or traces to a Parquet dataset for SQL engines
    /// (DuckDB, Polars, Spark, Trino): `memtrace convert run.pickle out.parquet`, or a folder
    /// or rank pattern (`'rank-{rank}.pickle'`) to one dataset partitioned by rank. The
    /// dataset's schema and example queries are in the README.
    Convert {
        /// The trace to read; for a Parquet dataset also a folder of traces or a rank pattern.
        input: PathBuf,
        /// Where to write; a name ending in `.gz` is gzip-compressed. A Parquet dataset is a
        /// new folder.
        output: PathBuf,
        /// The format to write; by default chosen from the output's name (`.pickle`/`.pkl`:
        /// pytorch, `.csv`: rmm-csv, `.json`: perfetto, `.jsonl` or none: jsonl, `.parquet`:
        /// parquet; another extension is an error).
        #[arg(long, value_enum)]
        to: Option<OutputFormat>,
    },
    /// The web viewer: timeline (15,000 bands by default, out-of-memory events marked),
    /// curves, segments over time and at any event, the event history, leaks and sites of a
    /// trace in the browser, or several traces side by side (two runs, or one file per rank of
    /// a multi-GPU job), served on 127.0.0.1 only; runs until interrupted.
    Serve(ServeArgs),
    /// Run the trace's allocation stream through blockpool's allocator on a simulated device,
    /// from the trace's first state, and set what it did beside what the trace's allocator did.
    Replay(ReplayArgs),
    /// Which allocator settings would have served the trace best: its allocation stream
    /// replayed (as `replay` does) under the recorded settings and under each of
    /// `expandable_segments`, `max_split_size_mb` (64 to 512), `roundup_power2_divisions` (2,
    /// 4, 8), a combination, and where the device's memory is known
    /// `garbage_collection_threshold` (0.6, 0.8), within the recorded device's memory, ranked
    /// by out-of-memory errors, peak reserved memory and segment allocations; prints the
    /// `PYTORCH_CUDA_ALLOC_CONF` line to use and how closely the replay under the recorded
    /// settings reproduced the recorded peak.
    #[command(after_help = TUNE_HELP)]
    Tune(TuneArgs),
    /// Why a device ran out of memory: at its first out-of-memory event (or the reserved peak
    /// when it has none), its reserved memory split so the parts add up (live allocations by
    /// category and site, rounding, blocks waiting on record_stream, free blocks by why they
    /// could not serve the request), the device's free memory, fragmentation, the failing
    /// request and its stack.
    #[command(visible_alias = "oom")]
    Explain(ExplainArgs),
    /// Plan activation checkpointing for a chain of stages from its per-stage costs (a JSON
    /// chain file, its format in `memtrace plan --help`): the activations the plan keeps, its forward calls, predicted
    /// peak memory and time, set against keeping every activation (store-all).
    #[command(after_help = PLAN_HELP)]
    Plan(PlanArgs),
    /// Whether CUDA is usable here: the driver library and version, each GPU's name, compute
    /// capability and memory, and if CUDA is unusable, why and what to do. Exits 0 either way:
    /// it is a report.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The arguments of `memtrace serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The trace file; several files (at most 64), a folder (its files ending in .pickle,
    /// .pkl, .jsonl or .csv, each optionally .gz) or a rank pattern (`run-{rank}.pickle`: every
    /// file of that folder with digits in place of `{rank}`) show the files side by side: each
    /// one's peaks, sites at the peak and timeline on one scale, the imbalance between them,
    /// and for two files the sites that changed. Files whose names differ only in the number
    /// after `rank` (or from a pattern) are labelled by rank, others by name.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The port (0: any free one).
    #[arg(long, default_value_t = 8700)]
    pub port: u16,
    /// Open the page in the browser (the viewer starts even when none can be opened).
    #[arg(long)]
    pub open: bool,
    /// Most connections served at once, each on a thread of its own. One more closes the
    /// connection that has waited longest for a request; only when every one is being
    /// answered is it answered 503.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = parse_connections)]
    pub max_connections: usize,
    /// Seconds a connection is kept between requests (decimals allowed: 0.5).
    #[arg(long, value_name = "SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub idle_timeout: Duration,
    /// Seconds a new connection may take to send its request, and any request to arrive
    /// whole once it has begun (decimals allowed).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds)]
    pub request_timeout: Duration,
}

/// `--at EVENT` or `--peak`: a point of the trace.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct AtOrPeak {
    /// The state after event EVENT, by its number: its index in the device's list in the
    /// file (PyTorch's `device_traces[device]`, 0-based); `start` for the state before event 0.
    #[arg(long, value_name = "EVENT", value_parser = EventPoint::parse)]
    pub at: Option<EventPoint>,
    /// Where allocated memory peaks.
    #[arg(long)]
    pub peak: bool,
}

/// The formats `convert` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// blockpool's JSON Lines trace.
    Jsonl,
    /// A PyTorch memory snapshot pickle (`torch.cuda.memory._dump_snapshot`).
    Pytorch,
    /// Perfetto / Chrome trace-event JSON.
    Perfetto,
    /// RMM's CSV allocation log.
    RmmCsv,
    /// A Parquet dataset: a folder of tables partitioned by rank, for SQL engines.
    Parquet,
}

/// Prints a clap error and gives the exit status: help and version go to stdout with 0, every
/// usage error is one line on stderr with 2.
pub fn usage_exit(error: clap::Error) -> ExitCode {
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            if error.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // clap's message may continue on indented lines (the missing arguments) before a
            // blank line and the usage; keep the message, on one line.
            let rendered = error.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            let first = match message.join(" ") {
                joined if joined.is_empty() => "invalid usage".to_string(),
                joined => joined.trim_start_matches("error: ").to_string(),
            };
            eprintln!("memtrace: {first} (see memtrace --help)");
            ExitCode::from(2)
        }
    }
}
