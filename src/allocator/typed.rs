//! [`TypedAllocation`]: an [`Allocation`] seen as `len` elements of `T`, on any backend.
//!
//! This is the part of a device buffer that needs no driver: the element count and the
//! overflow check on its byte size, the checks a copy or a stream needs before it is issued,
//! and the record of other streams that used the memory (`record_stream`), so the block is not
//! reused before their work is done. `DeviceBuffer` (feature `cuda`, in `cuda/buffer.rs`) adds
//! cudarc's traits on top; here it is all tested on [`SimBackend`](crate::SimBackend).

use std::fmt;
use std::marker::PhantomData;

use super::buffer_error::BufferError;
use super::caching::CachingAllocator;
use super::handle::Allocation;
use crate::backend::{Backend, DeviceIndex, StreamId};

/// Bytes taken by `len` elements of `T`, or [`BufferError::SizeOverflow`] when that is more
/// than `usize` can count.
///
/// ```
/// use blockpool::{byte_len, BufferError};
///
/// assert_eq!(byte_len::<f32>(1024)?, 4096);
/// assert!(matches!(byte_len::<f64>(usize::MAX / 4), Err(BufferError::SizeOverflow { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn byte_len<T>(len: usize) -> Result<usize, BufferError> {
    let element_bytes = std::mem::size_of::<T>();
    len.checked_mul(element_bytes)
        .ok_or(BufferError::SizeOverflow {
            len,
            element_bytes,
            type_name: std::any::type_name::<T>(),
        })
}

/// `len` elements of `T` in memory from a [`CachingAllocator`], freed (on its stream) when
/// dropped.
///
/// It never touches the memory: it keeps the typed length, checks what copies and streams need
/// before they are issued, and records other streams that use the memory so that, once freed,
/// the block is not handed out again before their work has completed.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId, TypedAllocation};
///
/// let sim = SimBackend::new(1, 1 << 30);
/// let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
/// let buf = TypedAllocation::<f32, _>::new(&alloc, 0, 1000, StreamId::from_raw(1))?;
/// assert_eq!((buf.len(), buf.num_bytes()), (1000, 4000));
/// buf.record_stream(StreamId::from_raw(2))?; // read by work queued on stream 2
/// let ptr = buf.ptr();
/// drop(buf);
/// // Stream 2 has not run yet: the block is not handed out again.
/// assert_ne!(alloc.allocate(0, 4000, StreamId::from_raw(1))?.ptr(), ptr);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TypedAllocation<T, B: Backend> {
    allocation: Allocation<B>,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T, B: Backend> TypedAllocation<T, B> {
    /// Allocates `len` elements of `T` on `device` for use on `stream`.
    ///
    /// Fails with [`BufferError::SizeOverflow`] when the byte size overflows, and with
    /// [`BufferError::Allocator`] when the allocator refuses (out of memory, invalid device).
    /// Its site is the caller's line.
    #[track_caller]
    pub fn new(
        allocator: &CachingAllocator<B>,
        device: impl Into<DeviceIndex>,
        len: usize,
        stream: StreamId,
    ) -> Result<Self, BufferError> {
        let device = device.into();
        let bytes = byte_len::<T>(len)?;
        let allocation = allocator.allocate(device, bytes, stream)?;
        Ok(TypedAllocation {
            allocation,
            len,
            _element: PhantomData,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size of the elements in bytes (`len * size_of::<T>()`; the block may be larger).
    pub fn num_bytes(&self) -> usize {
        self.allocation.requested_size()
    }

    /// Device address of the first element (0 when empty).
    pub fn ptr(&self) -> u64 {
        self.allocation.ptr()
    }

    /// Device of the memory.
    pub fn device(&self) -> DeviceIndex {
        self.allocation.device()
    }

    /// Stream the memory was allocated on, and is freed on.
    pub fn stream(&self) -> StreamId {
        self.allocation.stream()
    }

    /// The untyped allocation underneath.
    pub fn allocation(&self) -> &Allocation<B> {
        &self.allocation
    }

    /// Gives up the element type, keeping the memory.
    pub fn into_allocation(self) -> Allocation<B> {
        self.allocation
    }

    /// Notes that work queued on `stream` uses the memory, as
    /// [`Allocation::record_stream`] (the one name for it, as in PyTorch): when freed, the
    /// block is reused only after the work queued on `stream` by then has completed (or,
    /// under `stream_reuse:ordered`, once the buffer's stream waits for it). Using the own
    /// stream records nothing.
    pub fn record_stream(&self, stream: StreamId) -> Result<(), BufferError> {
        if stream != self.stream() {
            self.allocation.record_stream(stream)?;
        }
        Ok(())
    }

    /// [`BufferError::WrongDevice`] unless `device` is the buffer's device.
    pub fn check_device(&self, device: impl Into<DeviceIndex>) -> Result<(), BufferError> {
        let device = device.into();
        if device == self.device() {
            Ok(())
        } else {
            Err(BufferError::WrongDevice {
                buffer_device: self.device(),
                other_device: device,
            })
        }
    }

    /// [`BufferError::LengthMismatch`] for `operation` unless the other side of a copy has as
    /// many elements as the buffer.
    pub fn check_len(&self, other_len: usize, operation: &'static str) -> Result<(), BufferError> {
        if other_len == self.len {
            Ok(())
        } else {
            Err(BufferError::LengthMismatch {
                operation,
                buffer_len: self.len,
                other_len,
            })
        }
    }
}

impl<T, B: Backend> fmt::Debug for TypedAllocation<T, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedAllocation")
            .field("element", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("allocation", &self.allocation)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllocatorConfig, SimBackend};

    /// Device 0, which these tests use.
    const D0: DeviceIndex = DeviceIndex::new(0);

    fn allocator() -> (SimBackend, CachingAllocator<SimBackend>) {
        let sim = SimBackend::new(2, 1 << 30);
        let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
        (sim, alloc)
    }

    #[test]
    fn length_and_byte_size_follow_the_element_type() {
        let (_, alloc) = allocator();
        let buf = TypedAllocation::<u64, _>::new(&alloc, 1, 300, StreamId::from_raw(5)).unwrap();
        assert_eq!(buf.len(), 300);
        assert_eq!(buf.num_bytes(), 2400, "300 u64 are 2400 bytes");
        assert!(
            buf.allocation().size() >= 2400,
            "the block holds every element"
        );
        assert_eq!(
            (buf.device(), buf.stream()),
            (DeviceIndex::new(1), StreamId::from_raw(5))
        );
        assert!(!buf.is_empty());
    }

    #[test]
    fn byte_size_overflow_is_a_typed_error_and_allocates_nothing() {
        let (sim, alloc) = allocator();
        let err =
            TypedAllocation::<[u8; 16], _>::new(&alloc, D0, usize::MAX / 8, StreamId::from_raw(0))
                .unwrap_err();
        assert_eq!(
            err,
            BufferError::SizeOverflow {
                len: usize::MAX / 8,
                element_bytes: 16,
                type_name: "[u8; 16]",
            }
        );
        assert!(err.to_string().contains("ask for fewer elements"), "{err}");
        assert!(!err.is_out_of_memory(), "an overflow never fits");
        assert_eq!(
            sim.calls(D0).segment_allocs,
            0,
            "nothing reached the device"
        );
    }

    #[test]
    fn an_empty_buffer_has_no_memory() {
        let (sim, alloc) = allocator();
        let buf = TypedAllocation::<f32, _>::new(&alloc, D0, 0, StreamId::from_raw(0)).unwrap();
        assert!(buf.is_empty());
        assert_eq!((buf.ptr(), buf.num_bytes()), (0, 0));
        buf.record_stream(StreamId::from_raw(3)).unwrap();
        assert_eq!(sim.calls(D0).segment_allocs, 0);
    }

    #[test]
    fn block_used_on_another_stream_is_not_reused_before_that_stream_finishes() {
        let (sim, alloc) = allocator();
        let buf = TypedAllocation::<f32, _>::new(&alloc, D0, 1024, StreamId::from_raw(1)).unwrap();
        let ptr = buf.ptr();
        buf.record_stream(StreamId::from_raw(2)).unwrap();
        drop(buf);
        let other = alloc.allocate(0, 4096, StreamId::from_raw(1)).unwrap();
        assert_ne!(
            other.ptr(),
            ptr,
            "the block was handed out while stream 2 still had work queued on it"
        );
        drop(other);
        sim.advance_stream(D0, StreamId::from_raw(2), 1).unwrap();
        let again = alloc.allocate(0, 4096, StreamId::from_raw(1)).unwrap();
        assert_eq!(
            again.ptr(),
            ptr,
            "once stream 2 finished, the block is reused"
        );
    }

    #[test]
    fn use_on_the_own_stream_records_nothing() {
        let (_, alloc) = allocator();
        let buf = TypedAllocation::<f32, _>::new(&alloc, D0, 1024, StreamId::from_raw(1)).unwrap();
        let ptr = buf.ptr();
        buf.record_stream(StreamId::from_raw(1)).unwrap();
        drop(buf);
        let again = alloc.allocate(0, 4096, StreamId::from_raw(1)).unwrap();
        assert_eq!(
            again.ptr(),
            ptr,
            "no other stream used it, so it is reused at once"
        );
    }

    #[test]
    fn copies_of_another_length_are_refused() {
        let (_, alloc) = allocator();
        let buf = TypedAllocation::<f32, _>::new(&alloc, D0, 8, StreamId::from_raw(0)).unwrap();
        assert_eq!(buf.check_len(8, "copy_from_host"), Ok(()));
        let err = buf.check_len(9, "copy_from_host").unwrap_err();
        assert_eq!(
            err,
            BufferError::LengthMismatch {
                operation: "copy_from_host",
                buffer_len: 8,
                other_len: 9
            }
        );
        assert!(
            err.to_string()
                .starts_with("copy_from_host: the buffer has 8 elements"),
            "{err}"
        );
    }

    #[test]
    fn another_device_is_refused() {
        let (_, alloc) = allocator();
        let buf = TypedAllocation::<f32, _>::new(&alloc, 1, 8, StreamId::from_raw(0)).unwrap();
        assert_eq!(buf.check_device(1), Ok(()));
        let err = buf.check_device(0).unwrap_err();
        assert_eq!(
            err,
            BufferError::WrongDevice {
                buffer_device: DeviceIndex::new(1),
                other_device: D0
            }
        );
        assert!(
            err.to_string().contains("use a stream of device 1"),
            "{err}"
        );
    }

    #[test]
    fn allocator_refusals_pass_through_typed() {
        let (_, alloc) = allocator();
        let err = TypedAllocation::<f32, _>::new(&alloc, 7, 8, StreamId::from_raw(0)).unwrap_err();
        assert!(
            matches!(err, BufferError::Allocator(crate::Error::InvalidDevice { device, .. }) if device == DeviceIndex::new(7)),
            "{err:?}"
        );
        let oom =
            TypedAllocation::<u8, _>::new(&alloc, D0, 2 << 30, StreamId::from_raw(0)).unwrap_err();
        assert!(matches!(oom, BufferError::Allocator(_)), "{oom:?}");
    }
}
