//! Why CUDA is unusable, in three conditions a user can act on, and what to do about each.
//!
//! A [`Diagnosis`] is the precise cause (the library did not load, a symbol is missing, `cuInit`
//! said there is no device, ...); [`Condition`] groups causes into the three things a user
//! fixes in different places: the machine's GPU, its driver, or this program's build.

use std::fmt;

use serde::{Serialize, Serializer};

use super::report::{DriverCallError, DriverVersion};

/// Which of the three conditions for using CUDA failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Condition {
    /// The driver works but there is no NVIDIA GPU this process can use.
    NoUsableGpu,
    /// The NVIDIA driver is not installed, not found, or older than what blockpool needs.
    DriverMissingOrTooOld,
    /// This program was built without blockpool's `cuda` feature.
    NoCudaLibrary,
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Condition::NoUsableGpu => "no usable NVIDIA GPU",
            Condition::DriverMissingOrTooOld => "NVIDIA driver missing or too old",
            Condition::NoCudaLibrary => "no CUDA support in this program",
        })
    }
}

/// Why CUDA is unusable in this process. [`Display`](fmt::Display) says what happened;
/// [`advice`](Self::advice) says what to do.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum Diagnosis {
    /// The driver library (`libcuda.so` / `nvcuda.dll`) could not be loaded under any name
    /// tried.
    #[error("the NVIDIA driver library (libcuda) could not be loaded")]
    DriverLibraryMissing,
    /// The driver library lacks an entry point blockpool calls: the driver predates it.
    #[error("the NVIDIA driver library has no `{symbol}`: the driver is too old")]
    DriverSymbolMissing {
        /// The missing function.
        symbol: &'static str,
    },
    /// The library found is the CUDA toolkit's link stub (`cuInit` returned
    /// `CUDA_ERROR_STUB_LIBRARY`), not a driver: the driver is missing or the stub shadows it.
    #[error("the libcuda found is the CUDA toolkit's stub, not the NVIDIA driver")]
    StubLibrary,
    /// The driver supports an older CUDA than blockpool needs.
    #[error("the NVIDIA driver supports CUDA {found}, older than the {required} blockpool needs")]
    DriverVersionTooOld {
        /// What the driver supports (`cuDriverGetVersion`).
        found: DriverVersion,
        /// The oldest blockpool accepts.
        required: DriverVersion,
    },
    /// The driver refused to start because its library does not match the kernel module
    /// (`CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`) or, as a forward-compatibility package, does not
    /// support this GPU (`CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE`).
    #[error("the NVIDIA driver is too old or does not match its kernel module: {error}")]
    DriverTooOld {
        /// The refusing call.
        error: DriverCallError,
    },
    /// The driver found no NVIDIA GPU (`cuInit` returned `CUDA_ERROR_NO_DEVICE`, or
    /// `cuDeviceGetCount` returned 0).
    #[error("the NVIDIA driver found no GPU")]
    NoDevice,
    /// GPUs exist but none could be used: the driver failed to start, or no device would give
    /// this process a context (busy, exclusive or prohibited compute mode, a fault).
    #[error("no GPU could be used: {error}")]
    NoUsableDevice {
        /// The first failing call.
        error: DriverCallError,
    },
    /// blockpool was built without its `cuda` feature.
    #[error("blockpool was built without its `cuda` feature")]
    NotBuiltWithCuda,
}

impl Diagnosis {
    /// Which of the three conditions failed.
    pub fn condition(&self) -> Condition {
        match self {
            Diagnosis::DriverLibraryMissing
            | Diagnosis::StubLibrary
            | Diagnosis::DriverSymbolMissing { .. }
            | Diagnosis::DriverVersionTooOld { .. }
            | Diagnosis::DriverTooOld { .. } => Condition::DriverMissingOrTooOld,
            Diagnosis::NoDevice | Diagnosis::NoUsableDevice { .. } => Condition::NoUsableGpu,
            Diagnosis::NotBuiltWithCuda => Condition::NoCudaLibrary,
        }
    }

    /// A short name for the cause, as the JSON form's `cause` field gives it.
    pub fn cause(&self) -> &'static str {
        match self {
            Diagnosis::DriverLibraryMissing => "driver_library_missing",
            Diagnosis::StubLibrary => "stub_library",
            Diagnosis::DriverSymbolMissing { .. } => "driver_symbol_missing",
            Diagnosis::DriverVersionTooOld { .. } => "driver_version_too_old",
            Diagnosis::DriverTooOld { .. } => "driver_too_old",
            Diagnosis::NoDevice => "no_device",
            Diagnosis::NoUsableDevice { .. } => "no_usable_device",
            Diagnosis::NotBuiltWithCuda => "not_built_with_cuda",
        }
    }

    /// What to do about it, in words a user can act on.
    pub fn advice(&self) -> &'static str {
        match self {
            Diagnosis::DriverLibraryMissing => {
                "Install the NVIDIA driver (then `nvidia-smi` lists your GPUs). If it is \
                 installed, add the directory holding libcuda.so.1 to LD_LIBRARY_PATH; in a \
                 container, start it with the GPUs exposed (`docker run --gpus all`, NVIDIA \
                 Container Toolkit). Without a GPU, set BLOCKPOOL_BACKEND=sim to use the \
                 simulated device."
            }
            Diagnosis::StubLibrary => {
                "Install the NVIDIA driver. If it is installed, remove the CUDA toolkit's stubs \
                 directory (such as /usr/local/cuda/lib64/stubs) from LD_LIBRARY_PATH: its \
                 libcuda.so is for linking only and shadows the driver's."
            }
            Diagnosis::DriverSymbolMissing { .. }
            | Diagnosis::DriverVersionTooOld { .. }
            | Diagnosis::DriverTooOld { .. } => {
                "Update the NVIDIA driver to a current release (`nvidia-smi` shows the installed \
                 version); after an update, reboot or reload the kernel module so that the \
                 library and the module match."
            }
            Diagnosis::NoDevice => {
                "Check that `nvidia-smi` lists a GPU. If CUDA_VISIBLE_DEVICES is set, check that \
                 it names an existing GPU (an empty or wrong value hides them all); in a \
                 container, start it with the GPUs exposed (`docker run --gpus all`)."
            }
            Diagnosis::NoUsableDevice { .. } => {
                "Run `nvidia-smi` to see whether the GPUs are used by another process or set to \
                 an exclusive or prohibited compute mode (`nvidia-smi -q -d COMPUTE`), and \
                 whether the driver reports errors (`dmesg`); retry once a GPU is free."
            }
            Diagnosis::NotBuiltWithCuda => {
                "Rebuild with blockpool's `cuda` feature: it is on by default, so drop \
                 `--no-default-features` or add `features = [\"cuda\"]` to the blockpool \
                 dependency."
            }
        }
    }

    /// The failing driver call behind the diagnosis, if one is.
    pub fn driver_error(&self) -> Option<&DriverCallError> {
        match self {
            Diagnosis::DriverTooOld { error } | Diagnosis::NoUsableDevice { error } => Some(error),
            _ => None,
        }
    }
}

/// The JSON form: the condition, the cause, the sentence and the advice, and the failing call,
/// symbol or versions when there are.
#[derive(Serialize)]
struct DiagnosisJson<'a> {
    condition: Condition,
    cause: &'static str,
    summary: String,
    advice: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    symbol: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    driver_error: Option<&'a DriverCallError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    found_version: Option<DriverVersion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    required_version: Option<DriverVersion>,
}

impl Serialize for Diagnosis {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let symbol = match self {
            Diagnosis::DriverSymbolMissing { symbol } => Some(*symbol),
            _ => None,
        };
        let (found_version, required_version) = match self {
            Diagnosis::DriverVersionTooOld { found, required } => (Some(*found), Some(*required)),
            _ => (None, None),
        };
        DiagnosisJson {
            condition: self.condition(),
            cause: self.cause(),
            summary: self.to_string(),
            advice: self.advice(),
            symbol,
            driver_error: self.driver_error(),
            found_version,
            required_version,
        }
        .serialize(serializer)
    }
}
