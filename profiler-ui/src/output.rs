//! Writing to stdout: every write is checked, and a reader that went away (`memtrace info f |
//! head`) ends the command quietly instead of panicking.

use std::io::{self, Write};

/// Where a command's report goes.
pub struct Output {
    out: Box<dyn Write>,
}

impl Output {
    /// Buffered standard output.
    pub fn stdout() -> Output {
        Output {
            out: Box::new(io::BufWriter::new(io::stdout().lock())),
        }
    }

    /// Writes `text` as it is.
    pub fn write(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(text.as_bytes())
    }

    /// Writes `value` as pretty JSON and a newline.
    pub fn json<T: serde::Serialize>(&mut self, value: &T) -> anyhow::Result<()> {
        serde_json::to_writer_pretty(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.flush()?;
        Ok(())
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Whether `error` is a write to a closed pipe (the reader of our output exited).
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    let broken = Some(io::ErrorKind::BrokenPipe);
    error.chain().any(|cause| {
        cause.downcast_ref::<io::Error>().map(io::Error::kind) == broken
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == broken
    })
}

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
