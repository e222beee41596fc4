//! `memtrace diff --markdown`: the report as GitHub-flavoured Markdown, for a CI job to post
//! on a pull request: a heading naming the two files, the gate's verdicts when rules were
//! given, the allocated and reserved peaks with their change, and a table of the sites that
//! changed, largest change first, the rest counted.
//!
//! Names (files, sites, rules) are code spans, so that nothing they hold (`<`, `*`, `$`,
//! `:100:`) renders as Markdown, HTML, math or an emoji; in table cells their `|` is escaped
//! as GFM tables read it even inside code.

use crate::analysis::diff::{percent_change, DiffReport};
use crate::analysis::gate::GateReport;
use crate::format::{counted, format_size, signed_size};
use std::fmt::Write as _;

/// The report as Markdown: `files` are A's and B's names as given, at most `limit` changed
/// sites are listed.
pub fn render(
    files: (&str, &str),
    report: &DiffReport,
    gate: Option<&GateReport>,
    limit: usize,
) -> String {
    let mut page = format!(
        "### memtrace diff: {} -> {}\n\n",
        code_span(files.0),
        code_span(files.1)
    );
    if report.device_a != report.device_b {
        let _ = writeln!(
            page,
            "Device {} of A against device {} of B.\n",
            report.device_a, report.device_b
        );
    }
    if let Some(gate) = gate {
        gate_list(&mut page, gate);
    }
    page.push_str("| | A | B | change |\n|---|---:|---:|---:|\n");
    for (what, a, b) in [
        ("allocated peak", report.peak_a, report.peak_b),
        (
            "reserved peak",
            report.peak_reserved_a,
            report.peak_reserved_b,
        ),
    ] {
        let _ = writeln!(
            page,
            "| {what} | {} | {} | {} |",
            format_size(a),
            format_size(b),
            change_with_percent(a, b)
        );
    }
    page.push('\n');
    site_table(&mut page, report, limit);
    page
}

/// `**Gate: failed** (1 of 2 rules)` and one line per rule.
fn gate_list(page: &mut String, gate: &GateReport) {
    let failed = gate.rules.iter().filter(|v| !v.passed).count();
    let rules = counted(gate.rules.len() as u64, "rule");
    let _ = if failed == 0 {
        writeln!(page, "**Gate: passed** ({rules})\n")
    } else {
        writeln!(page, "**Gate: failed** ({failed} of {rules})\n")
    };
    for verdict in &gate.rules {
        let judged = if verdict.passed {
            "passed"
        } else {
            "**failed**"
        };
        let _ = writeln!(
            page,
            "- {judged} {}: {}",
            code_span(&verdict.rule),
            verdict.describe(code_span)
        );
    }
    page.push('\n');
}

/// The changed sites, at most `limit`, and how many are not listed.
fn site_table(page: &mut String, report: &DiffReport, limit: usize) {
    let changed: Vec<_> = report
        .sites
        .iter()
        .filter(|d| d.peak_change() != 0 || d.end_change() != 0)
        .collect();
    let unchanged = report.sites.len() - changed.len();
    let shown = limit.min(changed.len());
    if shown > 0 {
        page.push_str("| site | peak A | peak B | change | end A | end B | change |\n");
        page.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        for d in &changed[..shown] {
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} | {} | {} | {} |",
                table_cell(&d.site),
                format_size(d.peak_a),
                format_size(d.peak_b),
                signed_size(d.peak_change()),
                format_size(d.end_a),
                format_size(d.end_b),
                signed_size(d.end_change())
            );
        }
        page.push('\n');
    }
    let mut counts = Vec::new();
    if changed.is_empty() {
        counts.push("No site changed".to_string());
    }
    let hidden = changed.len() - shown;
    if hidden > 0 {
        counts.push(format!(
            "{} not listed (`--limit`)",
            counted(hidden as u64, "more changed site")
        ));
    }
    if unchanged > 0 || changed.is_empty() {
        counts.push(format!("{} unchanged", counted(unchanged as u64, "site")));
    }
    let _ = writeln!(page, "{}.", counts.join("; "));
}

/// A change with its percentage of `a`: `+3.00 MiB (+50.00 %)`, `0`, or without a percentage
/// from 0 bytes.
fn change_with_percent(a: u64, b: u64) -> String {
    let change = signed_size(b as i128 - a as i128);
    match percent_change(a, b) {
        Some(percent) if a != b => format!("{change} ({percent:+.2} %)"),
        _ => change,
    }
}

/// `text` as a code span: shown as it is, on one line, fenced by more backticks than it holds
/// in a row (and spaced from them when it begins or ends with a backtick or a space).
fn code_span(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    let text = text.replace(['\n', '\r'], " ");
    let mut run = 0;
    let mut longest = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let edge = |c: char| c == '`' || c == ' ';
    let pad = if text.starts_with(edge) || text.ends_with(edge) {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// `text` as a code span in a table cell: every `|` escaped as `\|`, which GFM reads inside
/// code too. The table reads backslashes in pairs, so a `|` after an odd run of them gets one
/// more: the row stays whole, and the cell shows one extra backslash there.
fn table_cell(text: &str) -> String {
    let mut cell = String::new();
    let mut backslashes = 0;
    for c in code_span(text).chars() {
        if c == '|' {
            if backslashes % 2 == 1 {
                cell.push('\\');
            }
            cell.push('\\');
        }
        backslashes = if c == '\\' { backslashes + 1 } else { 0 };
        cell.push(c);
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_take_a_longer_fence_than_the_backticks_inside() {
        assert_eq!(code_span("model.py:42:forward"), "`model.py:42:forward`");
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("a``b`c"), "```a``b`c```");
        assert_eq!(code_span("`x"), "`` `x ``", "a leading backtick is spaced");
        assert_eq!(
            code_span(" x"),
            "`  x `",
            "a leading space survives the stripping"
        );
        assert_eq!(
            code_span("<a>*b*$c$"),
            "`<a>*b*$c$`",
            "nothing else is escaped"
        );
        assert_eq!(code_span("two\nlines"), "`two lines`");
        assert_eq!(code_span(""), "");
    }

    #[test]
    fn table_cells_escape_pipes_so_the_row_stays_whole() {
        assert_eq!(table_cell("a|b"), r"`a\|b`");
        assert_eq!(table_cell("||"), r"`\|\|`");
        assert_eq!(
            table_cell(r"a\|b"),
            r"`a\\\|b`",
            "after one backslash the pipe is escaped past the pair"
        );
        assert_eq!(table_cell(r"a\\|b"), r"`a\\\|b`");
    }

    #[test]
    fn changes_carry_a_percentage_of_a_where_there_is_one() {
        assert_eq!(
            change_with_percent(2 << 20, 3 << 20),
            "+1024.00 KiB (+50.00 %)"
        );
        assert_eq!(change_with_percent(4, 3), "-1 bytes (-25.00 %)");
        assert_eq!(change_with_percent(7, 7), "0");
        assert_eq!(change_with_percent(0, 512), "+512 bytes");
    }
}
