//! Pickle, the format of PyTorch's memory snapshots, restricted to plain data.
//!
//! The reader parses protocols 0 to 5 into a [`Value`] tree and refuses every opcode that
//! would import or call anything, naming it; objects the file shares through its memo stay
//! shared (`Arc`), so a frame referenced hundreds of thousands of times is stored once. The
//! writer produces protocol 4 with a memo, as `pickle.dumps` would, so PyTorch's own tools load
//! it.

mod opcodes;
mod reader;
mod value;
mod writer;

pub use reader::{read, read_from, PickleError, ReadLimits};
pub(crate) use reader::{read_absorbing, Absorb, Container, Kind, Offer, Slot, View};
pub use value::Value;
pub use writer::{write, write_to, WriteOptions};
