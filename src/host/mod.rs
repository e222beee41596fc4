//! Pinned host memory cache with the semantics of PyTorch's `CachingHostAllocator`.
//!
//! Copies between a device and *page-locked* (pinned) host memory run asynchronously, but
//! pinning memory (`cuMemHostAlloc`) is slow and synchronizes the device. So, as PyTorch does,
//! freed pinned blocks are cached and handed out again:
//!
//! * **Power-of-two buckets.** A request is rounded up to the next power of two (1 byte stays
//!   1 byte, 1000 bytes become 1024) and served from that size's free list, newest block first.
//!   Blocks are never split or merged.
//! * **Events guard reuse.** After queuing an asynchronous copy that reads or writes a block,
//!   record it ([`HostAllocation::record_event`]); when the block is freed, an event is recorded
//!   on each such stream and the block is reused only once all of them have completed. Events
//!   are checked at every allocation, oldest first, stopping at the first one still running.
//! * **`empty_cache`** gives every cached block back to the backend; blocks still waiting for
//!   their events stay until the events complete.
//! * **Out of memory.** When the backend cannot pin more memory, the cache is released and the
//!   request retried once.
//! * **Statistics.** [`HostStats`] has the keys of `torch.cuda.host_memory_stats()`.
//!
//! `pool.rs` holds the bookkeeping (no locks, no I/O), `allocator.rs` the thread-safe
//! [`HostCachingAllocator`], `handle.rs` the owning [`HostAllocation`], `stats.rs` the
//! statistics and `error.rs` the errors.

mod allocator;
mod error;
mod handle;
mod pool;
mod stats;
#[cfg(test)]
mod tests;

pub use allocator::HostCachingAllocator;
pub use error::{HostError, HostResult};
pub use handle::HostAllocation;
pub use pool::{round_size, size_index, HOST_BUCKETS};
pub use stats::HostStats;
