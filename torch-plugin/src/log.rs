//! Where log lines go when the host process has set no `tracing` subscriber: standard error,
//! one line per event, prefixed `blockpool:`. PyTorch (a C++ host) never sets one, so without
//! this the warnings the header promises (bad pointers, caught panics) would go nowhere.
//!
//! The level is `BLOCKPOOL_LOG` (`off`, `error`, `warn`, `info`, `debug`, `trace`; `warn` when
//! unset or unreadable). A host that sets its own subscriber first (a Rust program, a test)
//! keeps it: this one is installed only when none is.

use std::fmt;
use tracing::level_filters::LevelFilter;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// The environment variable that sets the level of the default log.
pub const LOG_ENV_VAR: &str = "BLOCKPOOL_LOG";

/// Installs the standard-error subscriber as the process's global default, unless one is set
/// already (then this does nothing).
pub(crate) fn install_default() {
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let level = level_from_env(std::env::var(LOG_ENV_VAR).ok().as_deref());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .event_format(Line)
        .finish();
    // Another thread may have set one meanwhile: theirs stays, which is what we want.
    let _ = tracing::subscriber::set_global_default(subscriber);
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

/// Each event as one line, `blockpool: LEVEL message key=value ...`: the formatter writes the
/// whole line, then one write, so lines from several threads do not interleave. Spans are
/// not shown: blockpool logs events only.
struct Line;

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: format::Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "blockpool: {} ", event.metadata().level())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::{Arc, Mutex};

    #[test]
    fn level_defaults_to_warn_and_reads_every_name() {
        assert_eq!(level_from_env(None), LevelFilter::WARN);
        assert_eq!(level_from_env(Some("bogus")), LevelFilter::WARN);
        assert_eq!(level_from_env(Some(" Info ")), LevelFilter::INFO);
        assert_eq!(level_from_env(Some("off")), LevelFilter::OFF);
        assert_eq!(level_from_env(Some("debug")), LevelFilter::DEBUG);
    }

    /// What the formatter wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Written {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| io::ErrorKind::Other)?
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_event_is_one_prefixed_line_with_its_fields() {
        let written = Written::default();
        let sink = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_max_level(LevelFilter::WARN)
            .event_format(Line)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(ptr = 0x10, "unknown pointer");
            tracing::info!("below the level");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "blockpool: WARN unknown pointer ptr=16\n");
    }
}
