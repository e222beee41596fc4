//! Everything CUDA: `CudaBackend` (the [`Backend`](crate::Backend) over NVIDIA's driver),
//! `DeviceBuffer<T>` (blockpool memory where the Rust GPU ecosystem expects it), and [`probe()`]:
//! whether CUDA is usable in this process, and if not why. All but the probe need the `cuda`
//! feature; this is the only module that calls the driver, and no raw driver type leaves it.
//!
//! | file | what lives there |
//! |---|---|
//! | `backend.rs`, `backend/` | `CudaBackend`: creation checks, one device's context, segments and events (`device.rs`), expandable segments (`vmm.rs`) |
//! | `driver.rs`, `driver/` | the one path into libcuda: every driver function blockpool calls (virtual memory management in `vmm.rs`), and their list, which the probe and `CudaBackend::new` check before any call |
//! | `buffer.rs` | `DeviceBuffer<T>`: cudarc's `DeviceSlice` / `DevicePtr` / `DevicePtrMut` and kernel-argument traits over a [`TypedAllocation`] |
//! | `error.rs` | driver codes as [`BackendError`](crate::backend::BackendError)s, with what to do |
//! | `probe.rs`, `probe/` | [`probe()`]: the driver and each device, and a [`Diagnosis`] when CUDA is unusable |
//!
//! The element count, overflow checks and use on other streams of a `DeviceBuffer` are
//! [`TypedAllocation`]'s, which needs no driver and lives with the allocator's handles.
//! `cudarc` is re-exported so callers use the same version blockpool implements traits for.
//!
//! [`probe()`] exists without the `cuda` feature too, so a program can always ask why CUDA is
//! unusable; without the feature it says so.

#[cfg(feature = "cuda")]
mod backend;
#[cfg(feature = "cuda")]
mod buffer;
#[cfg(feature = "cuda")]
mod driver;
#[cfg(feature = "cuda")]
mod error;
mod probe;

/// The typed handle a `DeviceBuffer` builds on, backend-independent (in the allocator's
/// layer, and at the crate root); also named here, beside the buffer.
#[doc(no_inline)]
pub use crate::allocator::{byte_len, BufferError, TypedAllocation};
#[cfg(feature = "cuda")]
pub use backend::{CudaBackend, CudaBackendEvent, CudaDeviceProperties, MIN_DRIVER_VERSION};
#[cfg(feature = "cuda")]
pub use buffer::DeviceBuffer;
#[cfg(feature = "cuda")]
pub use cudarc;
pub(crate) use probe::probe_driver;
pub use probe::{
    probe, ComputeCapability, Condition, DeviceReport, Diagnosis, DriverCallError, DriverInfo,
    DriverVersion, ProbedDevice,
};
