//! Adopting a segment that already exists, with the blocks already live in it: how a replay
//! starts from the state a trace began in (segments reserved and tensors allocated before
//! recording started) instead of from an empty device.
//!
//! [`DeviceAllocator::adopt_segment`] checks the whole layout before it touches anything, then
//! asks the backend for the segment, tiles it with the live blocks at their offsets and one
//! cached free block per gap (gaps are maximal, so no two free neighbours are left unmerged),
//! and counts every statistic as if the allocator had made those allocations itself. The
//! adopted blocks are ordinary allocated blocks from then on: freeing one merges it with its
//! free neighbours, and a wholly free adopted segment is released like any other.

use super::block::{Block, BlockId, BlockState};
use super::device::{DeviceAllocator, Segment, TOO_MANY_BLOCKS};
use super::free_list::{FreeKey, PoolKind};
use super::sizing::MIN_BLOCK_SIZE;
use super::stat_updates::increase;
use crate::backend::{Backend, BackendError, DeviceIndex, StreamId};
use crate::error::Error;
use crate::trace::ContextId;

/// A live block of a segment to adopt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdoptBlock {
    /// Offset of the block's first byte from the segment's start, in bytes; a multiple of 512.
    pub offset: usize,
    /// Block size in bytes; a non-zero multiple of 512.
    pub size: usize,
    /// Bytes its caller asked for; at most `size`.
    pub requested: usize,
}

/// A segment to adopt: its size, pool and stream, and its live blocks, lowest offset first.
/// Whatever the blocks leave uncovered becomes cached free blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdoptSegment<'a> {
    /// Segment size in bytes; a non-zero multiple of 512.
    pub size: usize,
    /// The pool the segment serves.
    pub pool: PoolKind,
    /// The stream the segment serves; its free blocks are cached for this stream.
    pub stream: StreamId,
    /// The live blocks, lowest offset first, not overlapping.
    pub blocks: &'a [AdoptBlock],
}

/// A block handed over by [`DeviceAllocator::adopt_segment`]: allocated, to be freed with
/// [`DeviceAllocator::free`] like any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdoptedBlock {
    /// The block, for `free` and `record_stream`.
    pub id: BlockId,
    /// Device address of the first byte: the segment's address plus the block's offset.
    pub addr: u64,
    /// Block size in bytes.
    pub size: usize,
    /// Bytes asked for.
    pub requested: usize,
}

/// Why a segment could not be adopted. Nothing changed: the allocator and the device are as
/// they were before the call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AdoptError {
    /// The segment size is zero or not a multiple of 512 bytes. Never fits.
    #[error(
        "cannot adopt a segment of {size_bytes} bytes: a segment must be a non-zero multiple \
         of 512 bytes"
    )]
    SegmentSize {
        /// The size given.
        size_bytes: usize,
    },
    /// A block is empty, misaligned, overlaps the block before it or runs past the segment's
    /// end. Never fits.
    #[error(
        "cannot adopt the block at offset {offset} ({size_bytes} bytes) of a {segment_bytes}-byte \
         segment: blocks must be non-zero multiples of 512 bytes at 512-byte offsets, lowest \
         offset first, not overlapping and inside the segment"
    )]
    BlockMisplaced {
        /// The block's offset in the segment.
        offset: usize,
        /// The block's size.
        size_bytes: usize,
        /// The segment's size.
        segment_bytes: usize,
    },
    /// A block's caller asked for more bytes than the block has. Never fits.
    #[error(
        "cannot adopt the block at offset {offset}: {requested_bytes} bytes were asked for but \
         the block has only {size_bytes}"
    )]
    RequestedExceedsSize {
        /// The block's offset in the segment.
        offset: usize,
        /// The block's size.
        size_bytes: usize,
        /// Bytes asked for.
        requested_bytes: usize,
    },
    /// The device (or the memory fraction) has no room for the segment. Retryable: freeing
    /// memory or `empty_cache` can make room.
    #[error(
        "cannot adopt a segment of {size_bytes} bytes on device {device}: out of memory \
         (free memory or lower the segment count, or raise the device capacity)"
    )]
    OutOfMemory {
        /// Device asked.
        device: DeviceIndex,
        /// The segment's size.
        size_bytes: usize,
    },
    /// The allocator or the device refused for another reason.
    #[error(transparent)]
    Allocator(#[from] Error),
}

impl<E> DeviceAllocator<E> {
    /// Takes over a segment that already exists with its live blocks: asks `backend` for a
    /// segment of `segment.size` bytes (where the backend chooses, as for any segment), then
    /// puts each live block at its offset as an allocated block and caches each gap between
    /// them as one free block for `segment.stream`. Returns the live blocks, lowest address
    /// first.
    ///
    /// Every statistic moves as if the blocks had been allocated here (allocation, active,
    /// requested, inactive-split and oversize counts, reserved bytes and segments), and every
    /// invariant of [`DeviceAllocator::check_invariants`] holds afterwards. The segment is not
    /// counted in `num_device_alloc` (it was allocated before; its release later is counted in
    /// `num_device_free`), and no history event is recorded for it. A memory fraction set on
    /// this allocator applies.
    ///
    /// ```
    /// use blockpool::pool::{AdoptBlock, AdoptSegment, DeviceAllocator, PoolKind};
    /// use blockpool::{AllocatorConfig, SimBackend, StreamId};
    ///
    /// let sim = SimBackend::new(1, 1 << 30);
    /// let mut dev = DeviceAllocator::new(0, AllocatorConfig::default());
    /// let live = [AdoptBlock { offset: 4 << 20, size: 8 << 20, requested: 8 << 20 }];
    /// let segment = AdoptSegment {
    ///     size: 20 << 20,
    ///     pool: PoolKind::Large,
    ///     stream: StreamId::DEFAULT,
    ///     blocks: &live,
    /// };
    /// let adopted = dev.adopt_segment(&sim, &segment)?;
    /// assert_eq!(adopted[0].addr, 0x7f00_0000_0000 + (4 << 20));
    /// // The 4 MiB gap in front is cached: a 3 MiB request takes it without a device call.
    /// let block = dev.malloc(&sim, 3 << 20, StreamId::DEFAULT)?;
    /// assert_eq!(block.addr, 0x7f00_0000_0000);
    /// assert_eq!(dev.stats().num_device_alloc, 0);
    /// dev.check_invariants()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        segment: &AdoptSegment<'_>,
    ) -> Result<Vec<AdoptedBlock>, AdoptError> {
        let pieces = layout(segment)?;
        let size = segment.size;
        if let Some(limit) = self.limit_bytes(backend)? {
            if self.reserved.saturating_add(size) > limit {
                return Err(self.out_of_memory(size));
            }
        }
        let addr = match backend.alloc_segment(self.device, size) {
            Ok(addr) => addr,
            Err(BackendError::OutOfMemory { .. }) => return Err(self.out_of_memory(size)),
            Err(e) => return Err(Error::from(e).into()),
        };
        let overlaps = addr.checked_add(size as u64).map_or(true, |end| {
            let before = self.segments.range(..end).next_back();
            before.is_some_and(|(&start, s)| start + s.size as u64 > addr)
        });
        if overlaps {
            // A backend bug; give the segment back rather than corrupt the bookkeeping.
            debug_assert!(false, "backend placed a segment over a live one");
            backend
                .free_segment(self.device, addr, size)
                .map_err(Error::from)?;
            return Err(Error::InvariantViolated {
                what: "the backend placed a segment over a live one",
            }
            .into());
        }
        match self.insert_pieces(addr, segment, &pieces) {
            Ok(adopted) => Ok(adopted),
            Err(e) => {
                backend
                    .free_segment(self.device, addr, size)
                    .map_err(Error::from)?;
                Err(e.into())
            }
        }
    }

    fn out_of_memory(&self, size_bytes: usize) -> AdoptError {
        AdoptError::OutOfMemory {
            device: self.device,
            size_bytes,
        }
    }

    /// Creates the blocks of a checked layout in the segment at `addr` and counts them; on
    /// failure (no slab slot left) removes what it created.
    fn insert_pieces(
        &mut self,
        addr: u64,
        segment: &AdoptSegment<'_>,
        pieces: &[Piece],
    ) -> Result<Vec<AdoptedBlock>, Error> {
        let small = segment.pool == PoolKind::Small;
        let stream = segment.stream;
        let lookups = self.pool_ref(small).lookups;
        let mut ids: Vec<BlockId> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let mut block = Block::free(
                addr + piece.offset as u64,
                piece.size,
                stream,
                small,
                (ids.last().copied(), None),
                lookups,
            );
            if let Some(requested) = piece.live {
                block.state = BlockState::Allocated;
                block.requested = requested;
            }
            match self.blocks.insert(block) {
                Some(id) => ids.push(id),
                None => {
                    for id in ids {
                        self.blocks.remove(id);
                    }
                    return Err(TOO_MANY_BLOCKS);
                }
            }
        }
        for pair in ids.windows(2) {
            if let Some(block) = self.blocks.get_mut(pair[0]) {
                block.next = Some(pair[1]);
            }
        }
        let Some(&head) = ids.first() else {
            return Err(super::device::NO_BLOCK);
        };
        self.segments.insert(
            addr,
            Segment {
                expandable: false,
                size: segment.size,
                head,
                context: ContextId::NONE,
            },
        );
        self.count_segment(segment.size, small);

        let max_split = self.config.max_split_size();
        let split = pieces.len() > 1;
        let mut adopted = Vec::new();
        for (piece, &id) in pieces.iter().zip(&ids) {
            let (block_addr, size) = (addr + piece.offset as u64, piece.size);
            let stats = &mut self.stats;
            match piece.live {
                Some(requested) => {
                    increase(&mut stats.allocation, small, 1);
                    increase(&mut stats.allocated_bytes, small, size as u64);
                    increase(&mut stats.active, small, 1);
                    increase(&mut stats.active_bytes, small, size as u64);
                    increase(&mut stats.requested_bytes, small, requested as u64);
                    if size >= max_split {
                        stats.oversize_allocations.increase(1);
                    }
                    adopted.push(AdoptedBlock {
                        id,
                        addr: block_addr,
                        size,
                        requested,
                    });
                }
                None => {
                    if split {
                        increase(&mut stats.inactive_split, small, 1);
                        increase(&mut stats.inactive_split_bytes, small, size as u64);
                    }
                    let key = FreeKey {
                        stream,
                        size,
                        addr: block_addr,
                        id,
                    };
                    self.pool(small).insert(key);
                }
            }
        }
        Ok(adopted)
    }

    /// Counts a new segment of `size` bytes in the reserved bytes and segment statistics.
    fn count_segment(&mut self, size: usize, small: bool) {
        self.reserved += size;
        increase(&mut self.stats.segment, small, 1);
        increase(&mut self.stats.reserved_bytes, small, size as u64);
        if size >= self.config.max_split_size() {
            self.stats.oversize_segments.increase(1);
        }
    }
}

/// One block of an adopted segment: live with its requested bytes, or a free gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    offset: usize,
    size: usize,
    live: Option<usize>,
}

/// The blocks tiling `segment`: its live blocks and a free block for each gap, checked.
fn layout(segment: &AdoptSegment<'_>) -> Result<Vec<Piece>, AdoptError> {
    let size = segment.size;
    if size == 0 || size % MIN_BLOCK_SIZE != 0 {
        return Err(AdoptError::SegmentSize { size_bytes: size });
    }
    let mut pieces = Vec::with_capacity(segment.blocks.len() * 2 + 1);
    let mut end = 0usize;
    for block in segment.blocks {
        let misplaced = AdoptError::BlockMisplaced {
            offset: block.offset,
            size_bytes: block.size,
            segment_bytes: size,
        };
        let block_end = block.offset.checked_add(block.size);
        let fits = block_end.is_some_and(|e| e <= size);
        if block.size == 0
            || block.size % MIN_BLOCK_SIZE != 0
            || block.offset % MIN_BLOCK_SIZE != 0
            || block.offset < end
            || !fits
        {
            return Err(misplaced);
        }
        if block.requested > block.size {
            return Err(AdoptError::RequestedExceedsSize {
                offset: block.offset,
                size_bytes: block.size,
                requested_bytes: block.requested,
            });
        }
        if block.offset > end {
            pieces.push(Piece {
                offset: end,
                size: block.offset - end,
                live: None,
            });
        }
        pieces.push(Piece {
            offset: block.offset,
            size: block.size,
            live: Some(block.requested),
        });
        end = block.offset + block.size;
    }
    if end < size {
        pieces.push(Piece {
            offset: end,
            size: size - end,
            live: None,
        });
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SimBackend;
    use crate::config::AllocatorConfig;

    const MIB: usize = 1 << 20;
    const BASE: u64 = 0x7f00_0000_0000;

    fn live(offset: usize, size: usize, requested: usize) -> AdoptBlock {
        AdoptBlock {
            offset,
            size,
            requested,
        }
    }

    fn large(size: usize, blocks: &[AdoptBlock]) -> AdoptSegment<'_> {
        AdoptSegment {
            size,
            pool: PoolKind::Large,
            stream: StreamId::DEFAULT,
            blocks,
        }
    }

    fn setup() -> (SimBackend, DeviceAllocator<crate::backend::SimEvent>) {
        let sim = SimBackend::new(1, 1 << 30);
        (sim, DeviceAllocator::new(0, AllocatorConfig::default()))
    }

    fn check(dev: &DeviceAllocator<crate::backend::SimEvent>, after: &str) {
        if let Err(e) = dev.check_invariants() {
            panic!("invariants broken after {after}: {e}");
        }
    }

    #[test]
    fn adopted_blocks_sit_at_their_offsets_and_gaps_are_cached() {
        let (sim, mut dev) = setup();
        let blocks = [
            live(2 * MIB, 4 * MIB, 4 * MIB - 100),
            live(6 * MIB, 2 * MIB, 2 * MIB),
        ];
        let adopted = dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
        check(&dev, "adopting");
        let addrs: Vec<u64> = adopted.iter().map(|b| b.addr).collect();
        assert_eq!(addrs, [BASE + 2 * MIB as u64, BASE + 6 * MIB as u64]);
        assert_eq!(adopted[0].requested, 4 * MIB - 100);
        let flat = dev.stats().to_flat();
        assert_eq!(flat["allocated_bytes.all.current"], 6 * MIB as i64);
        assert_eq!(flat["requested_bytes.all.current"], 6 * MIB as i64 - 100);
        assert_eq!(flat["reserved_bytes.all.current"], 20 * MIB as i64);
        assert_eq!(flat["segment.large_pool.current"], 1);
        assert_eq!(
            flat["inactive_split.all.current"], 2,
            "the gap in front and the tail"
        );
        assert_eq!(flat["inactive_split_bytes.all.current"], 14 * MIB as i64);
        assert_eq!(
            flat["num_device_alloc"], 0,
            "adoption is not a device allocation"
        );
        assert_eq!(
            sim.allocated_bytes(0),
            20 * MIB,
            "the backend holds the segment"
        );
        let views = dev.segments();
        let sizes: Vec<usize> = views[0].blocks.iter().map(|b| b.size).collect();
        assert_eq!(sizes, [2 * MIB, 4 * MIB, 2 * MIB, 12 * MIB]);
    }

    #[test]
    fn allocating_and_freeing_around_adopted_blocks_keeps_every_invariant() {
        let (sim, mut dev) = setup();
        let blocks = [
            live(2 * MIB, 4 * MIB, 4 * MIB),
            live(6 * MIB, 2 * MIB, 2 * MIB),
        ];
        let adopted = dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
        let s = StreamId::DEFAULT;
        // Best fit: the 2 MiB gap in front, then the 12 MiB tail.
        let front = dev.malloc(&sim, 2 * MIB, s).unwrap();
        assert_eq!(front.addr, BASE);
        check(&dev, "taking the front gap");
        let tail = dev.malloc(&sim, 3 * MIB, s).unwrap();
        assert_eq!(tail.addr, BASE + 8 * MIB as u64);
        check(&dev, "splitting the tail");
        assert_eq!(
            dev.stats().num_device_alloc,
            0,
            "all from the adopted segment"
        );
        dev.free(&sim, adopted[0].id).unwrap();
        check(&dev, "freeing an adopted block between live ones");
        dev.free(&sim, front.id).unwrap();
        check(&dev, "merging the front gap with the freed adopted block");
        let merged = dev.malloc(&sim, 6 * MIB, s).unwrap();
        assert_eq!(merged.addr, BASE, "the merged 6 MiB in front serves 6 MiB");
        check(&dev, "reusing the merged block");
        for id in [merged.id, adopted[1].id, tail.id] {
            dev.free(&sim, id).unwrap();
            check(&dev, "freeing");
        }
        assert_eq!(dev.segments()[0].blocks.len(), 1, "everything merged");
        dev.empty_cache(&sim).unwrap();
        check(&dev, "empty_cache");
        assert_eq!(dev.reserved_bytes(), 0);
        assert_eq!(
            sim.allocated_bytes(0),
            0,
            "the adopted segment went back to the device"
        );
        assert_eq!(dev.stats().num_device_free, 1);
    }

    #[test]
    fn a_small_segment_whole_live_block_and_oversize_counts() {
        let sim = SimBackend::new(1, 1 << 30);
        let config = AllocatorConfig::parse("max_split_size_mb:20").unwrap();
        let mut dev = DeviceAllocator::new(0, config);
        let whole = [live(0, 40 * MIB, 40 * MIB)];
        let adopted = dev.adopt_segment(&sim, &large(40 * MIB, &whole)).unwrap();
        check(&dev, "adopting an oversize block");
        let flat = dev.stats().to_flat();
        assert_eq!(flat["oversize_allocations.current"], 1);
        assert_eq!(flat["oversize_segments.current"], 1);
        assert_eq!(flat["inactive_split.all.current"], 0, "an unsplit segment");
        let small = [live(512, 1024, 1000)];
        let segment = AdoptSegment {
            size: 2 * MIB,
            pool: PoolKind::Small,
            stream: StreamId(7),
            blocks: &small,
        };
        let small_adopted = dev.adopt_segment(&sim, &segment).unwrap();
        check(&dev, "adopting a small segment");
        let block = dev.malloc(&sim, 512, StreamId(7)).unwrap();
        assert_eq!(
            block.addr,
            small_adopted[0].addr - 512,
            "the 512-byte gap in front"
        );
        let other = dev.malloc(&sim, 512, StreamId(0)).unwrap();
        assert_ne!(
            other.addr - other.addr % (2 * MIB as u64),
            small_adopted[0].addr - 512,
            "another stream gets its own segment"
        );
        dev.free(&sim, adopted[0].id).unwrap();
        check(&dev, "freeing the oversize block");
        assert_eq!(dev.stats().to_flat()["oversize_allocations.current"], 0);
    }

    #[test]
    fn bad_layouts_are_refused_before_anything_changes() {
        let (sim, mut dev) = setup();
        let cases: [(usize, Vec<AdoptBlock>); 7] = [
            (0, vec![]),
            (1000, vec![]),
            (4096, vec![live(0, 0, 0)]),
            (4096, vec![live(100, 512, 512)]),
            (4096, vec![live(1024, 1024, 1024), live(1536, 512, 512)]),
            (4096, vec![live(3584, 1024, 1024)]),
            (4096, vec![live(usize::MAX - 511, 1024, 10)]),
        ];
        for (size, blocks) in &cases {
            let err = dev.adopt_segment(&sim, &large(*size, blocks)).unwrap_err();
            assert!(
                matches!(
                    err,
                    AdoptError::SegmentSize { .. } | AdoptError::BlockMisplaced { .. }
                ),
                "{size} {blocks:?}: {err}"
            );
        }
        let greedy = [live(0, 512, 513)];
        assert_eq!(
            dev.adopt_segment(&sim, &large(4096, &greedy)).unwrap_err(),
            AdoptError::RequestedExceedsSize {
                offset: 0,
                size_bytes: 512,
                requested_bytes: 513
            }
        );
        assert_eq!(
            AdoptError::SegmentSize { size_bytes: 1000 }.to_string(),
            "cannot adopt a segment of 1000 bytes: a segment must be a non-zero multiple of 512 \
             bytes"
        );
        assert_eq!(
            sim.calls(0).segment_allocs,
            0,
            "no device call for a bad layout"
        );
        assert_eq!(dev.reserved_bytes(), 0);
        check(&dev, "refusals");
    }

    #[test]
    fn out_of_memory_is_reported_and_changes_nothing() {
        let sim = SimBackend::new(1, 30 * MIB);
        let mut dev = DeviceAllocator::new(0, AllocatorConfig::default());
        let blocks = [live(0, 2 * MIB, 2 * MIB)];
        dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
        let err = dev
            .adopt_segment(&sim, &large(20 * MIB, &blocks))
            .unwrap_err();
        assert_eq!(
            err,
            AdoptError::OutOfMemory {
                device: 0,
                size_bytes: 20 * MIB
            }
        );
        assert_eq!(dev.reserved_bytes(), 20 * MIB);
        check(&dev, "a refused adoption");
        dev.set_memory_fraction(&sim, 0.5).unwrap();
        let small = [live(0, 512, 512)];
        let err = dev
            .adopt_segment(&sim, &large(2 * MIB, &small))
            .unwrap_err();
        assert!(
            matches!(err, AdoptError::OutOfMemory { .. }),
            "the memory fraction applies: {err}"
        );
    }
}
