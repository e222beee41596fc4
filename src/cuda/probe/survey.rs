//! The probe's logic, over a [`DriverApi`] so that every branch is tested with a scripted
//! driver: load the library, check its entry points, read the version, start the driver, then
//! look at each device. The real driver (`libcuda.rs`) only answers the questions.

use super::diagnosis::Diagnosis;
use super::report::{
    ComputeCapability, DeviceReport, DriverCallError, DriverInfo, DriverVersion, ProbedDevice,
};

/// `CUDA_ERROR_STUB_LIBRARY`: the library loaded is the toolkit's link stub, not a driver.
pub(crate) const CUDA_ERROR_STUB_LIBRARY: i32 = 34;
/// `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER`: the call needs a newer driver.
pub(crate) const CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER: i32 = 36;
/// `CUDA_ERROR_NO_DEVICE`: no CUDA-capable device.
pub(crate) const CUDA_ERROR_NO_DEVICE: i32 = 100;
/// `CUDA_ERROR_SYSTEM_DRIVER_MISMATCH`: the library and the kernel module differ in version.
pub(crate) const CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: i32 = 803;
/// `CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE`: forward compatibility not supported here.
pub(crate) const CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: i32 = 804;

/// What a device says about itself without a context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceFacts {
    pub(crate) name: String,
    pub(crate) compute_capability: ComputeCapability,
    pub(crate) total_bytes: usize,
    /// Whether the device supports virtual memory management (`cuMemMap`), which
    /// expandable segments need.
    pub(crate) virtual_memory: bool,
}

/// The questions the probe asks the driver, in the order it asks them. Every call after
/// [`library_present`](Self::library_present) is made only when the library loaded and has
/// every entry point.
pub(crate) trait DriverApi {
    /// The library names searched, in order.
    fn library_candidates(&self) -> Vec<String>;
    /// Whether the library loads under one of the candidates.
    fn library_present(&self) -> bool;
    /// The loaded library's file, if the platform tells.
    fn library_path(&self) -> Option<String>;
    /// The first entry point the library lacks, if any.
    fn missing_symbol(&self) -> Option<&'static str>;
    /// `cuDriverGetVersion`, as the driver encodes it.
    fn driver_version(&self) -> Result<i32, DriverCallError>;
    /// `cuInit(0)`.
    fn init(&self) -> Result<(), DriverCallError>;
    /// `cuDeviceGetCount`.
    fn device_count(&self) -> Result<usize, DriverCallError>;
    /// Name, compute capability and total memory of device `index`.
    fn device_facts(&self, index: usize) -> Result<DeviceFacts, DriverCallError>;
    /// Free memory of device `index`, in bytes, read in its primary context (retained for the
    /// call and released after).
    fn free_bytes(&self, index: usize) -> Result<usize, DriverCallError>;
}

/// Asks `api` everything and says whether CUDA is usable: the driver stage, then every device
/// (a context on each, to read its free memory).
pub(crate) fn survey(api: &impl DriverApi, required: DriverVersion) -> DeviceReport {
    let mut report = survey_driver(api, required);
    if report.diagnosis.is_some() {
        return report;
    }
    report.devices = (0..report.device_count)
        .map(|index| probe_device(api, index))
        .collect();
    if !report.devices.iter().any(ProbedDevice::is_usable) {
        // Every device failed; the first one's error stands for all.
        report.diagnosis = report
            .devices
            .iter()
            .find_map(|device| device.error.clone())
            .map(|error| Diagnosis::NoUsableDevice { error });
    }
    report
}

/// The driver stage alone: the library, its entry points and version, `cuInit` and the device
/// count. No context is made, so it is cheap; a report without a diagnosis has devices but
/// none was looked at (`devices` is empty).
pub(crate) fn survey_driver(api: &impl DriverApi, required: DriverVersion) -> DeviceReport {
    let mut report = DeviceReport {
        cuda_feature: true,
        driver: DriverInfo {
            searched_names: api.library_candidates(),
            ..DriverInfo::default()
        },
        device_count: 0,
        devices: Vec::new(),
        diagnosis: None,
    };
    if !api.library_present() {
        report.diagnosis = Some(Diagnosis::DriverLibraryMissing);
        return report;
    }
    report.driver.library_found = true;
    report.driver.library_path = api.library_path();
    if let Some(symbol) = api.missing_symbol() {
        report.diagnosis = Some(Diagnosis::DriverSymbolMissing { symbol });
        return report;
    }
    // The version needs no cuInit, so it is known even when the driver will not start: the
    // most useful fact when the diagnosis is "too old".
    let version = api.driver_version().map(DriverVersion::from_driver);
    report.driver.version = version.clone().ok().flatten();
    if let Err(error) = api.init() {
        report.diagnosis = Some(diagnose_init_failure(error));
        return report;
    }
    match version {
        Err(error) => {
            report.diagnosis = Some(Diagnosis::NoUsableDevice { error });
            return report;
        }
        Ok(Some(found)) if found < required => {
            report.diagnosis = Some(Diagnosis::DriverVersionTooOld { found, required });
            return report;
        }
        Ok(_) => {}
    }
    match api.device_count() {
        Ok(0) => report.diagnosis = Some(Diagnosis::NoDevice),
        Ok(count) => report.device_count = count,
        Err(error) => report.diagnosis = Some(Diagnosis::NoUsableDevice { error }),
    }
    report
}

/// Sorts a `cuInit` failure into the condition a user fixes.
///
/// The driver API has no `CUDA_ERROR_INSUFFICIENT_DRIVER` (that is the runtime's
/// `cudaErrorInsufficientDriver`, 35): a driver too old for blockpool lacks a symbol instead,
/// and a driver too old for its GPU or kernel module says so with 36, 803 or 804.
fn diagnose_init_failure(error: DriverCallError) -> Diagnosis {
    match error.code {
        CUDA_ERROR_NO_DEVICE => Diagnosis::NoDevice,
        CUDA_ERROR_STUB_LIBRARY => Diagnosis::StubLibrary,
        CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
        | CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => Diagnosis::DriverTooOld { error },
        _ => Diagnosis::NoUsableDevice { error },
    }
}

/// One device's facts; a failure leaves the rest unknown and is kept in `error`.
fn probe_device(api: &impl DriverApi, index: usize) -> ProbedDevice {
    let mut device = ProbedDevice {
        index,
        name: None,
        compute_capability: None,
        total_bytes: None,
        expandable_segments: None,
        free_bytes: None,
        error: None,
    };
    match api.device_facts(index) {
        Ok(facts) => {
            device.name = Some(facts.name);
            device.compute_capability = Some(facts.compute_capability);
            device.total_bytes = Some(facts.total_bytes);
            device.expandable_segments = Some(facts.virtual_memory);
        }
        Err(error) => {
            device.error = Some(error);
            return device;
        }
    }
    match api.free_bytes(index) {
        Ok(free) => device.free_bytes = Some(free),
        Err(error) => device.error = Some(error),
    }
    device
}
