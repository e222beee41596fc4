//! The facts a probe gathers: the driver library, its version, and each device's name,
//! compute capability and memory. Each is a plain value that serializes to JSON as it reads.

use std::fmt;

use serde::Serialize;

use super::diagnosis::Diagnosis;

/// What [`probe`](super::probe) found: the driver, the devices, and, when CUDA is unusable,
/// why.
///
/// CUDA is usable in this process exactly when [`diagnosis`](Self::diagnosis) is `None`; then at
/// least one device has its free memory known.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceReport {
    /// Whether this build of blockpool has the `cuda` feature (the CUDA backend).
    pub cuda_feature: bool,
    /// The driver library and its version.
    pub driver: DriverInfo,
    /// Devices the driver reports (`cuDeviceGetCount`); 0 when it could not be asked.
    pub device_count: usize,
    /// One entry per device, in index order.
    pub devices: Vec<ProbedDevice>,
    /// Why CUDA is unusable, and what to do; `None` when it is usable.
    pub diagnosis: Option<Diagnosis>,
}

impl DeviceReport {
    /// Whether CUDA is usable in this process: no [`Diagnosis`].
    pub fn is_usable(&self) -> bool {
        self.diagnosis.is_none()
    }
}

/// The CUDA driver library (`libcuda.so` on Linux, `nvcuda.dll` on Windows).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DriverInfo {
    /// Whether the library could be loaded under one of the names in `searched_names`.
    pub library_found: bool,
    /// The file the library was loaded from, when the platform tells (Linux:
    /// `/proc/self/maps`).
    pub library_path: Option<String>,
    /// The library names tried, in order (the dynamic loader searches its usual directories
    /// and `LD_LIBRARY_PATH` for each); empty without the `cuda` feature.
    pub searched_names: Vec<String>,
    /// The newest CUDA version the driver supports (`cuDriverGetVersion`), when known.
    pub version: Option<DriverVersion>,
}

/// A CUDA version as `cuDriverGetVersion` encodes it (`1000 * major + 10 * minor`); prints as
/// `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct DriverVersion {
    /// Major version, such as 12.
    pub major: u32,
    /// Minor version, such as 4.
    pub minor: u32,
}

impl DriverVersion {
    /// Decodes the driver's integer (`12040` is 12.4); `None` for a negative value.
    pub fn from_driver(encoded: i32) -> Option<DriverVersion> {
        let encoded = u32::try_from(encoded).ok()?;
        Some(DriverVersion {
            major: encoded / 1000,
            minor: encoded % 1000 / 10,
        })
    }
}

impl fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A device's compute capability (`sm_90` is 9.0); prints as `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ComputeCapability {
    /// Major revision.
    pub major: u32,
    /// Minor revision.
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One device as the probe saw it. A fact the driver would not give is `None`, and `error`
/// says which call failed first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProbedDevice {
    /// Device index (`0..device_count`), as CUDA numbers them (after `CUDA_VISIBLE_DEVICES`).
    pub index: usize,
    /// The device's name, such as `NVIDIA H100 80GB HBM3`.
    pub name: Option<String>,
    /// Compute capability.
    pub compute_capability: Option<ComputeCapability>,
    /// Memory on the device, in bytes (`cuDeviceTotalMem`).
    pub total_bytes: Option<usize>,
    /// Whether the device supports virtual memory management, which `expandable_segments:True`
    /// needs (without it the allocator falls back to fixed segments).
    pub expandable_segments: Option<bool>,
    /// Memory still free on the device, in bytes (`cuMemGetInfo` in its primary context).
    /// Known only when a context could be made on the device, which is what makes the device
    /// usable.
    pub free_bytes: Option<usize>,
    /// The first driver call that failed for this device, if any.
    pub error: Option<DriverCallError>,
}

impl ProbedDevice {
    /// Whether this process could make a context on the device and read its memory.
    pub fn is_usable(&self) -> bool {
        self.free_bytes.is_some()
    }
}

/// A driver call that returned an error: which call, the driver's code and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, thiserror::Error)]
#[error("{call} failed with {name} ({code})")]
pub struct DriverCallError {
    /// The driver function, such as `cuInit`.
    pub call: &'static str,
    /// The driver's numeric code (`CUresult`).
    pub code: i32,
    /// The driver's name for the code, such as `CUDA_ERROR_NO_DEVICE`.
    pub name: String,
}

impl DriverCallError {
    /// A failure of `call` with the driver's `code` and its `name`.
    pub fn new(call: &'static str, code: i32, name: impl Into<String>) -> DriverCallError {
        DriverCallError {
            call,
            code,
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_version_decodes_the_driver_integer() {
        assert_eq!(
            DriverVersion::from_driver(12040),
            Some(DriverVersion {
                major: 12,
                minor: 4
            })
        );
        assert_eq!(
            DriverVersion::from_driver(13000).map(|v| v.to_string()),
            Some("13.0".to_owned())
        );
        assert_eq!(
            DriverVersion::from_driver(11080).map(|v| v.to_string()),
            Some("11.8".to_owned())
        );
        assert_eq!(
            DriverVersion::from_driver(-1),
            None,
            "negative is no version"
        );
    }

    #[test]
    fn driver_call_error_names_call_code_and_name() {
        let error = DriverCallError::new("cuInit", 100, "CUDA_ERROR_NO_DEVICE");
        assert_eq!(
            error.to_string(),
            "cuInit failed with CUDA_ERROR_NO_DEVICE (100)"
        );
    }
}
