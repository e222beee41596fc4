//! `memtrace diff A B [--device N | --device-a N --device-b M] [--all-frames] [--fail-if RULE]...
//! [--json | --markdown] [--limit N]`: per allocation site, the live bytes at the allocated peak
//! and at the end of each trace (each on its own device if asked: one rank against another),
//! and the differences, largest change first, beside the allocated and reserved peaks. The
//! analysis is [`crate::analysis::diff`], the rules [`crate::analysis::gate`]; this prints the
//! report (`text.rs` for people, `markdown.rs` for a pull-request comment, or JSON), then each
//! failed rule on standard error, and says whether the gate failed.
//!
//! When a trace's compared device did not run out of memory and another of its devices did,
//! standard error says so, one line per trace (JSON: `notes`).
//!
//! `--json` prints the [`DiffReport`], and with rules a `gate` object: `passed` and `rules`, one
//! [`Verdict`](crate::analysis::gate::Verdict) per rule.

mod markdown;
mod text;

use super::dispatch::Status;
use crate::analysis::diff::{diff, DiffReport};
use crate::analysis::frames::FrameView;
use crate::analysis::gate::{judge, GateReport, Rule};
use crate::load::load_trace;
use crate::output::{is_broken_pipe, Output};
use anyhow::Context as _;
use serde::Serialize;
use std::io::Write as _;
use std::path::Path;

/// The most changed sites the Markdown table lists unless `--limit` says otherwise: a pull
/// request comment stays readable.
pub const MARKDOWN_SITES: usize = 30;

/// How the report is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Columns for people.
    Text,
    /// The report as data (`--json`).
    Json,
    /// GitHub-flavoured Markdown (`--markdown`).
    Markdown,
}

/// What `memtrace diff` compares and how it reports.
#[derive(Debug)]
pub struct DiffOptions {
    /// The device of each trace (each, when `None`, the trace's default).
    pub devices: (Option<u32>, Option<u32>),
    /// How sites are named.
    pub view: FrameView,
    /// The `--fail-if` rules, in order.
    pub rules: Vec<Rule>,
    /// How the report is printed.
    pub format: Format,
    /// The most changed sites listed (`None`: every one in text, [`MARKDOWN_SITES`] in
    /// Markdown; JSON lists every site).
    pub limit: Option<usize>,
}

/// What `--json` prints: the report, and with rules their verdicts.
#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a DiffReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'a GateReport>,
}

/// Runs `memtrace diff`: [`Status::GateFailed`] when a rule failed.
pub fn run(a: &Path, b: &Path, options: &DiffOptions, out: &mut Output) -> anyhow::Result<Status> {
    let first = load_trace(a).context("cannot read the first trace")?;
    let second = load_trace(b).context("cannot read the second trace")?;
    let report = diff(
        &first.snapshot,
        &second.snapshot,
        options.devices,
        options.view,
    )?;
    // Standard error, as the one-device commands say it: the report on standard output stays
    // the comparison (JSON has the notes too).
    for note in &report.notes {
        eprintln!("memtrace: {note}");
    }
    let gate = (!options.rules.is_empty()).then(|| judge(&options.rules, &report));
    let printed = match options.format {
        Format::Json => out.json(&JsonReport {
            report: &report,
            gate: gate.as_ref(),
        }),
        Format::Text => print(out, &text::render(&report, options.limit)),
        Format::Markdown => {
            let files = (a.to_string_lossy(), b.to_string_lossy());
            let limit = options.limit.unwrap_or(MARKDOWN_SITES);
            let page = markdown::render((&files.0, &files.1), &report, gate.as_ref(), limit);
            print(out, &page)
        }
    };
    match printed {
        // A reader that went away does not decide the gate: its verdict still sets the status.
        Err(e) if is_broken_pipe(&e) => {}
        printed => printed?,
    }
    let Some(gate) = gate else {
        return Ok(Status::Done);
    };
    let mut stderr = std::io::stderr().lock();
    for verdict in gate.rules.iter().filter(|v| !v.passed) {
        // One line each, whatever a site's name holds.
        let line = verdict.describe(|site| site.replace(['\n', '\r'], " "));
        let _ = writeln!(stderr, "memtrace: --fail-if {}: {line}", verdict.rule);
    }
    Ok(if gate.passed {
        Status::Done
    } else {
        Status::GateFailed
    })
}

/// Writes `text` and flushes it.
fn print(out: &mut Output, text: &str) -> anyhow::Result<()> {
    out.write(text)?;
    out.flush()?;
    Ok(())
}
