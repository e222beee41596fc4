//! blockpool memory where the Rust GPU ecosystem expects it (feature `cuda`), and [`probe`]:
//! whether CUDA is usable in this process, and if not why (with and without the feature).
//!
//! `DeviceBuffer<T>` is a typed buffer from the caching allocator that implements cudarc's
//! `DeviceSlice` / `DevicePtr` / `DevicePtrMut` and kernel-argument traits, so it goes where a
//! `CudaSlice<T>` goes. Its bookkeeping (element count, byte-size overflow, use on other
//! streams) is [`TypedAllocation`], generic over the backend (no feature needed) and tested on
//! the simulated one.
//! `cudarc` is re-exported so callers use the same version blockpool implements traits for.
//!
//! [`probe`] exists without the `cuda` feature too, so a program can always ask why CUDA is
//! unusable; without the feature it says so.

#[cfg(feature = "cuda")]
mod buffer;
mod probe;

/// The typed handle a `DeviceBuffer` builds on, backend-independent (in the allocator's
/// layer, and at the crate root); also named here, beside the buffer.
#[doc(no_inline)]
pub use crate::allocator::{byte_len, BufferError, TypedAllocation};
#[cfg(feature = "cuda")]
pub use buffer::DeviceBuffer;
#[cfg(feature = "cuda")]
pub use cudarc;
pub(crate) use probe::probe_driver;
pub use probe::{
    probe, ComputeCapability, Condition, DeviceReport, Diagnosis, DriverCallError, DriverInfo,
    DriverVersion, ProbedDevice,
};
