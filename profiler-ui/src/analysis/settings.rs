//! The allocator settings a recording ran under, as far as the trace tells them: given on the
//! command line, else the trace's own (PyTorch's `allocator_settings`, blockpool's header),
//! else PyTorch's defaults. `replay`, `tune` and `explain` judge the trace by them.

use blockpool::trace::Snapshot;
use blockpool::AllocatorConfig;

/// The settings the recording used, as far as the trace tells them: `given` (`--config`),
/// else the trace's own when blockpool understands them, else the defaults (saying why).
/// Returns the settings, where they came from (`--config`, `trace` or `default`) and the note.
pub fn recorded_config(
    given: Option<&AllocatorConfig>,
    snapshot: &Snapshot,
) -> (AllocatorConfig, &'static str, Option<String>) {
    if let Some(config) = given {
        return (config.clone(), "--config", None);
    }
    match snapshot.allocator_config.as_deref().map(str::trim) {
        Some(text) if !text.is_empty() => match AllocatorConfig::parse(text) {
            Ok(config) => (config, "trace", None),
            Err(e) => {
                let note = format!("the trace's settings `{text}` were not understood ({e})");
                (AllocatorConfig::default(), "default", Some(note))
            }
        },
        _ => (AllocatorConfig::default(), "default", None),
    }
}
