//! `memtrace`: look at GPU memory traces — blockpool's JSON Lines files, PyTorch's memory
//! snapshot pickles and RMM's CSV logs.
//!
//! Exit status: 0 on success (also when the reader of our output goes away early), 1 when a
//! rule of `memtrace diff --fail-if` failed (each said on standard error), 2 with a one-line
//! message on bad input or usage.
//!
//! | module | what lives there |
//! |---|---|
//! | `commands/` | one module per subcommand: read the trace, take what to show from `analysis/`, print it as text or JSON |
//! | `cli` | the command line (clap): every subcommand's arguments |
//! | `serve/` | the web viewer behind `memtrace serve` |
//! | `export/` | the Parquet dataset behind `memtrace convert ... OUT.parquet` |
//! | `analysis/` | what is computed from a trace: sites, timelines, leaks, the summary |
//! | `load`, `cache`, `output`, `format` | reading a trace file, through the import cache; writing to stdout; numbers as people read them |
//!
//! Imports run down the table, never up: `commands` uses the modules below it, `cli` and the
//! viewer and `export` use `analysis`, `analysis` uses only `format`, and only this file uses
//! `commands`.

mod analysis;
mod cache;
mod cli;
mod commands;
mod export;
mod format;
mod load;
mod output;
mod serve;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::usage_exit(e),
    };
    let mut out = output::Output::stdout();
    match commands::run(cli.command, &mut out) {
        Ok(commands::Status::Done) => ExitCode::SUCCESS,
        Ok(commands::Status::GateFailed) => ExitCode::from(1),
        Err(e) if output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memtrace: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, `outer: inner: innermost`, without repeating a cause
/// the outer message already quotes.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string().replace('\n', " ");
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}
