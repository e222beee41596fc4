//! Traces: allocation history, snapshots and trace files, ours and PyTorch's.
//!
//! So far: the event model ([`TraceEvent`]), the restricted pickle reader and writer for
//! PyTorch's snapshot files ([`pickle`]) and RMM's CSV allocation log ([`rmm`]).

mod event;
pub mod pickle;
pub mod rmm;

pub use event::{Action, ContextId, TraceEvent};
