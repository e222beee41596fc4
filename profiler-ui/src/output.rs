//! Where a command's report goes: buffered standard output, every write checked, and
//! [`is_broken_pipe`] to tell a reader that went away (`memtrace info f | head`) from a real
//! failure, so that the command ends quietly instead of panicking.

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

    /// Writes `report` as JSON when `json`, else as the text `render` makes of it.
    pub fn report<T: serde::Serialize>(
        &mut self,
        report: &T,
        json: bool,
        render: impl FnOnce(&T) -> String,
    ) -> anyhow::Result<()> {
        if json {
            return self.json(report);
        }
        self.write(&render(report))?;
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
