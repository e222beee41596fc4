//! [`Allocation`], the owning handle [`CachingAllocator::allocate`] returns: accessors for its
//! address, sizes, device and stream, what it knows of its origin (allocation id, site, name,
//! creation time and context), `record_stream`, and the free on drop (or the explicit
//! [`Allocation::free`] that reports a failure instead of logging it).

#[cfg(doc)]
use super::caching::CachingAllocator;
use super::caching::Shared;
use crate::backend::{Backend, DeviceIndex, StreamId};
use crate::error::Result;
use crate::event::{Context, ContextId, EventStamp};
use crate::pool::AllocatedBlock;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Source location of the call that made it.
    pub(super) site: &'static Location<'static>,
    pub(super) name: Option<Arc<str>>,
    /// Nanoseconds since the process's clock base when made; 0 when not taken.
    pub(super) created_ns: u64,
    /// Context gathered for leak tracking ([`ContextId::NONE`] unless capture was on).
    pub(super) leak_context: ContextId,
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

    /// When it was allocated, if the time was taken: while leak tracking captures context
    /// ([`LeakTracking::Context`](crate::leak::LeakTracking::Context) or more).
    pub fn created_at(&self) -> Option<Instant> {
        (self.created_ns != 0)
            .then(|| super::history::clock_base() + Duration::from_nanos(self.created_ns))
    }

    /// How long ago it was allocated, when [`created_at`](Self::created_at) is known.
    pub fn age(&self) -> Option<Duration> {
        self.created_at().map(|t| t.elapsed())
    }

    /// Source location of the call that allocated it (`#[track_caller]`: the user's line, not
    /// blockpool's, also through [`DeviceView::allocate`](crate::DeviceView::allocate) and the
    /// typed buffers' constructors).
    pub fn site(&self) -> &'static Location<'static> {
        self.site
    }

    /// The label leak reports group it under: [`site`](Self::site) with the annotation tags
    /// when context was captured ([`site_label`](crate::leak::site_label)).
    ///
    /// ```
    /// use blockpool::{annotate, AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    /// use blockpool::leak::LeakTracking;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let plain = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// assert_eq!(plain.site().line(), line!() - 1);
    /// assert_eq!(plain.site_label(), plain.site().to_string(), "file:line:column");
    /// alloc.set_leak_tracking(LeakTracking::Context);
    /// let _step = annotate("step");
    /// let tagged = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// assert!(tagged.site_label().starts_with("step @ "), "{}", tagged.site_label());
    /// assert!(tagged.created_at().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn site_label(&self) -> String {
        crate::leak::site_label(self.site, self.context().as_ref())
    }

    /// Its name, if it was given one ([`CachingAllocator::allocate_named`],
    /// [`set_name`](Self::set_name)).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Names it (or renames it), for leak reports and
    /// [`CachingAllocator::live_allocations`].
    pub fn set_name(&mut self, name: &str) {
        let name: Arc<str> = Arc::from(name);
        if let Some(block) = self.block {
            if let Ok(mut dev) = self.shared.lock(self.device) {
                dev.observers.live_mut().set_name(
                    block.id.index(),
                    block.alloc_id,
                    Arc::clone(&name),
                );
            }
        }
        self.name = Some(name);
    }

    /// The interned id of [`Allocation::context`], as events and snapshots refer to it;
    /// [`ContextId::NONE`] when none was gathered.
    pub fn context_id(&self) -> ContextId {
        match self.created.map(|stamp| stamp.context) {
            Some(id) if id != ContextId::NONE => id,
            _ => self.leak_context,
        }
    }

    /// Where it was allocated: the thread's [`annotate`](crate::annotate) tags, with the call
    /// stack when history records [`Backtraces::Rust`](crate::event::Backtraces::Rust) (or leak
    /// tracking is [`LeakTracking::Backtraces`](crate::leak::LeakTracking::Backtraces)).
    /// Gathered only while history is recorded with
    /// [`ContextLevel::State`](crate::event::ContextLevel::State) or more (PyTorch's
    /// `context="state"` / `"all"`) or leak tracking captures context; `None` otherwise.
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
        self.shared.contexts.get(self.context_id())
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
                tracing::error!(
                    device = self.device.get(),
                    ptr = block.addr,
                    "free failed: {e}"
                );
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
            .field("site", &format_args!("{}", self.site))
            .field("name", &self.name)
            .finish()
    }
}
