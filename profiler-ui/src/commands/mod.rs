//! The subcommands, one module each, named as on the command line; [`run`] (`dispatch.rs`)
//! runs the one a command line names. Most read a trace (`load.rs`), take what they show from
//! `analysis/` and print it as text or JSON; `serve` hands the trace to the viewer (`serve/`);
//! `plan` reads a chain file instead and plans checkpointing with `blockpool::checkpoint`.

mod convert;
mod demo;
mod diff;
mod dispatch;
mod doctor;
mod explain;
mod info;
mod leaks;
mod plan;
mod rank_summary;
pub(crate) mod replay;
mod segments;
mod serve;
mod streams;
mod summary;
mod timeline;
mod top;
mod tune;

pub use dispatch::{run, Status};
