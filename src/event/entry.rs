//! Trace events: what the allocator did, one line of history each.
//!
//! The actions and their meaning follow PyTorch's `TraceEntry` (`torch.cuda.memory._record_memory_history`),
//! so PyTorch's files and ours describe the same things. Contexts (tag stacks and frames) are
//! interned elsewhere and referenced by [`ContextId`].

use crate::backend::StreamId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// What an event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    /// A block was handed out (`size` is the block, `requested` what was asked for).
    Alloc,
    /// The caller freed a block; with pending stream uses, reuse waits for their events.
    FreeRequested,
    /// The block went back to the cache.
    FreeCompleted,
    /// A segment was obtained from the device.
    SegmentAlloc,
    /// A segment was returned to the device.
    SegmentFree,
    /// Physical memory was mapped into an expandable segment.
    SegmentMap,
    /// Physical memory was unmapped from an expandable segment.
    SegmentUnmap,
    /// A request failed for lack of memory (`addr` carries the device's free bytes, as in
    /// PyTorch).
    Oom,
    /// A snapshot was taken.
    Snapshot,
    /// A user annotation (`annotate`); PyTorch calls it `user_defined`.
    Annotate,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Oom,
        Action::Snapshot,
        Action::Annotate,
    ];

    /// The name in our trace files: `alloc`, `free_requested`, ..., `annotate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::Annotate => "annotate",
        }
    }

    /// The name in PyTorch's snapshot files (the same, but `user_defined` for annotations).
    pub fn pytorch_name(self) -> &'static str {
        match self {
            Action::Annotate => "user_defined",
            other => other.as_str(),
        }
    }

    /// The action named `name` in either spelling.
    pub fn from_name(name: &str) -> Option<Action> {
        if name == "user_defined" {
            return Some(Action::Annotate);
        }
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An interned context (tag stack and frames); 0 means none was recorded.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct ContextId(pub u32);

impl ContextId {
    /// No context.
    pub const NONE: ContextId = ContextId(0);
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// Device index.
    pub device: u32,
    /// Stream of the block or segment.
    pub stream: StreamId,
    /// Device address (for `Oom`: the device's free bytes, as PyTorch records it).
    pub addr: u64,
    /// Block or segment size in bytes.
    pub size: u64,
    /// Bytes the caller asked for (blocks only; 0 otherwise).
    pub requested: u64,
    /// Microseconds since recording started.
    pub time_us: u64,
    /// Context of the call, if recorded.
    pub context: ContextId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_both_spellings() {
        for action in Action::ALL {
            assert_eq!(Action::from_name(action.as_str()), Some(action));
            assert_eq!(Action::from_name(action.pytorch_name()), Some(action));
        }
        assert_eq!(Action::Annotate.pytorch_name(), "user_defined");
        assert_eq!(Action::from_name("segment_free"), Some(Action::SegmentFree));
        assert_eq!(Action::from_name("free"), None);
    }
}
