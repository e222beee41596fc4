//! The real driver behind the probe: [`LibCuda`] answers the survey's questions through
//! `cuda/driver.rs`, the same calls (and the same list of required symbols) the CUDA backend
//! uses.
//!
//! `survey` asks whether the library loads, then whether it has every symbol, before anything
//! else; the answers are kept here as the tokens `cuda/driver.rs` hands out, and a later
//! question is answered only with them, so no driver function is called that cudarc could
//! panic on. Errors become [`DriverCallError`]s with the code and the enum's name, never
//! through cudarc's error type.

use std::cell::Cell;
use std::ffi::c_int;

use cudarc::driver::sys::{CUdevice_attribute, CUresult};

use super::report::{ComputeCapability, DriverCallError};
use super::survey::{DeviceFacts, DriverApi};
use crate::cuda::driver::{CallError, Driver, Library};

/// The process's libcuda, asked through `cuda/driver.rs`.
pub(crate) struct LibCuda {
    /// The library, once [`DriverApi::library_present`] found it.
    library: Cell<Option<Library>>,
    /// The driver, once [`DriverApi::missing_symbol`] found every symbol.
    driver: Cell<Option<Driver>>,
}

impl LibCuda {
    /// Nothing asked yet.
    pub(crate) fn new() -> LibCuda {
        LibCuda {
            library: Cell::new(None),
            driver: Cell::new(None),
        }
    }

    /// The driver for `call`; the survey asks nothing of it before the symbols were found.
    fn driver(&self, call: &'static str) -> Result<Driver, DriverCallError> {
        let driver = self.driver.get();
        debug_assert!(
            driver.is_some(),
            "the survey asked {call} before checking the driver's symbols"
        );
        driver.ok_or_else(|| {
            let code = CUresult::CUDA_ERROR_NOT_INITIALIZED;
            DriverCallError::new(call, code as i32, format!("{code:?}"))
        })
    }

    /// The driver's handle for device `index`.
    fn device(&self, index: usize) -> Result<cudarc::driver::sys::CUdevice, DriverCallError> {
        let driver = self.driver("cuDeviceGet")?;
        driver
            .device(ordinal("cuDeviceGet", index)?)
            .map_err(call_error)
    }

    /// One integer attribute of `device`, which must not be negative.
    fn attribute(
        &self,
        driver: Driver,
        device: cudarc::driver::sys::CUdevice,
        attribute: CUdevice_attribute,
    ) -> Result<u32, DriverCallError> {
        let value = driver
            .device_attribute(device, attribute)
            .map_err(call_error)?;
        u32::try_from(value).map_err(|_| bad_value("cuDeviceGetAttribute"))
    }
}

/// A failed call with the code and the code's name. The enum's Debug is its C name
/// (`CUDA_ERROR_NO_DEVICE`): no driver call needed.
fn call_error(error: CallError) -> DriverCallError {
    DriverCallError::new(error.call, error.code as i32, format!("{:?}", error.code))
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

impl DriverApi for LibCuda {
    fn library_candidates(&self) -> Vec<String> {
        // The same names, in the same order, as cudarc's loader tries.
        Library::candidates()
    }

    fn library_present(&self) -> bool {
        self.library.set(Library::open());
        self.library.get().is_some()
    }

    fn library_path(&self) -> Option<String> {
        self.library.get()?.path()
    }

    fn missing_symbol(&self) -> Option<&'static str> {
        // Asked only once the library loaded; without one, no symbol can be looked up.
        let library = self.library.get()?;
        match library.driver() {
            Ok(driver) => {
                self.driver.set(Some(driver));
                None
            }
            Err(symbol) => Some(symbol),
        }
    }

    fn driver_version(&self) -> Result<i32, DriverCallError> {
        let driver = self.driver("cuDriverGetVersion")?;
        driver.driver_version().map_err(call_error)
    }

    fn init(&self) -> Result<(), DriverCallError> {
        self.driver("cuInit")?.init().map_err(call_error)
    }

    fn device_count(&self) -> Result<usize, DriverCallError> {
        let count = self
            .driver("cuDeviceGetCount")?
            .device_count()
            .map_err(call_error)?;
        usize::try_from(count).map_err(|_| bad_value("cuDeviceGetCount"))
    }

    fn device_facts(&self, index: usize) -> Result<DeviceFacts, DriverCallError> {
        let device = self.device(index)?;
        let driver = self.driver("cuDeviceGetName")?;
        let name = driver.device_name(device).map_err(call_error)?;
        use CUdevice_attribute as A;
        let major = self.attribute(
            driver,
            device,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )?;
        let minor = self.attribute(
            driver,
            device,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        )?;
        let virtual_memory = self.attribute(
            driver,
            device,
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        )? > 0;
        let total_bytes = driver.device_total_bytes(device).map_err(call_error)?;
        Ok(DeviceFacts {
            name,
            compute_capability: ComputeCapability { major, minor },
            total_bytes,
            virtual_memory,
        })
    }

    fn free_bytes(&self, index: usize) -> Result<usize, DriverCallError> {
        let device = self.device(index)?;
        let driver = self.driver("cuDevicePrimaryCtxRetain")?;
        driver
            .primary_context_free_bytes(device)
            .map_err(call_error)
    }
}
