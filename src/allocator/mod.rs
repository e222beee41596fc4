//! `CachingAllocator`: the thread-safe allocator over every device of a backend.
//!
//! Each device has its own [`DeviceAllocator`](crate::pool::DeviceAllocator) behind a
//! `parking_lot` mutex, so threads on different devices never contend. Rust callers get an
//! owning [`Allocation`] that frees its block on drop; the raw-pointer API (`malloc` / `free` by
//! address, for the C ABI) keeps live pointers in a sharded `DashMap` instead.
//!
//! `caching.rs` holds the allocator and its shared state, `device_view.rs` the per-device
//! [`DeviceView`] (the device API without an index to get wrong), `handle.rs` the owning
//! handle, `typed.rs` the handle seen as `len` elements of a type ([`TypedAllocation`], on any
//! backend; `buffer_error.rs` what it refuses), `history.rs` history recording and the event
//! stamps taken on the hot path, and `sink.rs` trace files: dumping a snapshot and streaming
//! the history as it is recorded. Each device's mutex guards its pool, whose observers keep the
//! statistics, the history and the live table; `leaks.rs` leak tracking (the live tables read back, the teardown
//! report, `shutdown`), `leak_scope.rs` [`LeakScope`], `raw.rs` the raw-pointer API (`malloc`, `free` and
//! `record_stream` by address); `introspect.rs` implements
//! [`Introspect`](crate::introspect::Introspect), the bookkeeping access replay tools and tests
//! use.

mod buffer_error;
mod caching;
mod device_view;
mod handle;
mod history;
mod introspect;
mod leak_scope;
mod leaks;
mod raw;
#[cfg(feature = "trace-files")]
mod sink;
mod typed;

pub use buffer_error::BufferError;
pub use caching::{CachingAllocator, FreeMemoryCallback};
pub use device_view::DeviceView;
pub use handle::Allocation;
pub use leak_scope::LeakScope;
pub use typed::{byte_len, TypedAllocation};
