//! Typed import of PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`).
//!
//! [`load_pytorch_snapshot`] reads a snapshot file with the restricted [`pickle`](super::pickle)
//! reader and [`snapshot_from_value`] turns the plain-data tree into a [`PytorchSnapshot`]:
//! segments with their blocks, and the per-device trace of allocator events. Every historical
//! form PyTorch has written is accepted (see [`Schema`]); keys this importer does not know are
//! ignored, while a missing required key or a value of the wrong type is a [`SnapshotError`]
//! naming where in the file it is. Frame lists the file shares by reference stay shared: each
//! distinct list becomes one `Arc<[Frame]>`.

mod convert;
mod error;
mod export;
mod fields;
mod model;

pub use convert::{load_pytorch_snapshot, snapshot_from_value};
pub use error::SnapshotError;
pub use model::{
    Block, BlockState, Frame, PytorchSnapshot, PytorchTraceEntry, Schema, Segment, SegmentType,
};
