//! Traces: allocation history, snapshots and trace files, ours and PyTorch's.
//!
//! So far: the event model ([`TraceEvent`]), history recording settings and the per-device
//! ring buffer ([`HistorySettings`]), contexts and annotations ([`annotate`], [`Context`]),
//! the restricted pickle reader and writer for PyTorch's snapshot files ([`pickle`]), typed
//! import of PyTorch's memory snapshots ([`pytorch`]) and RMM's CSV allocation log ([`rmm`]).

mod address_hash;
mod context;
mod event;
pub mod file;
mod history;
pub mod jsonl;
mod lines;
pub mod perfetto;
pub mod pickle;
pub mod pytorch;
pub mod rmm;
pub mod snapshot;
pub mod state;

pub(crate) use address_hash::AddressHasher;
pub use context::{annotate, AnnotationGuard, Context, Frame};
pub(crate) use context::{current as current_context, lookup as lookup_context, AnnotationSink};
pub(crate) use context::{register as register_sink, unregister as unregister_sink};
pub use event::{Action, ContextId, TraceEvent};
pub(crate) use history::TraceRing;
pub use history::{Backtraces, ContextLevel, EventStamp, HistorySettings};
pub use snapshot::{BlockState, Contexts, Snapshot, SnapshotInvalid};
pub use state::{Conflict, DeviceState, MemoryTotals, StateError, StateWalker};
