//! `memtrace convert IN OUT [--to FORMAT]`: reads a trace in any format memtrace reads and
//! writes it in another.

use crate::cli::OutputFormat as CliFormat;
use crate::format::count;
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::file::{save_trace, OutputFormat};
use std::path::Path;

/// Runs `memtrace convert`.
pub fn run(
    input: &Path,
    output: &Path,
    to: Option<CliFormat>,
    out: &mut Output,
) -> anyhow::Result<()> {
    let format = match to {
        Some(CliFormat::Jsonl) => OutputFormat::Jsonl,
        Some(CliFormat::Pytorch) => OutputFormat::PytorchPickle,
        Some(CliFormat::Perfetto) => OutputFormat::Perfetto,
        Some(CliFormat::RmmCsv) => OutputFormat::RmmCsv,
        None => OutputFormat::from_path(output).with_context(|| {
            format!(
                "{}: memtrace writes no format with this extension; name the output with one \
                 of {}, or choose the format with --to",
                output.display(),
                OutputFormat::EXTENSIONS
            )
        })?,
    };
    if same_file(input, output) {
        anyhow::bail!(
            "{} would be overwritten while it is read; choose another output",
            output.display()
        );
    }
    let trace = load_trace(input).context("cannot read the trace")?;
    save_trace(&trace.snapshot, output, format).context("cannot write the converted trace")?;
    out.write(&format!(
        "wrote {} ({}): {} events, {} segments\n",
        output.display(),
        format.name(),
        count(trace.snapshot.events.len() as u64),
        count(trace.snapshot.segments.len() as u64),
    ))?;
    let times = trace.snapshot.events.iter().map(|e| e.time_us);
    let untimed = !trace.snapshot.events.is_empty() && times.clone().min() == times.max();
    if untimed && matches!(format, OutputFormat::Perfetto | OutputFormat::RmmCsv) {
        out.write(&format!(
            "note: the trace records no times, so every {} sample is at one time; \
             `memtrace timeline` and the viewer draw it by event instead\n",
            format.name()
        ))?;
    }
    out.flush()?;
    Ok(())
}

/// Whether `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
