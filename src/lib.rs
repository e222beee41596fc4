//! # blockpool
//!
//! A GPU memory caching allocator with the semantics of PyTorch's CUDA caching allocator,
//! and the statistics to see where memory went.
//!
//! Asking a GPU driver for memory (`cuMemAlloc`) takes tens of microseconds to milliseconds and
//! synchronizes the device; freeing it (`cuMemFree`) synchronizes too. PyTorch avoids both by
//! keeping freed memory in pools and handing it out again. blockpool does the same for Rust:
//!
//! * **Rounding and pools.** Requests are rounded to 512 bytes (or to power-of-two divisions,
//!   `roundup_power2_divisions`). Requests up to 1 MiB come from 2 MiB segments in the *small
//!   pool*; larger ones from the *large pool* (20 MiB segments below 10 MiB, else their own
//!   size rounded to 2 MiB).
//! * **Best fit per stream, split and merge.** A request takes the smallest cached block of
//!   its stream that fits, lowest address first; a block larger than needed is split and the
//!   remainder cached; freed blocks merge with free neighbours in their segment.
//! * **Streams.** Memory freed on one stream is never handed to another while cached. A block
//!   also used on other streams ([`Allocation::record_stream`]) is reused only after events
//!   recorded on those streams at free time have completed. With `stream_reuse:ordered`
//!   ([`config::StreamReuse`]) a stream that misses its own cache takes another stream's
//!   cached blocks after waiting for that stream's work on the device, and `record_stream`
//!   frees are ordered the same way instead of waiting.
//! * **Out of memory.** When the device refuses, cached memory is released step by step and
//!   the request retried; a final failure is an [`Error::OutOfMemory`] whose message gives the
//!   request, capacity, free, allocated and reserved-but-unallocated bytes.
//! * **Expandable segments.** With `expandable_segments:True`, each stream and pool gets one
//!   reserved address range that is mapped to memory in 2 MiB / 20 MiB units as requests need
//!   it and unmapped by `empty_cache`, so large blocks pack without gaps between segments
//!   (on backends with virtual memory management: CUDA's `cuMemMap`, and [`SimBackend`]).
//! * **Threads.** One lock per device; with `release_lock_on_cudamalloc:True` it is released
//!   while the device allocates a segment, so other threads keep allocating from the cache
//!   during a slow `cuMemAlloc`.
//! * **Leaks.** Every live allocation is tracked with its site (the caller's source line);
//!   leak scopes report what a step left behind, [`LiveSnapshot::compare_to`](leak::LiveSnapshot::compare_to) which sites
//!   grew, and dropping the allocator with memory still live says so, LeakSanitizer-style
//!   ([`leak`]).
//! * **Statistics.** [`DeviceView::stats`] reads them typed
//!   (`stats.allocated_bytes.all.current`), [`DeviceView::memory_stats`] as the 122 keys of
//!   `torch.cuda.memory_stats()`; [`DeviceView::memory_summary`] prints its table.
//!
//! ## Quick start
//!
//! ```
//! use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
//!
//! let alloc = CachingAllocator::new(SimBackend::new(1, 80 << 30), AllocatorConfig::default());
//! let dev = alloc.device(0)?; // device 0; the only place a bad index can fail
//! let a = dev.allocate(4096, StreamId::DEFAULT)?; // owning handle
//! assert_eq!((a.size(), a.requested_size()), (4096, 4096));
//! drop(a); // back to the cache, not to the device
//! let stats = dev.stats();
//! assert_eq!(stats.reserved_bytes.all.current, 2 << 20); // one 2 MiB small segment
//! assert_eq!(stats.allocated_bytes.all.current, 0);
//! assert_eq!(dev.memory_stats()["allocated_bytes.all.peak"], 4096); // PyTorch's flat keys
//! alloc.empty_cache()?;
//! print!("{}", dev.memory_summary());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The crate root holds what that tour meets (the allocator and its handles, the simulated and
//! CUDA backends, settings, errors, statistics, `annotate`); everything else is named by its
//! module (`blockpool::event::TraceEvent`, `blockpool::backend::SimFault`,
//! `blockpool::leak::LiveSnapshot`).
//!
//! The index-taking methods of [`CachingAllocator`] (`alloc.memory_stats(0)?`,
//! `alloc.allocate(0, size, stream)?`) mirror PyTorch's `torch.cuda.*(device)` functions and
//! answer the same.
//!
//! ## Layers
//!
//! Imports run one way, from the top of this picture down; no module imports one above it.
//!
//! ```text
//!  users: Allocation, TypedAllocation, DeviceView, raw malloc/free (the C ABI)
//!    |
//!  allocator   CachingAllocator: a parking_lot Mutex per device, the pointer map (dashmap),
//!    |         handles, history recording; dump/stream trace files (feature trace-files)
//!    |     \--------------------------.
//!  trace       snapshots, the state     \    introspect   replay/test access (Introspect)
//!    |         at any event; file        //!    |         formats (trace-files)      \  cuda         CudaBackend, DeviceBuffer, probe:
//!    |                                     \   |          the one path into the driver
//!  pool        pure bookkeeping: sizing, blocks, free lists, DeviceAllocator, and the
//!    |         events its observers (statistics, history, live table) keep;
//!    |         #![forbid(unsafe_code)], no I/O, no locks, no threads
//!  event       the event model: TraceEvent, contexts, annotate, the history ring (no I/O)
//!    |
//!  backend     the Backend trait, StreamId, BackendError; SimBackend
//!
//!  beside them: config (AllocatorConfig), stats (DeviceStats, memory_summary) and error,
//!  which pool and allocator use; leak (live tables, reports, snapshots: plain data over
//!  event and backend, the live table filled by the pool's events); host (pinned host cache) over backend; global over cuda;
//!  checkpoint (recompute-for-memory planners) over pool's sizing rules and config
//! ```
//!
//! In words: [`backend`] imports nothing of the crate; [`event`] only [`StreamId`]; `pool`
//! takes [`backend`], [`event`], [`config`], [`stats`], [`leak`]'s live table and [`error`]; [`trace`] reads
//! `pool`'s kinds and rules and [`event`]'s model, and `pool` never imports [`trace`];
//! [`CachingAllocator`] sits on all of them; [`cuda`] implements [`Backend`] and wraps
//! [`TypedAllocation`]. `unsafe` lives only in [`cuda`] (driver calls, each with a
//! `// SAFETY:` comment) and [`host`] (views of pinned memory); `pool` forbids it.
//!
//! Files: one idea each, under about 600 lines. A folder whose module only declares and
//! re-exports has a `mod.rs`; a module with code of its own and submodules is `foo.rs` beside
//! `foo/` (as `pool/adopt.rs` and `pool/adopt/`), never both.
//!
//! | module | what lives there |
//! |---|---|
//! | [`backend`] | the [`Backend`] trait (segments, streams, events) and [`SimBackend`] |
//! | [`event`] | the event model: [`TraceEvent`](event::TraceEvent), contexts and [`annotate`], history settings and the per-device ring |
//! | `pool` (private) | pure bookkeeping: sizing rules, blocks, free lists, one device's allocator; its types and sizing rules are shown through [`introspect`] |
//! | [`CachingAllocator`] | one pool per device behind a mutex, per-device [`DeviceView`]s, owning handles ([`Allocation`], and [`TypedAllocation`]: one seen as `len` elements of a type), raw pointers, history recording ([`CachingAllocator::record_memory_history`]), [`CachingAllocator::snapshot`] |
//! | [`config`] | [`AllocatorConfig`] and the `BLOCKPOOL_ALLOC_CONF` parser |
//! | [`stats`] | PyTorch-compatible statistics and `memory_summary` |
//! | [`trace`] | snapshots and the state at any event; with `trace-files`, trace files (our JSON Lines with a streaming sink, PyTorch snapshot pickles both ways, Perfetto, RMM's CSV log) |
//! | [`cuda`] | everything CUDA, and the only module that calls the driver (one path into it, which checks that libcuda has every function blockpool calls before calling any): `CudaBackend` over cudarc and `DeviceBuffer<T>` (cudarc's `DeviceSlice`/`DevicePtr`/`DevicePtrMut`/`PushKernelArg`), both with the `cuda` feature, and [`cuda::probe`] (what CUDA this machine has, and why not) |
//! | [`global`] | the process-wide default allocator: CUDA when usable, else the simulated device (`BLOCKPOOL_BACKEND=cuda\|sim`) |
//! | [`introspect`] | [`Introspect`](introspect::Introspect): bookkeeping access for replay tools and tests (segments, invariants, adopting a trace's segments); not needed to allocate |
//! | [`leak`] | leak detection: the step detector ([`leak::StepDetector`]: sites whose live memory grows for K consecutive steps, and persistent memory apart), the same analysis `memtrace leaks` runs on files |
//! | [`host`] | [`HostCachingAllocator`]: pinned host memory cache (power-of-two buckets, event-guarded reuse, `host_memory_stats`) |
//! | [`leak`] | lifetime tracking on the live handles: each allocation's site (`#[track_caller]`, plus annotation tags with context capture), leak scopes ([`CachingAllocator::leak_scope`]), live snapshots and their difference ([`CachingAllocator::live_snapshot`], [`LiveSnapshot::compare_to`](leak::LiveSnapshot::compare_to)), the teardown report and [`CachingAllocator::shutdown`] |
//! | [`testing`] | [`testing::assert_no_leaks`]: fail a test when code leaves allocations live |
//! | [`checkpoint`] | trading recompute for memory: chain costs rounded as the allocator rounds, planners ([`checkpoint::StoreAll`], [`checkpoint::Uniform`] with `checkpoint_sequential`'s split, [`checkpoint::Sqrt`], [`checkpoint::Revolve`]) and the one simulator of the memory model that gives every [`checkpoint::Plan`]'s forward calls and peak bytes |
//!
//! ## Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `cuda` | on | `CudaBackend`, `DeviceBuffer` and the driver path of [`cuda::probe`], through cudarc loaded at run time (builds with no CUDA installed) |
//! | `trace-files` | on | the trace file formats in [`trace`] (JSON Lines, PyTorch pickles, Perfetto, RMM CSV), `dump_snapshot` and `stream_history_to`; without it history and snapshots stay in memory |
//!
//! ## Features of the simulated device
//!
//! [`SimBackend`] simulates devices with deterministic fake addresses (or real host memory),
//! streams whose events complete only when a test advances them, call counters, fault
//! injection and a hook into segment allocation ([`SimBackend::set_alloc_hook`]), so every rule
//! above is tested exactly without a GPU.

// Docs link to the trace file formats, which only exist with `trace-files`; the default
// build (which CI documents with -D warnings) checks every link.
#![cfg_attr(not(feature = "trace-files"), allow(rustdoc::broken_intra_doc_links))]

pub mod backend;
pub mod checkpoint;
pub mod config;
pub mod cuda;
pub mod error;
pub mod event;
pub mod global;
pub mod host;
pub mod introspect;
pub mod leak;
pub(crate) mod pool;
pub mod stats;
pub mod testing;
pub mod trace;

mod allocator;

pub use allocator::{
    byte_len, Allocation, BufferError, CachingAllocator, DeviceView, FreeMemoryCallback, LeakScope,
    TypedAllocation,
};
pub use backend::{Backend, DeviceIndex, SimBackend, StreamId};
pub use config::AllocatorConfig;
#[cfg(feature = "cuda")]
pub use cuda::{CudaBackend, DeviceBuffer};
pub use error::{Error, Result};
pub use event::{annotate, HistorySettings};
pub use global::try_default_allocator;
pub use host::HostCachingAllocator;
pub use leak::LeakTracking;
pub use stats::DeviceStats;
