//! One module per subcommand; [`run`] dispatches.

mod convert;
mod demo;
mod info;
mod summary;

use crate::cli::Command;
use crate::output::Output;

/// Runs `command`, writing its report to `out`.
pub fn run(command: Command, out: &mut Output) -> anyhow::Result<()> {
    match command {
        Command::Info { file, json } => info::run(&file, json, out),
        Command::Summary { file, json } => summary::run(&file, json, out),
        Command::Convert { input, output, to } => convert::run(&input, &output, to, out),
        Command::Demo { out: trace } => demo::run(&trace, out),
    }
}
