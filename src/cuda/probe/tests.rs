//! The probe's diagnoses against a scripted driver (every branch, exact reports), its JSON
//! shape, and the real probe on this machine.

use serde_json::json;

use super::survey::{
    survey, survey_driver, DeviceFacts, DriverApi, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
    CUDA_ERROR_NO_DEVICE, CUDA_ERROR_STUB_LIBRARY,
};
use super::*;

const GIB: usize = 1 << 30;

/// A driver that answers from a script.
struct ScriptedDriver {
    present: bool,
    missing_symbol: Option<&'static str>,
    version: Result<i32, DriverCallError>,
    init: Result<(), DriverCallError>,
    count: Result<usize, DriverCallError>,
    facts: Vec<Result<DeviceFacts, DriverCallError>>,
    free: Vec<Result<usize, DriverCallError>>,
}

impl ScriptedDriver {
    /// Driver 12.4 with two healthy H100s.
    fn healthy() -> ScriptedDriver {
        let h100 = |name: &str| DeviceFacts {
            name: name.to_owned(),
            compute_capability: ComputeCapability { major: 9, minor: 0 },
            total_bytes: 80 * GIB,
            virtual_memory: true,
        };
        ScriptedDriver {
            present: true,
            missing_symbol: None,
            version: Ok(12040),
            init: Ok(()),
            count: Ok(2),
            facts: vec![
                Ok(h100("NVIDIA H100 80GB HBM3")),
                Ok(h100("NVIDIA H100 PCIe")),
            ],
            free: vec![Ok(79 * GIB), Ok(70 * GIB)],
        }
    }
}

impl DriverApi for ScriptedDriver {
    fn library_candidates(&self) -> Vec<String> {
        vec!["libcuda.so".to_owned(), "libcuda.so.1".to_owned()]
    }
    fn library_present(&self) -> bool {
        self.present
    }
    fn library_path(&self) -> Option<String> {
        self.present
            .then(|| "/usr/lib/libcuda.so.550.54".to_owned())
    }
    fn missing_symbol(&self) -> Option<&'static str> {
        assert!(self.present, "symbols looked up without a library");
        self.missing_symbol
    }
    fn driver_version(&self) -> Result<i32, DriverCallError> {
        assert!(self.missing_symbol.is_none(), "called a missing symbol");
        self.version.clone()
    }
    fn init(&self) -> Result<(), DriverCallError> {
        self.init.clone()
    }
    fn device_count(&self) -> Result<usize, DriverCallError> {
        assert!(
            self.init.is_ok(),
            "cuDeviceGetCount before a successful cuInit"
        );
        self.count.clone()
    }
    fn device_facts(&self, index: usize) -> Result<DeviceFacts, DriverCallError> {
        self.facts[index].clone()
    }
    fn free_bytes(&self, index: usize) -> Result<usize, DriverCallError> {
        self.free[index].clone()
    }
}

fn driver_info(version: Option<DriverVersion>) -> DriverInfo {
    DriverInfo {
        library_found: true,
        library_path: Some("/usr/lib/libcuda.so.550.54".to_owned()),
        searched_names: vec!["libcuda.so".to_owned(), "libcuda.so.1".to_owned()],
        version,
    }
}

/// The oldest driver the scripted probes accept.
const REQUIRED: DriverVersion = DriverVersion {
    major: 11,
    minor: 4,
};

const V12_4: Option<DriverVersion> = Some(DriverVersion {
    major: 12,
    minor: 4,
});

fn unusable(version: Option<DriverVersion>, diagnosis: Diagnosis) -> DeviceReport {
    DeviceReport {
        cuda_feature: true,
        driver: driver_info(version),
        device_count: 0,
        devices: Vec::new(),
        diagnosis: Some(diagnosis),
    }
}

#[test]
fn missing_library_is_diagnosed_before_any_driver_call() {
    let driver = ScriptedDriver {
        present: false,
        ..ScriptedDriver::healthy()
    };
    let expected = DeviceReport {
        cuda_feature: true,
        driver: DriverInfo {
            library_found: false,
            library_path: None,
            searched_names: vec!["libcuda.so".to_owned(), "libcuda.so.1".to_owned()],
            version: None,
        },
        device_count: 0,
        devices: Vec::new(),
        diagnosis: Some(Diagnosis::DriverLibraryMissing),
    };
    assert_eq!(survey(&driver, REQUIRED), expected);
}

#[test]
fn missing_symbol_means_driver_too_old_and_stops_before_calling_it() {
    let driver = ScriptedDriver {
        missing_symbol: Some("cuMemGetInfo_v2"),
        ..ScriptedDriver::healthy()
    };
    let report = survey(&driver, REQUIRED);
    let diagnosis = Diagnosis::DriverSymbolMissing {
        symbol: "cuMemGetInfo_v2",
    };
    assert_eq!(report, unusable(None, diagnosis.clone()));
    assert_eq!(diagnosis.condition(), Condition::DriverMissingOrTooOld);
    assert_eq!(
        diagnosis.to_string(),
        "the NVIDIA driver library has no `cuMemGetInfo_v2`: the driver is too old"
    );
}

#[test]
fn unsupported_compat_driver_at_init_is_too_old_with_its_version() {
    let error = DriverCallError::new(
        "cuInit",
        CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    );
    let driver = ScriptedDriver {
        version: Ok(11020),
        init: Err(error.clone()),
        // The failed cuInit is the diagnosis, not the old version.
        ..ScriptedDriver::healthy()
    };
    let version = Some(DriverVersion {
        major: 11,
        minor: 2,
    });
    let diagnosis = Diagnosis::DriverTooOld { error };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(version, diagnosis.clone())
    );
    assert_eq!(
        diagnosis.to_string(),
        "the NVIDIA driver is too old or does not match its kernel module: cuInit failed with \
         CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804)"
    );
}

#[test]
fn driver_older_than_required_is_too_old_and_names_both_versions() {
    let driver = ScriptedDriver {
        version: Ok(11020),
        ..ScriptedDriver::healthy()
    };
    let found = DriverVersion {
        major: 11,
        minor: 2,
    };
    let diagnosis = Diagnosis::DriverVersionTooOld {
        found,
        required: REQUIRED,
    };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(Some(found), diagnosis.clone())
    );
    assert_eq!(
        diagnosis.to_string(),
        "the NVIDIA driver supports CUDA 11.2, older than the 11.4 blockpool needs"
    );
    let value = serde_json::to_value(&diagnosis).map_err(|e| e.to_string());
    assert_eq!(
        value.map(|v| (v["found_version"].clone(), v["required_version"].clone())),
        Ok((
            json!({"major": 11, "minor": 2}),
            json!({"major": 11, "minor": 4})
        ))
    );
}

#[test]
fn stub_library_at_init_means_driver_missing() {
    let driver = ScriptedDriver {
        init: Err(DriverCallError::new(
            "cuInit",
            CUDA_ERROR_STUB_LIBRARY,
            "CUDA_ERROR_STUB_LIBRARY",
        )),
        ..ScriptedDriver::healthy()
    };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(V12_4, Diagnosis::StubLibrary)
    );
    assert_eq!(
        Diagnosis::StubLibrary.condition(),
        Condition::DriverMissingOrTooOld
    );
}

#[test]
fn driver_stage_counts_devices_without_looking_at_them() {
    let busy = DriverCallError::new(
        "cuDevicePrimaryCtxRetain",
        46,
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
    );
    let driver = ScriptedDriver {
        free: vec![Err(busy.clone()), Err(busy)],
        ..ScriptedDriver::healthy()
    };
    let expected = DeviceReport {
        cuda_feature: true,
        driver: driver_info(V12_4),
        device_count: 2,
        devices: Vec::new(),
        diagnosis: None,
    };
    assert_eq!(
        survey_driver(&driver, REQUIRED),
        expected,
        "no context is made"
    );
}

#[test]
fn driver_kernel_mismatch_at_init_is_too_old() {
    let error = DriverCallError::new("cuInit", 803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
    let driver = ScriptedDriver {
        init: Err(error.clone()),
        ..ScriptedDriver::healthy()
    };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(V12_4, Diagnosis::DriverTooOld { error })
    );
}

#[test]
fn no_device_at_init_means_no_usable_gpu() {
    let driver = ScriptedDriver {
        init: Err(DriverCallError::new(
            "cuInit",
            CUDA_ERROR_NO_DEVICE,
            "CUDA_ERROR_NO_DEVICE",
        )),
        ..ScriptedDriver::healthy()
    };
    let report = survey(&driver, REQUIRED);
    assert_eq!(report, unusable(V12_4, Diagnosis::NoDevice));
    assert_eq!(Diagnosis::NoDevice.condition(), Condition::NoUsableGpu);
}

#[test]
fn zero_devices_means_no_usable_gpu() {
    let driver = ScriptedDriver {
        count: Ok(0),
        ..ScriptedDriver::healthy()
    };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(V12_4, Diagnosis::NoDevice)
    );
}

#[test]
fn other_init_failure_means_no_usable_gpu_with_the_error() {
    let error = DriverCallError::new("cuInit", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    let driver = ScriptedDriver {
        init: Err(error.clone()),
        ..ScriptedDriver::healthy()
    };
    let diagnosis = Diagnosis::NoUsableDevice { error };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(V12_4, diagnosis.clone())
    );
    assert_eq!(diagnosis.condition(), Condition::NoUsableGpu);
}

#[test]
fn failing_device_count_means_no_usable_gpu() {
    let error = DriverCallError::new("cuDeviceGetCount", 999, "CUDA_ERROR_UNKNOWN");
    let driver = ScriptedDriver {
        count: Err(error.clone()),
        ..ScriptedDriver::healthy()
    };
    assert_eq!(
        survey(&driver, REQUIRED),
        unusable(V12_4, Diagnosis::NoUsableDevice { error })
    );
}

#[test]
fn healthy_devices_are_reported_in_order_and_usable() {
    let report = survey(&ScriptedDriver::healthy(), REQUIRED);
    let sm90 = Some(ComputeCapability { major: 9, minor: 0 });
    let expected = DeviceReport {
        cuda_feature: true,
        driver: driver_info(V12_4),
        device_count: 2,
        devices: vec![
            ProbedDevice {
                index: 0,
                name: Some("NVIDIA H100 80GB HBM3".to_owned()),
                compute_capability: sm90,
                total_bytes: Some(80 * GIB),
                expandable_segments: Some(true),
                free_bytes: Some(79 * GIB),
                error: None,
            },
            ProbedDevice {
                index: 1,
                name: Some("NVIDIA H100 PCIe".to_owned()),
                compute_capability: sm90,
                total_bytes: Some(80 * GIB),
                expandable_segments: Some(true),
                free_bytes: Some(70 * GIB),
                error: None,
            },
        ],
        diagnosis: None,
    };
    assert_eq!(report, expected);
    assert!(report.is_usable());
}

#[test]
fn one_busy_device_leaves_cuda_usable_and_records_its_error() {
    let busy = DriverCallError::new(
        "cuDevicePrimaryCtxRetain",
        46,
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
    );
    let driver = ScriptedDriver {
        free: vec![Err(busy.clone()), Ok(70 * GIB)],
        ..ScriptedDriver::healthy()
    };
    let report = survey(&driver, REQUIRED);
    assert_eq!(report.diagnosis, None, "device 1 is usable");
    assert_eq!(report.devices[0].free_bytes, None);
    assert_eq!(report.devices[0].error, Some(busy));
    assert_eq!(
        report.devices[0].total_bytes,
        Some(80 * GIB),
        "facts before the failure stay"
    );
    assert!(!report.devices[0].is_usable() && report.devices[1].is_usable());
}

#[test]
fn every_device_failing_is_no_usable_gpu_with_the_first_error() {
    let name_error = DriverCallError::new("cuDeviceGetName", 999, "CUDA_ERROR_UNKNOWN");
    let busy = DriverCallError::new(
        "cuDevicePrimaryCtxRetain",
        46,
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
    );
    let driver = ScriptedDriver {
        facts: vec![
            Err(name_error.clone()),
            ScriptedDriver::healthy().facts[1].clone(),
        ],
        free: vec![Ok(1), Err(busy)],
        ..ScriptedDriver::healthy()
    };
    let report = survey(&driver, REQUIRED);
    assert_eq!(
        report.devices[0],
        ProbedDevice {
            index: 0,
            name: None,
            compute_capability: None,
            total_bytes: None,
            expandable_segments: None,
            free_bytes: None,
            error: Some(name_error.clone()),
        },
        "a device whose facts fail is not asked for memory"
    );
    assert_eq!(
        report.diagnosis,
        Some(Diagnosis::NoUsableDevice { error: name_error })
    );
}

#[test]
fn every_diagnosis_belongs_to_one_of_the_three_conditions() {
    let error = DriverCallError::new("cuInit", 1, "CUDA_ERROR_INVALID_VALUE");
    let cases = [
        (
            Diagnosis::DriverLibraryMissing,
            Condition::DriverMissingOrTooOld,
        ),
        (Diagnosis::StubLibrary, Condition::DriverMissingOrTooOld),
        (
            Diagnosis::DriverVersionTooOld {
                found: REQUIRED,
                required: REQUIRED,
            },
            Condition::DriverMissingOrTooOld,
        ),
        (
            Diagnosis::DriverSymbolMissing { symbol: "cuInit" },
            Condition::DriverMissingOrTooOld,
        ),
        (
            Diagnosis::DriverTooOld {
                error: error.clone(),
            },
            Condition::DriverMissingOrTooOld,
        ),
        (Diagnosis::NoDevice, Condition::NoUsableGpu),
        (Diagnosis::NoUsableDevice { error }, Condition::NoUsableGpu),
        (Diagnosis::NotBuiltWithCuda, Condition::NoCudaLibrary),
    ];
    for (diagnosis, condition) in cases {
        assert_eq!(diagnosis.condition(), condition, "{diagnosis:?}");
        assert!(
            !diagnosis.advice().is_empty(),
            "{diagnosis:?} has no advice"
        );
    }
    assert_eq!(
        Condition::DriverMissingOrTooOld.to_string(),
        "NVIDIA driver missing or too old"
    );
}

#[test]
fn report_serializes_with_condition_cause_summary_and_advice() {
    let error = DriverCallError::new("cuInit", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    let diagnosis = Diagnosis::NoUsableDevice { error };
    let report = unusable(V12_4, diagnosis.clone());
    let value = serde_json::to_value(&report).map_err(|e| e.to_string());
    let expected = json!({
        "cuda_feature": true,
        "driver": {
            "library_found": true,
            "library_path": "/usr/lib/libcuda.so.550.54",
            "searched_names": ["libcuda.so", "libcuda.so.1"],
            "version": {"major": 12, "minor": 4}
        },
        "device_count": 0,
        "devices": [],
        "diagnosis": {
            "condition": "no_usable_gpu",
            "cause": "no_usable_device",
            "summary": "no GPU could be used: cuInit failed with CUDA_ERROR_DEVICE_UNAVAILABLE (46)",
            "advice": diagnosis.advice(),
            "driver_error": {"call": "cuInit", "code": 46, "name": "CUDA_ERROR_DEVICE_UNAVAILABLE"}
        }
    });
    assert_eq!(value, Ok(expected));
}

#[test]
fn device_serializes_every_fact() {
    let report = survey(&ScriptedDriver::healthy(), REQUIRED);
    let value = serde_json::to_value(&report.devices[1]).map_err(|e| e.to_string());
    let expected = json!({
        "index": 1,
        "name": "NVIDIA H100 PCIe",
        "compute_capability": {"major": 9, "minor": 0},
        "total_bytes": 80u64 << 30,
        "expandable_segments": true,
        "free_bytes": 70u64 << 30,
        "error": null
    });
    assert_eq!(value, Ok(expected));
}

/// The real probe on this machine. CI has no driver: then the report is exactly "driver
/// missing". Where a driver is installed the library must be found and reported.
#[cfg(feature = "cuda")]
#[test]
fn probe_on_this_machine_never_panics_and_reports_a_missing_driver() {
    let report = probe();
    let present = crate::cuda::driver::Library::open().is_some();
    if present {
        assert!(
            report.driver.library_found,
            "libcuda loads but the probe missed it"
        );
        assert_ne!(report.diagnosis, Some(Diagnosis::DriverLibraryMissing));
        return;
    }
    let searched: Vec<String> = ["cuda", "nvcuda"]
        .iter()
        .flat_map(|name| cudarc::get_lib_name_candidates(name))
        .collect();
    assert_eq!(
        crate::cuda::driver::Library::candidates(),
        searched,
        "the probe searches the names cudarc's loader tries"
    );
    assert!(
        searched.iter().any(|name| name == "libcuda.so.1") || cfg!(not(target_os = "linux")),
        "the name every Linux driver installs must be searched: {searched:?}"
    );
    let expected = DeviceReport {
        cuda_feature: true,
        driver: DriverInfo {
            library_found: false,
            library_path: None,
            searched_names: searched,
            version: None,
        },
        device_count: 0,
        devices: Vec::new(),
        diagnosis: Some(Diagnosis::DriverLibraryMissing),
    };
    assert_eq!(report, expected);
    let diagnosis = Diagnosis::DriverLibraryMissing;
    assert_eq!(
        diagnosis.to_string(),
        "the NVIDIA driver library (libcuda) could not be loaded"
    );
    assert_eq!(
        diagnosis.advice(),
        "Install the NVIDIA driver (then `nvidia-smi` lists your GPUs). If it is installed, add \
         the directory holding libcuda.so.1 to LD_LIBRARY_PATH; in a container, start it with \
         the GPUs exposed (`docker run --gpus all`, NVIDIA Container Toolkit). Without a GPU, \
         set BLOCKPOOL_BACKEND=sim to use the simulated device."
    );
}

/// Without the `cuda` feature there is nothing to ask: the third condition.
#[cfg(not(feature = "cuda"))]
#[test]
fn probe_without_the_cuda_feature_reports_no_cuda_library() {
    let expected = DeviceReport {
        cuda_feature: false,
        driver: DriverInfo::default(),
        device_count: 0,
        devices: Vec::new(),
        diagnosis: Some(Diagnosis::NotBuiltWithCuda),
    };
    assert_eq!(probe(), expected);
    assert_eq!(
        Diagnosis::NotBuiltWithCuda.condition(),
        Condition::NoCudaLibrary
    );
}

/// On a machine with an NVIDIA GPU (run by `scripts/gpu-check.sh`).
#[cfg(feature = "cuda")]
#[test]
#[ignore = "needs an NVIDIA GPU and driver"]
fn probe_finds_a_usable_gpu() {
    let report = probe();
    assert_eq!(report.diagnosis, None, "CUDA should be usable: {report:#?}");
    assert!(report.driver.library_found && report.driver.version.is_some());
    assert_eq!(report.devices.len(), report.device_count);
    for device in &report.devices {
        let (Some(free), Some(total)) = (device.free_bytes, device.total_bytes) else {
            panic!("device {} has unknown memory: {device:?}", device.index);
        };
        assert!(0 < free && free <= total, "free {free} of total {total}");
        assert!(device.name.as_deref().is_some_and(|n| !n.is_empty()));
        assert!(device.compute_capability.is_some_and(|cc| cc.major >= 3));
    }
}
