//! `memtrace plan CHAIN.json (--budget BYTES | --slots N | --planner NAME) [--segments N]
//! [--schedule] [--json]`: activation checkpointing planned from a chain's measured per-stage
//! costs, by `blockpool::checkpoint`'s planners and memory model, set against store-all.
//!
//! `chain_file.rs` reads the chain file (its format is in `memtrace plan --help`,
//! [`PLAN_HELP`](crate::cli::PLAN_HELP)); `text.rs` writes the report for people. Here the
//! options become a planner, the work a plan may take is bounded before it is made, and the
//! report (as JSON, [`PlanReport`]) is built.
//!
//! `--json` prints one [`PlanReport`]: `file`, `stages`, `time_unit`, `input_bytes` (rounded);
//! `planner` (`name`, `budget_bytes`, `slots`, `segments`); `plan` and `store_all` (each:
//! `kept`, the activations the first sweep keeps; `forward_calls`, `forward_calls_per_stage`,
//! `peak_bytes`, `peak_operation` and its index `peak_op`, `total_time`, `max_snapshots`,
//! `operations`); `ratios` (plan over store-all for `forward_calls`, `peak_bytes`,
//! `total_time`; null where store-all's is 0); `budget` (with `--budget`: `bytes`, `fits`,
//! `spare_bytes`, `over_bytes`); `schedule` (with `--schedule`: the operations as `F3`, `S3`,
//! `D3`, `B3`).

mod chain_file;
mod text;

use crate::cli::{PlanArgs, PlannerName};
use crate::format::{count, counted, format_size};
use crate::output::Output;
use blockpool::checkpoint::{
    Budget, ChainCosts, CheckpointError, Op, Plan, Planner, Revolve, Sqrt, StoreAll, Uniform,
};
use blockpool::AllocatorConfig;
use chain_file::ChainFile;
use serde::Serialize;

/// Most forward calls a plan may make: its schedule and per-operation memory are kept whole,
/// about 100 bytes per forward call.
pub const MAX_FORWARD_CALLS: u64 = 2_000_000;

/// The report, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// The chain file, as given.
    pub file: String,
    /// Stages in the chain.
    pub stages: usize,
    /// The file's `time_unit`, if it gave one.
    pub time_unit: Option<String>,
    /// Bytes of the chain's input, rounded as the allocator rounds.
    pub input_bytes: usize,
    /// The planner and its settings.
    pub planner: PlannerSettings,
    /// The plan.
    pub plan: PlanFigures,
    /// The plan that keeps every activation, for comparison.
    pub store_all: PlanFigures,
    /// The plan's figures over store-all's.
    pub ratios: Ratios,
    /// The plan against `--budget`, when one was given.
    pub budget: Option<BudgetCheck>,
    /// The plan's operations, with `--schedule`.
    pub schedule: Option<Vec<String>>,
}

/// Which planner ran, with what.
#[derive(Debug, Serialize)]
pub struct PlannerSettings {
    /// `budget`, `revolve`, `store-all`, `uniform` or `sqrt`.
    pub name: &'static str,
    /// `--budget`, in bytes.
    pub budget_bytes: Option<usize>,
    /// `--slots`.
    pub slots: Option<usize>,
    /// `--segments` (uniform), or the segment count sqrt chose.
    pub segments: Option<usize>,
}

/// What the memory model says of one plan.
#[derive(Debug, Serialize)]
pub struct PlanFigures {
    /// The activations the first forward sweep keeps (`0` is the chain's input).
    pub kept: Vec<usize>,
    /// Stage forward calls outside backward steps.
    pub forward_calls: u64,
    /// The same, per stage.
    pub forward_calls_per_stage: Vec<u64>,
    /// The most bytes alive at once.
    pub peak_bytes: usize,
    /// Index in the schedule of the first operation reaching the peak.
    pub peak_op: usize,
    /// That operation (`F3`, `S3`, `D3`, `B3`).
    pub peak_operation: String,
    /// Total time in the file's unit.
    pub total_time: u64,
    /// The most snapshots alive at once, the input's included.
    pub max_snapshots: usize,
    /// Operations in the schedule.
    pub operations: usize,
}

impl PlanFigures {
    fn of(plan: &Plan) -> PlanFigures {
        PlanFigures {
            kept: plan.kept().to_vec(),
            forward_calls: plan.forward_calls(),
            forward_calls_per_stage: plan.forward_calls_per_stage().to_vec(),
            peak_bytes: plan.peak_bytes(),
            peak_op: plan.peak_op(),
            peak_operation: plan
                .schedule()
                .get(plan.peak_op())
                .map_or_else(String::new, Op::to_string),
            total_time: plan.total_time(),
            max_snapshots: plan.max_snapshots(),
            operations: plan.schedule().len(),
        }
    }
}

/// The plan's figures over store-all's; `None` where store-all's is 0.
#[derive(Debug, Serialize)]
pub struct Ratios {
    /// Forward calls.
    pub forward_calls: Option<f64>,
    /// Peak bytes.
    pub peak_bytes: Option<f64>,
    /// Total time.
    pub total_time: Option<f64>,
}

/// The plan's peak against `--budget`.
#[derive(Debug, Serialize)]
pub struct BudgetCheck {
    /// The budget, in bytes.
    pub bytes: usize,
    /// Whether the plan's peak is at most the budget.
    pub fits: bool,
    /// Budget bytes the plan leaves unused (0 when it does not fit).
    pub spare_bytes: usize,
    /// Bytes the plan needs beyond the budget (0 when it fits).
    pub over_bytes: usize,
}

/// Runs `memtrace plan`.
pub fn run(args: &PlanArgs, out: &mut Output) -> anyhow::Result<()> {
    // Refuse bad options before reading what may be a large file.
    let choice = choose(args)?;
    let file = ChainFile::read(&args.chain)?;
    let shown = args.chain.display().to_string();
    let chain = ChainCosts::new(
        file.input_bytes.0,
        file.costs(),
        &AllocatorConfig::default(),
    )
    .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let planner = planner(&choice, args, &chain, &shown)?;
    let plan = planner.plan(&chain).map_err(|e| match e {
        CheckpointError::BudgetTooSmall { budget, minimum } => anyhow::anyhow!(
            "--budget {} ({} bytes) is below what any plan of {shown} needs: give at least {} \
             bytes ({})",
            format_size(budget as u64),
            count(budget as u64),
            count(minimum as u64),
            format_size(minimum as u64),
        ),
        CheckpointError::TooManyStages { stages, max } => anyhow::anyhow!(
            "{shown}: {} stages; the budget planner plans at most {}: use --slots N \
             (revolve) or --planner uniform --segments N",
            count(stages as u64),
            count(max as u64)
        ),
        other => anyhow::anyhow!("{shown}: {other}"),
    })?;
    let store_all = StoreAll.plan(&chain)?;
    let report = report(&file, &chain, &choice, args, &plan, &store_all);
    if args.json {
        return out.json(&report);
    }
    out.write(&text::render(&report, &file))?;
    out.flush()?;
    Ok(())
}

/// What the options ask for.
struct Choice {
    /// The planner.
    name: PlannerName,
    /// `--budget`, in bytes.
    budget_bytes: Option<usize>,
}

/// The planner the options name, or why they do not name one.
fn choose(args: &PlanArgs) -> anyhow::Result<Choice> {
    let name = match (args.planner, args.budget, args.slots) {
        (Some(name), _, _) => name,
        (None, Some(_), Some(_)) => anyhow::bail!(
            "--budget and --slots select different planners (budget, revolve); give one, or \
             name the planner with --planner (a budget then checks its plan)"
        ),
        (None, Some(_), None) => PlannerName::Budget,
        (None, None, Some(_)) => PlannerName::Revolve,
        (None, None, None) => anyhow::bail!(
            "give --budget BYTES (the budget planner), --slots N (revolve) or --planner NAME \
             (see memtrace plan --help)"
        ),
    };
    let planner = name.as_str();
    if args.slots.is_some() && name != PlannerName::Revolve {
        anyhow::bail!(
            "--slots is for the revolve planner, not {planner}; drop it or give --planner revolve"
        );
    }
    if args.segments.is_some() && name != PlannerName::Uniform {
        anyhow::bail!("--segments is for the uniform planner, not {planner}; drop it or give --planner uniform");
    }
    match name {
        PlannerName::Budget if args.budget.is_none() => {
            anyhow::bail!("the budget planner needs --budget BYTES (e.g. --budget 78.5G)")
        }
        PlannerName::Revolve if args.slots.is_none() => {
            anyhow::bail!("the revolve planner needs --slots N, the snapshots it may hold")
        }
        PlannerName::Uniform if args.segments.is_none() => {
            anyhow::bail!("the uniform planner needs --segments N")
        }
        _ => {}
    }
    let budget_bytes = args
        .budget
        .map(|bytes| {
            usize::try_from(bytes).map_err(|_| {
                anyhow::anyhow!("--budget {bytes} is more bytes than this machine counts")
            })
        })
        .transpose()?;
    Ok(Choice { name, budget_bytes })
}

/// The planner for `chain`, once the work its plan takes is known to be bounded.
fn planner(
    choice: &Choice,
    args: &PlanArgs,
    chain: &ChainCosts,
    shown: &str,
) -> anyhow::Result<Box<dyn Planner>> {
    let n = chain.len();
    Ok(match choice.name {
        // Longer than `Budget` plans: its typed error, worded for the command line in `run`.
        PlannerName::Budget => Box::new(Budget {
            bytes: choice.budget_bytes.unwrap_or(0),
        }),
        PlannerName::Revolve => {
            let slots = args.slots.unwrap_or(1);
            let fits = |slots: usize| {
                Revolve::forward_calls(n, slots).is_some_and(|calls| calls <= MAX_FORWARD_CALLS)
            };
            if !fits(slots) {
                let needed = Revolve::forward_calls(n, slots)
                    .map_or_else(|| "more than 2^64".to_owned(), count);
                // Forward calls fall as slots grow, and n slots need n - 1 calls.
                let (mut low, mut high) = (slots, n.max(slots));
                while low < high {
                    let mid = low + (high - low) / 2;
                    if fits(mid) {
                        high = mid;
                    } else {
                        low = mid + 1;
                    }
                }
                anyhow::bail!(
                    "{shown}: revolve with {} needs {needed} forward calls for {}, more than \
                     the {} a plan may make here; give --slots {low} or more",
                    counted(slots as u64, "slot"),
                    counted(n as u64, "stage"),
                    count(MAX_FORWARD_CALLS)
                );
            }
            Box::new(Revolve { slots })
        }
        PlannerName::StoreAll => Box::new(StoreAll),
        PlannerName::Uniform => Box::new(Uniform::pytorch(args.segments.unwrap_or(1))),
        PlannerName::Sqrt => Box::new(Sqrt),
    })
}

/// The report of `plan` and `store_all` for `chain`.
fn report(
    file: &ChainFile,
    chain: &ChainCosts,
    choice: &Choice,
    args: &PlanArgs,
    plan: &Plan,
    store_all: &Plan,
) -> PlanReport {
    let ratio = |a: f64, b: f64| (b != 0.0).then(|| a / b);
    let budget = choice.budget_bytes.map(|bytes| BudgetCheck {
        bytes,
        fits: plan.peak_bytes() <= bytes,
        spare_bytes: bytes.saturating_sub(plan.peak_bytes()),
        over_bytes: plan.peak_bytes().saturating_sub(bytes),
    });
    let segments = match choice.name {
        PlannerName::Uniform => args.segments,
        PlannerName::Sqrt => Some(Sqrt::segments(chain.len())),
        _ => None,
    };
    PlanReport {
        file: args.chain.display().to_string(),
        stages: chain.len(),
        time_unit: file.time_unit.clone(),
        input_bytes: chain.input_bytes(),
        planner: PlannerSettings {
            name: choice.name.as_str(),
            budget_bytes: choice.budget_bytes,
            slots: args.slots,
            segments,
        },
        ratios: Ratios {
            forward_calls: ratio(
                plan.forward_calls() as f64,
                store_all.forward_calls() as f64,
            ),
            peak_bytes: ratio(plan.peak_bytes() as f64, store_all.peak_bytes() as f64),
            total_time: ratio(plan.total_time() as f64, store_all.total_time() as f64),
        },
        plan: PlanFigures::of(plan),
        store_all: PlanFigures::of(store_all),
        budget,
        schedule: args
            .schedule
            .then(|| plan.schedule().iter().map(Op::to_string).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_states_the_limits_the_command_enforces() {
        let help = crate::cli::PLAN_HELP;
        for limit in [
            chain_file::MAX_STAGES as u64,
            Budget::MAX_STAGES as u64,
            MAX_FORWARD_CALLS,
        ] {
            assert!(
                help.contains(&limit.to_string()),
                "{limit} missing from the help"
            );
        }
        assert!(help.contains(&format!("{} MiB", chain_file::MAX_FILE_BYTES >> 20)));
    }
}
