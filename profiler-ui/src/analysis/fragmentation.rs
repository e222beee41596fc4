//! Fragmentation, one definition for every command that prints it (`summary`, `replay`,
//! `explain`, `tune`'s replays): the share of reserved memory that is not allocated,
//! `(reserved - allocated) / reserved`, taken at the reserved peak, in the state of the peak
//! where allocated memory is highest. It says how much of the most memory the allocator ever
//! held sat unused even when that memory was fullest: a reservation that stays flat while a
//! workload fills it counts at its fullest, not at its first state (before the first event of
//! a trace whose segments were all made before recording began).
//!
//! PyTorch's trace records a new segment just before the allocation it serves; that
//! allocation is at the same reserved bytes with more allocated, so the peak is taken with it
//! in, as an allocator that counts both at once (blockpool's, in a replay) sees it.

/// The formula, in the words the commands print beside it.
pub const FORMULA: &str = "(reserved - allocated) / reserved";

/// How the figure is defined, in the words the commands print beside it.
pub const DEFINITION: &str =
    "(reserved - allocated) / reserved at the reserved peak, where allocated is highest";

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
    /// The state index, at the peak, where allocated was highest (the first such).
    pub fullest_index: usize,
    /// [`unallocated_share`] there.
    pub fragmentation: f64,
}

impl ReservedPeak {
    /// The tracker at the starting state (index 0).
    pub fn start(reserved: u64, allocated: u64) -> ReservedPeak {
        ReservedPeak {
            reserved_bytes: reserved,
            index: 0,
            fullest_index: 0,
            fragmentation: unallocated_share(reserved, allocated),
        }
    }

    /// Notes the state at `index`; whether it is a new peak.
    pub fn note(&mut self, index: usize, reserved: u64, allocated: u64) -> bool {
        let share = unallocated_share(reserved, allocated);
        if reserved > self.reserved_bytes {
            *self = ReservedPeak {
                reserved_bytes: reserved,
                index,
                fullest_index: index,
                fragmentation: share,
            };
            return true;
        }
        if reserved == self.reserved_bytes && share < self.fragmentation {
            self.fullest_index = index;
            self.fragmentation = share;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_is_taken_where_it_is_fullest() {
        let mut peak = ReservedPeak::start(0, 0);
        assert!(peak.note(1, 20 << 20, 0));
        assert_eq!(peak.fragmentation, 1.0, "the segment alone is all unused");
        assert!(!peak.note(2, 20 << 20, 5 << 20));
        assert_eq!(peak.fragmentation, 0.75, "with the block it was made for");
        assert!(!peak.note(3, 20 << 20, 10 << 20));
        assert!(!peak.note(4, 20 << 20, 2 << 20));
        assert_eq!(peak.fragmentation, 0.5, "the fullest state of the peak");
        assert_eq!(
            (peak.reserved_bytes, peak.index, peak.fullest_index),
            (20 << 20, 1, 3)
        );
        // A higher peak starts again, though it is emptier.
        assert!(peak.note(5, 40 << 20, 2 << 20));
        assert_eq!(peak.fragmentation, 0.95);
        assert_eq!((peak.index, peak.fullest_index), (5, 5));
    }

    #[test]
    fn a_flat_reservation_counts_at_its_fullest_not_its_first_state() {
        // Every segment made before recording: reserved never moves.
        let mut peak = ReservedPeak::start(40 << 30, 10 << 30);
        for (i, allocated) in [20u64, 39, 30].into_iter().enumerate() {
            peak.note(i + 1, 40 << 30, allocated << 30);
        }
        assert_eq!(peak.index, 0);
        assert_eq!(peak.fullest_index, 2);
        assert_eq!(peak.fragmentation, 1.0 / 40.0);
    }

    #[test]
    fn nothing_reserved_is_no_fragmentation() {
        assert_eq!(unallocated_share(0, 0), 0.0);
        assert_eq!(ReservedPeak::start(0, 0).fragmentation, 0.0);
    }
}
