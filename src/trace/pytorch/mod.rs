//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`): typed import, conversion to
//! and from [`Snapshot`](crate::trace::Snapshot), and export that PyTorch's viewer loads.
//!
//! [`load_pytorch_snapshot`] reads a snapshot file with the restricted [`pickle`](super::pickle)
//! reader and [`snapshot_from_value`] turns the plain-data tree into a [`PytorchSnapshot`]:
//! segments with their blocks, and the per-device trace of allocator events. Every historical
//! form PyTorch has written is accepted (see [`Schema`]); keys this importer does not know are
//! ignored, while a missing required key or a value of the wrong type is a [`SnapshotError`]
//! naming where in the file it is. Frame lists the file shares by reference stay shared: each
//! distinct list becomes one `Arc<[Frame]>`.
//!
//! [`load_pytorch_snapshot_as_snapshot`] goes on to the format-neutral `Snapshot`, and
//! [`write_pytorch_snapshot`] writes a `Snapshot` in PyTorch's newest schema, with a few extra
//! keys PyTorch ignores so that reading the file back gives the same `Snapshot`.

mod annotations;
mod convert;
mod error;
mod export;
mod extras;
mod fields;
mod import;
mod model;

pub use convert::{load_pytorch_snapshot, snapshot_from_value};
pub use error::SnapshotError;
pub use export::{
    snapshot_to_pytorch_value, write_pytorch_snapshot, ExportError, MAX_EXPORT_DEVICE,
};
pub use extras::TAG_FILENAME;
#[cfg(test)]
use import::taken_by_stream;
pub use import::{
    load_pytorch_snapshot_as_snapshot, snapshot_from_pytorch_value,
    snapshot_from_pytorch_value_with,
};
pub(crate) use import::{read_pytorch_pickle, snapshot_from_owned_pytorch_value, Streamed};
pub use model::{
    Block, BlockState, Frame, PytorchSnapshot, PytorchTraceEntry, Schema, Segment, SegmentType,
};

#[cfg(test)]
mod absorb_tests;
#[cfg(test)]
mod frame_line_tests;
#[cfg(test)]
mod interop_tests;
