//! `memtrace doctor [--json]`: whether CUDA is usable in this process — the driver library,
//! its version, every device's name, compute capability and memory — and if not, which
//! condition failed and what to do. The facts come from `blockpool::cuda::probe`.
//!
//! It exits 0 whether or not CUDA is usable: the report is the answer, and "unusable, because
//! ..." is as much an answer as "usable".

use crate::format::format_size;
use crate::output::Output;
use blockpool::cuda::{probe, DeviceReport, ProbedDevice};
use std::fmt::Write as _;

/// Probes CUDA and prints the report: text, one fact a line, or JSON with `json`.
pub fn run(json: bool, out: &mut Output) -> anyhow::Result<()> {
    let report = probe();
    if json {
        return out.json(&report);
    }
    out.write(&render(&report))?;
    out.flush()?;
    Ok(())
}

/// The report as text: one fact a line, then the verdict, the diagnosis and the advice.
pub fn render(report: &DeviceReport) -> String {
    let mut text = String::new();
    let feature = if report.cuda_feature {
        "built in"
    } else {
        "not built in"
    };
    let _ = writeln!(text, "cuda feature:   {feature}");
    let driver = &report.driver;
    let library = match (&driver.library_path, driver.library_found) {
        (Some(path), true) => format!("found, {path}"),
        (None, true) => "found".to_owned(),
        (_, false) if driver.searched_names.is_empty() => "not searched".to_owned(),
        (_, false) => format!("not found; searched {}", driver.searched_names.join(", ")),
    };
    let _ = writeln!(text, "driver library: {library}");
    let version = driver
        .version
        .map_or_else(|| "unknown".to_owned(), |v| format!("CUDA {v}"));
    let _ = writeln!(text, "driver version: {version}");
    let _ = writeln!(text, "devices:        {}", report.device_count);
    for device in &report.devices {
        let label = format!("device {}:", device.index);
        let _ = writeln!(text, "{label:<15} {}", describe(device));
    }
    match &report.diagnosis {
        None => {
            let _ = writeln!(text, "CUDA:           usable");
        }
        Some(diagnosis) => {
            let _ = writeln!(text, "CUDA:           unusable: {}", diagnosis.condition());
            let _ = writeln!(text, "diagnosis:      {diagnosis}");
            let _ = writeln!(text, "advice:         {}", diagnosis.advice());
        }
    }
    text
}

/// One device on one line: name, compute capability, total and free memory, whether it can
/// back expandable segments, or what failed.
fn describe(device: &ProbedDevice) -> String {
    let mut facts = vec![device.name.clone().unwrap_or_else(|| "unknown".to_owned())];
    if let Some(cc) = device.compute_capability {
        facts.push(format!("compute capability {cc}"));
    }
    if let Some(total) = device.total_bytes {
        facts.push(format!("{} total", format_size(total as u64)));
    }
    if let Some(free) = device.free_bytes {
        facts.push(format!("{} free", format_size(free as u64)));
    }
    match device.expandable_segments {
        Some(true) => facts.push("expandable segments".to_owned()),
        Some(false) => {
            facts.push("no expandable segments (no virtual memory management)".to_owned())
        }
        None => {}
    }
    if let Some(error) = &device.error {
        facts.push(format!("unusable: {error}"));
    }
    facts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockpool::cuda::{
        ComputeCapability, Diagnosis, DriverCallError, DriverInfo, DriverVersion,
    };

    fn device(index: usize, free_bytes: Option<usize>) -> ProbedDevice {
        ProbedDevice {
            index,
            name: Some("NVIDIA H100 80GB HBM3".to_owned()),
            compute_capability: Some(ComputeCapability { major: 9, minor: 0 }),
            total_bytes: Some(80 << 30),
            expandable_segments: Some(true),
            free_bytes,
            error: free_bytes.is_none().then(|| {
                DriverCallError::new(
                    "cuDevicePrimaryCtxRetain",
                    46,
                    "CUDA_ERROR_DEVICE_UNAVAILABLE",
                )
            }),
        }
    }

    #[test]
    fn usable_report_lists_each_device_on_a_line() {
        let report = DeviceReport {
            cuda_feature: true,
            driver: DriverInfo {
                library_found: true,
                library_path: Some("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15".to_owned()),
                searched_names: vec!["libcuda.so".to_owned()],
                version: Some(DriverVersion {
                    major: 12,
                    minor: 4,
                }),
            },
            device_count: 2,
            devices: vec![
                device(0, Some(79 << 30)),
                ProbedDevice {
                    expandable_segments: Some(false),
                    ..device(1, None)
                },
            ],
            diagnosis: None,
        };
        assert_eq!(
            render(&report),
            "cuda feature:   built in\n\
             driver library: found, /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n\
             driver version: CUDA 12.4\n\
             devices:        2\n\
             device 0:       NVIDIA H100 80GB HBM3, compute capability 9.0, 80.00 GiB total, \
             79.00 GiB free, expandable segments\n\
             device 1:       NVIDIA H100 80GB HBM3, compute capability 9.0, 80.00 GiB total, \
             no expandable segments (no virtual memory management), unusable: \
             cuDevicePrimaryCtxRetain failed with CUDA_ERROR_DEVICE_UNAVAILABLE (46)\n\
             CUDA:           usable\n"
        );
    }

    #[test]
    fn build_without_cuda_says_so_and_what_to_do() {
        let report = DeviceReport {
            cuda_feature: false,
            driver: DriverInfo::default(),
            device_count: 0,
            devices: Vec::new(),
            diagnosis: Some(Diagnosis::NotBuiltWithCuda),
        };
        assert_eq!(
            render(&report),
            format!(
                "cuda feature:   not built in\n\
                 driver library: not searched\n\
                 driver version: unknown\n\
                 devices:        0\n\
                 CUDA:           unusable: no CUDA support in this program\n\
                 diagnosis:      blockpool was built without its `cuda` feature\n\
                 advice:         {}\n",
                Diagnosis::NotBuiltWithCuda.advice()
            )
        );
    }
}
