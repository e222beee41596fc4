//! What can be wrong with an RMM log, always with the 1-based line number where it was found.

use std::fmt;
use std::io;

/// Why an RMM log could not be read. Every variant but [`RmmError::Empty`] names the 1-based
/// line (the header is line 1); field errors also carry the offending text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RmmError {
    /// The underlying reader failed.
    #[error("line {line}: reading the RMM log failed: {source}")]
    Io {
        /// The line being read when it failed.
        line: u64,
        /// What the reader reported.
        #[source]
        source: io::Error,
    },
    /// The input has no header line at all.
    #[error("the RMM log is empty: expected the header `Thread,Time,Action,Pointer,Size,Stream`")]
    Empty,
    /// The header lacks a column this reader needs (RMM before 0.14.1 wrote no `Thread` column;
    /// a file that is not an RMM log usually lacks them all).
    #[error("line {line}: header `{header}` has no `{}` column", column.column_name())]
    MissingColumn {
        /// The header's line number (1).
        line: u64,
        /// The column missing, as RMM names it.
        column: RmmField,
        /// The header line as found (shortened if long).
        header: String,
    },
    /// The header names a column twice, so which one holds the value is ambiguous.
    #[error("line {line}: header names the `{}` column twice", column.column_name())]
    DuplicateColumn {
        /// The header's line number (1).
        line: u64,
        /// The column named twice.
        column: RmmField,
    },
    /// A line is longer than [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES); RMM's lines are under
    /// 100 bytes, so this is not an RMM log (or it is corrupt). Reading stops there.
    #[error("line {line}: longer than {limit_bytes} bytes, which no RMM log line is")]
    LineTooLong {
        /// The line that is too long.
        line: u64,
        /// The limit, in bytes.
        limit_bytes: usize,
    },
    /// A line has another number of comma-separated fields than the header (an empty line has
    /// none; a line cut short by a crash usually has too few).
    #[error("line {line}: expected {expected} comma-separated fields as in the header, found {found}: `{text}`")]
    FieldCount {
        /// The line.
        line: u64,
        /// Fields in the header.
        expected: usize,
        /// Fields in this line.
        found: usize,
        /// The line as found (shortened if long).
        text: String,
    },
    /// One field could not be read.
    #[error("line {line}: {field} `{text}` {problem}")]
    Field {
        /// The line.
        line: u64,
        /// Which column.
        field: RmmField,
        /// The field as found (shortened if long; bytes that are not UTF-8 shown as U+FFFD).
        text: String,
        /// What is wrong with it.
        problem: FieldProblem,
    },
}

impl RmmError {
    /// The 1-based line number the error was found on; `None` for [`RmmError::Empty`].
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Empty => None,
            Self::Io { line, .. }
            | Self::MissingColumn { line, .. }
            | Self::DuplicateColumn { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::FieldCount { line, .. }
            | Self::Field { line, .. } => Some(*line),
        }
    }
}

/// A column of the log, displayed lowercase in messages ("pointer `0xZZ` is not ...") and
/// named with [`RmmField::column_name`] in the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RmmField {
    /// `Thread`: the OS thread id.
    Thread,
    /// `Time`: the time of day.
    Time,
    /// `Action`: what happened.
    Action,
    /// `Pointer`: the address.
    Pointer,
    /// `Size`: bytes.
    Size,
    /// `Stream`: the CUDA stream.
    Stream,
}

impl RmmField {
    /// The columns in the order RMM writes them.
    pub const ALL: [RmmField; 6] = [
        Self::Thread,
        Self::Time,
        Self::Action,
        Self::Pointer,
        Self::Size,
        Self::Stream,
    ];

    /// The column's name in the header, as RMM spells it.
    pub const fn column_name(self) -> &'static str {
        match self {
            Self::Thread => "Thread",
            Self::Time => "Time",
            Self::Action => "Action",
            Self::Pointer => "Pointer",
            Self::Size => "Size",
            Self::Stream => "Stream",
        }
    }
}

impl fmt::Display for RmmField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Thread => "thread",
            Self::Time => "time",
            Self::Action => "action",
            Self::Pointer => "pointer",
            Self::Size => "size",
            Self::Stream => "stream",
        })
    }
}

/// What is wrong with a field; displayed as the end of a sentence about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldProblem {
    /// Not a decimal integer (thread, size): empty, a sign, a space or another character.
    NotDecimal,
    /// Not hexadecimal: a pointer that is neither `0x` and hex digits nor `(nil)`, or a stream
    /// that is not hex digits after an optional `0x`.
    NotHexadecimal,
    /// A number that does not fit in 64 bits.
    TooLarge,
    /// Not a time of day `HH:MM:SS.ffffff` (hours below 24, minutes and seconds below 60, six
    /// digits of microseconds; RMM before 21.06 wrote `:` before them, which is accepted).
    NotTimeOfDay,
    /// Not one of `allocate`, `free`, `allocate failure`.
    UnknownAction,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotDecimal => "is not a decimal integer",
            Self::NotHexadecimal => "is not hexadecimal",
            Self::TooLarge => "does not fit in 64 bits",
            Self::NotTimeOfDay => "is not a time of day HH:MM:SS.ffffff",
            Self::UnknownAction => "is not `allocate`, `free` or `allocate failure`",
        })
    }
}
