//! Turning the driver's `CUresult` codes into [`BackendError`]s, without ever panicking.
//!
//! cudarc's own `DriverError` formats itself by calling `cuGetErrorString`, which panics when
//! libcuda cannot be loaded. Everything here works from the raw code instead: the driver's
//! name and description are asked for only once the library has been found with every symbol
//! ([`Driver::checked`]), and otherwise the binding's own enum name (which is the same string
//! `cuGetErrorName` returns) is used. Codes that a person can act on (no device, driver too
//! old, stub library, device busy) get a hint saying what to do.

use cudarc::driver::sys::CUresult;

use super::driver::{CallError, Driver};
use crate::backend::{BackendError, DeviceIndex};

/// The code the "driver library not found" error carries: no driver call could even be made,
/// and this is the driver's own code for a shared library that failed to initialize.
pub(crate) const LIBRARY_MISSING: CUresult = CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED;

/// The error [`CudaBackend::new`](super::CudaBackend::new) returns when libcuda cannot be
/// loaded in this process.
pub(crate) fn library_missing() -> BackendError {
    BackendError::Driver {
        device: DeviceIndex::new(0),
        code: LIBRARY_MISSING as i32,
        name: error_name(LIBRARY_MISSING),
        message: "the NVIDIA driver library (libcuda.so.1 on Linux, nvcuda.dll on Windows) \
                  could not be loaded in this process: install the NVIDIA driver, or add the \
                  directory holding libcuda to the library path (LD_LIBRARY_PATH); without a GPU, \
                  use the simulated backend (SimBackend, BLOCKPOOL_BACKEND=sim)"
            .to_owned(),
    }
}

/// The error [`CudaBackend::new`](super::CudaBackend::new) returns when the driver library
/// lacks `symbol`, one of the functions blockpool calls: the driver predates them.
pub(crate) fn symbol_missing(symbol: &'static str) -> BackendError {
    BackendError::Driver {
        device: DeviceIndex::new(0),
        code: CALL_REQUIRES_NEWER_DRIVER,
        name: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER".to_owned(),
        message: format!(
            "the NVIDIA driver library has no `{symbol}`, which this program calls: the driver \
             is too old; update the driver"
        ),
    }
}

/// The driver's name for `code`, such as `CUDA_ERROR_OUT_OF_MEMORY`.
///
/// Asks `cuGetErrorName` only when the library has every symbol; the binding's enum name is
/// the same string and serves otherwise (and for codes the installed driver does not know).
pub(crate) fn error_name(code: CUresult) -> String {
    Driver::checked()
        .and_then(|driver| driver.error_name(code))
        .unwrap_or_else(|| format!("{code:?}"))
}

/// The driver's one-line description of `code`, when the library has every symbol and knows
/// the code.
fn error_description(code: CUresult) -> Option<String> {
    Driver::checked()?.error_string(code)
}

// Driver codes with a remedy, as numbers: not every binding version cudarc may be built
// against has every variant (`CUDA_ERROR_DEVICE_UNAVAILABLE` arrived in 11.7).
const NOT_INITIALIZED: i32 = 3;
const DEINITIALIZED: i32 = 4;
const STUB_LIBRARY: i32 = 34;
/// `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER`: the driver is older than the call needs.
pub(crate) const CALL_REQUIRES_NEWER_DRIVER: i32 = 36;
const DEVICE_UNAVAILABLE: i32 = 46;
const NO_DEVICE: i32 = 100;
const INVALID_DEVICE: i32 = 101;
const INVALID_CONTEXT: i32 = 201;
const INVALID_HANDLE: i32 = 400;
const ILLEGAL_ADDRESS: i32 = 700;
const LAUNCH_FAILED: i32 = 719;
const SYSTEM_DRIVER_MISMATCH: i32 = 803;
const COMPAT_NOT_SUPPORTED_ON_DEVICE: i32 = 804;

/// What a person can do about driver error `code`, for the codes that have a remedy.
pub(crate) fn hint(code: i32) -> Option<&'static str> {
    Some(match code {
        NO_DEVICE => {
            "no CUDA-capable device is visible to this process: check `nvidia-smi` and \
             CUDA_VISIBLE_DEVICES, or use the simulated backend (BLOCKPOOL_BACKEND=sim)"
        }
        INVALID_DEVICE => {
            "the device index is not visible to this process: check CUDA_VISIBLE_DEVICES"
        }
        CALL_REQUIRES_NEWER_DRIVER => {
            "the installed NVIDIA driver is too old for this program: update the driver"
        }
        STUB_LIBRARY => {
            "the libcuda found is the CUDA toolkit's stub library, not the driver's: remove the \
             toolkit's `stubs` directory from the library path"
        }
        SYSTEM_DRIVER_MISMATCH => {
            "the driver library does not match the loaded kernel module: reboot, or reinstall \
             the NVIDIA driver so both have the same version"
        }
        COMPAT_NOT_SUPPORTED_ON_DEVICE => {
            "the CUDA forward-compatibility package does not support this GPU: use the \
             driver's own libcuda"
        }
        DEVICE_UNAVAILABLE => {
            "the device is busy or in exclusive-process mode and held by another process: \
             check `nvidia-smi` for its compute mode and users"
        }
        NOT_INITIALIZED | DEINITIALIZED => {
            "the driver is not initialized (or is shutting down): create the CudaBackend \
             before, and drop allocations before, the process exits"
        }
        INVALID_CONTEXT | INVALID_HANDLE => {
            "a stream or event from another device or context was used: use streams made \
             from CudaBackend::context for that device"
        }
        ILLEGAL_ADDRESS | LAUNCH_FAILED => {
            "an earlier kernel faulted and the context is unusable: find the faulting kernel \
             with compute-sanitizer; the process must restart"
        }
        _ => return None,
    })
}

/// A [`BackendError::Driver`] for `code`, returned by `call` on `device`: the driver's code and
/// name, its description when it can be had, and a remedy where one is known.
pub(crate) fn driver_error(device: DeviceIndex, code: CUresult, call: &str) -> BackendError {
    let mut message = format!("{call} failed");
    if let Some(text) = error_description(code) {
        message.push_str(": ");
        message.push_str(&text);
    }
    if let Some(hint) = hint(code as i32) {
        message.push_str("; ");
        message.push_str(hint);
    }
    BackendError::Driver {
        device,
        code: code as i32,
        name: error_name(code),
        message,
    }
}

/// The error for a failed device allocation of `requested_bytes`: out-of-memory stays
/// retryable ([`BackendError::OutOfMemory`]), anything else is a driver error.
pub(crate) fn device_alloc_error(
    device: DeviceIndex,
    code: CUresult,
    requested_bytes: usize,
    call: &str,
) -> BackendError {
    match code {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => BackendError::OutOfMemory {
            device,
            requested_bytes,
        },
        _ => driver_error(device, code, call),
    }
}

/// The error for a failed pinned host allocation of `requested_bytes`: out-of-memory stays
/// retryable ([`BackendError::HostOutOfMemory`]), anything else is a driver error.
pub(crate) fn host_alloc_error(code: CUresult, requested_bytes: usize) -> BackendError {
    match code {
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => BackendError::HostOutOfMemory { requested_bytes },
        _ => driver_error(DeviceIndex::new(0), code, "cuMemHostAlloc"),
    }
}

/// A driver call's result on a device, its failure as a [`BackendError`].
pub(crate) trait OnDevice<T> {
    /// The failure as the [`driver_error`] of the call on `device`.
    fn on(self, device: DeviceIndex) -> Result<T, BackendError>;
}

impl<T> OnDevice<T> for Result<T, CallError> {
    fn on(self, device: DeviceIndex) -> Result<T, BackendError> {
        self.map_err(|e| driver_error(device, e.code, e.call))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device 0, which these tests use.
    const D0: DeviceIndex = DeviceIndex::new(0);

    #[test]
    fn out_of_memory_on_a_segment_is_retryable() {
        let err = device_alloc_error(
            DeviceIndex::new(1),
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            4096,
            "cuMemAlloc_v2",
        );
        assert_eq!(
            err,
            BackendError::OutOfMemory {
                device: DeviceIndex::new(1),
                requested_bytes: 4096
            }
        );
        assert!(err.is_out_of_memory(), "device OOM must stay retryable");
    }

    #[test]
    fn out_of_memory_on_pinned_memory_is_host_out_of_memory() {
        let err = host_alloc_error(CUresult::CUDA_ERROR_OUT_OF_MEMORY, 1 << 20);
        assert_eq!(
            err,
            BackendError::HostOutOfMemory {
                requested_bytes: 1 << 20
            }
        );
        assert!(err.is_out_of_memory(), "host OOM must stay retryable");
    }

    #[test]
    fn other_codes_carry_the_driver_code_and_name() {
        let err = device_alloc_error(D0, CUresult::CUDA_ERROR_INVALID_VALUE, 512, "cuMemAlloc_v2");
        match err {
            BackendError::Driver {
                device,
                code,
                name,
                message,
            } => {
                assert_eq!(device, D0);
                assert_eq!(code, 1, "CUDA_ERROR_INVALID_VALUE is code 1");
                assert_eq!(name, "CUDA_ERROR_INVALID_VALUE");
                assert!(
                    message.starts_with("cuMemAlloc_v2 failed"),
                    "the message must name the call: {message}"
                );
            }
            other => panic!("expected a driver error, got {other:?}"),
        }
        assert!(!driver_error(D0, CUresult::CUDA_ERROR_LAUNCH_FAILED, "x").is_out_of_memory());
    }

    #[test]
    fn actionable_codes_say_what_to_do() {
        let err = driver_error(D0, CUresult::CUDA_ERROR_NO_DEVICE, "cuInit");
        let text = err.to_string();
        assert!(text.contains("CUDA_ERROR_NO_DEVICE"), "{text}");
        assert!(text.contains("code 100") || text.contains("100"), "{text}");
        assert!(text.contains("nvidia-smi"), "the hint is missing: {text}");
        assert!(hint(CALL_REQUIRES_NEWER_DRIVER).is_some_and(|h| h.contains("update the driver")));
        let stub = driver_error(D0, CUresult::CUDA_ERROR_STUB_LIBRARY, "cuInit").to_string();
        assert!(stub.contains("stub library"), "{stub}");
        assert_eq!(hint(CUresult::CUDA_ERROR_INVALID_VALUE as i32), None);
    }

    #[test]
    fn success_checks_ok_and_failure_names_the_call() {
        use crate::cuda::driver::check;
        assert_eq!(check("cuMemFree_v2", CUresult::CUDA_SUCCESS).on(D0), Ok(()));
        let err = check("cuEventRecord", CUresult::CUDA_ERROR_INVALID_HANDLE)
            .on(DeviceIndex::new(2))
            .unwrap_err();
        assert!(
            matches!(&err, BackendError::Driver { device, code: 400, name, .. } if *device == DeviceIndex::new(2) && name == "CUDA_ERROR_INVALID_HANDLE"),
            "{err:?}"
        );
    }

    #[test]
    fn the_missing_library_error_says_what_to_install() {
        let err = library_missing();
        let text = err.to_string();
        assert!(text.contains("libcuda.so.1"), "{text}");
        assert!(text.contains("install the NVIDIA driver"), "{text}");
        assert!(text.contains("BLOCKPOOL_BACKEND=sim"), "{text}");
        assert!(!err.is_out_of_memory());
    }

    #[test]
    fn a_missing_symbol_is_a_driver_too_old_error_naming_it() {
        let err = symbol_missing("cuMemCreate");
        assert!(
            matches!(&err, BackendError::Driver { device, code: 36, name, .. } if *device == D0 && name == "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("has no `cuMemCreate`"),
            "the symbol is named: {text}"
        );
        assert!(text.contains("update the driver"), "{text}");
        assert!(!err.is_out_of_memory(), "an old driver is not retryable");
    }
}
