//! What the traced program's own allocator did, rebuilt from the file by walking its events
//! from the starting state: segment allocations and frees, and the reserved peak, to set
//! beside what blockpool does with the same stream.

use crate::analysis::fragmentation::ReservedPeak;
use blockpool::trace::{Action, StateWalker};
use serde::Serialize;

/// The trace allocator's own figures on one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Recorded {
    /// `segment_alloc` events, and `segment_map` ones (expandable segments), each a device
    /// allocation as PyTorch's `num_device_alloc` counts them.
    pub segment_allocs: u64,
    /// `segment_free` and `segment_unmap` events.
    pub segment_frees: u64,
    /// Highest bytes in segments, the starting state included.
    pub peak_reserved_bytes: u64,
    /// Highest bytes in allocated blocks.
    pub peak_allocated_bytes: u64,
    /// Fragmentation as [`crate::analysis::fragmentation`] defines it: (reserved - allocated)
    /// / reserved at the reserved peak; 0 with nothing reserved.
    pub fragmentation_at_peak: f64,
    /// Bytes in segments before the first event.
    pub reserved_at_start_bytes: u64,
    /// Bytes in segments after the last event.
    pub reserved_at_end_bytes: u64,
    /// The device's memory as the recording's out-of-memory events tell it: the most of
    /// `device_free` plus the bytes reserved then, over its `oom` events; `None` without one.
    /// Memory other processes held is not in it.
    pub device_memory_bytes: Option<u64>,
}

/// Walks `walker` from where it is to the end and sums up what the trace's allocator did.
/// Segment sizes are exact; allocated bytes are block sizes, a block known only from PyTorch's
/// events (which record requests) at its request rounded as the allocator rounds it, the least
/// it took.
pub fn walk(walker: &mut StateWalker) -> Recorded {
    let start = walker.totals();
    let mut recorded = Recorded {
        reserved_at_start_bytes: start.reserved_bytes,
        ..Recorded::default()
    };
    let mut peak = ReservedPeak::start(start.reserved_bytes, start.allocated_bytes);
    recorded.peak_allocated_bytes = start.allocated_bytes;
    while let Some(event) = walker.step() {
        let action = event.action;
        // An `oom` event's address is the device's free bytes, as PyTorch records it.
        let device_free = event.addr;
        match action {
            Action::SegmentAlloc | Action::SegmentMap => recorded.segment_allocs += 1,
            Action::SegmentFree | Action::SegmentUnmap => recorded.segment_frees += 1,
            _ => {}
        }
        let totals = walker.totals();
        let (reserved, allocated) = (totals.reserved_bytes, totals.allocated_bytes);
        if action == Action::Oom {
            let memory = device_free.saturating_add(reserved);
            recorded.device_memory_bytes = recorded.device_memory_bytes.max(Some(memory));
        }
        recorded.peak_allocated_bytes = recorded.peak_allocated_bytes.max(allocated);
        peak.note(walker.position(), reserved, allocated);
    }
    recorded.peak_reserved_bytes = peak.reserved_bytes;
    recorded.fragmentation_at_peak = peak.fragmentation;
    recorded.reserved_at_end_bytes = walker.totals().reserved_bytes;
    recorded
}
