//! Entry points for replaying a trace through the allocator: adopting the segments and live
//! blocks a trace began with, as raw allocations freed by address like any other, and a cheap
//! look at the current totals for peak tracking after every event.

use super::caching::CachingAllocator;
use crate::backend::{Backend, DeviceIndex};
use crate::error::Error;
use crate::pool::{AdoptError, AdoptSegment};
use crate::trace::{ContextLevel, MemoryTotals};

impl<B: Backend> CachingAllocator<B> {
    /// Takes over a segment that already exists on `device` with its live blocks (see
    /// [`DeviceAllocator::adopt_segment`](crate::pool::DeviceAllocator::adopt_segment)) and
    /// returns the address of each live block, lowest first. Each is a raw allocation from
    /// then on: free it with [`CachingAllocator::free`].
    ///
    /// ```
    /// use blockpool::pool::{AdoptBlock, AdoptSegment, PoolKind};
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let live = [AdoptBlock { offset: 0, size: 1 << 20, requested: 1 << 20 }];
    /// let segment = AdoptSegment {
    ///     size: 2 << 20,
    ///     pool: PoolKind::Small,
    ///     stream: StreamId::DEFAULT,
    ///     blocks: &live,
    /// };
    /// let ptrs = alloc.adopt_segment(0, &segment)?;
    /// assert_eq!(alloc.device_totals(0)?.allocated_bytes, 1 << 20);
    /// alloc.free(0, ptrs[0])?;
    /// assert_eq!(alloc.device_totals(0)?.allocated_bytes, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt_segment(
        &self,
        device: DeviceIndex,
        segment: &AdoptSegment<'_>,
    ) -> Result<Vec<u64>, AdoptError> {
        let stamp = self.shared.stamp(ContextLevel::State);
        let mut dev = self.lock_device(device)?;
        dev.set_event_stamp(stamp);
        let adopted = dev.adopt_segment(&self.shared.backend, segment)?;
        drop(dev);
        Ok(adopted
            .into_iter()
            .map(|block| {
                self.shared.raw.insert(block.addr, (device, block.id));
                block.addr
            })
            .collect())
    }

    /// The current totals of `device`, named as a trace's [`MemoryTotals`] are (the
    /// `.all.current` statistics), without copying every statistic as
    /// [`CachingAllocator::device_stats`] does.
    pub fn device_totals(&self, device: DeviceIndex) -> Result<MemoryTotals, Error> {
        let dev = self.lock_device(device)?;
        let stats = dev.stats();
        let current = |array: &crate::stats::StatArray| array.all.current.max(0) as u64;
        Ok(MemoryTotals {
            allocated_bytes: current(&stats.allocated_bytes),
            active_bytes: current(&stats.active_bytes),
            requested_bytes: current(&stats.requested_bytes),
            reserved_bytes: current(&stats.reserved_bytes),
            allocations: current(&stats.allocation),
            active_blocks: current(&stats.active),
            segments: current(&stats.segment),
        })
    }
}
