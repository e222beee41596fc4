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
use super::device::{DeviceAllocator, TOO_MANY_BLOCKS};
use super::free_list::{FreeKey, PoolKind};
use super::observe::{Place, PoolEvent};
use super::segments::Segment;
use super::sizing::MIN_BLOCK_SIZE;
use crate::backend::{Backend, BackendError, DeviceIndex, StreamId};
use crate::error::Error;
use crate::event::ContextId;

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
    /// use blockpool::introspect::{AdoptBlock, AdoptSegment, Introspect, PoolKind};
    /// use blockpool::{AllocatorConfig, CachingAllocator, DeviceIndex, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let live = [AdoptBlock { offset: 4 << 20, size: 8 << 20, requested: 8 << 20 }];
    /// let segment = AdoptSegment {
    ///     size: 20 << 20,
    ///     pool: PoolKind::Large,
    ///     stream: StreamId::DEFAULT,
    ///     blocks: &live,
    /// };
    /// let adopted = alloc.adopt_segment(DeviceIndex::new(0), &segment)?;
    /// assert_eq!(adopted, [0x7f00_0000_0000 + (4 << 20)]);
    /// // The 4 MiB gap in front is cached: a 3 MiB request takes it without a device call.
    /// let block = alloc.allocate(0, 3 << 20, StreamId::DEFAULT)?;
    /// assert_eq!(block.ptr(), 0x7f00_0000_0000);
    /// assert_eq!(alloc.device_stats(0)?.num_device_alloc, 0);
    /// alloc.check_invariants(DeviceIndex::new(0))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt_segment<B: Backend<Event = E>>(
        &mut self,
        backend: &B,
        segment: &AdoptSegment<'_>,
    ) -> Result<Vec<AdoptedBlock>, AdoptError> {
        let pieces = layout(segment)?;
        let size = segment.size;
        if self.over_limit_with(backend, size)? {
            return Err(self.out_of_memory(size));
        }
        let addr = match backend.alloc_segment(self.device, size) {
            Ok(addr) => addr,
            Err(BackendError::OutOfMemory { .. }) => return Err(self.out_of_memory(size)),
            Err(e) => return Err(Error::from(e).into()),
        };
        if self.segments.overlaps(addr, size) {
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
        let lookups = self.pool_ref(small).lookups();
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
        self.segments.reserve(segment.size);
        let at = Place {
            stream,
            addr,
            size: segment.size,
            small,
        };
        let oversize = self.policy.is_oversize(segment.size);
        self.observers
            .emit(PoolEvent::AdoptSegment { at, oversize });

        let split = pieces.len() > 1;
        let mut adopted = Vec::new();
        for (piece, &id) in pieces.iter().zip(&ids) {
            let (block_addr, size) = (addr + piece.offset as u64, piece.size);
            let at = Place {
                stream,
                addr: block_addr,
                size,
                small,
            };
            match piece.live {
                Some(requested) => {
                    self.observers.emit(PoolEvent::AdoptBlock {
                        block: id,
                        at,
                        requested,
                        oversize: self.policy.is_oversize(size),
                    });
                    adopted.push(AdoptedBlock {
                        id,
                        addr: block_addr,
                        size,
                        requested,
                    });
                }
                None => {
                    if split {
                        self.observers.emit(PoolEvent::InactiveSplit {
                            small,
                            blocks: 1,
                            bytes: size as i64,
                        });
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
mod tests;
