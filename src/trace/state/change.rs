//! [`Change`]: what one event did to a device's memory, as exact before/after values, so a
//! walker replays it either way without checks.
//!
//! A trace has one change per event, so the common one, a block's change, is kept in 32
//! bytes: an event changes one block's state (allocated, pending free or gone) and never its
//! size, request or context, so those are stored once with the state before and after.

use super::memory::{LiveBlock, LiveSegment, Memory, MemoryTotals};
use crate::trace::{BlockState, ContextId};

/// What one event changed.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Change {
    /// Nothing changed.
    None,
    /// One active block's state changed.
    Block(BlockChange),
    /// Segments were replaced (rarer: boxed, so the common change stays small).
    Segments(Box<SegmentsChange>),
}

/// The active block at `addr` went from state `before` to `after` (`None`: no block there),
/// with the same size, request and context throughout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct BlockChange {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    pub context: ContextId,
    pub before: Option<BlockState>,
    pub after: Option<BlockState>,
}

/// The segments `before` were replaced by the segments `after`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SegmentsChange {
    pub before: Vec<(u64, LiveSegment)>,
    pub after: Vec<(u64, LiveSegment)>,
}

impl Change {
    /// A change of the block at `addr` whose data is `block`'s (its state aside).
    pub fn block(
        addr: u64,
        block: &LiveBlock,
        before: Option<BlockState>,
        after: Option<BlockState>,
    ) -> Change {
        Change::Block(BlockChange {
            addr,
            size: block.size,
            requested: block.requested,
            context: block.context,
            before,
            after,
        })
    }

    /// The segments `before` replaced by `after`.
    pub fn segments(before: Vec<(u64, LiveSegment)>, after: Vec<(u64, LiveSegment)>) -> Change {
        Change::Segments(Box::new(SegmentsChange { before, after }))
    }

    /// Sets the context of the block a block change names, before and after.
    pub fn set_block_context(&mut self, context: ContextId) {
        if let Change::Block(change) = self {
            change.context = context;
        }
    }

    /// The size of the block a block change names.
    pub fn block_size(&self) -> Option<u64> {
        match self {
            Change::Block(change) => Some(change.size),
            Change::None | Change::Segments(_) => None,
        }
    }

    /// Applies the change forward to `totals` alone: what [`apply`](Self::apply) does to the
    /// totals of a memory in the state before it, without the memory.
    pub fn apply_to_totals(&self, totals: &mut MemoryTotals) {
        match self {
            Change::None => {}
            Change::Block(change) => {
                for (state, sign) in [(change.before, -1), (change.after, 1)] {
                    if let Some(state) = state {
                        totals.add_block(state, change.size, change.requested, sign);
                    }
                }
            }
            Change::Segments(change) => {
                for (segments, sign) in [(&change.before, -1), (&change.after, 1)] {
                    for (_, segment) in segments {
                        totals.add_segment(segment.size, sign);
                    }
                }
            }
        }
    }

    /// Applies the change: forward (the event happens) or backward (it is undone).
    pub fn apply(&self, memory: &mut Memory, forward: bool) {
        match self {
            Change::None => {}
            Change::Block(change) => {
                let (from, to) = if forward {
                    (change.before, change.after)
                } else {
                    (change.after, change.before)
                };
                // Inserting replaces the block there (one lookup, not two).
                match (from, to) {
                    (_, Some(state)) => memory.insert_block(change.addr, change.live(state)),
                    (Some(_), None) => {
                        memory.remove_block(change.addr);
                    }
                    (None, None) => {}
                }
            }
            Change::Segments(change) => {
                let (from, to) = if forward {
                    (&change.before, &change.after)
                } else {
                    (&change.after, &change.before)
                };
                for (addr, _) in from {
                    memory.remove_segment(*addr);
                }
                for (addr, segment) in to {
                    memory.insert_segment(*addr, *segment);
                }
            }
        }
    }
}

impl BlockChange {
    /// The block in `state`.
    fn live(&self, state: BlockState) -> LiveBlock {
        LiveBlock {
            size: self.size,
            requested: self.requested,
            state,
            context: self.context,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_kept_in_32_bytes() {
        assert_eq!(std::mem::size_of::<Change>(), 32);
    }
}
