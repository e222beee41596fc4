//! Traces: snapshots, the state at any event, and trace files, ours and PyTorch's.
//!
//! Always compiled: [`Snapshot`] (segments, blocks, events and their contexts, as
//! [`CachingAllocator::snapshot`](crate::CachingAllocator::snapshot) takes it) and [`state`]
//! (the segments and blocks at any event, by walking a trace back from its end). The event
//! model itself ([`TraceEvent`], [`HistorySettings`], [`annotate`]) lives in
//! [`event`](crate::event) and is re-exported here.
//!
//! With the `trace-files` feature (on by default), the file formats: [`jsonl`] (blockpool's
//! JSON Lines, with the streaming sink), [`pickle`] (a restricted reader that runs no code, and
//! a writer) and [`pytorch`] (PyTorch's snapshot files both ways), [`perfetto`] (counter
//! tracks for Perfetto and `chrome://tracing`), [`rmm`] (RAPIDS RMM's CSV log) and
//! [`file`](mod@file) (loading any of them by content).

#[cfg(feature = "trace-files")]
mod address_hash;
#[cfg(feature = "trace-files")]
pub mod file;
#[cfg(feature = "trace-files")]
pub mod jsonl;
#[cfg(feature = "trace-files")]
pub mod limits;
#[cfg(feature = "trace-files")]
mod lines;
mod numbers;
#[cfg(feature = "trace-files")]
pub mod perfetto;
#[cfg(feature = "trace-files")]
pub mod pickle;
#[cfg(feature = "trace-files")]
pub mod pytorch;
#[cfg(feature = "trace-files")]
pub mod rmm;
pub mod snapshot;
pub mod state;

#[cfg(feature = "trace-files")]
pub(crate) use address_hash::AddressHasher;
// The event model lives in its own leaf; its types are part of every trace.
pub use crate::event::{
    annotate, Action, AnnotationGuard, Backtraces, Context, ContextId, ContextLevel, EventStamp,
    Frame, HistorySettings, TraceEvent,
};
#[cfg(feature = "trace-files")]
pub use limits::{ImportLimitExceeded, ImportLimits};
pub use numbers::EventNumbers;
pub use snapshot::{
    BlockState, Contexts, PytorchDetails, SegmentPool, SettingValue, Snapshot, SnapshotInvalid,
};
pub use state::{Conflict, DeviceState, MemoryTotals, StateError, StateWalker};
