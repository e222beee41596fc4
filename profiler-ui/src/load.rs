//! Reading the trace file a command is given: blockpool's loader (the format found from the
//! content, not the name; gzip undone; errors that name the file and what is wrong with it)
//! with a spinner on stderr while a large file loads.

/// Files at least this large get a spinner on stderr while they load.
const SPINNER_FROM_BYTES: u64 = 16 << 20;

/// Reads the trace in `path` (see [`blockpool::trace::file::load_trace`]), with a spinner on
/// stderr while a large file loads. The spinner is drawn only when stderr is a terminal, so
/// pipes and logs stay clean.
pub fn load_trace(
    path: &std::path::Path,
) -> Result<blockpool::trace::file::LoadedTrace, blockpool::trace::file::TraceFileError> {
    let large = std::fs::metadata(path).is_ok_and(|m| m.len() >= SPINNER_FROM_BYTES);
    let spinner = large.then(|| {
        let spinner =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        spinner.set_message(format!("reading {}", path.display()));
        spinner.enable_steady_tick(std::time::Duration::from_millis(120));
        spinner
    });
    let loaded = blockpool::trace::file::load_trace(path);
    if let Some(spinner) = spinner {
        spinner.finish_and_clear();
    }
    loaded
}
