//! What the reference model knows: the live allocations and who owns them, the memory freed
//! with stream events pending, and per device the events recorded on each stream, the faults
//! injected and the counters seen so far.

use blockpool::{Allocation, SimBackend, StreamId};

use super::ops::STREAMS;

/// Who owns a live allocation.
pub(super) enum Owner {
    Handle(Allocation<SimBackend>),
    Raw,
}

/// A live allocation as the model sees it.
pub(super) struct Live {
    pub(super) owner: Owner,
    pub(super) device: usize,
    pub(super) ptr: u64,
    pub(super) size: usize,
    pub(super) stream: StreamId,
    /// Streams other than `stream` it was recorded on.
    pub(super) used_on: Vec<StreamId>,
}

/// Memory freed while other streams still had work queued on it: it must not be handed out
/// until every event in `waits` (stream, ticket) has completed.
pub(super) struct Guard {
    pub(super) device: usize,
    pub(super) ptr: u64,
    pub(super) size: usize,
    pub(super) waits: Vec<(StreamId, u64)>,
}

/// Events the allocator has recorded on a simulated stream, and how many have completed.
#[derive(Clone, Copy, Default)]
pub(super) struct StreamModel {
    pub(super) recorded: u64,
    pub(super) completed: u64,
    pub(super) hung: bool,
}

impl StreamModel {
    pub(super) fn pending(&self) -> bool {
        self.completed < self.recorded
    }
}

#[derive(Default)]
pub(super) struct DeviceModel {
    pub(super) streams: [StreamModel; STREAMS.len()],
    /// Injected allocation faults: (device allocations left until it fires, fires as OOM).
    pub(super) faults: Vec<(u64, bool)>,
    pub(super) fraction: Option<f64>,
    pub(super) oom_above: Option<usize>,
    /// Device allocation calls (successful or not) seen so far.
    pub(super) alloc_calls: u64,
    /// Segments allocated on the device so far.
    pub(super) segment_allocs: u64,
    /// `num_sync_all_streams` seen so far (since the last reset of accumulated stats).
    pub(super) syncs: i64,
    /// `num_ooms` seen so far (since the last reset of accumulated stats).
    pub(super) ooms: i64,
    /// The device's (segment allocations, segment frees) at the last reset of accumulated
    /// stats: `num_device_alloc` and `num_device_free` count from there.
    pub(super) calls_at_reset: (u64, u64),
    /// Raw pointers freed on this device, for double frees.
    pub(super) freed_raw: Vec<u64>,
}

/// What one operation did to a device, read from its counters.
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct Effects {
    pub(super) new_segments: u64,
    /// Out-of-memory failures the allocator counted.
    pub(super) ooms: i64,
    pub(super) fired_oom: bool,
    pub(super) fired_error: bool,
}

pub(super) fn stream_index(stream: StreamId) -> usize {
    STREAMS
        .iter()
        .position(|&s| s == stream)
        .unwrap_or_else(|| panic!("{stream} is not one of the model's streams"))
}
