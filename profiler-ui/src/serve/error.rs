//! What can go wrong: starting the viewer ([`ServeError`], the command fails) and answering
//! one request ([`RequestError`], that request gets a 4xx and the server goes on).

use blockpool::trace::StateError;

/// Why the viewer cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The port cannot be bound on 127.0.0.1 (in use, or needs privileges).
    #[error("cannot listen on 127.0.0.1:{port}: {source} (choose another with --port, or --port 0 for any free one)")]
    Bind {
        /// The port asked for.
        port: u16,
        /// What the system said.
        source: std::io::Error,
    },
    /// The analyses the page shows (summary, leaks, curves) failed on this trace.
    #[error(transparent)]
    Analysis(#[from] anyhow::Error),
    /// The files given cannot be shown together.
    #[error(transparent)]
    Files(#[from] super::files::FileListError),
    /// The trace contradicts itself, so states cannot be rebuilt for the viewer.
    #[error("cannot rebuild the memory of device {device}: {source}")]
    State {
        /// Device index.
        device: u32,
        /// What is wrong.
        source: StateError,
    },
}

/// Why one request cannot be answered; the response is a 4xx with the message as JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A query parameter is malformed or out of range.
    #[error("parameter `{name}`: {reason}")]
    BadParameter {
        /// The parameter.
        name: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The query string is not valid percent-encoded UTF-8.
    #[error("the query string is not valid percent-encoded UTF-8")]
    BadEncoding,
    /// The device asked for has no events or segments in the trace.
    #[error("device {0} is not in this trace")]
    NoDevice(u32),
    /// The page shows no file with this index.
    #[error("no file {file} in this page (files 0 to {last})")]
    NoFile {
        /// The index asked for.
        file: u64,
        /// The last index there is.
        last: usize,
    },
    /// No allocation has this id on the device.
    #[error("no allocation {0} on this device")]
    NoAllocation(usize),
    /// The state asked for cannot be rebuilt (an index past the end).
    #[error(transparent)]
    State(#[from] StateError),
}

impl RequestError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            RequestError::NoDevice(_)
            | RequestError::NoFile { .. }
            | RequestError::NoAllocation(_) => 404,
            _ => 400,
        }
    }
}
