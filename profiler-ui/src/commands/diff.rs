//! `memtrace diff A B [--device N | --device-a N --device-b M] [--all-frames] [--fail-if RULE]...
//! [--json]`: per allocation site, the live bytes at the allocated peak
//! and at the end of each trace (each on its own device if asked: one rank against another),
//! and the differences, largest change first, beside the allocated and reserved peaks. The
//! analysis is [`crate::analysis::diff`], the rules [`crate::analysis::gate`]; this prints the
//! report (`text.rs` for people, or JSON), then each
//! failed rule on standard error, and says whether the gate failed.
//!
//! `--json` prints the [`DiffReport`], and with rules a `gate` object: `passed` and `rules`, one
//! [`Verdict`](crate::analysis::gate::Verdict) per rule.

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

/// What `memtrace diff` compares and how it reports.
#[derive(Debug)]
pub struct DiffOptions {
    /// The device of each trace (each, when `None`, the trace's default).
    pub devices: (Option<u32>, Option<u32>),
    /// How sites are named.
    pub view: FrameView,
    /// The `--fail-if` rules, in order.
    pub rules: Vec<Rule>,
    /// Print the report as JSON.
    pub json: bool,
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
    let gate = (!options.rules.is_empty()).then(|| judge(&options.rules, &report));
    let printed = if options.json {
        out.json(&JsonReport {
            report: &report,
            gate: gate.as_ref(),
        })
    } else {
        print(out, &text::render(&report))
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
