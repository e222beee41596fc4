//! [`BufferError`]: what typed device buffers refuse, with what to do about it.

use crate::backend::{BackendError, DeviceIndex};

/// A failure of a typed buffer ([`TypedAllocation`](super::TypedAllocation) or
/// `DeviceBuffer`, with the `cuda` feature).
///
/// Only [`BufferError::Allocator`] with an out-of-memory error is retryable (free memory, or
/// `empty_cache`, and try again); the others are misuse that fails the same way every time.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BufferError {
    /// `len` elements of the type take more bytes than a `usize` can count. Never fits.
    #[error("{len} elements of {type_name} ({element_bytes} bytes each) is more bytes than usize can hold: ask for fewer elements")]
    SizeOverflow {
        /// Elements asked for.
        len: usize,
        /// Size of one element, in bytes.
        element_bytes: usize,
        /// The element type.
        type_name: &'static str,
    },
    /// A copy between sides of different lengths.
    #[error("{operation}: the buffer has {buffer_len} elements but the other side has {other_len}; copies need equal lengths (copy into or from a sub-slice of matching length)")]
    LengthMismatch {
        /// Which copy.
        operation: &'static str,
        /// Elements in the buffer.
        buffer_len: usize,
        /// Elements on the other side.
        other_len: usize,
    },
    /// The buffer was used with a stream (or asked for on a device) of another device.
    #[error("a buffer on device {buffer_device} was used with a stream of device {other_device}: use a stream of device {buffer_device}, or copy the data to device {other_device} first")]
    WrongDevice {
        /// Device of the buffer's memory.
        buffer_device: DeviceIndex,
        /// Device of the stream.
        other_device: DeviceIndex,
    },
    /// The stream belongs to a CUDA context other than the primary context of the device,
    /// which blockpool allocates in.
    #[error("the stream belongs to a CUDA context other than device {device}'s primary context, which blockpool allocates in: make streams from CudaBackend::context({device})")]
    ForeignContext {
        /// Device of the buffer.
        device: DeviceIndex,
    },
    /// cudarc panicked in a call blockpool made for the buffer (it unwraps driver errors in a
    /// few places, such as the events of a new slice, made with `cuEventCreate`); the panic was
    /// caught. What was being done and cudarc's message, which names the driver's error.
    #[error("cudarc panicked while {operation} on device {device}: {message}")]
    CudarcPanicked {
        /// Device of the buffer.
        device: DeviceIndex,
        /// What blockpool had asked of cudarc.
        operation: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The allocator refused (out of memory, invalid device, ...).
    #[error(transparent)]
    Allocator(#[from] crate::Error),
    /// The device failed a copy or a setup call.
    #[error("device error: {0}")]
    Backend(#[from] BackendError),
}

impl BufferError {
    /// Whether freeing memory may let the failed request succeed.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, BufferError::Allocator(crate::Error::OutOfMemory(_)))
            || matches!(self, BufferError::Backend(e) if e.is_out_of_memory())
    }
}
