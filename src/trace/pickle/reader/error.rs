//! [`PickleError`], every way [`read`](super::read) refuses an input, with the byte offset and
//! a message that says what to do about it.

/// Why a pickle could not be read. Every variant names the byte offset of the opcode at fault
/// (counted from the start of the input); none is retryable with the same input and limits. The
/// limit variants ([`TooDeep`](Self::TooDeep), [`TooManyItems`](Self::TooManyItems),
/// [`TooManyMemoEntries`](Self::TooManyMemoEntries)) are the ones that larger
/// [`ReadLimits`](super::ReadLimits) can help; all others mean the input is not a pickle of
/// plain data, or is truncated or corrupt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleError {
    /// An opcode that imports or calls code, or reads data from outside the input.
    #[error("refused opcode {opcode} ({byte:#04x}) at byte {offset}: {reason}")]
    Refused {
        /// The opcode's name, as `pickletools` spells it.
        opcode: &'static str,
        /// The opcode's byte.
        byte: u8,
        /// Where the opcode starts.
        offset: usize,
        /// Why it is refused, in words.
        reason: &'static str,
    },
    /// The input could not be read (a corrupt gzip stream, an I/O error, a stream longer than
    /// its reader allows).
    #[error("could not read the input at byte {offset}: {message}")]
    Read {
        /// How many bytes had been read.
        offset: usize,
        /// What the reader said.
        message: String,
    },
    /// A byte that is no opcode of protocols 0 to 5.
    #[error(
        "unknown opcode {byte:#04x} at byte {offset}: the input is not a pickle, is corrupt, \
         or uses a protocol newer than 5"
    )]
    UnknownOpcode {
        /// The byte.
        byte: u8,
        /// Where it is.
        offset: usize,
    },
    /// A `PROTO` opcode naming a protocol newer than 5.
    #[error(
        "unsupported pickle protocol {version} at byte {offset}: this reader knows protocols 0 \
         to 5"
    )]
    UnsupportedProtocol {
        /// The protocol the file declares.
        version: u8,
        /// Where the `PROTO` opcode starts.
        offset: usize,
    },
    /// The input ends inside an opcode's fixed-size argument or text line.
    #[error(
        "truncated pickle: opcode {opcode} at byte {offset} needs {needed} more bytes but only \
         {remaining} remain"
    )]
    Truncated {
        /// The opcode being read.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// Bytes its argument needs (for a text line: at least this many, up to the newline).
        needed: usize,
        /// Bytes left in the input after the opcode byte.
        remaining: usize,
    },
    /// An opcode declares a string, bytes, integer or frame longer than the rest of the input;
    /// nothing was allocated for it.
    #[error(
        "opcode {opcode} at byte {offset} declares {declared} bytes but only {remaining} remain: \
         the file is truncated or corrupt"
    )]
    LengthBeyondInput {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// The length it declares, in bytes.
        declared: u64,
        /// Bytes left in the input after its length field.
        remaining: usize,
    },
    /// The input ends without a `STOP` opcode.
    #[error("truncated pickle: the input ends at byte {offset} without a STOP opcode")]
    MissingStop {
        /// The input's length.
        offset: usize,
    },
    /// An opcode needs more values on the stack (above the last `MARK`) than there are.
    #[error(
        "opcode {opcode} at byte {offset} needs {needed} value(s) on the stack above the last \
         MARK, but there are {found}: the file is corrupt"
    )]
    StackUnderflow {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// Values it needs.
        needed: usize,
        /// Values there are.
        found: usize,
    },
    /// An opcode that works on the items after a `MARK` found no `MARK`.
    #[error("opcode {opcode} at byte {offset} needs a MARK before it and there is none: the file is corrupt")]
    MissingMark {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
    },
    /// An opcode found a value of the wrong type: `APPEND` to something other than a list,
    /// `SETITEM` on something other than a dict, and the like.
    #[error("opcode {opcode} at byte {offset} expects {expected} but found {found}")]
    WrongType {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// What it needs, in words ("a list").
        expected: &'static str,
        /// What it found, as a Python type name ("dict").
        found: &'static str,
    },
    /// `DICT` or `SETITEMS` with an odd number of items after the `MARK`.
    #[error(
        "opcode {opcode} at byte {offset} has {count} items after its MARK, an odd number: keys \
         and values must pair up"
    )]
    OddItemCount {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// Items after the mark.
        count: usize,
    },
    /// A dict key or set item that Python could not hash: a list, dict or set.
    #[error("opcode {opcode} at byte {offset} uses a {kind} as a dict key or set item, which Python cannot hash")]
    Unhashable {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// The Python type name of the key ("list").
        kind: &'static str,
    },
    /// A `GET`, `BINGET` or `LONG_BINGET` of a memo index that was never stored.
    #[error("opcode {opcode} at byte {offset} reads memo entry {index}, which was never stored: the file is corrupt")]
    MissingMemo {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// The index it reads.
        index: u64,
    },
    /// A container that contains itself, which a tree of `Arc`s cannot hold.
    #[error(
        "the {kind} created at byte {offset} contains itself (a reference cycle); this reader \
         returns trees and refuses cycles"
    )]
    Cycle {
        /// The Python type name of the container ("list").
        kind: &'static str,
        /// Where the opcode that created it starts.
        offset: usize,
    },
    /// Containers or marks nest deeper than [`ReadLimits::max_depth`](super::ReadLimits).
    #[error(
        "nesting deeper than {limit} at byte {offset} (the container or MARK created there): \
         raise ReadLimits::max_depth if the file is trusted"
    )]
    TooDeep {
        /// The limit.
        limit: usize,
        /// Where the opcode that went past it starts.
        offset: usize,
    },
    /// More values than [`ReadLimits::max_items`](super::ReadLimits).
    #[error(
        "more than {limit} values at byte {offset} (ReadLimits::max_items; the reader indexes \
         at most 4294967295)"
    )]
    TooManyItems {
        /// The limit.
        limit: usize,
        /// Where the opcode that went past it starts.
        offset: usize,
    },
    /// An argument longer than [`ReadLimits::max_argument_bytes`](super::ReadLimits).
    #[error(
        "{opcode} at byte {offset} has an argument of {declared} bytes, more than the limit of \
         {limit}: raise ReadLimits::max_argument_bytes if the file is trusted"
    )]
    ArgumentTooLong {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// Its argument's length in bytes (for a text line, how much was read without its end).
        declared: u64,
        /// The limit.
        limit: usize,
    },
    /// The machine could not give the memory for the values read so far and the next.
    #[error(
        "memory ran out at byte {offset} holding the pickle's values: the file needs more \
         memory than this machine could give"
    )]
    OutOfMemory {
        /// Where the opcode whose value did not fit starts.
        offset: usize,
    },
    /// More memo entries than [`ReadLimits::max_memo_entries`](super::ReadLimits).
    #[error(
        "more than {limit} memo entries at byte {offset} (ReadLimits::max_memo_entries; the \
         reader indexes at most 4294967295)"
    )]
    TooManyMemoEntries {
        /// The limit.
        limit: usize,
        /// Where the opcode that went past it starts.
        offset: usize,
    },
    /// A string that is not valid UTF-8 (or, for Python 2 strings, not ASCII), or that holds a
    /// lone surrogate, which Rust strings cannot.
    #[error("opcode {opcode} at byte {offset}: {problem}")]
    InvalidString {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// What is wrong, in words.
        problem: &'static str,
    },
    /// An argument that does not parse: a text number, a quoted string, a negative length or
    /// memo index.
    #[error("opcode {opcode} at byte {offset}: {problem}")]
    BadArgument {
        /// The opcode.
        opcode: &'static str,
        /// Where it starts.
        offset: usize,
        /// What is wrong, in words.
        problem: &'static str,
    },
}

impl PickleError {
    /// The byte offset the error points at: the start of the opcode at fault (for
    /// [`Cycle`](Self::Cycle), the opcode that created the container; for
    /// [`MissingStop`](Self::MissingStop), the end of the input).
    pub fn offset(&self) -> usize {
        match *self {
            PickleError::Refused { offset, .. }
            | PickleError::UnknownOpcode { offset, .. }
            | PickleError::UnsupportedProtocol { offset, .. }
            | PickleError::Truncated { offset, .. }
            | PickleError::LengthBeyondInput { offset, .. }
            | PickleError::ArgumentTooLong { offset, .. }
            | PickleError::MissingStop { offset }
            | PickleError::StackUnderflow { offset, .. }
            | PickleError::MissingMark { offset, .. }
            | PickleError::WrongType { offset, .. }
            | PickleError::OddItemCount { offset, .. }
            | PickleError::Unhashable { offset, .. }
            | PickleError::MissingMemo { offset, .. }
            | PickleError::Cycle { offset, .. }
            | PickleError::TooDeep { offset, .. }
            | PickleError::TooManyItems { offset, .. }
            | PickleError::TooManyMemoEntries { offset, .. }
            | PickleError::OutOfMemory { offset }
            | PickleError::InvalidString { offset, .. }
            | PickleError::BadArgument { offset, .. }
            | PickleError::Read { offset, .. } => offset,
        }
    }
}
