//! [`Allocation`], the owning handle [`CachingAllocator::allocate`] returns: accessors for its
//! address, sizes, device and stream, `record_stream`, and the free on drop (or the explicit
//! [`Allocation::free`] that reports a failure instead of logging it).

#[cfg(doc)]
use super::caching::CachingAllocator;
use super::caching::Shared;
use crate::backend::{Backend, DeviceIndex, StreamId};
use crate::error::Result;
use crate::event::{Context, ContextId, EventStamp};
use crate::pool::AllocatedBlock;
use std::fmt;
use std::sync::Arc;

/// An owning handle to device memory from a [`CachingAllocator`]. Dropping it frees the block
/// on its stream (deferred until other streams it was recorded on have finished with it).
pub struct Allocation<B: Backend> {
    pub(super) shared: Arc<Shared<B>>,
    pub(super) device: DeviceIndex,
    pub(super) block: Option<AllocatedBlock>,
    pub(super) requested: usize,
    pub(super) stream: StreamId,
    /// Time and context of the call that made it, while history was recorded.
    pub(super) created: Option<EventStamp>,
}

impl<B: Backend> Allocation<B> {
    /// Device address of the first byte (0 for a zero-byte allocation).
    pub fn ptr(&self) -> u64 {
        self.block.map_or(0, |b| b.addr)
    }

    /// Usable size in bytes: the rounded block size, at least the requested size.
    pub fn size(&self) -> usize {
        self.block.map_or(0, |b| b.size)
    }

    /// Bytes asked for.
    pub fn requested_size(&self) -> usize {
        self.requested
    }

    /// Device of the memory.
    pub fn device(&self) -> DeviceIndex {
        self.device
    }

    /// Stream the memory was allocated on (where it is freed).
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Allocation number on its device, counting from 1 (0 for a zero-byte allocation).
    pub fn id(&self) -> u64 {
        self.block.map_or(0, |b| b.alloc_id)
    }

    /// When it was allocated, in microseconds since history recording started
    /// ([`CachingAllocator::record_memory_history`]); `None` if history was not being
    /// recorded then. Taking the time costs a clock read, so it is taken only while recording.
    pub fn created_us(&self) -> Option<u64> {
        self.created.map(|stamp| stamp.time_us)
    }

    /// The interned id of [`Allocation::context`], as events and snapshots refer to it;
    /// [`ContextId::NONE`] when none was gathered.
    pub fn context_id(&self) -> ContextId {
        self.created.map_or(ContextId::NONE, |stamp| stamp.context)
    }

    /// Where it was allocated: the thread's [`annotate`](crate::annotate) tags, with the call
    /// stack when history records [`Backtraces::Rust`](crate::Backtraces::Rust). Gathered only
    /// while history is recorded with [`ContextLevel::State`](crate::ContextLevel::State) or
    /// more (PyTorch's `context="state"` / `"all"`); `None` otherwise.
    ///
    /// ```
    /// use blockpool::{annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let before = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// assert!(before.context().is_none() && before.created_us().is_none());
    /// alloc.record_memory_history(HistorySettings::default())?;
    /// let a = {
    ///     let _tag = annotate("layer3.attn");
    ///     alloc.allocate(0, 4096, StreamId::DEFAULT)?
    /// };
    /// let context = a.context().expect("recorded");
    /// assert_eq!(context.tags, ["layer3.attn".into()]);
    /// assert!(a.created_us().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context(&self) -> Option<Context> {
        crate::event::lookup_context(self.context_id())
    }

    /// Marks the memory as used on `stream` too: when freed, it is not reused before the work
    /// queued on `stream` by then has completed.
    pub fn record_stream(&self, stream: StreamId) -> Result<()> {
        match self.block {
            Some(block) => self
                .shared
                .lock(self.device)?
                .record_stream(block.id, stream),
            None => Ok(()),
        }
    }

    /// Frees now, reporting a device failure that dropping would only log.
    pub fn free(mut self) -> Result<()> {
        match self.block.take() {
            Some(block) => self.shared.free(self.device, block.id),
            None => Ok(()),
        }
    }
}

impl<B: Backend> Drop for Allocation<B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            if let Err(e) = self.shared.free(self.device, block.id) {
                tracing::error!(device = self.device, ptr = block.addr, "free failed: {e}");
            }
        }
    }
}

impl<B: Backend> fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocation")
            .field("device", &self.device)
            .field("ptr", &format_args!("{:#x}", self.ptr()))
            .field("size", &self.size())
            .field("requested", &self.requested)
            .field("stream", &self.stream)
            .finish()
    }
}
