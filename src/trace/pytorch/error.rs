//! [`SnapshotError`]: why a pickle is not a PyTorch memory snapshot, naming the place in the
//! file (`segments[3].blocks[7].size`) and what was expected there.

use crate::trace::pickle::PickleError;
use crate::trace::ImportLimitExceeded;

/// Why a snapshot could not be imported. Paths are written as Python would index the value:
/// `segments[3].blocks[7].size` is `snapshot["segments"][3]["blocks"][7]["size"]`; paths in the
/// bare segment-list form start with the index (`[3].blocks[7].size`), and `the snapshot` names
/// the whole file. None is retryable: the input is corrupt or not a PyTorch snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes are not a pickle of plain data.
    #[error("not a readable pickle: {0}")]
    Pickle(#[from] PickleError),
    /// A value has the wrong Python type.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// Where the value is.
        path: String,
        /// What was expected there, in words (`an int`).
        expected: &'static str,
        /// The Python type found (`str`).
        found: &'static str,
    },
    /// A dict lacks a key every form of the snapshot has.
    #[error("{path}: missing key {key:?}")]
    MissingKey {
        /// Where the dict is.
        path: String,
        /// The key.
        key: &'static str,
    },
    /// An int outside the range of its field (a negative size, a line past `u32`).
    #[error("{path}: expected {expected}, found {found}")]
    OutOfRange {
        /// Where the value is.
        path: String,
        /// The range expected, in words.
        expected: &'static str,
        /// The value found.
        found: String,
    },
    /// A trace entry's `action` is none of PyTorch's.
    #[error("{path}: unknown action {name:?}")]
    UnknownAction {
        /// Where the action is.
        path: String,
        /// The action's name.
        name: String,
    },
    /// A block's `state` is none of `active_allocated`, `active_pending_free`, `inactive`.
    #[error(
        "{path}: unknown block state {name:?} (expected active_allocated, active_pending_free \
         or inactive)"
    )]
    UnknownBlockState {
        /// Where the state is.
        path: String,
        /// The state's name.
        name: String,
    },
    /// A segment, block, trace entry or external annotation that is one object referenced
    /// from several places (the file pushed one memoized dict again). PyTorch writes each of
    /// them once; expanding the copies would let a few kilobytes ask for gigabytes.
    #[error(
        "{path}: this {what} is one object the file references more than once; a PyTorch \
         snapshot writes each {what} once, so the file is not one PyTorch wrote"
    )]
    Shared {
        /// Where the first reference is.
        path: String,
        /// `segment`, `block`, `trace entry` or `external annotation`.
        what: &'static str,
    },
    /// The snapshot would expand past a limit of [`ImportLimits`](crate::trace::ImportLimits).
    #[error("{path}: {source}")]
    Limit {
        /// Where the value that went past the limit is.
        path: String,
        /// The limit, and how to raise it.
        #[source]
        source: ImportLimitExceeded,
    },
    /// A segment's `segment_type` is neither `small` nor `large`.
    #[error("{path}: unknown segment type {name:?} (expected small or large)")]
    UnknownSegmentType {
        /// Where the type is.
        path: String,
        /// The type's name.
        name: String,
    },
}
