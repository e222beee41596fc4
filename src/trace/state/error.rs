//! Why a trace cannot be rebuilt into states: [`StateError`], and the [`Conflict`] it names.

use crate::trace::{Action, BlockState};

/// Why the state of a device at some event cannot be rebuilt from a [`Snapshot`].
///
/// Rebuilding tolerates what truncated or foreign traces legitimately contain: allocations and
/// segments made before the trace began, and end states that lack what the events say is live
/// at the end (RMM logs have no end state at all). What it refuses are true contradictions,
/// where the events and the end state disagree about memory both describe.
///
/// [`Snapshot`]: crate::trace::Snapshot
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// An event contradicts the state the later events and the end state imply.
    #[error(
        "event {index} of device {device} ({action} at {addr:#x}) contradicts the later \
         events or the end state: {conflict}; the trace was edited, merged from two runs or \
         lost events in between, so rebuild from a trace recorded in one piece"
    )]
    Contradiction {
        /// Device index.
        device: u32,
        /// Position of the event among the device's events, from 0.
        index: usize,
        /// What the event records.
        action: Action,
        /// Address the event names.
        addr: u64,
        /// What is wrong.
        conflict: Conflict,
    },
    /// The snapshot's segments for the device are inconsistent on their own.
    #[error(
        "the end state of device {device} is inconsistent at {address:#x}: {conflict}; \
         `Snapshot::validate` names the fault in full"
    )]
    EndState {
        /// Device index.
        device: u32,
        /// Address of the segment or block at fault.
        address: u64,
        /// What is wrong.
        conflict: Conflict,
    },
    /// The event index asked for is past the device's last event.
    #[error(
        "device {device} has {events} recorded events, so its states are numbered 0 to \
         {events}; {index} is past the end"
    )]
    IndexOutOfRange {
        /// Device index.
        device: u32,
        /// The index asked for.
        index: usize,
        /// How many events the device has.
        events: usize,
    },
}

/// What contradicts what, for a [`StateError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Conflict {
    /// A block or segment of 0 bytes.
    #[error("it is 0 bytes long")]
    Empty,
    /// A range that runs past the end of the 64-bit address space.
    #[error("its {size} bytes run past the end of the address space")]
    PastAddressSpace {
        /// The range's size in bytes.
        size: u64,
    },
    /// A block overlaps another live block.
    #[error("it overlaps the live block at {block:#x}")]
    OverlapsBlock {
        /// Address of the other block.
        block: u64,
    },
    /// A block lies partly inside a segment.
    #[error("it crosses a boundary of the segment at {segment:#x}")]
    CrossesSegment {
        /// Address of the segment.
        segment: u64,
    },
    /// A segment overlaps another segment.
    #[error("it overlaps the segment at {segment:#x}")]
    OverlapsSegment {
        /// Address of the other segment.
        segment: u64,
    },
    /// A range lies partly inside a segment (a `segment_map` that only part of a segment
    /// covers).
    #[error("it lies only partly inside the segment at {segment:#x}")]
    PartlyInSegment {
        /// Address of the segment.
        segment: u64,
    },
    /// A block would be live in device memory that no segment holds at that point.
    #[error("the block at {block:#x} would be live in memory the allocator did not hold")]
    LiveBlockOutsideSegment {
        /// Address of the block.
        block: u64,
    },
    /// Right after an `alloc`, the block is pending free with no `free_requested` in between.
    #[error("the block is pending free right after it was allocated, with no free_requested")]
    PendingAfterAlloc,
    /// Right after a free, a block at the same address is still live with no `alloc` in
    /// between.
    #[error("a block at this address is still {state} right after the free, with no alloc")]
    LiveAfterFree {
        /// The state of that block.
        state: BlockState,
    },
}
