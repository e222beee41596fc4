//! Fragmentation, one definition for every command that prints it (`summary`, `replay`): the
//! share of reserved memory that is not allocated, `(reserved - allocated) / reserved`, taken
//! at the reserved peak, the first state where reserved memory is highest. It says how much of
//! the most memory the allocator ever held sat in its cache unused.
//!
//! PyTorch's trace records a new segment just before the allocation it serves; a peak reached
//! by a `segment_alloc` (or `segment_map`) is therefore taken with the next `alloc` in, as an
//! allocator that counts both at once (blockpool's, in a replay) sees it.

use blockpool::trace::Action;

/// How the figure is defined, in the words the commands print beside it.
pub const DEFINITION: &str = "(reserved - allocated) / reserved at the reserved peak";

/// `(reserved - allocated) / reserved`; 0 with nothing reserved.
pub fn unallocated_share(reserved: u64, allocated: u64) -> f64 {
    if reserved == 0 {
        0.0
    } else {
        reserved.saturating_sub(allocated) as f64 / reserved as f64
    }
}

/// Follows reserved and allocated bytes state by state and keeps the reserved peak and the
/// fragmentation there.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReservedPeak {
    /// Highest bytes in segments.
    pub reserved_bytes: u64,
    /// The state index (after this many events) where reserved first reached it.
    pub index: usize,
    /// [`unallocated_share`] there.
    pub fragmentation: f64,
    /// The peak came from a new segment, whose allocation has not been seen yet.
    segment_pending: bool,
}

impl ReservedPeak {
    /// The tracker at the starting state (index 0).
    pub fn start(reserved: u64, allocated: u64) -> ReservedPeak {
        ReservedPeak {
            reserved_bytes: reserved,
            index: 0,
            fragmentation: unallocated_share(reserved, allocated),
            segment_pending: false,
        }
    }

    /// Notes the state at `index`, reached by `action`; whether it is a new peak.
    pub fn note(&mut self, index: usize, action: Action, reserved: u64, allocated: u64) -> bool {
        if reserved > self.reserved_bytes {
            self.reserved_bytes = reserved;
            self.index = index;
            self.fragmentation = unallocated_share(reserved, allocated);
            self.segment_pending = matches!(action, Action::SegmentAlloc | Action::SegmentMap);
            return true;
        }
        if std::mem::take(&mut self.segment_pending) && action == Action::Alloc {
            self.fragmentation = unallocated_share(reserved, allocated);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_from_a_new_segment_is_taken_with_the_allocation_it_serves() {
        let mut peak = ReservedPeak::start(0, 0);
        assert!(peak.note(1, Action::SegmentAlloc, 20 << 20, 0));
        assert_eq!(peak.fragmentation, 1.0, "the segment alone is all unused");
        assert!(!peak.note(2, Action::Alloc, 20 << 20, 5 << 20));
        assert_eq!(peak.fragmentation, 0.75, "with the block it was made for");
        assert!(!peak.note(3, Action::Alloc, 20 << 20, 10 << 20));
        assert_eq!(peak.fragmentation, 0.75, "later allocations do not move it");
        assert_eq!((peak.reserved_bytes, peak.index), (20 << 20, 1));
    }

    #[test]
    fn nothing_reserved_is_no_fragmentation() {
        assert_eq!(unallocated_share(0, 0), 0.0);
        assert_eq!(ReservedPeak::start(0, 0).fragmentation, 0.0);
    }
}
