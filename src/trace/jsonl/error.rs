//! What can go wrong reading or writing a native trace file. Every problem found in a file
//! names its 1-based line (the header is line 1) and says what is wrong there.

use crate::trace::SnapshotInvalid;
use std::io;
use std::path::PathBuf;

/// Why a trace file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonlError {
    /// The file could not be opened or created.
    #[error("cannot open trace file {}: {source}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// Writing failed (disk full, closed pipe, ...).
    #[error("writing the trace failed: {0}")]
    Write(#[source] io::Error),
    /// The underlying reader failed (or the gzip data is corrupt).
    #[error("line {line}: reading the trace failed: {source}")]
    Read {
        /// The line being read when it failed.
        line: u64,
        /// What the reader reported.
        #[source]
        source: io::Error,
    },
    /// The input holds no line at all.
    #[error("the trace is empty: expected a header line like {{\"blockpool_trace\":1,...}}")]
    Empty,
    /// The first line is not a blockpool trace header.
    #[error(
        "line 1: not a blockpool trace: the first line must be a header like \
         {{\"blockpool_trace\":1,...}}"
    )]
    NotATrace,
    /// The file was written by a newer blockpool whose format this one cannot read.
    #[error(
        "line 1: trace format version {found} is not supported: this blockpool reads version \
         {supported}; read it with the blockpool that wrote it or a newer one"
    )]
    UnsupportedVersion {
        /// The version in the header.
        found: u64,
        /// The version this reader reads.
        supported: u64,
    },
    /// A line is longer than [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES); reading stops there.
    #[error("line {line}: longer than {limit_bytes} bytes, the most a trace line may hold")]
    LineTooLong {
        /// The line.
        line: u64,
        /// The limit, in bytes.
        limit_bytes: usize,
    },
    /// A line is not valid JSON, or a field has the wrong type.
    #[error("line {line}: {message}")]
    Json {
        /// The line.
        line: u64,
        /// What the JSON parser said (with the column).
        message: String,
    },
    /// A line is a JSON object of no kind this reader knows (none of the keys
    /// `blockpool_trace`, `frame`, `event`, `segment`, `end`, `context`).
    #[error(
        "line {line}: not a trace line: expected one of the keys `frame`, `context`, `event`, \
         `segment` or `end`"
    )]
    UnknownLine {
        /// The line.
        line: u64,
    },
    /// A line lacks a field its kind requires.
    #[error("line {line}: {kind} line has no `{field}` field")]
    MissingField {
        /// The line.
        line: u64,
        /// The kind of line (`event`, `segment`, ...).
        kind: &'static str,
        /// The field missing.
        field: &'static str,
    },
    /// A field holds a value of the right type that means nothing (an unknown event action,
    /// block state or pool name, a frame or context id of 0).
    #[error("line {line}: `{field}` is {value:?}; expected {expected}")]
    BadValue {
        /// The line.
        line: u64,
        /// The field.
        field: &'static str,
        /// The value found (shortened if long).
        value: String,
        /// What would be accepted.
        expected: &'static str,
    },
    /// A line refers to a frame or context id no earlier line defined.
    #[error("line {line}: {kind} {id} is not defined by an earlier line")]
    Undefined {
        /// The line.
        line: u64,
        /// `frame` or `context`.
        kind: &'static str,
        /// The id.
        id: u64,
    },
    /// A frame or context id is defined twice.
    #[error("line {line}: {kind} {id} is defined again (first on line {first})")]
    Redefined {
        /// The line.
        line: u64,
        /// `frame` or `context`.
        kind: &'static str,
        /// The id.
        id: u64,
        /// The line that defined it first.
        first: u64,
    },
    /// Something follows the end line, which must be the last.
    #[error("line {line}: the trace ended on line {end_line}, but more follows")]
    AfterEnd {
        /// The first line after the end line.
        line: u64,
        /// The end line.
        end_line: u64,
    },
    /// The end line's counts disagree with what the file holds: lines are missing.
    #[error(
        "line {line}: the end line counts {expected} {what} but the trace holds {found}; \
         lines are missing"
    )]
    CountMismatch {
        /// The end line.
        line: u64,
        /// `events` or `segments`.
        what: &'static str,
        /// What the end line says.
        expected: u64,
        /// What was read.
        found: u64,
    },
    /// The segments and blocks are inconsistent (blocks that do not tile their segment,
    /// overlapping segments).
    #[error("line {line}: {source}")]
    Invalid {
        /// The segment line at fault.
        line: u64,
        /// What is wrong.
        #[source]
        source: SnapshotInvalid,
    },
    /// A context line would take the trace past a limit of
    /// [`ImportLimits`](crate::trace::ImportLimits).
    #[error("line {line}: {source}")]
    Limit {
        /// The context line at fault.
        line: u64,
        /// The limit, and how to raise it.
        #[source]
        source: crate::trace::ImportLimitExceeded,
    },
    /// [`stream_history_to`](crate::CachingAllocator::stream_history_to) was called while
    /// recording is off: there would be nothing to stream.
    #[error(
        "history recording is off: call record_memory_history before streaming the history \
         to a file"
    )]
    RecordingOff,
    /// [`stream_history_to`](crate::CachingAllocator::stream_history_to) was called while
    /// another stream of the same allocator is running; stop that one first.
    #[error("this allocator already streams its history to a file; stop that stream first")]
    AlreadyStreaming,
    /// The machine could not give the memory for the events read so far and the next.
    #[error(
        "line {line}: memory ran out holding {events} events: the trace needs more memory than \
         this machine could give; read it on a machine with more, or cut it into parts"
    )]
    OutOfMemory {
        /// The line whose event did not fit.
        line: u64,
        /// Events held when memory ran out.
        events: usize,
    },
}

impl JsonlError {
    /// The 1-based line the problem was found on, when it is about one line.
    pub fn line(&self) -> Option<u64> {
        match self {
            JsonlError::Read { line, .. }
            | JsonlError::LineTooLong { line, .. }
            | JsonlError::Json { line, .. }
            | JsonlError::UnknownLine { line }
            | JsonlError::MissingField { line, .. }
            | JsonlError::BadValue { line, .. }
            | JsonlError::Undefined { line, .. }
            | JsonlError::Redefined { line, .. }
            | JsonlError::AfterEnd { line, .. }
            | JsonlError::CountMismatch { line, .. }
            | JsonlError::Invalid { line, .. }
            | JsonlError::Limit { line, .. }
            | JsonlError::OutOfMemory { line, .. } => Some(*line),
            JsonlError::NotATrace | JsonlError::UnsupportedVersion { .. } => Some(1),
            JsonlError::Open { .. }
            | JsonlError::Write(_)
            | JsonlError::Empty
            | JsonlError::RecordingOff
            | JsonlError::AlreadyStreaming => None,
        }
    }
}
