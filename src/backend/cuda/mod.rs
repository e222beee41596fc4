//! The CUDA backend (feature `cuda`): [`CudaBackend`] over cudarc's driver bindings.
//!
//! `backend.rs` holds the backend and its creation checks, `device.rs` one device (primary
//! context, properties, segments, event pool), `vmm.rs` its expandable-segment address ranges
//! and mappings, `error.rs` the mapping of driver codes to
//! [`BackendError`](crate::backend::BackendError)s. This is the only place that calls the driver
//! for the allocator; no raw driver type leaves it.

mod backend;
mod device;
pub(crate) mod error;
mod vmm;

pub use backend::{CudaBackend, CudaBackendEvent, MIN_DRIVER_VERSION};
pub use device::CudaDeviceProperties;
