//! Bookkeeping access for replay tools and tests; not needed to allocate.
//!
//! [`Introspect`] reaches past the allocator's API into one device's pool: its segments and
//! blocks as they are, the invariants of DESIGN.md section 7 checked from scratch, segments
//! taken over with their live blocks (how a replay starts from a trace's first state), and the
//! current totals without copying every statistic. It is implemented for
//! [`CachingAllocator`] and is a separate import so that the allocator's own API stays what a
//! program that allocates needs:
//!
//! ```
//! use blockpool::introspect::Introspect;
//! use blockpool::{AllocatorConfig, CachingAllocator, DeviceIndex, SimBackend, StreamId};
//!
//! let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
//! let a = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
//! alloc.check_invariants(DeviceIndex::new(0))?;
//! let segments = alloc.segments(DeviceIndex::new(0))?;
//! assert_eq!((segments.len(), segments[0].blocks[0].addr), (1, a.ptr()));
//! assert_eq!(alloc.device_totals(DeviceIndex::new(0))?.allocated_bytes, 4096);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::backend::DeviceIndex;
use crate::error::Result;

/// PyTorch's sizing rules, as the pool applies them (rounding, pools, segment sizes).
pub use crate::pool::sizing;
/// The pool's bookkeeping types, as [`Introspect`] shows them (the pool itself is private).
pub use crate::pool::{
    AdoptBlock, AdoptError, AdoptSegment, BlockId, BlockState, BlockView, InvariantViolation,
    PoolKind, SegmentView,
};
use crate::trace::MemoryTotals;
#[cfg(doc)]
use crate::{CachingAllocator, DeviceStats};

/// Bookkeeping access for replay tools and tests; not needed to allocate (see the
/// [module docs](self)). Implemented for [`CachingAllocator`]; sealed, so that methods can be
/// added without breaking anyone.
pub trait Introspect: sealed::Sealed {
    /// Segments of `device` with their blocks, lowest address first.
    fn segments(&self, device: DeviceIndex) -> Result<Vec<SegmentView>>;

    /// Checks every bookkeeping invariant of `device`: blocks tile their segments, free
    /// neighbours of one stream are merged, the free lists hold exactly the free blocks, and
    /// every current statistic equals what the blocks imply. A bad index is a violation too.
    fn check_invariants(&self, device: DeviceIndex) -> Result<(), InvariantViolation>;

    /// Takes over a segment that already exists on `device` with its live blocks (a segment
    /// of its size from the backend, each live block at its offset, each gap cached) and
    /// returns the address of each live block,
    /// lowest first. Each is a raw allocation from then on: free it with
    /// [`CachingAllocator::free`].
    ///
    /// ```
    /// use blockpool::introspect::Introspect;
    /// use blockpool::introspect::{AdoptBlock, AdoptSegment, PoolKind};
    /// use blockpool::{AllocatorConfig, CachingAllocator, DeviceIndex, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let live = [AdoptBlock { offset: 0, size: 1 << 20, requested: 1 << 20 }];
    /// let segment = AdoptSegment {
    ///     size: 2 << 20,
    ///     pool: PoolKind::Small,
    ///     stream: StreamId::DEFAULT,
    ///     blocks: &live,
    /// };
    /// let ptrs = alloc.adopt_segment(DeviceIndex::new(0), &segment)?;
    /// assert_eq!(alloc.device_totals(DeviceIndex::new(0))?.allocated_bytes, 1 << 20);
    /// alloc.free(0, ptrs[0])?;
    /// assert_eq!(alloc.device_totals(DeviceIndex::new(0))?.allocated_bytes, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn adopt_segment(
        &self,
        device: DeviceIndex,
        segment: &AdoptSegment<'_>,
    ) -> Result<Vec<u64>, AdoptError>;

    /// The current totals of `device`, named as a trace's [`MemoryTotals`] are (the
    /// `.all.current` statistics), without copying every statistic as
    /// [`CachingAllocator::device_stats`] does (for peak tracking after every replayed event).
    fn device_totals(&self, device: DeviceIndex) -> Result<MemoryTotals>;
}

pub(crate) mod sealed {
    /// Implemented only inside this crate, so no one else can implement
    /// [`Introspect`](super::Introspect).
    pub trait Sealed {}
}
