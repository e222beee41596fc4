//! The event model: what the allocator records and with what context. A leaf that both the
//! bookkeeping layer ([`pool`](crate::pool)) and the trace files ([`trace`](crate::trace))
//! use; it does no I/O and starts no threads.
//!
//! - [`TraceEvent`], [`Action`], [`ContextId`]: one line of history, PyTorch's `TraceEntry`;
//! - [`HistorySettings`], [`ContextLevel`], [`Backtraces`], [`EventStamp`] and the per-device
//!   ring buffer that keeps the newest events;
//! - [`annotate`], [`Context`], [`Frame`]: the thread's tag stack and call stacks, interned
//!   once per process.

mod context;
mod entry;
mod history;

pub use context::{annotate, AnnotationGuard, Context, Frame, LineText};
pub(crate) use context::{current as current_context, lookup as lookup_context, AnnotationSink};
pub(crate) use context::{register as register_sink, unregister as unregister_sink};
pub use entry::{Action, ContextId, TraceEvent};
pub(crate) use history::TraceRing;
pub use history::{Backtraces, ContextLevel, EventStamp, HistorySettings};
