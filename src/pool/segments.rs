//! One device's segments by address, and the bytes they reserve, as a component: the
//! bookkeeping adds and removes segments and counts reserved bytes only through this
//! interface.
//!
//! A fixed segment reserves its whole size when the device returns it; an expandable one
//! reserves nothing until memory is mapped into it, so the two counts move separately.

use super::block::BlockId;
use crate::event::ContextId;
use std::collections::BTreeMap;

/// Segment bookkeeping: enough to walk its blocks and to find it by address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    /// Size in bytes; for an expandable segment, of its whole reserved address range.
    pub size: usize,
    /// Whether the segment is an expandable one (`expandable.rs`).
    pub expandable: bool,
    /// The segment's first block.
    pub head: BlockId,
    /// Context of the call that allocated the segment, when history keeps contexts.
    pub context: ContextId,
}

/// A device's segments, lowest address first, and its reserved bytes.
#[derive(Debug, Default)]
pub(crate) struct SegmentMap {
    by_addr: BTreeMap<u64, Segment>,
    /// Sizes of the fixed segments plus the bytes mapped into expandable ones.
    reserved: usize,
}

impl SegmentMap {
    /// Adds the segment starting at `addr` (its reserved bytes are counted apart, with
    /// [`SegmentMap::reserve`]).
    pub(crate) fn insert(&mut self, addr: u64, segment: Segment) {
        self.by_addr.insert(addr, segment);
    }

    /// Removes the segment starting at `addr`, if there is one.
    pub(crate) fn remove(&mut self, addr: u64) -> Option<Segment> {
        self.by_addr.remove(&addr)
    }

    /// The segment starting at `addr`.
    pub(crate) fn get(&self, addr: u64) -> Option<&Segment> {
        self.by_addr.get(&addr)
    }

    /// The segment that starts at or before `addr`, with its address: the one holding `addr`
    /// when any does.
    pub(crate) fn at_or_before(&self, addr: u64) -> Option<(u64, &Segment)> {
        self.by_addr
            .range(..=addr)
            .next_back()
            .map(|(&start, s)| (start, s))
    }

    /// Whether `size` bytes at `addr` would overlap a segment (or run past the address space).
    pub(crate) fn overlaps(&self, addr: u64, size: usize) -> bool {
        addr.checked_add(size as u64).map_or(true, |end| {
            let before = self.by_addr.range(..end).next_back();
            before.is_some_and(|(&start, s)| start + s.size as u64 > addr)
        })
    }

    /// Every segment with its address, lowest address first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Segment)> + '_ {
        self.by_addr.iter().map(|(&addr, s)| (addr, s))
    }

    /// Number of segments.
    pub(crate) fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Reserved bytes: fixed segments' sizes plus the bytes mapped into expandable ones.
    #[inline]
    pub(crate) fn reserved(&self) -> usize {
        self.reserved
    }

    /// Counts `bytes` more reserved: a fixed segment added, or memory mapped.
    pub(crate) fn reserve(&mut self, bytes: usize) {
        self.reserved += bytes;
    }

    /// Counts `bytes` no longer reserved: a fixed segment released, or memory unmapped.
    pub(crate) fn unreserve(&mut self, bytes: usize) {
        self.reserved -= bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(size: usize) -> Segment {
        Segment {
            size,
            expandable: false,
            head: BlockId::from_index(0),
            context: ContextId::NONE,
        }
    }

    #[test]
    fn finds_the_segment_holding_an_address_and_refuses_overlaps() {
        let mut map = SegmentMap::default();
        map.insert(0x1000, segment(0x1000));
        map.insert(0x4000, segment(0x2000));
        assert_eq!(map.at_or_before(0x4fff).map(|(a, _)| a), Some(0x4000));
        assert_eq!(map.at_or_before(0x2800).map(|(a, _)| a), Some(0x1000));
        assert!(map.at_or_before(0xfff).is_none());
        assert!(!map.overlaps(0x2000, 0x2000), "ends where the next begins");
        assert!(map.overlaps(0x1800, 0x100), "inside the first");
        assert!(map.overlaps(0x3000, 0x1001), "runs into the second");
        assert!(map.overlaps(u64::MAX - 10, 100), "past the address space");
        let addrs: Vec<u64> = map.iter().map(|(a, _)| a).collect();
        assert_eq!(addrs, [0x1000, 0x4000]);
        assert_eq!(map.remove(0x1000).map(|s| s.size), Some(0x1000));
        assert_eq!((map.len(), map.get(0x1000).is_none()), (1, true));
    }

    #[test]
    fn reserved_bytes_are_counted_apart_from_the_map() {
        let mut map = SegmentMap::default();
        map.insert(0x1000, segment(20 << 20));
        assert_eq!(map.reserved(), 0, "inserting counts nothing by itself");
        map.reserve(20 << 20);
        map.reserve(2 << 20);
        map.unreserve(20 << 20);
        assert_eq!(map.reserved(), 2 << 20);
    }
}
