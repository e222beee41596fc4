//! The expandable address space of one device, as a component: whether expandable segments
//! are in force and the unmapped blocks of each pool. (The bytes mapped are counted with the
//! reserved bytes, `SegmentMap::reserve`.) The bookkeeping in
//! `expandable.rs` changes it only through this interface, and `check_invariants` reads it
//! the same way.

use crate::backend::StreamId;
use crate::pool::block::BlockId;
use std::collections::BTreeMap;

/// A device's expandable-segment state.
#[derive(Debug)]
pub(crate) struct Expandable {
    /// Whether expandable segments are on: asked for by the configuration and, once the
    /// backend was asked, supported by it.
    on: bool,
    /// Whether the backend was asked yet.
    settled: bool,
    /// Unmapped blocks of the large (`[0]`) and small (`[1]`) pool, by (stream, address).
    unmapped: [BTreeMap<(StreamId, u64), BlockId>; 2],
}

impl Expandable {
    /// The state of a device whose settings ask for expandable segments (`on`) or not.
    pub(crate) fn new(on: bool) -> Expandable {
        Expandable {
            on,
            settled: false,
            unmapped: [BTreeMap::new(), BTreeMap::new()],
        }
    }

    /// Whether expandable segments are on, as far as is known: before the backend is asked,
    /// whether the settings ask for them.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// Whether the backend still has to say if it can map memory.
    pub(crate) fn unsettled(&self) -> bool {
        self.on && !self.settled
    }

    /// Takes the backend's answer: without support, expandable segments are off for good.
    pub(crate) fn settle(&mut self, supported: bool) {
        self.settled = true;
        self.on &= supported;
    }

    /// The unmapped blocks of a pool, by (stream, address).
    pub(crate) fn unmapped(&self, small: bool) -> &BTreeMap<(StreamId, u64), BlockId> {
        &self.unmapped[usize::from(small)]
    }

    /// The unmapped blocks of a pool that belong to `stream`, lowest address first.
    pub(crate) fn unmapped_on(
        &self,
        small: bool,
        stream: StreamId,
    ) -> impl Iterator<Item = BlockId> + '_ {
        self.unmapped(small)
            .range((stream, 0)..=(stream, u64::MAX))
            .map(|(_, &id)| id)
    }

    /// Adds the unmapped block `id` of `stream` at `addr` to its pool's set.
    pub(crate) fn insert_unmapped(
        &mut self,
        small: bool,
        stream: StreamId,
        addr: u64,
        id: BlockId,
    ) {
        self.unmapped[usize::from(small)].insert((stream, addr), id);
    }

    /// Takes the unmapped block of `stream` at `addr` out of its pool's set; `None` when the
    /// set has none there.
    pub(crate) fn remove_unmapped(
        &mut self,
        small: bool,
        stream: StreamId,
        addr: u64,
    ) -> Option<BlockId> {
        self.unmapped[usize::from(small)].remove(&(stream, addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_without_support_turns_it_off_once_asked() {
        let mut space = Expandable::new(true);
        assert!(space.is_on() && space.unsettled());
        space.settle(false);
        assert!(!space.is_on() && !space.unsettled());
        let mut off = Expandable::new(false);
        assert!(
            !off.unsettled(),
            "nothing to ask when the settings ask for nothing"
        );
        off.settle(true);
        assert!(
            !off.is_on(),
            "support does not turn on what was not asked for"
        );
    }

    #[test]
    fn unmapped_sets_are_per_pool_and_per_stream() {
        let mut space = Expandable::new(true);
        let (s1, s2) = (StreamId::from_raw(1), StreamId::from_raw(2));
        space.insert_unmapped(false, s1, 0x3000, BlockId::from_index(3));
        space.insert_unmapped(false, s1, 0x1000, BlockId::from_index(1));
        space.insert_unmapped(false, s2, 0x2000, BlockId::from_index(2));
        space.insert_unmapped(true, s1, 0x4000, BlockId::from_index(4));
        let on_s1: Vec<BlockId> = space.unmapped_on(false, s1).collect();
        assert_eq!(on_s1, [BlockId::from_index(1), BlockId::from_index(3)]);
        assert_eq!(space.unmapped(true).len(), 1);
        assert_eq!(
            space.remove_unmapped(false, s2, 0x2000),
            Some(BlockId::from_index(2))
        );
        assert_eq!(space.remove_unmapped(false, s2, 0x2000), None);
    }
}
