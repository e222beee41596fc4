//! The fake driver's virtual memory management: `cuMemAddressReserve` reserves host address
//! space with no access (`mmap(PROT_NONE)`), `cuMemCreate` charges a device's capacity,
//! `cuMemMap` + `cuMemSetAccess` make a range of a reservation readable and writable
//! (`mprotect`), `cuMemUnmap` takes the access and the contents away again. So copies into
//! mapped memory work, and touching unmapped memory faults as on a GPU.
//!
//! Linux only (the calls answer `CUDA_ERROR_NOT_SUPPORTED` elsewhere).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_uint, c_void};

use super::{code, with_driver, write, Driver};

/// The mapping granularity this driver reports and requires.
pub const GRANULARITY: usize = 2 << 20;

/// `CU_MEM_ALLOCATION_TYPE_PINNED` and `CU_MEM_LOCATION_TYPE_DEVICE`.
const ALLOCATION_TYPE_PINNED: u32 = 1;
const LOCATION_TYPE_DEVICE: u32 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const ACCESS_READWRITE: u32 = 3;

/// `CUmemLocation`, as the C header lays it out.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Location {
    kind: u32,
    id: c_int,
}

/// The start of `CUmemAllocationProp`, as the C header lays it out.
#[repr(C)]
pub struct AllocationProperties {
    kind: u32,
    requested_handle_types: u32,
    location: Location,
}

/// `CUmemAccessDesc`, as the C header lays it out.
#[repr(C)]
pub struct AccessDescriptor {
    location: Location,
    flags: u32,
}

/// A reserved range: the host mapping behind it (larger, for alignment) and its device.
pub(super) struct Reservation {
    size: usize,
    mmap_base: usize,
    mmap_len: usize,
}

/// Physical memory from `cuMemCreate`.
pub(super) struct Handle {
    device: usize,
    size: usize,
    /// Where it is mapped, if it is.
    mapped_at: Option<u64>,
    /// `cuMemRelease` was called while it was mapped: freed at unmap.
    released: bool,
}

/// One `cuMemMap`.
pub(super) struct Mapping {
    size: usize,
    handle: u64,
    /// `cuMemSetAccess` made it readable and writable.
    accessible: bool,
}

/// The fake's VMM state, part of its `Driver`.
#[derive(Default)]
pub(super) struct AddressSpace {
    reservations: BTreeMap<u64, Reservation>,
    handles: HashMap<u64, Handle>,
    mappings: BTreeMap<u64, Mapping>,
    next_handle: u64,
}

#[cfg(target_os = "linux")]
mod os {
    use std::ffi::{c_int, c_void};

    pub const PROT_NONE: c_int = 0;
    pub const PROT_READ_WRITE: c_int = 0x1 | 0x2;
    pub const MAP_PRIVATE_ANONYMOUS_NORESERVE: c_int = 0x02 | 0x20 | 0x4000;
    pub const MADV_DONTNEED: c_int = 4;
    pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;

    extern "C" {
        pub fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: i64,
        ) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
        pub fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
        pub fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
}

/// Reads the device a `CUmemAllocationProp` names; it must be pinned device memory.
fn properties_device(
    driver: &Driver,
    properties: *const AllocationProperties,
) -> Result<usize, u32> {
    if properties.is_null() {
        return Err(code::INVALID_VALUE);
    }
    // SAFETY: the caller passed a `CUmemAllocationProp`, whose first 16 bytes have this layout.
    let properties = unsafe { &*properties };
    if properties.kind != ALLOCATION_TYPE_PINNED || properties.location.kind != LOCATION_TYPE_DEVICE
    {
        return Err(code::INVALID_VALUE);
    }
    driver.device(properties.location.id)
}

impl AddressSpace {
    /// Whether `[ptr, ptr + len)` is covered by accessible mappings (adjacent ones may share
    /// it, as a block spanning two mapped units does).
    pub(super) fn covers(&self, ptr: u64, len: usize) -> bool {
        let Some(end) = ptr.checked_add(len as u64) else {
            return false;
        };
        let mut at = ptr;
        loop {
            let Some((&start, mapping)) = self.mappings.range(..=at).next_back() else {
                return false;
            };
            let mapping_end = start + mapping.size as u64;
            if !mapping.accessible || mapping_end <= at {
                return false;
            }
            if mapping_end >= end {
                return true;
            }
            at = mapping_end;
        }
    }

    /// The device of the mapping `ptr` is in, if it is in one.
    pub(super) fn device_of(&self, ptr: u64) -> Option<usize> {
        let (&start, mapping) = self.mappings.range(..=ptr).next_back()?;
        if ptr - start >= mapping.size as u64 {
            return None;
        }
        self.handles.get(&mapping.handle).map(|h| h.device)
    }

    /// Bytes of physical memory from `cuMemCreate` still charged.
    pub(super) fn created_bytes(&self) -> u64 {
        self.handles.values().map(|h| h.size as u64).sum()
    }

    /// Live reservations.
    pub(super) fn reservation_count(&self) -> u64 {
        self.reservations.len() as u64
    }
}

/// Runs `f` on the driver where the platform has the calls.
fn with_vmm(f: impl FnOnce(&mut Driver) -> Result<(), u32>) -> u32 {
    if cfg!(target_os = "linux") {
        with_driver(f)
    } else {
        with_driver(|_| Err(code::NOT_SUPPORTED))
    }
}

/// `cuMemGetAllocationGranularity`: 2 MiB for pinned device memory.
///
/// # Safety
/// `granularity` is null or writable; `properties` is null or a `CUmemAllocationProp`.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    properties: *const AllocationProperties,
    option: c_uint,
) -> u32 {
    with_vmm(|d| {
        properties_device(d, properties)?;
        // CU_MEM_ALLOC_GRANULARITY_MINIMUM (0) or _RECOMMENDED (1).
        if option > 1 {
            return Err(code::INVALID_VALUE);
        }
        write(granularity, GRANULARITY)
    })
}

/// `cuMemAddressReserve`: `size` (a multiple of the granularity) of inaccessible host address
/// space, aligned to the granularity.
///
/// # Safety
/// `ptr` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    _addr: u64,
    flags: u64,
) -> u32 {
    with_vmm(|d| {
        d.current_device()?;
        d.injected("cuMemAddressReserve")?;
        let bad_alignment = alignment != 0 && !alignment.is_power_of_two();
        if ptr.is_null() || size == 0 || size % GRANULARITY != 0 || flags != 0 || bad_alignment {
            return Err(code::INVALID_VALUE);
        }
        let mmap_len = size.checked_add(GRANULARITY).ok_or(code::OUT_OF_MEMORY)?;
        reserve(d, size, mmap_len).and_then(|start| write(ptr, start))
    })
}

#[cfg(target_os = "linux")]
fn reserve(d: &mut Driver, size: usize, mmap_len: usize) -> Result<u64, u32> {
    // SAFETY: an anonymous, inaccessible, unreserved mapping of fresh address space.
    let base = unsafe {
        os::mmap(
            std::ptr::null_mut(),
            mmap_len,
            os::PROT_NONE,
            os::MAP_PRIVATE_ANONYMOUS_NORESERVE,
            -1,
            0,
        )
    };
    if base == os::MAP_FAILED {
        return Err(code::OUT_OF_MEMORY);
    }
    let start = (base as usize).next_multiple_of(GRANULARITY) as u64;
    d.vmm.reservations.insert(
        start,
        Reservation {
            size,
            mmap_base: base as usize,
            mmap_len,
        },
    );
    Ok(start)
}

#[cfg(not(target_os = "linux"))]
fn reserve(_: &mut Driver, _: usize, _: usize) -> Result<u64, u32> {
    Err(code::NOT_SUPPORTED)
}

/// `cuMemAddressFree`: exactly a reservation, with nothing mapped in it.
#[no_mangle]
pub extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    with_vmm(|d| {
        let reservation = d.vmm.reservations.get(&ptr).ok_or(code::INVALID_VALUE)?;
        let end = ptr + reservation.size as u64;
        if reservation.size != size || d.vmm.mappings.range(ptr..end).next().is_some() {
            return Err(code::INVALID_VALUE);
        }
        let reservation = d.vmm.reservations.remove(&ptr).ok_or(code::UNKNOWN)?;
        #[cfg(target_os = "linux")]
        // SAFETY: the mapping `reserve` made, unmapped once, here.
        unsafe {
            os::munmap(reservation.mmap_base as *mut c_void, reservation.mmap_len);
        }
        let _ = reservation;
        Ok(())
    })
}

/// `cuMemCreate`: `size` (a multiple of the granularity) of the device's memory. Not exported
/// from the library built with `--cfg fake_cuda_without_mem_create` (a driver too old).
///
/// # Safety
/// `handle` is null or writable; `properties` is null or a `CUmemAllocationProp`.
#[cfg_attr(not(fake_cuda_without_mem_create), no_mangle)]
#[cfg_attr(fake_cuda_without_mem_create, allow(non_snake_case))]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    properties: *const AllocationProperties,
    flags: u64,
) -> u32 {
    with_vmm(|d| {
        let device = properties_device(d, properties)?;
        d.injected("cuMemCreate")?;
        if handle.is_null() || size == 0 || size % GRANULARITY != 0 || flags != 0 {
            return Err(code::INVALID_VALUE);
        }
        let memory = &mut d.devices[device];
        if size > memory.capacity - memory.used {
            return Err(code::OUT_OF_MEMORY);
        }
        memory.used += size;
        d.vmm.next_handle += 1;
        let id = d.vmm.next_handle;
        d.vmm.handles.insert(
            id,
            Handle {
                device,
                size,
                mapped_at: None,
                released: false,
            },
        );
        write(handle, id)
    })
}

/// Frees a handle's memory (its capacity) for good.
fn free_handle(d: &mut Driver, id: u64) {
    if let Some(handle) = d.vmm.handles.remove(&id) {
        d.devices[handle.device].used -= handle.size;
    }
}

/// `cuMemRelease`: frees the memory now, or at its unmap if it is mapped.
#[no_mangle]
pub extern "C" fn cuMemRelease(handle: u64) -> u32 {
    with_vmm(|d| {
        let entry = d.vmm.handles.get_mut(&handle).ok_or(code::INVALID_VALUE)?;
        if entry.released {
            return Err(code::INVALID_VALUE);
        }
        if entry.mapped_at.is_some() {
            entry.released = true;
        } else {
            free_handle(d, handle);
        }
        Ok(())
    })
}

/// `cuMemMap`: a whole unmapped handle into free space of one reservation.
#[no_mangle]
pub extern "C" fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) -> u32 {
    with_vmm(|d| {
        d.injected("cuMemMap")?;
        let entry = d.vmm.handles.get(&handle).ok_or(code::INVALID_HANDLE)?;
        if offset != 0 || flags != 0 || entry.size != size || entry.mapped_at.is_some() {
            return Err(code::INVALID_VALUE);
        }
        let end = ptr.checked_add(size as u64).ok_or(code::INVALID_VALUE)?;
        let inside = d
            .vmm
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&start, r)| end <= start + r.size as u64);
        let overlaps = d
            .vmm
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&start, m)| start + m.size as u64 > ptr);
        if !inside || overlaps || ptr % GRANULARITY as u64 != 0 {
            return Err(code::INVALID_VALUE);
        }
        d.vmm.mappings.insert(
            ptr,
            Mapping {
                size,
                handle,
                accessible: false,
            },
        );
        if let Some(entry) = d.vmm.handles.get_mut(&handle) {
            entry.mapped_at = Some(ptr);
        }
        Ok(())
    })
}

/// `cuMemSetAccess`: read/write for the mappings' own device over whole mappings.
///
/// # Safety
/// `descriptors` points to `count` `CUmemAccessDesc`s.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: u64,
    size: usize,
    descriptors: *const AccessDescriptor,
    count: usize,
) -> u32 {
    with_vmm(|d| {
        if descriptors.is_null() || count != 1 {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: the caller passed one descriptor (count checked above).
        let descriptor = unsafe { &*descriptors };
        if descriptor.flags != ACCESS_READWRITE || descriptor.location.kind != LOCATION_TYPE_DEVICE
        {
            return Err(code::INVALID_VALUE);
        }
        let device = d.device(descriptor.location.id)?;
        let end = ptr.checked_add(size as u64).ok_or(code::INVALID_VALUE)?;
        // Whole mappings, back to back, of that device.
        let mut at = ptr;
        let mut covered = Vec::new();
        while at < end {
            let mapping = d.vmm.mappings.get(&at).ok_or(code::INVALID_VALUE)?;
            if d.vmm.handles.get(&mapping.handle).map(|h| h.device) != Some(device) {
                return Err(code::INVALID_DEVICE);
            }
            covered.push(at);
            at += mapping.size as u64;
        }
        if at != end {
            return Err(code::INVALID_VALUE);
        }
        protect(ptr, size, true)?;
        for start in covered {
            if let Some(mapping) = d.vmm.mappings.get_mut(&start) {
                mapping.accessible = true;
            }
        }
        Ok(())
    })
}

/// Gives `[ptr, ptr + size)` read/write access, or takes access and contents away.
#[cfg(target_os = "linux")]
fn protect(ptr: u64, size: usize, accessible: bool) -> Result<(), u32> {
    let addr = ptr as *mut c_void;
    // SAFETY: the range lies inside a reservation's own anonymous mapping (the callers
    // checked), which nothing else uses.
    let failed = unsafe {
        if accessible {
            os::mprotect(addr, size, os::PROT_READ_WRITE) != 0
        } else {
            os::madvise(addr, size, os::MADV_DONTNEED) != 0
                || os::mprotect(addr, size, os::PROT_NONE) != 0
        }
    };
    if failed {
        Err(code::UNKNOWN)
    } else {
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
fn protect(_: u64, _: usize, _: bool) -> Result<(), u32> {
    Err(code::NOT_SUPPORTED)
}

/// `cuMemUnmap`: exactly one earlier mapping; its contents are gone.
#[no_mangle]
pub extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    with_vmm(|d| {
        let mapping = d.vmm.mappings.get(&ptr).ok_or(code::INVALID_VALUE)?;
        if mapping.size != size {
            return Err(code::INVALID_VALUE);
        }
        protect(ptr, size, false)?;
        let mapping = d.vmm.mappings.remove(&ptr).ok_or(code::UNKNOWN)?;
        let released = match d.vmm.handles.get_mut(&mapping.handle) {
            Some(handle) => {
                handle.mapped_at = None;
                handle.released
            }
            None => false,
        };
        if released {
            free_handle(d, mapping.handle);
        }
        Ok(())
    })
}
