//! The Parquet dataset `memtrace convert TRACE OUT.parquet` writes: a folder of tables, each
//! partitioned by rank (`TABLE/rank=N/part-0.parquet`, Hive-style, as Spark writes a
//! `.parquet` folder), that engines built to scale out (Spark, Trino, DataFusion) and local ones
//! (DuckDB, Polars) query with SQL across thousands of ranks. Converting one file writes rank
//! 0; a folder or a rank pattern writes one partition per file, read one at a time, so memory
//! is the largest file's. Files that are not a rank series are numbered in name order, and
//! `source` says which file each number is.
//!
//! The schema (integers are unsigned; `context` is null for an event without one):
//!
//! | table | one row per | columns |
//! |---|---|---|
//! | `source` | file | `path`, `format` (`pytorch`, `jsonl`, `rmm-csv`), `allocator_config` (`PYTORCH_CUDA_ALLOC_CONF` syntax), `time_origin_unix_us` (when `time_us` 0 was) |
//! | `settings` | key of PyTorch's `allocator_settings` | `key`, `value` (as Python prints it) |
//! | `devices` | device | `device`, `events`, `start_allocated`, `start_reserved`, `start_active`, `start_requested`: the memory before the first event, rebuilt from the end state; `end_reserved`: bytes in its segments at the end |
//! | `events` | event | `device`, `position` (1 for the device's first event; the memory after it is the state `position`), `number` (the file's event number; null for an annotation the import inserted), `action` (`alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`, `segment_map`, `segment_unmap`, `oom`, `snapshot`, `annotate`), `address`, `size` (the block or segment), `requested`, `stream`, `time_us` (since `time_origin_unix_us`), `context`, and the device's memory after the event: `device_allocated`, `device_reserved`, `device_active`, `device_requested` |
//! | `allocations` | block handed out (by an `alloc` event, or alive before the first) | `device`, `address`, `size`, `requested`, `context`, `site` (as `memtrace top` names it), `allocated_at` (the `position` of its `alloc`; null when alive before the first event), `freed_at` (the `position` of its `free_requested`, from which it no longer counts as allocated; null when alive at the end) |
//! | `contexts` | context | `context`, `site`, `frames`, `tags` (how many of each) |
//! | `tags` | tag of a context | `context`, `depth` (0 outermost), `tag` |
//! | `stacks` | frame of a context | `context`, `depth` (0 innermost), `frame` |
//! | `frames` | distinct frame | `frame`, `name`, `filename`, `line` (null when unknown) |
//! | `segments` | segment at the end | `device`, `address`, `size`, `stream`, `pool` (`small`, `large`), `expandable`, `context` |
//! | `blocks` | block at the end | `device`, `segment` (its address), `address`, `size`, `requested`, `state` (`active_allocated`, `active_pending_free`, `inactive`), `context` |
//!
//! Context and frame ids are the file's: join on `rank` too.

mod table;
mod tables;

pub use tables::RowCounts;

use crate::load::load_trace;
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// One trace file of the dataset and the rank it is written as.
pub struct Input {
    /// The file.
    pub path: PathBuf,
    /// Its partition: `rank=N`.
    pub rank: u32,
}

/// What one file became.
pub struct Written {
    /// Its events (all devices).
    pub events: usize,
    /// Rows per table.
    pub rows: RowCounts,
}

/// Writes the dataset of `inputs` to the folder `out`, which must not exist: the tables are
/// written into a sibling folder first and moved to `out` once complete, so `out` is either
/// the whole dataset or absent.
pub fn write_dataset(inputs: &[Input], out: &Path) -> anyhow::Result<Vec<Written>> {
    if out.exists() {
        anyhow::bail!(
            "{} exists; remove it or choose another name (a dataset is written whole, never \
             into an existing folder)",
            out.display()
        );
    }
    let name = out
        .file_name()
        .with_context(|| format!("{} names no folder", out.display()))?;
    let partial = out.with_file_name(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = write_all(inputs, &partial).and_then(|written| {
        std::fs::rename(&partial, out)
            .with_context(|| format!("cannot move {} to {}", partial.display(), out.display()))?;
        Ok(written)
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    written
}

fn write_all(inputs: &[Input], folder: &Path) -> anyhow::Result<Vec<Written>> {
    std::fs::create_dir_all(folder)
        .with_context(|| format!("cannot create {}", folder.display()))?;
    let mut written = Vec::with_capacity(inputs.len());
    for input in inputs {
        let trace = load_trace(&input.path)
            .with_context(|| format!("cannot read {}", input.path.display()))?;
        let rows = tables::write_tables(
            &trace.snapshot,
            &input.path,
            trace.format.as_str(),
            folder,
            &format!("rank={}", input.rank),
        )
        .with_context(|| format!("cannot convert {}", input.path.display()))?;
        written.push(Written {
            events: trace.snapshot.events.len(),
            rows,
        });
    }
    Ok(written)
}
