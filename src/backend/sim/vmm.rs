//! Virtual memory management as the simulated device plays it, for expandable segments:
//! reserved address ranges and the chunks mapped into them. Ranges are fake addresses from a
//! window of their own, `0x1000_0000_0000_0000 + device * 2^52` (4 PiB per device), apart from
//! the fake segments' window, so neither ever overlaps the other and a device of any capacity
//! can reserve 1 1/8 of it per stream and pool, as PyTorch's allocator does.
//!
//! Mapped bytes count against the device's capacity exactly as segment bytes do, and the
//! injected allocation faults (countdowns and the out-of-memory limit) apply to each map as to
//! each segment allocation. Every bad call is a typed error that changes nothing.
//!
//! Host-backed devices do not support it: a reserved range would need host address space
//! that is mapped page by page, which safe Rust cannot do, so [`SimBackend`](super::SimBackend)
//! reports no support there and the allocator falls back to fixed segments.

use std::collections::BTreeMap;

use super::device::{give_back_range, take_range, Device};
use crate::backend::address_ranges::{
    self, check_release, place_mapping, range_of_mapping, ReleaseRefusal, Reserved,
};
use crate::backend::BackendError;

/// Granularity of reservations and mappings, in bytes (2 MiB, the driver's usual
/// `cuMemGetAllocationGranularity`).
pub const MAPPING_GRANULARITY: usize = 2 << 20;

/// Unused address space left after each reservation, in bytes, so that two ranges never touch
/// and the mapped memory of one can never look contiguous with another's.
const GUARD_BYTES: u64 = MAPPING_GRANULARITY as u64;

/// Start of device 0's reservation window; device `d` starts `d` times [`VMM_SPAN`] higher.
pub(super) const VMM_BASE: u64 = 0x1000_0000_0000_0000;
/// Size of each device's reservation window, in bytes (4 PiB).
pub(super) const VMM_SPAN: u64 = 1 << 52;

/// The reservation window of device `index`: empty when host-backed or past the address space.
pub(super) fn address_window(index: usize, host_backed: bool) -> BTreeMap<u64, u64> {
    let start = u64::try_from(index)
        .ok()
        .and_then(|i| i.checked_mul(VMM_SPAN))
        .and_then(|offset| offset.checked_add(VMM_BASE));
    match start.and_then(|s| Some((s, s.checked_add(VMM_SPAN)?))) {
        Some((start, end)) if !host_backed => BTreeMap::from([(start, end)]),
        _ => BTreeMap::new(),
    }
}

/// One reserved address range.
pub(super) struct Reservation {
    size_bytes: usize,
    /// End (exclusive) of the fake address space it holds, guard included.
    range_end: u64,
    /// Mapped chunks, start -> size in bytes.
    mappings: BTreeMap<u64, usize>,
}

impl Reserved for Reservation {
    type Mapping = usize;
    fn size_bytes(&self) -> usize {
        self.size_bytes
    }
    fn mappings(&self) -> &BTreeMap<u64, usize> {
        &self.mappings
    }
}

impl Device {
    /// Reserves `size_bytes` (a non-zero multiple of [`MAPPING_GRANULARITY`]) of fake address
    /// space, aligned to the granularity.
    pub(super) fn reserve(&mut self, size_bytes: usize) -> Result<u64, BackendError> {
        let result = self.try_reserve(size_bytes);
        match result {
            Ok(_) => self.calls.address_reservations += 1,
            Err(_) => self.calls.failed_vmm_calls += 1,
        }
        result
    }

    fn try_reserve(&mut self, size_bytes: usize) -> Result<u64, BackendError> {
        let device = self.index();
        if size_bytes == 0 || size_bytes % MAPPING_GRANULARITY != 0 {
            return Err(BackendError::BadMapping {
                device,
                what: "reserve",
                ptr: 0,
                size_bytes,
                reason: "the size must be a non-zero multiple of the 2 MiB granularity",
            });
        }
        let footprint = u64::try_from(size_bytes)
            .ok()
            .and_then(|size| size.checked_add(GUARD_BYTES))
            .ok_or(BackendError::OutOfMemory {
                device,
                requested_bytes: size_bytes,
            })?;
        let ptr = take_range(
            &mut self.free_vmm_ranges,
            footprint,
            MAPPING_GRANULARITY as u64,
        )
        .ok_or(BackendError::OutOfMemory {
            device,
            requested_bytes: size_bytes,
        })?;
        self.reservations.insert(
            ptr,
            Reservation {
                size_bytes,
                range_end: ptr + footprint,
                mappings: BTreeMap::new(),
            },
        );
        Ok(ptr)
    }

    /// Releases the reserved range at `ptr` of `size_bytes`, which must have nothing mapped.
    pub(super) fn release_reservation(
        &mut self,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let device = self.index();
        if let Err(refusal) = check_release(&self.reservations, ptr, size_bytes) {
            self.calls.failed_vmm_calls += 1;
            return Err(match refusal {
                ReleaseRefusal::InUse { mapped_bytes } => BackendError::AddressRangeInUse {
                    device,
                    ptr,
                    mapped_bytes,
                },
                ReleaseRefusal::Unknown => BackendError::UnknownAddressRange {
                    device,
                    ptr,
                    size_bytes,
                },
            });
        }
        if let Some(reservation) = self.reservations.remove(&ptr) {
            give_back_range(&mut self.free_vmm_ranges, ptr, reservation.range_end);
        }
        self.calls.address_releases += 1;
        Ok(())
    }

    /// Maps `size_bytes` of new memory at `ptr`, inside one reservation and over no mapping.
    pub(super) fn map(&mut self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let result = self.try_map(ptr, size_bytes);
        match result {
            Ok(()) => self.calls.maps += 1,
            Err(_) => self.calls.failed_maps += 1,
        }
        result
    }

    fn try_map(&mut self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let device = self.index();
        let bad = |reason| BackendError::BadMapping {
            device,
            what: "map",
            ptr,
            size_bytes,
            reason,
        };
        let start =
            place_mapping(&self.reservations, ptr, size_bytes, MAPPING_GRANULARITY).map_err(bad)?;
        // The faults and the capacity apply as to a segment allocation.
        self.charge(size_bytes, "map_memory")?;
        if let Some(reservation) = self.reservations.get_mut(&start) {
            reservation.mappings.insert(ptr, size_bytes);
        }
        Ok(())
    }

    /// Unmaps exactly the earlier mapping `(ptr, size_bytes)`.
    pub(super) fn unmap(&mut self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let device = self.index();
        let mapping = range_of_mapping(&self.reservations, ptr, size_bytes)
            .and_then(|start| self.reservations.get_mut(&start));
        let Some(reservation) = mapping else {
            self.calls.failed_unmaps += 1;
            return Err(BackendError::BadMapping {
                device,
                what: "unmap",
                ptr,
                size_bytes,
                reason: "no earlier map_memory call mapped exactly this range",
            });
        };
        reservation.mappings.remove(&ptr);
        self.uncharge(size_bytes);
        self.calls.unmaps += 1;
        Ok(())
    }

    /// Bytes mapped in reserved ranges.
    pub(super) fn mapped_bytes(&self) -> usize {
        self.reservations
            .values()
            .map(address_ranges::mapped_bytes)
            .sum()
    }

    /// Number of reserved address ranges.
    pub(super) fn reservation_count(&self) -> usize {
        self.reservations.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::sim::{SimBackend, SimFault};
    use crate::backend::DeviceIndex;
    use crate::backend::{Backend, BackendError};

    /// Device 0, which these tests use.
    const D0: DeviceIndex = DeviceIndex::new(0);

    const G: usize = super::MAPPING_GRANULARITY;

    #[test]
    fn reserved_ranges_never_overlap_segments_or_each_other() -> Result<(), BackendError> {
        let sim = SimBackend::new(1, 64 << 20);
        assert!(sim.supports_expandable_segments(D0));
        assert!(
            !sim.supports_expandable_segments(DeviceIndex::new(1)),
            "no device 1"
        );
        let base = super::VMM_BASE;
        let range = sim.reserve_address_range(D0, 8 * G)?;
        assert_eq!(range, base);
        let segment = sim.alloc_segment(D0, G)?;
        assert_eq!(segment, 0x7f00_0000_0000, "segments have their own window");
        let second = sim.reserve_address_range(D0, 2 * G)?;
        assert_eq!(second, base + 9 * G as u64, "after the range and its guard");
        let two = SimBackend::new(2, 1 << 40);
        let huge = two.reserve_address_range(DeviceIndex::new(1), 9 << 37)?;
        assert_eq!(
            huge,
            base + super::VMM_SPAN,
            "device 1's window holds 1 1/8 TiB"
        );
        assert_eq!(sim.allocated_bytes(D0), G, "reserving takes no memory");
        sim.release_address_range(D0, range, 8 * G)?;
        assert_eq!(
            sim.reserve_address_range(D0, 4 * G)?,
            base,
            "a released range is reused"
        );
        let calls = sim.calls(D0);
        assert_eq!((calls.address_reservations, calls.address_releases), (3, 1));
        assert_eq!(sim.address_range_count(D0), 2);
        Ok(())
    }

    #[test]
    fn mapped_bytes_count_against_capacity_and_faults() -> Result<(), BackendError> {
        let sim = SimBackend::new(1, 6 * G);
        let range = sim.reserve_address_range(D0, 8 * G)?;
        sim.map_memory(D0, range, 2 * G)?;
        sim.map_memory(D0, range + 2 * G as u64, 2 * G)?;
        assert_eq!(sim.mem_get_info(D0)?.free_bytes, 2 * G);
        assert_eq!(sim.mapped_bytes(D0), 4 * G);
        let segment = sim.alloc_segment(D0, G)?;
        let out_of_memory = Err(BackendError::OutOfMemory {
            device: D0,
            requested_bytes: 2 * G,
        });
        let past = sim.map_memory(D0, range + 4 * G as u64, 2 * G);
        assert_eq!(past, out_of_memory, "past the capacity");
        sim.free_segment(D0, segment, G)?;
        sim.set_oom_above(D0, Some(5 * G))?;
        let limited = sim.map_memory(D0, range + 4 * G as u64, 2 * G);
        assert_eq!(limited, out_of_memory, "past the limit");
        sim.set_oom_above(D0, None)?;
        sim.inject(D0, SimFault::AllocOutOfMemory { nth: 1 })?;
        let injected = sim.map_memory(D0, range + 4 * G as u64, 2 * G);
        assert_eq!(
            injected, out_of_memory,
            "an injected out-of-memory fault fails the mapping as out of memory"
        );
        sim.inject(D0, SimFault::AllocError { nth: 1 })?;
        let error = sim.map_memory(D0, range + 4 * G as u64, 2 * G);
        assert_eq!(
            error,
            Err(BackendError::InjectedFault {
                device: D0,
                what: "map_memory"
            }),
            "an injected device error fails the mapping, and is no out-of-memory"
        );
        sim.map_memory(D0, range + 4 * G as u64, 2 * G)?;
        assert_eq!(sim.allocated_bytes(D0), 6 * G);
        let calls = sim.calls(D0);
        assert_eq!((calls.maps, calls.failed_maps), (3, 4));
        Ok(())
    }

    #[test]
    fn bad_calls_are_typed_errors_that_change_nothing() -> Result<(), BackendError> {
        let sim = SimBackend::new(1, 64 << 20);
        assert!(matches!(
            sim.reserve_address_range(D0, G + 512),
            Err(BackendError::BadMapping { .. })
        ));
        let range = sim.reserve_address_range(D0, 4 * G)?;
        sim.map_memory(D0, range, 2 * G)?;
        let bad_maps = [
            (range + G as u64, 2 * G, "overlaps"),
            (range + 512, G, "unaligned"),
            (range + 2 * G as u64, 4 * G, "past the range"),
            (range + 8 * G as u64, G, "outside every range"),
            (range + 2 * G as u64, 0, "empty"),
        ];
        for (ptr, size, why) in bad_maps {
            assert!(
                matches!(
                    sim.map_memory(D0, ptr, size),
                    Err(BackendError::BadMapping { .. })
                ),
                "{why}"
            );
        }
        assert!(
            matches!(
                sim.unmap_memory(D0, range, G),
                Err(BackendError::BadMapping { .. })
            ),
            "half of a mapping"
        );
        assert!(
            matches!(
                sim.unmap_memory(D0, range + 2 * G as u64, 2 * G),
                Err(BackendError::BadMapping { .. })
            ),
            "never mapped"
        );
        assert_eq!(
            sim.release_address_range(D0, range, 4 * G),
            Err(BackendError::AddressRangeInUse {
                device: D0,
                ptr: range,
                mapped_bytes: 2 * G
            })
        );
        assert!(matches!(
            sim.release_address_range(D0, range, 2 * G),
            Err(BackendError::UnknownAddressRange { .. })
        ));
        assert_eq!(sim.mapped_bytes(D0), 2 * G, "nothing changed");
        sim.unmap_memory(D0, range, 2 * G)?;
        sim.release_address_range(D0, range, 4 * G)?;
        assert_eq!(
            (sim.allocated_bytes(D0), sim.address_range_count(D0)),
            (0, 0)
        );
        let calls = sim.calls(D0);
        assert_eq!(
            (calls.unmaps, calls.failed_unmaps, calls.failed_vmm_calls),
            (1, 2, 3)
        );
        Ok(())
    }

    #[test]
    fn host_backed_mode_refuses_expandable_segments() {
        let sim = SimBackend::builder().host_backed(true).build();
        assert!(!sim.supports_expandable_segments(D0));
        let error = sim.reserve_address_range(D0, G).unwrap_err();
        assert!(matches!(error, BackendError::Unsupported { device, .. } if device == D0));
        assert!(error.to_string().contains("host-backed"), "{error}");
    }
}
