//! Exact placement of fake segments, for replays that reproduce a trace's addresses.
//!
//! A replay that wants each new segment where the traced program's driver put it names the
//! address before the allocation ([`SimBackend::place_next_segment`]); the next fake segment
//! goes there when that range is free and aligned, and by first fit otherwise, so a placement
//! that cannot be honoured never fails an allocation. [`SimBackend::placements`] tells how
//! many were honoured, so the replay can say how exact it was.

use std::collections::BTreeMap;
use std::ops::Range;

use super::device::{FAKE_BASE, FAKE_SPAN};
use super::SimBackend;
use crate::backend::{BackendError, DeviceIndex};

/// One device's pending placement and its record.
#[derive(Debug, Default)]
pub(super) struct Placement {
    /// Address for the next fake segment, if one was asked for.
    next: Option<u64>,
    /// Segments placed where asked.
    pub placed: u64,
    /// Placements that could not be honoured (range taken, outside the device's range, or
    /// misaligned); those segments went by first fit.
    pub missed: u64,
}

impl Placement {
    /// The address asked for the next segment; asking is one-shot.
    pub fn take_next(&mut self) -> Option<u64> {
        self.next.take()
    }
}

/// Takes `addr..addr + footprint` out of the free ranges (start -> end, exclusive) when it lies
/// wholly inside one and `addr` is a multiple of `align`; false, and no change, otherwise.
pub(super) fn carve(
    free_ranges: &mut BTreeMap<u64, u64>,
    addr: u64,
    footprint: u64,
    align: u64,
) -> bool {
    let Some(end) = addr.checked_add(footprint) else {
        return false;
    };
    if align == 0 || addr % align != 0 || footprint == 0 {
        return false;
    }
    let Some((&start, &range_end)) = free_ranges.range(..=addr).next_back() else {
        return false;
    };
    if end > range_end {
        return false;
    }
    free_ranges.remove(&start);
    if start < addr {
        free_ranges.insert(start, addr);
    }
    if end < range_end {
        free_ranges.insert(end, range_end);
    }
    true
}

impl SimBackend {
    /// Asks that the next fake segment allocated on `device` start at `addr` (`None` withdraws
    /// the request). The request is honoured when `addr` is 512-byte aligned and the whole
    /// segment fits in free space of the device's fake range
    /// ([`SimBackend::address_range`]); otherwise that segment goes by first fit as usual.
    /// Either way the request is used up by the next successful placement attempt. Host-backed
    /// segments ignore it.
    ///
    /// ```
    /// use blockpool::{Backend, DeviceIndex, SimBackend};
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// let base = sim.address_range(DeviceIndex::new(0)).map(|r| r.start).unwrap_or(0);
    /// sim.place_next_segment(DeviceIndex::new(0), Some(base + (64 << 20)))?;
    /// assert_eq!(sim.alloc_segment(DeviceIndex::new(0), 2 << 20)?, base + (64 << 20));
    /// // The request was used up: the next segment goes by first fit.
    /// assert_eq!(sim.alloc_segment(DeviceIndex::new(0), 2 << 20)?, base);
    /// sim.place_next_segment(DeviceIndex::new(0), Some(base + 4096))?; // taken by the first-fit segment
    /// assert_eq!(sim.alloc_segment(DeviceIndex::new(0), 2 << 20)?, base + (2 << 20));
    /// assert_eq!(sim.placements(DeviceIndex::new(0)), (1, 1), "one honoured, one missed");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn place_next_segment(
        &self,
        device: DeviceIndex,
        addr: Option<u64>,
    ) -> Result<(), BackendError> {
        self.device(device)?.lock().placement.next = addr;
        Ok(())
    }

    /// How placement requests on `device` went: `(placed, missed)`, the segments put where
    /// [`SimBackend::place_next_segment`] asked and those that went by first fit instead.
    /// `(0, 0)` for a device that does not exist.
    pub fn placements(&self, device: DeviceIndex) -> (u64, u64) {
        self.device(device).map_or((0, 0), |d| {
            let dev = d.lock();
            (dev.placement.placed, dev.placement.missed)
        })
    }

    /// The fake address range of `device`: `0x7f00_0000_0000 + device * 2^40`, 1 TiB long.
    /// `None` for a host-backed backend (its segments live at host addresses) and for a device
    /// that does not exist or whose range would pass 2^64.
    pub fn address_range(&self, device: DeviceIndex) -> Option<Range<u64>> {
        if self.is_host_backed() || device.get() >= self.inner.devices.len() {
            return None;
        }
        let start = u64::try_from(device.get())
            .ok()?
            .checked_mul(FAKE_SPAN)?
            .checked_add(FAKE_BASE)?;
        Some(start..start.checked_add(FAKE_SPAN)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;

    fn ranges(list: &[(u64, u64)]) -> BTreeMap<u64, u64> {
        list.iter().copied().collect()
    }

    #[test]
    fn carving_splits_the_free_range_around_the_segment() {
        let mut free = ranges(&[(0, 10_240)]);
        assert!(carve(&mut free, 2048, 1024, 512));
        assert_eq!(free, ranges(&[(0, 2048), (3072, 10_240)]));
        assert!(carve(&mut free, 0, 2048, 512), "a range taken whole");
        assert_eq!(free, ranges(&[(3072, 10_240)]));
    }

    #[test]
    fn carving_refuses_taken_misaligned_and_overflowing_ranges() {
        let mut free = ranges(&[(0, 4096), (8192, 12_288)]);
        let before = free.clone();
        assert!(
            !carve(&mut free, 3072, 2048, 512),
            "runs past the free range"
        );
        assert!(!carve(&mut free, 4096, 512, 512), "inside a taken range");
        assert!(!carve(&mut free, 100, 512, 512), "misaligned");
        assert!(!carve(&mut free, u64::MAX - 511, 1024, 512), "overflows");
        assert!(!carve(&mut free, 0, 0, 512), "empty");
        assert_eq!(free, before, "a refused carve changes nothing");
    }

    #[test]
    fn placed_segments_free_back_into_the_range() {
        let sim = SimBackend::new(2, 1 << 30);
        let range = sim.address_range(DeviceIndex::new(1)).expect("fake range");
        assert_eq!(range.start, 0x8000_0000_0000);
        assert_eq!(range.end - range.start, 1 << 40);
        let at = range.start + (10 << 20);
        sim.place_next_segment(DeviceIndex::new(1), Some(at))
            .unwrap();
        assert_eq!(sim.alloc_segment(DeviceIndex::new(1), 4 << 20).unwrap(), at);
        sim.free_segment(DeviceIndex::new(1), at, 4 << 20).unwrap();
        sim.place_next_segment(DeviceIndex::new(1), Some(at + (2 << 20)))
            .unwrap();
        assert_eq!(
            sim.alloc_segment(DeviceIndex::new(1), 8 << 20).unwrap(),
            at + (2 << 20),
            "the freed range merged back and can be placed into again"
        );
        sim.place_next_segment(DeviceIndex::new(1), Some(range.end))
            .unwrap();
        assert_eq!(
            sim.alloc_segment(DeviceIndex::new(1), 2 << 20).unwrap(),
            range.start,
            "outside the range: first fit"
        );
        assert_eq!(sim.placements(DeviceIndex::new(1)), (2, 1));
        assert_eq!(sim.placements(DeviceIndex::new(0)), (0, 0));
        assert_eq!(sim.placements(DeviceIndex::new(9)), (0, 0));
        assert_eq!(
            sim.place_next_segment(DeviceIndex::new(9), None),
            Err(BackendError::InvalidDevice {
                device: DeviceIndex::new(9),
                device_count: 2
            }),
            "a placement on a device that does not exist must be refused"
        );
        assert_eq!(sim.address_range(DeviceIndex::new(2)), None);
    }
}
