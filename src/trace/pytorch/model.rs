//! The typed model of a PyTorch memory snapshot: segments, blocks, trace entries and frames,
//! named as PyTorch's `_memory_viz.py` and `torch.cuda.memory` name them.

use std::sync::Arc;

use crate::trace::pickle::Value;
use crate::trace::Action;

/// A PyTorch memory snapshot: the allocator's segments when it was taken and the recorded
/// history of allocator events.
#[derive(Clone, Debug, PartialEq)]
pub struct PytorchSnapshot {
    /// Every segment the caching allocator held, in the file's order.
    pub segments: Vec<Segment>,
    /// The recorded events, one list per device index (`device_traces[d]` is device `d`),
    /// oldest first; empty for the bare segment-list form, which records no history.
    pub device_traces: Vec<Vec<PytorchTraceEntry>>,
    /// The allocator's settings (`allocator_settings`, 2024 and later), kept as plain data
    /// because their keys change between PyTorch releases.
    pub allocator_settings: Option<Value>,
    /// Annotations from outside the allocator (`external_annotations`, newest files), as plain
    /// data.
    pub external_annotations: Option<Value>,
    /// Which historical form the file had.
    pub schema: Schema,
}

/// The historical forms of PyTorch's snapshot files, oldest first. The form is inferred from
/// what the file holds, so a file with nothing that tells two forms apart (an empty trace, say)
/// gets the older of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Schema {
    /// The whole file is a list of segments, without traces (early 2023).
    SegmentList,
    /// A dict of `segments` and `device_traces` whose blocks carry `history` lists instead of
    /// an `address` (2023); block addresses are computed from their segment's.
    LegacyBlockHistory,
    /// A dict of `segments` and `device_traces` with block addresses and frames, without
    /// `allocator_settings`; trace entries may lack `time_us` (late 2023).
    DeviceTraces,
    /// As [`DeviceTraces`](Self::DeviceTraces), plus `allocator_settings` (2024 and later).
    AllocatorSettings,
    /// Trace entries also carry `compile_context` or `user_metadata` (2025).
    CompileContext,
}

/// A segment: one device allocation of the caching allocator, split into blocks.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Device index.
    pub device: u32,
    /// Device address of the segment's start.
    pub address: u64,
    /// Size of the segment in bytes.
    pub total_size: u64,
    /// The stream the segment belongs to (PyTorch writes the `cudaStream_t` value).
    pub stream: u64,
    /// Which pool the segment serves.
    pub segment_type: SegmentType,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks (allocated, or freed with stream uses pending).
    pub active_size: u64,
    /// Bytes the callers of the allocated blocks asked for.
    pub requested_size: u64,
    /// Whether it is an expandable segment (`expandable_segments:True`); false when the file
    /// predates the key.
    pub is_expandable: bool,
    /// The memory pool the segment belongs to (`segment_pool_id`): `(0, 0)` for the default
    /// pool, another pair for a private pool (a CUDA graph's, or a `torch.cuda.MemPool`);
    /// `(0, 0)` when the file predates the key.
    pub segment_pool_id: (u64, u64),
    /// Call stack that allocated the segment, innermost first; empty when not recorded.
    pub frames: Arc<[Frame]>,
    /// The segment's blocks in address order; their sizes add up to `total_size`.
    pub blocks: Vec<Block>,
}

/// The pool a segment serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentType {
    /// The small pool (requests of up to 1 MiB), `"small"`.
    Small,
    /// The large pool, `"large"`.
    Large,
}

/// A block of a segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Device address; for legacy files without `address`, the segment's address plus the
    /// sizes of the blocks before it, as PyTorch's viewer computes it.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes the caller asked for; `size` when the file does not say.
    pub requested_size: u64,
    /// Whether the block is in use.
    pub state: BlockState,
    /// Call stack of the allocation, innermost first; for legacy files the frames of the first
    /// `history` entry; empty when not recorded.
    pub frames: Arc<[Frame]>,
}

/// Whether a block is in use, as PyTorch's `state` strings say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out to a caller, `"active_allocated"`.
    ActiveAllocated,
    /// Freed by the caller, waiting for stream uses to finish, `"active_pending_free"`.
    ActivePendingFree,
    /// Cached and free, `"inactive"`.
    Inactive,
}

/// One recorded allocator event of PyTorch's trace.
#[derive(Clone, Debug, PartialEq)]
pub struct PytorchTraceEntry {
    /// What happened.
    pub action: Action,
    /// Device address of the block or segment (for [`Action::Oom`]: the device's free bytes).
    pub addr: u64,
    /// Size in bytes of the block or segment.
    pub size: u64,
    /// The stream (PyTorch writes the `cudaStream_t` value).
    pub stream: u64,
    /// When it happened, in microseconds since the Unix epoch; `None` in files that predate
    /// `time_us`.
    pub time_us: Option<u64>,
    /// Call stack of the event, innermost first; empty when not recorded.
    pub frames: Arc<[Frame]>,
    /// torch.compile's context of the event (`compile_context`, `"N/A"` outside compiled
    /// code), when recorded; equal strings are shared.
    pub compile_context: Option<Arc<str>>,
}

/// One frame of a recorded call stack (Python, TorchScript or C++).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Source file, `"??"` when unknown.
    pub filename: Arc<str>,
    /// Line in `filename`, 0 when unknown.
    pub line: u32,
    /// The function.
    pub name: Arc<str>,
}
