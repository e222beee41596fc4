//! Where raw memory, streams and events come from.
//!
//! A [`Backend`] is a device driver seen from the allocator: it hands out and takes back whole
//! segments, reports free and total memory, and records events on streams so the allocator can
//! tell when work that used a block has finished. [`SimBackend`] simulates devices for tests,
//! replays and docs; `CudaBackend` (in [`cuda`](crate::cuda), feature `cuda`) implements the
//! trait over NVIDIA's driver. Nothing here knows about CUDA: the CUDA module imports this one,
//! never the other way.

pub(crate) mod address_ranges;
mod base;
mod error;
mod sim;

pub use sim::{
    SimAllocHook, SimBackend, SimBackendBuilder, SimCalls, SimEvent, SimFault, SimHostCalls,
    HOST_PAGE, MAPPING_GRANULARITY,
};

pub use base::{Backend, DeviceIndex, MemInfo, StreamId};
pub use error::BackendError;
