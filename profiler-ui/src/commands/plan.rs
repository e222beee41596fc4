//! `memtrace plan CHAIN.json (--budget BYTES | --slots N | --planner NAME) [--segments N]
//! [--schedule] [--json]`: activation checkpointing planned from a chain's measured per-stage
//! costs, by `blockpool::checkpoint`'s planners and memory model, set against store-all.
//!
//! `chain_file.rs` reads the chain file (its format is in `memtrace plan --help`,
//! [`PLAN_HELP`](crate::cli::PLAN_HELP)). Here the options become a planner, the work a plan
//! may take is bounded before it is made, and the report is printed.
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

use crate::cli::{PlanArgs, PlannerName};
use crate::format::{count, format_size};
use crate::output::Output;
use blockpool::checkpoint::{
    Budget, ChainCosts, CheckpointError, Op, Plan, Planner, Revolve, Sqrt, StoreAll, Uniform,
};
use blockpool::AllocatorConfig;
use chain_file::ChainFile;
use serde::Serialize;
use std::fmt::Write as _;

/// Most stages the budget planner is given. Its table is capped at 2^25 cells, so its memory
/// stays near 270 MB, but its time grows with the stages: on the 2-core build machine
/// (2026-12-02) a heterogeneous chain took 4 s at 100 stages and 37 s at 500.
pub const MAX_BUDGET_STAGES: usize = 1_000;

/// Most forward calls a plan may make: its schedule and per-operation memory are kept whole,
/// about 100 bytes per forward call.
pub const MAX_FORWARD_CALLS: u64 = 2_000_000;

/// Most kept stage names the text report lists.
const MAX_NAMES_SHOWN: usize = 12;

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
        other => anyhow::anyhow!("{shown}: {other}"),
    })?;
    let store_all = StoreAll.plan(&chain)?;
    let report = report(&file, &chain, &choice, args, &plan, &store_all);
    if args.json {
        return out.json(&report);
    }
    out.write(&render(&report, &file))?;
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
        PlannerName::Budget => {
            if n > MAX_BUDGET_STAGES {
                anyhow::bail!(
                    "{shown}: {} stages; the budget planner plans at most {}: use --slots N \
                     (revolve) or --planner uniform --segments N",
                    count(n as u64),
                    count(MAX_BUDGET_STAGES as u64)
                );
            }
            Box::new(Budget {
                bytes: choice.budget_bytes.unwrap_or(0),
            })
        }
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
                    "{shown}: revolve with {slots} slot{} needs {needed} forward calls for {} \
                     stages, more than the {} a plan may make here; give --slots {low} or more",
                    if slots == 1 { "" } else { "s" },
                    count(n as u64),
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

/// The report as text.
fn render(report: &PlanReport, file: &ChainFile) -> String {
    let mut text = String::new();
    let unit = report.time_unit.as_deref().map(clean);
    let _ = writeln!(
        text,
        "chain    {}: {} stage{}, input {}{}",
        report.file,
        count(report.stages as u64),
        if report.stages == 1 { "" } else { "s" },
        format_size(report.input_bytes as u64),
        unit.as_ref()
            .map_or_else(String::new, |u| format!(", times in {u}")),
    );
    let settings = &report.planner;
    let mut planner = settings.name.to_owned();
    if let Some(slots) = settings.slots {
        let _ = write!(
            planner,
            ", {slots} slot{}",
            if slots == 1 { "" } else { "s" }
        );
    }
    if let Some(segments) = settings.segments {
        let _ = write!(
            planner,
            ", {segments} segment{}",
            if segments == 1 { "" } else { "s" }
        );
    }
    let _ = writeln!(text, "planner  {planner}");
    let kept = &report.plan.kept;
    let _ = writeln!(
        text,
        "kept     {} ({} of {} stage inputs)",
        ranges(kept),
        count(kept.len() as u64),
        count(report.stages as u64)
    );
    if let Some(names) = file.names() {
        let mut listed: Vec<String> = kept
            .iter()
            .take(MAX_NAMES_SHOWN)
            .map(|&i| {
                names
                    .get(i)
                    .copied()
                    .flatten()
                    .map_or_else(|| format!("stage {i}"), clean)
            })
            .collect();
        if kept.len() > MAX_NAMES_SHOWN {
            listed.push(format!(
                "and {} more",
                count((kept.len() - MAX_NAMES_SHOWN) as u64)
            ));
        }
        let _ = writeln!(text, "         inputs of {}", listed.join(", "));
    }
    text.push('\n');
    let (plan, all, ratios) = (&report.plan, &report.store_all, &report.ratios);
    let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), show_ratio);
    let time_label = unit.map_or_else(|| "time".to_owned(), |u| format!("time ({u})"));
    let rows = [
        (
            "",
            settings.name.to_owned(),
            "store-all".to_owned(),
            "ratio".to_owned(),
        ),
        (
            "forward calls",
            count(plan.forward_calls),
            count(all.forward_calls),
            ratio(ratios.forward_calls),
        ),
        (
            "peak",
            format_size(plan.peak_bytes as u64),
            format_size(all.peak_bytes as u64),
            ratio(ratios.peak_bytes),
        ),
        (
            "peak bytes",
            count(plan.peak_bytes as u64),
            count(all.peak_bytes as u64),
            String::new(),
        ),
        (
            &time_label,
            count(plan.total_time),
            count(all.total_time),
            ratio(ratios.total_time),
        ),
        (
            "snapshots",
            count(plan.max_snapshots as u64),
            count(all.max_snapshots as u64),
            String::new(),
        ),
    ];
    let width = |pick: fn(&(&str, String, String, String)) -> usize| {
        rows.iter().map(pick).max().unwrap_or(0)
    };
    let label_width = width(|r| r.0.chars().count());
    let plan_width = width(|r| r.1.len()).max(8);
    let all_width = width(|r| r.2.len());
    for (label, a, b, r) in &rows {
        let line = format!("{label:<label_width$}  {a:>plan_width$}  {b:>all_width$}  {r:>5}");
        let _ = writeln!(text, "{}", line.trim_end());
    }
    text.push('\n');
    let _ = writeln!(
        text,
        "peak at operation {} of {}: {}",
        count(plan.peak_op as u64),
        count(plan.operations as u64),
        describe(&plan.peak_operation, report.stages)
    );
    if let Some(budget) = &report.budget {
        let verdict = if budget.fits {
            format!(
                "the plan fits, {} to spare",
                format_size(budget.spare_bytes as u64)
            )
        } else {
            format!(
                "the plan needs {} ({} bytes) more",
                format_size(budget.over_bytes as u64),
                count(budget.over_bytes as u64)
            )
        };
        let _ = writeln!(
            text,
            "budget   {} ({} bytes): {verdict}",
            format_size(budget.bytes as u64),
            count(budget.bytes as u64)
        );
    }
    if let Some(schedule) = &report.schedule {
        text.push_str("\nschedule (F forward, S store, D drop, B backward step)\n");
        for line in schedule.chunks(16) {
            let _ = writeln!(text, "  {}", line.join(" "));
        }
    }
    text
}

/// A ratio with two decimals, or two significant digits below 0.01.
fn show_ratio(ratio: f64) -> String {
    if ratio == 0.0 || ratio >= 0.01 {
        format!("{ratio:.2}")
    } else {
        format!("{ratio:.1e}")
    }
}

/// An operation in words: `B3` as `B3, stage 3's backward step`.
fn describe(operation: &str, stages: usize) -> String {
    let (kind, index) = operation.split_at(operation.len().min(1));
    let words = match kind {
        "F" => format!("stage {index}'s forward"),
        "S" => format!("store of x_{index}"),
        "D" => format!("drop of x_{index}"),
        "B" if index.parse::<usize>().ok() == stages.checked_sub(1) => {
            format!("stage {index}'s backward step, with its forward and the loss")
        }
        "B" => format!("stage {index}'s backward step"),
        _ => return operation.to_owned(),
    };
    format!("{operation}, {words}")
}

/// Activation indices as `x_0 x_3 x_5..x_9`: runs of three or more as ranges.
fn ranges(kept: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < kept.len() {
        let mut j = i;
        while j + 1 < kept.len() && kept[j + 1] == kept[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("x_{}..x_{}", kept[i], kept[j]));
        } else {
            parts.extend(kept[i..=j].iter().map(|k| format!("x_{k}")));
        }
        i = j + 1;
    }
    parts.join(" ")
}

/// A label from the file, with control characters escaped so it stays on its line.
fn clean(label: &str) -> String {
    label
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_activations_read_as_ranges() {
        assert_eq!(ranges(&[0]), "x_0");
        assert_eq!(ranges(&[0, 1, 3, 5, 6, 7, 8]), "x_0 x_1 x_3 x_5..x_8");
    }

    #[test]
    fn operations_read_in_words() {
        assert_eq!(
            describe("B3", 4),
            "B3, stage 3's backward step, with its forward and the loss"
        );
        assert_eq!(describe("B2", 4), "B2, stage 2's backward step");
        assert_eq!(describe("F0", 4), "F0, stage 0's forward");
        assert_eq!(describe("", 4), "");
    }

    #[test]
    fn ratios_keep_two_significant_digits() {
        assert_eq!(show_ratio(1.0), "1.00");
        assert_eq!(show_ratio(0.375), "0.38");
        assert_eq!(show_ratio(0.0), "0.00");
        assert_eq!(show_ratio(0.00008), "8.0e-5");
    }

    #[test]
    fn labels_stay_on_one_line() {
        assert_eq!(clean("us\n\u{1b}[31m"), "us\\n\\u{1b}[31m");
    }

    #[test]
    fn the_help_states_the_limits_the_command_enforces() {
        let help = crate::cli::PLAN_HELP;
        for limit in [
            chain_file::MAX_STAGES as u64,
            MAX_BUDGET_STAGES as u64,
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
