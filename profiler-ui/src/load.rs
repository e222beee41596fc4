//! Reading the trace file a command is given: blockpool's loader (the format found from the
//! content, not the name; gzip undone; errors that name the file and what is wrong with it)
//! with a spinner on stderr while a large file loads.

use crate::cache::{Cache, CACHE_ENV};

/// Files at least this large get a spinner on stderr while they load.
const SPINNER_FROM_BYTES: u64 = 16 << 20;

/// Reads the trace in `path` (see [`blockpool::trace::file::load_trace`]), from the import
/// cache when it holds this file ([`crate::cache`]), with a spinner on stderr while a large
/// file loads. The spinner is drawn only when stderr is a terminal, so pipes and logs stay
/// clean. A large file read from the trace is written to the cache for the next command; when
/// that fails, one line on stderr says why, and the command goes on.
pub fn load_trace(
    path: &std::path::Path,
) -> Result<blockpool::trace::file::LoadedTrace, blockpool::trace::file::TraceFileError> {
    let cache = Cache::from_env().filter(|cache| cache.wants(path));
    let large = std::fs::metadata(path).is_ok_and(|m| m.len() >= SPINNER_FROM_BYTES);
    let spinner = large.then(|| {
        let spinner =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        spinner.set_message(format!("reading {}", path.display()));
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        spinner
    });
    let mut not_stored = None;
    let loaded = match cache.as_ref().and_then(|cache| cache.load(path)) {
        Some(trace) => Ok(trace),
        None => {
            let loaded = blockpool::trace::file::load_trace(path);
            if let (Some(cache), Ok(trace)) = (&cache, &loaded) {
                not_stored = cache.store(path, trace).err();
            }
            loaded
        }
    };
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    if large {
        release_freed_memory();
    }
    // After the spinner's line is cleared, so the note stands on a line of its own.
    if let Some(e) = not_stored {
        eprintln!(
            "memtrace: note: the import cache was not written ({e}); {CACHE_ENV}=off stops trying"
        );
    }
    loaded
}

/// Gives the system back the memory an import freed. glibc keeps freed small allocations in
/// its heap, and a large import frees gigabytes of them (the pickle reader's arena and tree):
/// without this, the memory a command then allocates (a state walker's changes) comes on top
/// of them instead of in their place.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointer and only releases glibc's own free pages; it
    // may be called at any time from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
