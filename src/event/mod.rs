//! The event model: what the allocator records and with what context. A leaf that both the
//! bookkeeping layer (`pool`, private) and the trace files ([`trace`](crate::trace))
//! use; it does no I/O and starts no threads.
//!
//! - [`TraceEvent`], [`Action`], [`ContextId`]: one line of history, PyTorch's `TraceEntry`;
//! - [`HistorySettings`], [`ContextLevel`], [`Backtraces`], [`EventStamp`] and the per-device
//!   ring buffer that keeps the newest events;
//! - [`annotate`], [`Context`], [`Frame`]: the thread's tag stack (interned once per process,
//!   bounded by [`MAX_TAG_BYTES`], [`MAX_TAG_DEPTH`] and [`MAX_TAG_STACKS`]) and call stacks;
//! - [`ContextTable`]: an allocator's contexts, bounded by its `max_contexts`.

mod context;
mod entry;
mod history;
mod stacks;
mod table;
mod tags;

pub(crate) use context::AnnotationSink;
pub use context::{annotate, AnnotationGuard, Context, Frame, LineText};
pub(crate) use context::{register as register_sink, unregister as unregister_sink};
pub use entry::{Action, ContextId, TraceEvent};
pub(crate) use history::TraceRing;
pub use history::{Backtraces, ContextLevel, EventStamp, HistorySettings};
pub use stacks::MAX_STACK_FRAMES;
pub use table::{ContextTable, DEFAULT_MAX_CONTEXTS};
#[cfg(feature = "trace-files")]
pub(crate) use tags::bounded as bounded_tag;
pub use tags::{dropped_tag_stacks, MAX_TAG_BYTES, MAX_TAG_DEPTH, MAX_TAG_STACKS};
