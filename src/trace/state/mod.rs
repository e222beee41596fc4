//! The allocator's memory at any event of a trace: segments and blocks rebuilt from a
//! [`Snapshot`](crate::trace::Snapshot)'s end state by walking its events back, as PyTorch's
//! viewer does, including allocations alive before the trace began.
//!
//! [`Snapshot::state_at`](crate::trace::Snapshot::state_at) gives one state;
//! [`StateWalker`] moves through them one event at a time with running [`MemoryTotals`], for
//! peak finding, timelines and replay. What each event undoes and what is tolerated is in
//! `undo.rs` and on [`StateWalker`]; what is not is a [`StateError`].

mod change;
mod error;
mod memory;
mod undo;
mod walker;

pub use error::{Conflict, StateError};
pub use memory::{DeviceState, MemoryTotals};
pub use walker::StateWalker;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
