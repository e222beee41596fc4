//! The real driver behind the probe, through cudarc's `sys` layer.
//!
//! cudarc panics when libcuda cannot be loaded or lacks a symbol, on the first call of any
//! driver function (and formatting its `DriverError` calls the driver too). So nothing here
//! calls a driver function before [`LibCuda::library_present`] said the library loads and
//! [`LibCuda::missing_symbol`] found every entry point blockpool uses; `survey` keeps that
//! order. Errors become [`DriverCallError`]s with the code and the enum's name, never through
//! cudarc's error type.

use std::ffi::{c_char, c_int, CStr};

use cudarc::driver::sys::{self, CUdevice_attribute, CUresult};

use super::report::{ComputeCapability, DriverCallError};
use super::survey::{DeviceFacts, DriverApi};

/// Every driver function blockpool calls (the probe and the CUDA backend). A library without
/// one of them predates what blockpool needs.
const REQUIRED_SYMBOLS: [&str; 21] = [
    "cuDriverGetVersion",
    "cuInit",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
];

/// Longest device name read, in bytes with the terminating NUL (the driver's names are < 100).
const NAME_CAPACITY: usize = 256;

/// The process's libcuda, asked through cudarc.
pub(crate) struct LibCuda;

/// `Ok` for `CUDA_SUCCESS`, else the call, the code and the code's name.
fn check(call: &'static str, result: CUresult) -> Result<(), DriverCallError> {
    if result == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        // The enum's Debug is its C name (CUDA_ERROR_NO_DEVICE); no driver call needed.
        Err(DriverCallError::new(
            call,
            result as i32,
            format!("{result:?}"),
        ))
    }
}

/// An error for a value the driver returned that makes no sense (a negative count or size).
fn bad_value(call: &'static str) -> DriverCallError {
    DriverCallError::new(
        call,
        CUresult::CUDA_ERROR_UNKNOWN as i32,
        "CUDA_ERROR_UNKNOWN",
    )
}

/// `index` as the driver's `int` ordinal.
fn ordinal(call: &'static str, index: usize) -> Result<c_int, DriverCallError> {
    c_int::try_from(index).map_err(|_| {
        DriverCallError::new(
            call,
            CUresult::CUDA_ERROR_INVALID_DEVICE as i32,
            "CUDA_ERROR_INVALID_DEVICE",
        )
    })
}

impl LibCuda {
    /// The driver's handle for device `index`.
    fn device(&self, index: usize) -> Result<sys::CUdevice, DriverCallError> {
        let mut device: sys::CUdevice = 0;
        let index = ordinal("cuDeviceGet", index)?;
        // SAFETY: 1. `survey` calls this only after the library loaded with every symbol, so
        // cudarc's loader cannot panic. 2. `device` is a live, writable CUdevice.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, index)
        })?;
        Ok(device)
    }

    /// One integer attribute of `device`.
    fn attribute(
        &self,
        device: sys::CUdevice,
        attribute: CUdevice_attribute,
    ) -> Result<u32, DriverCallError> {
        let mut value: c_int = 0;
        // SAFETY: 1. the library and symbol are present (see `device`). 2. `value` is a live,
        // writable int; `device` came from cuDeviceGet.
        let result = unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) };
        check("cuDeviceGetAttribute", result)?;
        u32::try_from(value).map_err(|_| bad_value("cuDeviceGetAttribute"))
    }
}

impl DriverApi for LibCuda {
    fn library_candidates(&self) -> Vec<String> {
        // The same names, in the same order, as cudarc's loader tries.
        ["cuda", "nvcuda"]
            .iter()
            .flat_map(|name| cudarc::get_lib_name_candidates(name))
            .collect()
    }

    fn library_present(&self) -> bool {
        // SAFETY: loading the driver library runs its initializers, which is what every use of
        // CUDA does first; the function only tries names and never calls into the library.
        unsafe { sys::is_culib_present() }
    }

    fn library_path(&self) -> Option<String> {
        // `is_culib_present` closed the library again; cudarc's loader keeps it open, so the
        // file is mapped while `/proc/self/maps` is read.
        // SAFETY: called only after `library_present` returned true, so `culib` loads the
        // library instead of panicking; loading runs only the library's initializers.
        let _library = unsafe { sys::culib() };
        loaded_library_path()
    }

    fn missing_symbol(&self) -> Option<&'static str> {
        // SAFETY: called only after `library_present` returned true, so `culib` loads the
        // library instead of panicking. Looking a symbol up never calls it, and the pointer
        // type is only a placeholder: the symbol is dropped without being used.
        let library = unsafe { sys::culib() };
        REQUIRED_SYMBOLS.into_iter().find(|name| {
            // SAFETY: as above; the looked-up symbol is not called or dereferenced.
            unsafe { library.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err()
        })
    }

    fn driver_version(&self) -> Result<i32, DriverCallError> {
        let mut version: c_int = 0;
        // SAFETY: 1. the library and symbol are present. 2. `version` is a live, writable int.
        // cuDriverGetVersion needs no cuInit.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        Ok(version)
    }

    fn init(&self) -> Result<(), DriverCallError> {
        // SAFETY: the library and symbol are present; cuInit(0) may be called any number of
        // times from any thread.
        check("cuInit", unsafe { sys::cuInit(0) })
    }

    fn device_count(&self) -> Result<usize, DriverCallError> {
        let mut count: c_int = 0;
        // SAFETY: 1. the library and symbol are present and cuInit succeeded. 2. `count` is a
        // live, writable int.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        usize::try_from(count).map_err(|_| bad_value("cuDeviceGetCount"))
    }

    fn device_facts(&self, index: usize) -> Result<DeviceFacts, DriverCallError> {
        let device = self.device(index)?;
        let mut name = [0 as c_char; NAME_CAPACITY];
        // SAFETY: 1. the library and symbol are present. 2. `name` is a writable buffer of
        // NAME_CAPACITY bytes and the driver is told that length (a small constant, fits int).
        let result =
            unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), NAME_CAPACITY as c_int, device) };
        check("cuDeviceGetName", result)?;
        // Never trust a terminator the driver may have left out: the last byte is ours.
        name[NAME_CAPACITY - 1] = 0;
        // SAFETY: `name` is a live buffer that ends with a NUL byte (set just above).
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let major = self.attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )?;
        let minor = self.attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        )?;
        let virtual_memory = self.attribute(
            device,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        )? > 0;
        let mut total_bytes = 0usize;
        // SAFETY: 1. the library and symbol are present. 2. `total_bytes` is a live, writable
        // size_t.
        check("cuDeviceTotalMem_v2", unsafe {
            sys::cuDeviceTotalMem_v2(&mut total_bytes, device)
        })?;
        Ok(DeviceFacts {
            name,
            compute_capability: ComputeCapability { major, minor },
            total_bytes,
            virtual_memory,
        })
    }

    fn free_bytes(&self, index: usize) -> Result<usize, DriverCallError> {
        let device = self.device(index)?;
        let mut context: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: 1. the library and symbol are present. 2. `context` is a live, writable
        // CUcontext. A successful retain is balanced by the release below on every path.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        let free = free_bytes_in(context);
        // SAFETY: balances the successful retain above; the context is no longer current
        // (`free_bytes_in` popped it).
        let released = check("cuDevicePrimaryCtxRelease_v2", unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(device)
        });
        let free = free?;
        released?;
        Ok(free)
    }
}

/// Free bytes of the device of `context`, with `context` current for the call only: whatever
/// context this thread had is current again afterwards.
fn free_bytes_in(context: sys::CUcontext) -> Result<usize, DriverCallError> {
    // SAFETY: 1. the library and symbol are present. 2. `context` is a retained primary
    // context, alive until its release after this function returns.
    check("cuCtxPushCurrent_v2", unsafe {
        sys::cuCtxPushCurrent_v2(context)
    })?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: 1. the library and symbol are present; a context is current. 2. `free` and
    // `total` are live, writable size_t values.
    let info = check("cuMemGetInfo_v2", unsafe {
        sys::cuMemGetInfo_v2(&mut free, &mut total)
    });
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: 1. the library and symbol are present. 2. the push above succeeded, so there is
    // a context to pop; `popped` is a live, writable CUcontext.
    let pop = check("cuCtxPopCurrent_v2", unsafe {
        sys::cuCtxPopCurrent_v2(&mut popped)
    });
    info?;
    pop?;
    Ok(free)
}

/// The file the driver library was loaded from: the first mapping in `/proc/self/maps` named
/// `libcuda.so*` or `libcuda64*`.
#[cfg(target_os = "linux")]
fn loaded_library_path() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        // The path is the last field and the only one starting with `/` (it may hold spaces).
        .filter_map(|line| line.find('/').map(|start| &line[start..]))
        .find(|path| {
            let file = path.rsplit('/').next().unwrap_or(path);
            file == "libcuda.so" || file.starts_with("libcuda.so.") || file.starts_with("libcuda64")
        })
        .map(str::to_owned)
}

/// Not known on this platform.
#[cfg(not(target_os = "linux"))]
fn loaded_library_path() -> Option<String> {
    None
}
