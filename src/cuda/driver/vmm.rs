//! The virtual memory management calls of [`Driver`] (expandable segments): address ranges
//! and the physical memory mapped in them, with the C layouts of their arguments. Part of
//! `driver.rs`, the one path into the driver: the symbols called here are in its
//! [`REQUIRED_SYMBOLS`](super::REQUIRED_SYMBOLS) too.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{check, CallError, Driver};

/// `CUmemLocation` as the C header lays it out. cudarc's binding of it changes with the CUDA
/// version it was generated for (the id became a union member in 12.9), so the few fields
/// blockpool sets are written through this fixed layout instead.
#[repr(C)]
#[derive(Clone, Copy)]
struct Location {
    /// `CUmemLocationType`.
    kind: u32,
    /// The device ordinal.
    id: i32,
}

/// `CUmemAllocationProp` as the C header lays it out (see [`Location`]).
#[repr(C)]
struct AllocationProperties {
    /// `CUmemAllocationType`.
    kind: u32,
    /// `CUmemAllocationHandleType`.
    requested_handle_types: u32,
    location: Location,
    win32_handle_metadata: *mut c_void,
    /// `compressionType`, `gpuDirectRDMACapable`, `usage` and reserved bytes: all zero.
    allocation_flags: [u8; 8],
}

/// `CUmemAccessDesc` as the C header lays it out (see [`Location`]).
#[repr(C)]
struct AccessDescriptor {
    location: Location,
    /// `CUmemAccess_flags`.
    flags: u32,
}

// The fixed layouts are the bindings' sizes, whatever CUDA version cudarc was built for.
const _: () = {
    assert!(std::mem::size_of::<Location>() == std::mem::size_of::<sys::CUmemLocation>());
    assert!(
        std::mem::size_of::<AllocationProperties>()
            == std::mem::size_of::<sys::CUmemAllocationProp>()
    );
    assert!(std::mem::size_of::<AccessDescriptor>() == std::mem::size_of::<sys::CUmemAccessDesc>());
};

/// Memory on device `ordinal`.
fn device_location(ordinal: usize) -> Location {
    Location {
        kind: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE as u32,
        id: ordinal as i32,
    }
}

/// Pinned device memory on `ordinal`, as `cuMemCreate` and the granularity query want it.
fn allocation_properties(ordinal: usize) -> AllocationProperties {
    AllocationProperties {
        kind: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED as u32,
        requested_handle_types: 0, // CU_MEM_HANDLE_TYPE_NONE
        location: device_location(ordinal),
        win32_handle_metadata: std::ptr::null_mut(),
        allocation_flags: [0; 8],
    }
}

/// Virtual memory management: address ranges and the physical memory mapped in them.
impl Driver {
    /// The minimum mapping granularity of pinned memory on device `ordinal`
    /// (`cuMemGetAllocationGranularity`).
    pub(crate) fn allocation_granularity(self, ordinal: usize) -> Result<usize, CallError> {
        let properties = allocation_properties(ordinal);
        let mut granularity = 0usize;
        // SAFETY: the library has the symbol; both pointers are valid for the call,
        // `properties` in the C layout of `CUmemAllocationProp`.
        check("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut granularity,
                (&properties as *const AllocationProperties).cast(),
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        Ok(granularity)
    }

    /// Reserves `size_bytes` of address space in the current context, where the driver
    /// chooses (`cuMemAddressReserve`).
    pub(crate) fn address_reserve(self, size_bytes: usize) -> Result<sys::CUdeviceptr, CallError> {
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the library has the symbol; `ptr` is a valid out-pointer; address 0 and
        // alignment 0 let the driver choose; flags must be 0.
        check("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut ptr, size_bytes, 0, 0, 0)
        })?;
        Ok(ptr)
    }

    /// Frees a reserved range (`cuMemAddressFree`).
    ///
    /// # Safety
    ///
    /// `ptr..ptr + size_bytes` is exactly one range from
    /// [`address_reserve`](Self::address_reserve), freed once, with nothing mapped in it.
    pub(crate) unsafe fn address_free(
        self,
        ptr: sys::CUdeviceptr,
        size_bytes: usize,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuMemAddressFree", unsafe {
            sys::cuMemAddressFree(ptr, size_bytes)
        })
    }

    /// `size_bytes` of pinned physical memory on device `ordinal` (`cuMemCreate`).
    pub(crate) fn mem_create(
        self,
        ordinal: usize,
        size_bytes: usize,
    ) -> Result<sys::CUmemGenericAllocationHandle, CallError> {
        let properties = allocation_properties(ordinal);
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: the library has the symbol; `handle` and `properties` (in the C layout of
        // `CUmemAllocationProp`) are valid for the call; flags must be 0.
        check("cuMemCreate", unsafe {
            sys::cuMemCreate(
                &mut handle,
                size_bytes,
                (&properties as *const AllocationProperties).cast(),
                0,
            )
        })?;
        Ok(handle)
    }

    /// Releases physical memory (`cuMemRelease`).
    ///
    /// # Safety
    ///
    /// `handle` came from [`mem_create`](Self::mem_create), is released once, and is mapped
    /// nowhere (or its mappings are used by nothing and unmapped next).
    pub(crate) unsafe fn mem_release(
        self,
        handle: sys::CUmemGenericAllocationHandle,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
    }

    /// Maps all of `handle` at `ptr` (`cuMemMap`).
    ///
    /// # Safety
    ///
    /// `ptr..ptr + size_bytes` lies in a reserved range with nothing mapped there, and
    /// `handle` is live physical memory of exactly `size_bytes`.
    pub(crate) unsafe fn mem_map(
        self,
        ptr: sys::CUdeviceptr,
        size_bytes: usize,
        handle: sys::CUmemGenericAllocationHandle,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise; offset and
        // flags must be 0.
        check("cuMemMap", unsafe {
            sys::cuMemMap(ptr, size_bytes, 0, handle, 0)
        })
    }

    /// Lets device `ordinal` read and write `ptr..ptr + size_bytes` (`cuMemSetAccess`).
    ///
    /// # Safety
    ///
    /// The range is one mapping the caller made with [`mem_map`](Self::mem_map).
    pub(crate) unsafe fn set_read_write(
        self,
        ptr: sys::CUdeviceptr,
        size_bytes: usize,
        ordinal: usize,
    ) -> Result<(), CallError> {
        let access = AccessDescriptor {
            location: device_location(ordinal),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE as u32,
        };
        // SAFETY: the library has the symbol; `access` is one descriptor in the C layout; the
        // range is the caller's mapping (its promise).
        check("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(
                ptr,
                size_bytes,
                (&access as *const AccessDescriptor).cast(),
                1,
            )
        })
    }

    /// Unmaps `ptr..ptr + size_bytes` (`cuMemUnmap`); unlike `cuMemFree` it does not wait for
    /// work that may still use the memory.
    ///
    /// # Safety
    ///
    /// The range is exactly one mapping made with [`mem_map`](Self::mem_map), and no queued or
    /// running work uses it.
    pub(crate) unsafe fn mem_unmap(
        self,
        ptr: sys::CUdeviceptr,
        size_bytes: usize,
    ) -> Result<(), CallError> {
        // SAFETY: the library has the symbol; the rest is the caller's promise.
        check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size_bytes) })
    }
}
