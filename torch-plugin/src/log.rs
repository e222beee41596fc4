//! Where log lines go when the host process has set no `tracing` subscriber: standard error,
//! one line per event, prefixed `blockpool:`. PyTorch (a C++ host) never sets one, so without
//! this the warnings the header promises (bad pointers, caught panics) would go nowhere.
//!
//! The level is `BLOCKPOOL_LOG` (`off`, `error`, `warn`, `info`, `debug`, `trace`; `warn` when
//! unset or unreadable). A host that sets its own subscriber first (a Rust program, a test)
//! keeps it: this one is installed only when none is.

use std::fmt::{self, Write as _};
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The environment variable that sets the level of the default log.
pub const LOG_ENV_VAR: &str = "BLOCKPOOL_LOG";

/// Installs the standard-error subscriber as the process's global default, unless one is set
/// already (then this does nothing).
pub(crate) fn install_default() {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let level = level_from_env(std::env::var(LOG_ENV_VAR).ok().as_deref());
    // Another thread may have set one meanwhile: theirs stays, which is what we want.
    let _ = tracing::subscriber::set_global_default(StderrLog { level });
}

/// The level `BLOCKPOOL_LOG=value` asks for; `warn` for anything else.
pub(crate) fn level_from_env(value: Option<&str>) -> LevelFilter {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("off") => LevelFilter::OFF,
        Some("error") => LevelFilter::ERROR,
        Some("info") => LevelFilter::INFO,
        Some("debug") => LevelFilter::DEBUG,
        Some("trace") => LevelFilter::TRACE,
        _ => LevelFilter::WARN,
    }
}

/// Writes each enabled event as `blockpool: LEVEL message key=value ...` to standard error.
/// Spans are accepted and ignored: blockpool logs events only.
struct StderrLog {
    level: LevelFilter,
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.level)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Ids must be non-zero; one for all is enough when spans are ignored.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = line_of(event);
        line.push('\n');
        // One write per line, so lines from several threads do not interleave; a closed
        // standard error is nothing to report.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// `blockpool: LEVEL message key=value ...`, without the newline.
fn line_of(event: &Event<'_>) -> String {
    let mut line = format!("blockpool: {} ", event.metadata().level());
    event.record(&mut LineWriter { line: &mut line });
    line
}

/// Appends an event's message, then its other fields as `key=value`.
struct LineWriter<'a> {
    line: &'a mut String,
}

impl Visit for LineWriter<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Writing to a String cannot fail.
        let _ = if field.name() == "message" {
            write!(self.line, "{value:?}")
        } else {
            write!(self.line, " {}={value:?}", field.name())
        };
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.line.push_str(value);
        } else {
            let _ = write!(self.line, " {}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_defaults_to_warn_and_reads_every_name() {
        assert_eq!(level_from_env(None), LevelFilter::WARN);
        assert_eq!(level_from_env(Some("bogus")), LevelFilter::WARN);
        assert_eq!(level_from_env(Some(" Info ")), LevelFilter::INFO);
        assert_eq!(level_from_env(Some("off")), LevelFilter::OFF);
        assert_eq!(level_from_env(Some("debug")), LevelFilter::DEBUG);
    }

    #[test]
    fn an_event_is_one_prefixed_line_with_its_fields() {
        struct Capture(std::sync::Mutex<Vec<String>>);
        impl Subscriber for Capture {
            fn enabled(&self, _: &Metadata<'_>) -> bool {
                true
            }
            fn new_span(&self, _: &Attributes<'_>) -> Id {
                Id::from_u64(1)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, event: &Event<'_>) {
                if let Ok(mut lines) = self.0.lock() {
                    lines.push(line_of(event));
                }
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }
        let capture = std::sync::Arc::new(Capture(std::sync::Mutex::new(Vec::new())));
        tracing::subscriber::with_default(std::sync::Arc::clone(&capture), || {
            tracing::warn!(ptr = 0x10, "unknown pointer");
        });
        let lines = capture.0.lock().map(|l| l.clone()).unwrap_or_default();
        assert_eq!(lines, ["blockpool: WARN unknown pointer ptr=16"]);
    }
}
