//! [`DeviceBuffer<T>`]: caching-allocator memory that goes where a cudarc `CudaSlice<T>` goes.
//!
//! The buffer wraps a [`TypedAllocation`] (length, overflow checks, `record_stream`) and a
//! `CudaSlice<T>` made over the same address with `upgrade_device_ptr`, which never owns the
//! memory: dropping the buffer `leak`s the slice (its stream waits for the slice's last read
//! and write events, nothing is freed) and then the allocation goes back to the pool on the
//! buffer's stream. The cudarc traits delegate to that slice, so copies and kernel launches get
//! cudarc's own event ordering, and a use on another stream of the same context is recorded on
//! the allocation first.

use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{
    CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, LaunchArgs,
    PushKernelArg, SyncOnDrop, ValidAsZeroBits,
};

use super::error::driver_error;
use super::CudaBackend;
use crate::backend::{DeviceIndex, StreamId};
use crate::{Allocation, BufferError, CachingAllocator, TypedAllocation};

/// `len` elements of `T` on a GPU, from a [`CachingAllocator<CudaBackend>`], usable wherever
/// cudarc takes a `CudaSlice<T>`.
///
/// # Contract
///
/// * **Its stream.** The buffer belongs to the stream it was allocated on; dropping it returns
///   the block to the pool on that stream, so later work on that stream may reuse it at once.
/// * **Other streams.** cudarc's traits ([`DevicePtr`], [`DevicePtrMut`], [`PushKernelArg`])
///   behave as for a `CudaSlice`: with cudarc's event tracking on (its default, once a context
///   has a non-default stream) the stream that uses the buffer first waits for its last write
///   (and, to write, its last read), and the buffer's read or write event is recorded after the
///   use. Dropping the buffer makes its own stream wait for those events before the block is
///   freed. On top of that, every `device_ptr`/`device_ptr_mut` call with a stream other than
///   the buffer's records that stream on the allocation (`record_stream`): once freed, the
///   block is not handed out before that stream's work has completed. A kernel argument does
///   not tell the buffer its stream; call [`DeviceBuffer::record_stream`] for a kernel on
///   another stream if event tracking is off.
/// * **Context.** Streams must come from the device's primary context, which
///   [`CudaBackend::context`] returns; the checked methods refuse others with
///   [`BufferError::WrongDevice`] / [`BufferError::ForeignContext`]. The raw trait methods
///   cannot return errors: there a stream of another context is not recorded (logged at debug).
/// * **Checked copies.** [`copy_from_host`](Self::copy_from_host),
///   [`copy_to_host`](Self::copy_to_host) and [`copy_from_device`](Self::copy_from_device)
///   require equal lengths and return [`BufferError::LengthMismatch`] instead of cudarc's panic.
///
/// ```no_run
/// use blockpool::{AllocatorConfig, CachingAllocator, CudaBackend, DeviceBuffer, DeviceIndex};
///
/// let alloc = CachingAllocator::new(CudaBackend::new()?, AllocatorConfig::default());
/// let stream = alloc.backend().context(DeviceIndex::new(0))?.new_stream()?;
///
/// let mut x = DeviceBuffer::<f32>::alloc_zeros(&alloc, 0, 1024, &stream)?;
/// x.copy_from_host(&vec![1.0; 1024])?; // checked: equal lengths
/// let y = DeviceBuffer::from_host(&alloc, 0, &[2.0f32; 1024], &stream)?;
///
/// // Where a CudaSlice goes: cudarc's copies ...
/// let mut host = vec![0.0f32; 1024];
/// stream.memcpy_dtoh(&y, &mut host)?;
/// // ... and kernel arguments (`func` from `ctx.load_module(...)?.load_function("axpy")?`):
/// # fn launch(stream: &blockpool::cuda::cudarc::driver::CudaStream,
/// #           func: &blockpool::cuda::cudarc::driver::CudaFunction,
/// #           x: &mut DeviceBuffer<f32>, y: &DeviceBuffer<f32>)
/// #           -> Result<(), Box<dyn std::error::Error>> {
/// use blockpool::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
/// let n = x.len() as u32;
/// let mut builder = stream.launch_builder(func);
/// builder.arg(x).arg(y).arg(&n);
/// // SAFETY (of the example): the kernel takes (float*, const float*, unsigned) and reads
/// // and writes at most `n` elements.
/// unsafe { builder.launch(LaunchConfig::for_num_elems(n)) }?;
/// # Ok(()) }
/// assert_eq!(x.to_vec()?, vec![1.0; 1024]);
/// drop(x); // back to the pool on `stream`
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DeviceBuffer<T> {
    typed: TypedAllocation<T, CudaBackend>,
    /// A view of the same memory that cudarc's traits and events work on. Never dropped as a
    /// `CudaSlice` (that would `cuMemFree` pool memory): `Drop` leaks it.
    slice: ManuallyDrop<CudaSlice<T>>,
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements of `T` on `device` for use on `stream`, contents
    /// uninitialized (whatever the block held before).
    ///
    /// # Safety
    ///
    /// The contents are unspecified bytes: write every element before reading one as `T`
    /// (for example before [`to_vec`](Self::to_vec) of a type with invalid bit patterns, such
    /// as `bool`). [`alloc_zeros`](Self::alloc_zeros) and [`from_host`](Self::from_host) are
    /// the safe constructors.
    ///
    /// # Errors
    ///
    /// [`BufferError::SizeOverflow`], [`BufferError::WrongDevice`] when `stream` is of another
    /// device, [`BufferError::ForeignContext`] when it is of another context than the
    /// backend's, [`BufferError::Allocator`] when the allocator refuses (out of memory is
    /// retryable), and [`BufferError::Backend`] for an error cudarc deferred on the context.
    #[track_caller]
    pub unsafe fn alloc(
        allocator: &CachingAllocator<CudaBackend>,
        device: impl Into<DeviceIndex>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BufferError> {
        let device = device.into();
        check_stream_of(allocator.backend(), device, stream)?;
        let typed = TypedAllocation::new(allocator, device, len, CudaBackend::stream_id(stream))?;
        Self::over(typed, stream)
    }

    /// Allocates `len` zeroed elements of `T` on `device` for use on `stream` (the zeroing is
    /// queued on `stream`). Errors as for [`alloc`](Self::alloc).
    #[track_caller]
    pub fn alloc_zeros(
        allocator: &CachingAllocator<CudaBackend>,
        device: impl Into<DeviceIndex>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BufferError>
    where
        T: ValidAsZeroBits,
    {
        let device = device.into();
        // SAFETY: every byte is zeroed below, before the buffer is returned, and all-zero bits
        // are a valid `T` (`ValidAsZeroBits`).
        let mut buffer = unsafe { Self::alloc(allocator, device, len, stream) }?;
        let device = buffer.device();
        stream
            .memset_zeros(&mut buffer)
            .map_err(|e| driver_error(device, e.0, "cuMemsetD8Async"))?;
        Ok(buffer)
    }

    /// A buffer on `device` holding a copy of `src`, queued on `stream`. Errors as for
    /// [`alloc`](Self::alloc).
    #[track_caller]
    pub fn from_host(
        allocator: &CachingAllocator<CudaBackend>,
        device: impl Into<DeviceIndex>,
        src: &[T],
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BufferError> {
        let device = device.into();
        // SAFETY: every element is written by the copy below before the buffer is returned.
        let mut buffer = unsafe { Self::alloc(allocator, device, src.len(), stream) }?;
        buffer.copy_from_host(src)?;
        Ok(buffer)
    }

    /// Copies `src` into the buffer, queued on the buffer's stream.
    /// [`BufferError::LengthMismatch`] unless `src` has exactly [`len`](Self::len) elements.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<(), BufferError> {
        self.typed.check_len(src.len(), "copy_from_host")?;
        let stream = Arc::clone(self.slice.stream());
        stream
            .memcpy_htod(src, self)
            .map_err(|e| driver_error(self.device(), e.0, "cuMemcpyHtoDAsync").into())
    }

    /// Copies the buffer into `dst` on the buffer's stream, and waits for it.
    /// [`BufferError::LengthMismatch`] unless `dst` has exactly [`len`](Self::len) elements.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<(), BufferError> {
        self.typed.check_len(dst.len(), "copy_to_host")?;
        let stream = self.slice.stream();
        stream
            .memcpy_dtoh(self, dst)
            .and_then(|()| stream.synchronize())
            .map_err(|e| driver_error(self.device(), e.0, "cuMemcpyDtoHAsync").into())
    }

    /// The contents as a `Vec`, copied on the buffer's stream (waits for it).
    pub fn to_vec(&self) -> Result<Vec<T>, BufferError> {
        let stream = self.slice.stream();
        stream
            .clone_dtoh(self)
            .and_then(|v| stream.synchronize().map(|()| v))
            .map_err(|e| driver_error(self.device(), e.0, "cuMemcpyDtoHAsync").into())
    }

    /// Copies another device buffer or cudarc slice into this one, on this buffer's stream.
    /// [`BufferError::LengthMismatch`] unless `src` has exactly [`len`](Self::len) elements.
    pub fn copy_from_device<S: DevicePtr<T>>(&mut self, src: &S) -> Result<(), BufferError> {
        self.typed.check_len(src.len(), "copy_from_device")?;
        let stream = Arc::clone(self.slice.stream());
        stream
            .memcpy_dtod(src, self)
            .map_err(|e| driver_error(self.device(), e.0, "cuMemcpyDtoDAsync").into())
    }
}

impl<T> DeviceBuffer<T> {
    /// Wraps `typed` (allocated on `stream`) in a cudarc slice over the same memory.
    fn over(
        typed: TypedAllocation<T, CudaBackend>,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, BufferError> {
        let device = typed.device();
        // `upgrade_device_ptr` unwraps event creation, which fails on an error cudarc deferred
        // on the context: report that one typed first.
        stream
            .context()
            .check_err()
            .map_err(|e| driver_error(device, e.0, "a previous cudarc call"))?;
        let (ptr, len) = (typed.ptr(), typed.len());
        // SAFETY: 1. `ptr` is `len` elements of `T` of device memory in the stream's context
        // (checked by the constructors), live as long as `typed`, which the buffer owns and
        // drops after the slice; 2. the slice never frees it: `Drop` takes it out and `leak`s
        // it, and no `&mut CudaSlice` is handed out that could swap it away.
        let slice = catch_unwind(AssertUnwindSafe(|| unsafe {
            stream.upgrade_device_ptr::<T>(ptr, len)
        }))
        .map_err(|payload| BufferError::CudarcPanicked {
            device,
            operation: "wrapping the allocation as a CudaSlice (upgrade_device_ptr, which \
                        creates the slice's read and write events)",
            message: panic_message(payload.as_ref()),
        })?;
        Ok(DeviceBuffer {
            typed,
            slice: ManuallyDrop::new(slice),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.typed.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.typed.is_empty()
    }

    /// Size of the elements in bytes.
    pub fn num_bytes(&self) -> usize {
        self.typed.num_bytes()
    }

    /// Device address of the first element (0 when empty). Using it bypasses the stream
    /// ordering of the cudarc traits.
    pub fn ptr(&self) -> u64 {
        self.typed.ptr()
    }

    /// Device of the memory.
    pub fn device(&self) -> DeviceIndex {
        self.typed.device()
    }

    /// The stream the buffer belongs to (it is freed there).
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.slice.stream()
    }

    /// The allocation underneath, with its block size and allocation id.
    pub fn allocation(&self) -> &Allocation<CudaBackend> {
        self.typed.allocation()
    }

    /// The cudarc slice over the buffer's memory, for views (`slice(..)`) and other read-only
    /// cudarc APIs.
    pub fn as_cuda_slice(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// Checks that `stream` can use this buffer: [`BufferError::WrongDevice`] for a stream of
    /// another device, [`BufferError::ForeignContext`] for one of another context.
    pub fn check_stream(&self, stream: &CudaStream) -> Result<(), BufferError> {
        self.typed.check_device(stream.context().ordinal())?;
        if stream.context().cu_ctx() == self.slice.stream().context().cu_ctx() {
            Ok(())
        } else {
            Err(BufferError::ForeignContext {
                device: self.device(),
            })
        }
    }

    /// Marks the buffer as used by work queued on `stream` (PyTorch's `record_stream`): once
    /// dropped, the block is not reused before that work has completed. Nothing for the
    /// buffer's own stream; the errors of [`check_stream`](Self::check_stream) otherwise.
    pub fn record_stream(&self, stream: &CudaStream) -> Result<(), BufferError> {
        self.check_stream(stream)?;
        self.typed.record_stream(CudaBackend::stream_id(stream))
    }

    /// `record_stream` from a trait method that cannot return an error.
    fn note_use(&self, stream: &CudaStream) {
        if stream.cu_stream() == self.slice.stream().cu_stream() {
            return;
        }
        if let Err(e) = self.record_stream(stream) {
            tracing::debug!(
                device = self.device().get(),
                "buffer used on a stream not recorded: {e}"
            );
        }
    }
}

/// The constructors' stream check: `stream` must be of `device`, in the backend's context.
fn check_stream_of(
    backend: &CudaBackend,
    device: DeviceIndex,
    stream: &CudaStream,
) -> Result<(), BufferError> {
    let context = backend.context(device)?;
    if stream.context().ordinal() != device.get() {
        return Err(BufferError::WrongDevice {
            buffer_device: device,
            other_device: DeviceIndex::new(stream.context().ordinal()),
        });
    }
    if stream.context().cu_ctx() != context.cu_ctx() {
        return Err(BufferError::ForeignContext { device });
    }
    Ok(())
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: the slice is taken exactly once, here, and `self.slice` is not used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
        // Waits (on the buffer's stream) for the slice's last read and write, frees nothing.
        let _: sys::CUdeviceptr = slice.leak();
        // `self.typed` drops next: the block returns to the pool on the buffer's stream.
    }
}

impl<T> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("typed", &self.typed)
            .field(
                "stream",
                &StreamId::from_raw(self.slice.stream().cu_stream() as u64),
            )
            .finish()
    }
}

impl<T> DeviceSlice<T> for DeviceBuffer<T> {
    fn len(&self) -> usize {
        self.typed.len()
    }

    fn stream(&self) -> &Arc<CudaStream> {
        self.slice.stream()
    }
}

impl<T> DevicePtr<T> for DeviceBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        self.note_use(stream);
        self.slice.device_ptr(stream)
    }
}

impl<T> DevicePtrMut<T> for DeviceBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        self.note_use(stream);
        self.slice.device_ptr_mut(stream)
    }
}

// SAFETY: delegates to cudarc's impl for `&CudaSlice<T>` over the same memory, which pushes a
// pointer to the slice's `CUdeviceptr` (alive for `'b`, as the buffer is borrowed for `'b`) and
// queues the slice's events for the launch.
unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b DeviceBuffer<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b DeviceBuffer<T>) -> &mut Self {
        let slice: &'b CudaSlice<T> = &arg.slice;
        self.arg(slice)
    }
}

// SAFETY: as for `&DeviceBuffer<T>`, through cudarc's impl for `&mut CudaSlice<T>`.
unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b mut DeviceBuffer<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut DeviceBuffer<T>) -> &mut Self {
        let slice: &'b mut CudaSlice<T> = &mut arg.slice;
        self.arg(slice)
    }
}

/// The text of a caught panic: its `&str` or `String` payload, as `panic!` and `unwrap` make.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
