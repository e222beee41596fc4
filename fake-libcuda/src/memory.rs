//! The fake driver's memory: `cuMemAlloc`/`cuMemFree` (and the stream-ordered pair) backed by
//! host memory, `cuMemGetInfo`, pinned host memory, and copies and sets checked against the
//! live allocations.

use super::*;

/// Where an address points.
impl Driver {
    /// What `ptr` points into: device memory (`cuMemAlloc`, or a mapping of `cuMemCreate`
    /// memory) or pinned host memory, and the device it belongs to.
    pub(crate) fn pointer_owner(&self, ptr: u64) -> Option<(MemoryType, usize)> {
        if let Some(device) = self.vmm.device_of(ptr) {
            return Some((MemoryType::Device, device));
        }
        let inside = |start: u64, size: usize| ptr >= start && ptr - start < size as u64;
        if let Some((&start, allocation)) = self.allocations.range(..=ptr).next_back() {
            if inside(start, allocation.size) {
                return Some((MemoryType::Device, allocation.device));
            }
        }
        self.host
            .iter()
            .find(|(&start, host)| inside(start as u64, host.size))
            .map(|(_, host)| (MemoryType::Host, host.device))
    }

    /// Checks that `[ptr, ptr + len)` is memory of `device`, which a copy or set on one of its
    /// streams touches: another device's memory is `CUDA_ERROR_INVALID_VALUE`, as the driver
    /// answers for memory its context cannot reach.
    pub(crate) fn check_device_range(
        &self,
        device: usize,
        ptr: u64,
        len: usize,
    ) -> Result<(), u32> {
        self.check_range(ptr, len)?;
        match self.pointer_owner(ptr) {
            Some((MemoryType::Device, owner)) if owner == device => Ok(()),
            _ => Err(code::INVALID_VALUE),
        }
    }
}

/// `cuMemGetInfo_v2` of the current device.
///
/// # Safety
/// `free` and `total` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    with_driver(|d| {
        let device = &d.devices[d.current_device()?];
        write(free, device.capacity - device.used)?;
        write(total, device.capacity)
    })
}

/// `cuMemAlloc_v2` on the current device.
///
/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(ptr: *mut u64, size: usize) -> u32 {
    with_driver(|d| {
        if ptr.is_null() {
            return Err(code::INVALID_VALUE);
        }
        d.injected("cuMemAlloc_v2")?;
        let address = d.allocate(size)?;
        write(ptr, address)
    })
}

/// `cuMemFree_v2`.
#[no_mangle]
pub extern "C" fn cuMemFree_v2(ptr: u64) -> u32 {
    with_driver(|d| {
        d.injected("cuMemFree_v2")?;
        d.free(ptr)
    })
}

/// `cuMemAllocAsync`: allocates at once (all work here is synchronous).
///
/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(ptr: *mut u64, size: usize, stream: *mut c_void) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        if ptr.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let address = d.allocate(size)?;
        write(ptr, address)
    })
}

/// `cuMemFreeAsync`: frees at once.
#[no_mangle]
pub extern "C" fn cuMemFreeAsync(ptr: u64, stream: *mut c_void) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        d.free(ptr)
    })
}

/// `cuDeviceGetDefaultMemPool`.
///
/// # Safety
/// `pool` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut *mut c_void, device: c_int) -> u32 {
    with_driver(|d| {
        let device = d.device(device)?;
        write(pool, (POOL_BASE + device * HANDLE_STEP) as *mut c_void)
    })
}

/// `cuMemPoolSetAttribute`: accepted for a default pool, without effect.
#[no_mangle]
pub extern "C" fn cuMemPoolSetAttribute(
    pool: *mut c_void,
    attribute: c_uint,
    value: *mut c_void,
) -> u32 {
    with_driver(|d| {
        let offset = (pool as usize)
            .checked_sub(POOL_BASE)
            .ok_or(code::INVALID_HANDLE)?;
        if offset % HANDLE_STEP != 0 || offset / HANDLE_STEP >= d.devices.len() || value.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // The CUmemPool_attribute values run from REUSE_FOLLOW_EVENT_DEPENDENCIES (1) to
        // USED_MEM_HIGH (8).
        if !(1..=8).contains(&attribute) {
            return Err(code::INVALID_VALUE);
        }
        Ok(())
    })
}

/// `cuMemHostAlloc`: page-aligned host memory.
///
/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> u32 {
    with_driver(|d| {
        let device = d.current_device()?;
        d.injected("cuMemHostAlloc")?;
        // PORTABLE (1), DEVICEMAP (2), WRITECOMBINED (4).
        if size == 0 || ptr.is_null() || flags & !7 != 0 {
            return Err(code::INVALID_VALUE);
        }
        let layout = std::alloc::Layout::from_size_align(size, ALIGNMENT)
            .map_err(|_| code::OUT_OF_MEMORY)?;
        // SAFETY: `layout` has a non-zero size.
        let address = unsafe { std::alloc::alloc(layout) };
        if address.is_null() {
            return Err(code::OUT_OF_MEMORY);
        }
        d.host
            .insert(address as usize, HostAllocation { size, device });
        write(ptr, address.cast())
    })
}

/// `cuMemFreeHost`.
#[no_mangle]
pub extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> u32 {
    with_driver(|d| {
        let size = d
            .host
            .remove(&(ptr as usize))
            .ok_or(code::INVALID_VALUE)?
            .size;
        let layout =
            std::alloc::Layout::from_size_align(size, ALIGNMENT).map_err(|_| code::UNKNOWN)?;
        // SAFETY: `ptr` came from `std::alloc::alloc` with this layout in `cuMemHostAlloc` and
        // was live in `host`, from which it is now removed.
        unsafe { std::alloc::dealloc(ptr.cast(), layout) };
        Ok(())
    })
}

/// `cuMemcpyHtoDAsync_v2`: copies at once.
///
/// # Safety
/// `src` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    len: usize,
    stream: *mut c_void,
) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        d.check_device_range(device, dst, len)?;
        if src.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: `dst..dst+len` is inside a live allocation (checked) and the caller gave
        // `len` readable bytes at `src`.
        unsafe { std::ptr::copy(src.cast::<u8>(), dst as *mut u8, len) };
        Ok(())
    })
}

/// `cuMemcpyDtoHAsync_v2`: copies at once.
///
/// # Safety
/// `dst` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    len: usize,
    stream: *mut c_void,
) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        d.check_device_range(device, src, len)?;
        if dst.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: `src..src+len` is inside a live allocation (checked) and the caller gave
        // `len` writable bytes at `dst`.
        unsafe { std::ptr::copy(src as *const u8, dst.cast::<u8>(), len) };
        Ok(())
    })
}

/// `cuMemcpyDtoDAsync_v2`: copies at once.
#[no_mangle]
pub extern "C" fn cuMemcpyDtoDAsync_v2(dst: u64, src: u64, len: usize, stream: *mut c_void) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        d.check_range(src, len)?;
        d.check_range(dst, len)?;
        // SAFETY: both ranges are inside live allocations (checked).
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
        Ok(())
    })
}

/// `cuMemsetD8Async`: sets at once.
#[no_mangle]
pub extern "C" fn cuMemsetD8Async(dst: u64, value: u8, len: usize, stream: *mut c_void) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        d.check_device_range(device, dst, len)?;
        // SAFETY: the range is inside a live allocation (checked).
        unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) };
        Ok(())
    })
}

/// `CUpointer_attribute` values `cuPointerGetAttribute` answers.
const POINTER_ATTRIBUTE_MEMORY_TYPE: c_uint = 2;
const POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_uint = 9;

/// `cuPointerGetAttribute` for `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (a `CUmemorytype`, 4 bytes:
/// 1 host, 2 device) and `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` (an `int`) of any address
/// inside device memory (`cuMemAlloc`, mapped `cuMemCreate` memory) or pinned host memory; an
/// address the driver did not hand out is `CUDA_ERROR_INVALID_VALUE`, as in the driver, and
/// other attributes `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// `data` is null or writable for the attribute's type.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: u64,
) -> u32 {
    with_driver(|d| {
        let (memory_type, device) = d.pointer_owner(ptr).ok_or(code::INVALID_VALUE)?;
        match attribute {
            POINTER_ATTRIBUTE_MEMORY_TYPE => write(data.cast::<c_uint>(), memory_type as c_uint),
            POINTER_ATTRIBUTE_DEVICE_ORDINAL => write(data.cast::<c_int>(), device as c_int),
            _ => Err(code::NOT_SUPPORTED),
        }
    })
}
