//! `memtrace plan`'s report as text: the chain and planner, the kept activations (by name
//! when the chain file names its stages), a table of the plan against store-all, where the plan
//! peaks, the budget check and, with `--schedule`, the operations.

use super::chain_file::ChainFile;
use super::PlanReport;
use crate::format::{count, counted, format_size};
use std::fmt::Write as _;

/// Most kept stage names the text report lists.
const MAX_NAMES_SHOWN: usize = 12;

/// The report as text.
pub fn render(report: &PlanReport, file: &ChainFile) -> String {
    let mut text = String::new();
    let unit = report.time_unit.as_deref().map(clean);
    let _ = writeln!(
        text,
        "chain    {}: {}, input {}{}",
        report.file,
        counted(report.stages as u64, "stage"),
        format_size(report.input_bytes as u64),
        unit.as_ref()
            .map_or_else(String::new, |u| format!(", times in {u}")),
    );
    let settings = &report.planner;
    let mut planner = settings.name.to_owned();
    if let Some(slots) = settings.slots {
        let _ = write!(planner, ", {}", counted(slots as u64, "slot"));
    }
    if let Some(segments) = settings.segments {
        let _ = write!(planner, ", {}", counted(segments as u64, "segment"));
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
}
