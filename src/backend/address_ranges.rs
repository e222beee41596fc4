//! Reserved address ranges and the memory mapped in them, as every backend that maps memory
//! keeps them (`sim/vmm.rs`, and `cuda/backend/vmm.rs` for CUDA): where a new mapping may go and whether a range
//! may be released. Only the bookkeeping lives here; the device calls stay in each backend.

use std::collections::BTreeMap;

/// A reserved address range: its size, and its mappings by start address.
pub(crate) trait Reserved {
    /// What each mapping keeps beside its start (its size, and whatever the backend needs).
    type Mapping: Mapped;
    /// Size of the range in bytes.
    fn size_bytes(&self) -> usize;
    /// Mappings by start address.
    fn mappings(&self) -> &BTreeMap<u64, Self::Mapping>;
}

/// A mapping's size in bytes.
pub(crate) trait Mapped {
    /// Size of the mapping in bytes.
    fn size_bytes(&self) -> usize;
}

impl Mapped for usize {
    fn size_bytes(&self) -> usize {
        *self
    }
}

impl<H> Mapped for (usize, H) {
    fn size_bytes(&self) -> usize {
        self.0
    }
}

/// Why a range may not be released.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReleaseRefusal {
    /// No range of that size was reserved at that address.
    Unknown,
    /// The range still has these many bytes mapped.
    InUse {
        /// Bytes still mapped in the range.
        mapped_bytes: usize,
    },
}

/// Bytes mapped in `range`.
pub(crate) fn mapped_bytes<R: Reserved>(range: &R) -> usize {
    range.mappings().values().map(Mapped::size_bytes).sum()
}

/// Whether the range reserved at `ptr` with `size_bytes` may be released: it exists with that
/// size and has nothing mapped.
pub(crate) fn check_release<R: Reserved>(
    ranges: &BTreeMap<u64, R>,
    ptr: u64,
    size_bytes: usize,
) -> Result<(), ReleaseRefusal> {
    match ranges.get(&ptr) {
        Some(r) if r.size_bytes() == size_bytes && r.mappings().is_empty() => Ok(()),
        Some(r) if r.size_bytes() == size_bytes => Err(ReleaseRefusal::InUse {
            mapped_bytes: mapped_bytes(r),
        }),
        _ => Err(ReleaseRefusal::Unknown),
    }
}

/// The start of the range that `[ptr, ptr + size_bytes)` lies in, when it may be mapped there:
/// aligned to `granularity`, inside one reserved range, over no earlier mapping. Otherwise
/// the reason, for [`BackendError::BadMapping`](super::BackendError::BadMapping).
pub(crate) fn place_mapping<R: Reserved>(
    ranges: &BTreeMap<u64, R>,
    ptr: u64,
    size_bytes: usize,
    granularity: usize,
) -> Result<u64, &'static str> {
    let (start, range) = range_holding(ranges, ptr, size_bytes, granularity)?;
    let end = ptr + size_bytes as u64;
    let overlaps_before = range
        .mappings()
        .range(..=ptr)
        .next_back()
        .is_some_and(|(&at, mapping)| at + mapping.size_bytes() as u64 > ptr);
    if overlaps_before || range.mappings().range(ptr..end).next().is_some() {
        return Err("the range overlaps memory mapped earlier");
    }
    Ok(start)
}

/// The start of the range holding exactly the earlier mapping `(ptr, size_bytes)`, if any.
pub(crate) fn range_of_mapping<R: Reserved>(
    ranges: &BTreeMap<u64, R>,
    ptr: u64,
    size_bytes: usize,
) -> Option<u64> {
    let (&start, range) = ranges.range(..=ptr).next_back()?;
    let mapping = range.mappings().get(&ptr)?;
    (mapping.size_bytes() == size_bytes).then_some(start)
}

/// The range `[ptr, ptr + size_bytes)` lies in, checking its alignment.
fn range_holding<R: Reserved>(
    ranges: &BTreeMap<u64, R>,
    ptr: u64,
    size_bytes: usize,
    granularity: usize,
) -> Result<(u64, &R), &'static str> {
    if size_bytes == 0 || size_bytes % granularity != 0 || ptr % granularity as u64 != 0 {
        return Err("address and size must be non-zero multiples of the mapping granularity");
    }
    let end = ptr
        .checked_add(size_bytes as u64)
        .ok_or("the range runs past the address space")?;
    ranges
        .range(..=ptr)
        .next_back()
        .filter(|(&start, range)| end <= start + range.size_bytes() as u64)
        .map(|(&start, range)| (start, range))
        .ok_or("the range lies in no reserved address range")
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Range {
        size_bytes: usize,
        mappings: BTreeMap<u64, usize>,
    }

    impl Reserved for Range {
        type Mapping = usize;
        fn size_bytes(&self) -> usize {
            self.size_bytes
        }
        fn mappings(&self) -> &BTreeMap<u64, usize> {
            &self.mappings
        }
    }

    const G: usize = 0x1000;

    fn ranges() -> BTreeMap<u64, Range> {
        // One range [0x10000, 0x20000) with [0x12000, 0x14000) mapped.
        let mappings = BTreeMap::from([(0x12000, 2 * G)]);
        BTreeMap::from([(
            0x10000,
            Range {
                size_bytes: 16 * G,
                mappings,
            },
        )])
    }

    #[test]
    fn a_mapping_goes_only_aligned_inside_a_range_and_over_nothing() {
        let r = ranges();
        assert_eq!(place_mapping(&r, 0x10000, 2 * G, G), Ok(0x10000));
        assert_eq!(place_mapping(&r, 0x14000, 12 * G, G), Ok(0x10000));
        let overlap = Err("the range overlaps memory mapped earlier");
        assert_eq!(place_mapping(&r, 0x11000, 2 * G, G), overlap);
        assert_eq!(place_mapping(&r, 0x13000, G, G), overlap);
        let outside = Err("the range lies in no reserved address range");
        assert_eq!(place_mapping(&r, 0x1f000, 2 * G, G), outside);
        assert_eq!(place_mapping(&r, 0x8000, G, G), outside);
        let unaligned =
            Err("address and size must be non-zero multiples of the mapping granularity");
        assert_eq!(place_mapping(&r, 0x10800, G, G), unaligned);
        assert_eq!(place_mapping(&r, 0x10000, 0, G), unaligned);
        assert_eq!(
            place_mapping(&r, u64::MAX - 0xfff, G, G),
            Err("the range runs past the address space")
        );
    }

    #[test]
    fn only_an_empty_range_of_the_same_size_may_be_released() {
        let mut r = ranges();
        assert_eq!(
            check_release(&r, 0x10000, 16 * G),
            Err(ReleaseRefusal::InUse {
                mapped_bytes: 2 * G
            })
        );
        assert_eq!(
            check_release(&r, 0x10000, 8 * G),
            Err(ReleaseRefusal::Unknown)
        );
        assert_eq!(
            check_release(&r, 0x20000, 16 * G),
            Err(ReleaseRefusal::Unknown)
        );
        assert_eq!(range_of_mapping(&r, 0x12000, 2 * G), Some(0x10000));
        assert_eq!(range_of_mapping(&r, 0x12000, G), None);
        r.get_mut(&0x10000).unwrap().mappings.clear();
        assert_eq!(check_release(&r, 0x10000, 16 * G), Ok(()));
    }
}
