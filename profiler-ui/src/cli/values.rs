//! The readers of the values clap cannot read itself: counts, depths, connections, seconds,
//! percentages and allocator settings (byte sizes are
//! [`parse_bytes`](crate::format::parse_bytes)'s, in `format`).

use blockpool::AllocatorConfig;
use std::time::Duration;

/// Reads a count of 1 or more (`--slots`, `--segments`).
pub(crate) fn parse_positive(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{text}` is not a whole number of 1 or more")),
    }
}

/// Most `--max-connections`: each is a thread and a socket.
pub(crate) const MOST_CONNECTIONS: usize = 4096;

/// Reads `--depth`: 1 to [`MAX_DEPTH`](crate::analysis::tree::MAX_DEPTH).
pub(crate) fn parse_depth(text: &str) -> Result<usize, String> {
    let most = crate::analysis::tree::MAX_DEPTH;
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=most).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{text}` is not a number of levels from 1 to {most}"
        )),
    }
}

/// Reads `--max-connections`: 1 to [`MOST_CONNECTIONS`].
pub(crate) fn parse_connections(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MOST_CONNECTIONS).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{text}` is not a number of connections from 1 to {MOST_CONNECTIONS}"
        )),
    }
}

/// Reads a positive number of seconds, decimals allowed, at most a day.
pub(crate) fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds, e.g. 30 or 0.5"))?;
    if !(seconds > 0.0 && seconds <= 86_400.0) {
        return Err(format!(
            "`{text}` is out of range: give more than 0 and at most 86400 seconds"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Reads a percentage from 0 to 100 (`--min-share`).
pub(crate) fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("`{text}` is not a percentage from 0 to 100")),
    }
}

/// Reads allocator settings in `PYTORCH_CUDA_ALLOC_CONF` syntax (`--config`, `--try`).
pub(crate) fn parse_config(text: &str) -> Result<AllocatorConfig, String> {
    AllocatorConfig::parse(text).map_err(|e| e.to_string())
}
