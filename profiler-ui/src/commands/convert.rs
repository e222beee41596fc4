//! `memtrace convert IN OUT [--to FORMAT]`: reads a trace in any format memtrace reads and
//! writes it in another, or writes a trace, a folder of traces or a rank series as a Parquet
//! dataset ([`crate::export`]).

use crate::cli::OutputFormat as CliFormat;
use crate::export::{write_dataset, Input};
use crate::format::counted;
use crate::load::load_trace;
use crate::output::Output;
use crate::serve::files::{is_pattern, resolve_at_most};
use anyhow::Context as _;
use blockpool::trace::file::{save_trace, OutputFormat};
use std::path::Path;

/// Most files one Parquet dataset is written from.
pub const MAX_DATASET_FILES: usize = 100_000;

/// Runs `memtrace convert`.
pub fn run(
    input: &Path,
    output: &Path,
    to: Option<CliFormat>,
    out: &mut Output,
) -> anyhow::Result<()> {
    let format = match to {
        Some(CliFormat::Parquet) => return dataset(input, output, out),
        None if is_parquet_name(output) => return dataset(input, output, out),
        Some(CliFormat::Jsonl) => OutputFormat::Jsonl,
        Some(CliFormat::Pytorch) => OutputFormat::PytorchPickle,
        Some(CliFormat::Perfetto) => OutputFormat::Perfetto,
        Some(CliFormat::RmmCsv) => OutputFormat::RmmCsv,
        None => OutputFormat::from_path(output).with_context(|| {
            format!(
                "{}: memtrace writes no format with this extension; name the output with one \
                 of {}, or .parquet for a Parquet dataset, or choose the format with --to",
                output.display(),
                OutputFormat::EXTENSIONS
            )
        })?,
    };
    if input.is_dir() || is_pattern(input) {
        anyhow::bail!(
            "{}: a folder or a rank pattern converts only to a Parquet dataset (name the output \
             OUT.parquet, or give --to parquet)",
            input.display()
        );
    }
    if same_file(input, output) {
        anyhow::bail!(
            "{} would be overwritten while it is read; choose another output",
            output.display()
        );
    }
    let trace = load_trace(input).context("cannot read the trace")?;
    save_trace(&trace.snapshot, output, format).context("cannot write the converted trace")?;
    out.write(&format!(
        "wrote {} ({}): {}, {}\n",
        output.display(),
        format.name(),
        counted(trace.snapshot.events.len() as u64, "event"),
        counted(trace.snapshot.segments.len() as u64, "segment"),
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

/// Whether `path` is named as a Parquet dataset: `.parquet`, any case.
fn is_parquet_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// Writes the dataset of `input` (a trace, a folder of traces or a rank pattern) to `output`.
fn dataset(input: &Path, output: &Path, out: &mut Output) -> anyhow::Result<()> {
    let entries = resolve_at_most(
        &[input.to_owned()],
        MAX_DATASET_FILES,
        &format!(
            "memtrace convert writes at most {MAX_DATASET_FILES} files into one dataset; \
             convert the folder in parts"
        ),
    )?;
    // A rank series keeps its ranks; other files are numbered in name order.
    let inputs: Vec<Input> = (0u32..)
        .zip(&entries)
        .map(|(index, entry)| Input {
            path: entry.path.clone(),
            rank: entry.rank.unwrap_or(index),
        })
        .collect();
    let written = write_dataset(&inputs, output)?;
    let events: usize = written.iter().map(|w| w.events).sum();
    out.write(&format!(
        "wrote {} (Parquet dataset): {}, {}\n",
        output.display(),
        counted(written.len() as u64, "rank"),
        counted(events as u64, "event"),
    ))?;
    for (name, _) in written.first().map_or(&[][..], |w| &w.rows[..]) {
        let rows: usize = written
            .iter()
            .flat_map(|w| w.rows.iter().filter(|(n, _)| n == name))
            .map(|(_, rows)| rows)
            .sum();
        out.write(&format!("  {name}: {}\n", counted(rows as u64, "row")))?;
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
