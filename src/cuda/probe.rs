//! [`probe`]: what CUDA looks like from this process, and if it is unusable, why and what to do.
//!
//! The probe never panics, with or without a driver: it checks that the driver library loads
//! and has every entry point blockpool calls (the list `CudaBackend::new` checks too) before
//! calling any of them (cudarc would panic otherwise), and every failure becomes part of the
//! report. Its logic (`survey`) runs over a small driver interface, so each diagnosis is tested
//! with a scripted driver on machines without a GPU.
//!
//! | file | what lives there |
//! |---|---|
//! | `report.rs` | [`DeviceReport`] and the facts in it |
//! | `diagnosis.rs` | [`Diagnosis`], its [`Condition`] and advice |
//! | `survey.rs` | the order of questions and how answers become a diagnosis |
//! | `libcuda.rs` | the answers from libcuda, through `cuda/driver.rs` (feature `cuda`) |

mod diagnosis;
#[cfg(feature = "cuda")]
mod libcuda;
mod report;
#[cfg(any(feature = "cuda", test))]
mod survey;
#[cfg(test)]
mod tests;

pub use diagnosis::{Condition, Diagnosis};
pub use report::{
    ComputeCapability, DeviceReport, DriverCallError, DriverInfo, DriverVersion, ProbedDevice,
};

/// Looks at the CUDA driver and every device, and says whether CUDA is usable here.
///
/// Gathers whether the driver library loads (and from where), the driver's CUDA version, the
/// device count, and per device its name, compute capability, total memory and free memory
/// (read in the device's primary context, retained for the call and released after). When CUDA
/// is unusable, [`DeviceReport::diagnosis`] says which condition failed and what to do: no
/// driver library, a driver older than the CUDA backend needs (11.4), no device, or no device
/// that would give this process a context. Never panics; takes as long as starting the driver
/// on every device (up to seconds the first time in a process).
///
/// Without the `cuda` feature it reports [`Diagnosis::NotBuiltWithCuda`].
///
/// ```
/// let report = blockpool::cuda::probe();
/// match &report.diagnosis {
///     None => println!("{} CUDA device(s)", report.device_count),
///     Some(why) => println!("CUDA unusable: {why}. {}", why.advice()),
/// }
/// ```
pub fn probe() -> DeviceReport {
    #[cfg(feature = "cuda")]
    {
        survey::survey(&libcuda::LibCuda::new(), REQUIRED_DRIVER_VERSION)
    }
    #[cfg(not(feature = "cuda"))]
    {
        not_built_with_cuda()
    }
}

/// Like [`probe`], without looking at the devices one by one (no context is made): whether the
/// driver loads, is recent enough, starts and reports devices. `devices` is empty.
pub(crate) fn probe_driver() -> DeviceReport {
    #[cfg(feature = "cuda")]
    {
        survey::survey_driver(&libcuda::LibCuda::new(), REQUIRED_DRIVER_VERSION)
    }
    #[cfg(not(feature = "cuda"))]
    {
        not_built_with_cuda()
    }
}

/// The oldest driver the CUDA backend accepts.
#[cfg(feature = "cuda")]
const REQUIRED_DRIVER_VERSION: DriverVersion = DriverVersion {
    major: (super::MIN_DRIVER_VERSION / 1000) as u32,
    minor: (super::MIN_DRIVER_VERSION % 1000 / 10) as u32,
};

/// The report of a build without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
fn not_built_with_cuda() -> DeviceReport {
    DeviceReport {
        cuda_feature: false,
        driver: DriverInfo::default(),
        device_count: 0,
        devices: Vec::new(),
        diagnosis: Some(Diagnosis::NotBuiltWithCuda),
    }
}
