//! Export to Perfetto / Chrome trace-event JSON, which loads in <https://ui.perfetto.dev> and
//! `chrome://tracing`.
//!
//! [`write_perfetto`] writes a [`Snapshot`](crate::trace::Snapshot) as one process per device
//! with counter tracks for its allocated, reserved and requested bytes, the annotation tags as
//! nested slices and out-of-memory failures as instant events. The pieces it is built from are
//! public too: [`memory_timeline`] (the byte counters after each change) and
//! [`annotation_intervals`] (when each [`annotate`](crate::annotate) tag was on the stack).

mod annotations;
mod counters;
mod writer;

pub use annotations::{annotation_intervals, AnnotationInterval};
pub use counters::{memory_timeline, MemorySample};
pub use writer::write_perfetto;
