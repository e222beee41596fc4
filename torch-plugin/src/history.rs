//! History and snapshots through the C interface: `blockpool_record_memory_history`
//! (`torch.cuda.memory._record_memory_history`), `blockpool_dump_snapshot`
//! (`torch.cuda.memory._dump_snapshot`, PyTorch's pickle), and the annotation tags of
//! `blockpool_annotate_push` / `_pop` that contexts and leak sites carry.
//!
//! Stopping the recording keeps what was recorded for the next dumps (the header's promise):
//! the library clears a device's history when recording stops, so the plugin takes a
//! snapshot just before, and dumps it while recording stays off. That snapshot is the state
//! when recording stopped, with its events, so the trace and the segments agree (a viewer
//! rebuilds earlier states by walking back from the segments).

use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex, PoisonError};

use blockpool::event::{AnnotationGuard, Backtraces, ContextLevel};
use blockpool::trace::pytorch::write_pytorch_snapshot;
use blockpool::trace::Snapshot;
use blockpool::HistorySettings;

use crate::boundary::status;
use crate::error::Error;
use crate::global::allocator;
use crate::text::read_text;

/// Events kept per device when `blockpool_record_memory_history` is given `max_entries` 0.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;

/// The environment variable whose value fills in `{rank}` in a snapshot path.
pub const RANK_ENV_VAR: &str = "RANK";

/// Whether history is being recorded, and what was recorded up to the last stop.
struct Recording {
    on: bool,
    kept: Option<Arc<Snapshot>>,
}

static RECORDING: Mutex<Recording> = Mutex::new(Recording {
    on: false,
    kept: None,
});

fn recording() -> std::sync::MutexGuard<'static, Recording> {
    RECORDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The library's settings for the header's arguments.
fn settings(enabled: c_int, max_entries: usize, context: c_int) -> Result<HistorySettings, Error> {
    if enabled == 0 {
        return Ok(HistorySettings::DISABLED);
    }
    let (context_level, stacks) = match context {
        0 => (ContextLevel::None, Backtraces::None),
        1 => (ContextLevel::All, Backtraces::None),
        2 => (ContextLevel::All, Backtraces::Rust),
        _ => return Err(Error::InvalidContext { context }),
    };
    Ok(HistorySettings {
        enabled: true,
        context: context_level,
        max_entries: if max_entries == 0 {
            DEFAULT_MAX_ENTRIES
        } else {
            max_entries
        },
        stacks,
    })
}

/// Starts, reconfigures or stops history recording on every device (header:
/// `blockpool_record_memory_history`). `context` 1 gives every event the thread's annotation
/// tags (as PyTorch's `context="all"`), 2 also a native backtrace of the call (microseconds
/// per event). Stopping keeps the history for later dumps until recording starts again.
#[no_mangle]
pub extern "C" fn blockpool_record_memory_history(
    enabled: c_int,
    max_entries: usize,
    context: c_int,
) -> c_int {
    status("blockpool_record_memory_history", || {
        let settings = settings(enabled, max_entries, context)?;
        let alloc = allocator()?;
        let mut recording = recording();
        if settings.enabled {
            alloc.record_memory_history(settings)?;
            *recording = Recording {
                on: true,
                kept: None,
            };
        } else if recording.on {
            let kept = Arc::new(alloc.snapshot());
            alloc.record_memory_history(settings)?;
            *recording = Recording {
                on: false,
                kept: Some(kept),
            };
        }
        Ok(())
    })
}

/// `path` with `{rank}` replaced by `rank` (the `RANK` variable: `None` when unset, read as
/// 0). A `RANK` that is not a non-negative integer is refused, but only when the path asks
/// for it.
fn fill_in_rank(path: &str, rank: Option<&str>) -> Result<String, Error> {
    if !path.contains("{rank}") {
        return Ok(path.to_owned());
    }
    let rank = match rank {
        None => 0,
        Some(value) => value
            .trim()
            .parse::<u64>()
            .map_err(|_| Error::InvalidRank {
                value: value.to_owned(),
            })?,
    };
    Ok(path.replace("{rank}", &rank.to_string()))
}

/// Writes every device's segments, blocks and recorded history as PyTorch's snapshot pickle
/// to `path` (header: `blockpool_dump_snapshot`), `{rank}` filled in from `RANK`.
///
/// # Safety
///
/// `path` must be NULL (refused) or a NUL-terminated string left unchanged during the call.
#[no_mangle]
pub unsafe extern "C" fn blockpool_dump_snapshot(path: *const c_char) -> c_int {
    status("blockpool_dump_snapshot", || {
        // SAFETY: the caller upholds read_text's contract on `path` (this function's # Safety).
        let path = unsafe { read_text(path, "path") }?;
        let rank = match std::env::var(RANK_ENV_VAR) {
            Ok(value) => Some(value),
            Err(std::env::VarError::NotPresent) => None,
            Err(std::env::VarError::NotUnicode(value)) => {
                Some(value.to_string_lossy().into_owned())
            }
        };
        let path = fill_in_rank(&path, rank.as_deref())?;
        let alloc = allocator()?;
        let snapshot = {
            let recording = recording();
            match (&recording.kept, recording.on) {
                (Some(kept), false) => Arc::clone(kept),
                _ => Arc::new(alloc.snapshot()),
            }
        };
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let mut out = BufWriter::new(File::create(&path).map_err(io)?);
        write_pytorch_snapshot(&snapshot, &mut out).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(())
    })
}

thread_local! {
    /// This thread's tags pushed through C, innermost last.
    static PUSHED: RefCell<Vec<AnnotationGuard>> = const { RefCell::new(Vec::new()) };
}

/// Pushes `tag` on this thread's annotation stack (`blockpool::annotate`), until the matching
/// `blockpool_annotate_pop`.
///
/// # Safety
///
/// `tag` must be NULL (refused) or a NUL-terminated string left unchanged during the call.
#[no_mangle]
pub unsafe extern "C" fn blockpool_annotate_push(tag: *const c_char) -> c_int {
    status("blockpool_annotate_push", || {
        // SAFETY: the caller upholds read_text's contract on `tag` (this function's # Safety).
        let tag = unsafe { read_text(tag, "tag") }?;
        let guard = blockpool::annotate(&tag);
        PUSHED.with_borrow_mut(|pushed| pushed.push(guard));
        Ok(())
    })
}

/// Pops the innermost tag this thread pushed; with none pushed, `BLOCKPOOL_ERR_INVALID_ARGUMENT`.
#[no_mangle]
pub extern "C" fn blockpool_annotate_pop() -> c_int {
    status("blockpool_annotate_pop", || {
        // Out of the borrow before it drops: dropping records an event on recording allocators.
        let guard = PUSHED.with_borrow_mut(Vec::pop);
        match guard {
            Some(guard) => {
                drop(guard);
                Ok(())
            }
            None => Err(Error::NoAnnotation),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_fills_in_only_where_asked() {
        assert_eq!(
            fill_in_rank("run.pickle", Some("x")).ok().as_deref(),
            Some("run.pickle")
        );
        assert_eq!(
            fill_in_rank("run-{rank}.pickle", None).ok().as_deref(),
            Some("run-0.pickle")
        );
        assert_eq!(
            fill_in_rank("r{rank}/run-{rank}.pickle", Some(" 3"))
                .ok()
                .as_deref(),
            Some("r3/run-3.pickle")
        );
        assert!(matches!(
            fill_in_rank("run-{rank}.pickle", Some("two")),
            Err(Error::InvalidRank { .. })
        ));
        assert!(matches!(
            fill_in_rank("run-{rank}.pickle", Some("-1")),
            Err(Error::InvalidRank { .. })
        ));
    }

    #[test]
    fn context_levels_map_to_the_librarys_settings() {
        let none = settings(1, 0, 0).ok();
        assert_eq!(
            none.map(|s| (s.context, s.max_entries)),
            Some((ContextLevel::None, 100_000))
        );
        let tags = settings(1, 5, 1).ok();
        assert_eq!(
            tags.map(|s| (s.context, s.stacks, s.max_entries)),
            Some((ContextLevel::All, Backtraces::None, 5))
        );
        let stacks = settings(1, 5, 2).ok();
        assert_eq!(stacks.map(|s| s.stacks), Some(Backtraces::Rust));
        assert!(matches!(
            settings(1, 5, 3),
            Err(Error::InvalidContext { context: 3 })
        ));
        assert_eq!(settings(0, 0, 9).ok(), Some(HistorySettings::DISABLED));
    }
}
