//! `memtrace doctor` as a user runs it: exit 0 whether or not CUDA is usable, the JSON report
//! equal to what `blockpool::cuda::probe` says in this process, and on a machine without a
//! driver (CI) the exact text.

mod common;

use blockpool::cuda::{probe, Diagnosis};
use common::memtrace;
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn doctor_json_is_the_probe_report_and_exits_0() {
    let output = memtrace(&["doctor", "--json"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "", "nothing on stderr");
    let mut printed: Value =
        serde_json::from_slice(&output.stdout).expect("doctor --json prints JSON");
    let mut expected = serde_json::to_value(probe()).expect("the report serializes");
    // On a GPU machine free memory may move between the two probes; the rest may not.
    for report in [&mut printed, &mut expected] {
        for device in report["devices"].as_array_mut().into_iter().flatten() {
            device["free_bytes"] = Value::Null;
        }
    }
    assert_eq!(printed, expected);
}

#[test]
fn doctor_without_a_driver_says_so_line_by_line_and_exits_0() {
    let report = probe();
    if report.diagnosis != Some(Diagnosis::DriverLibraryMissing) {
        // A machine with a driver: the verdict line must still be there, and the exit 0.
        let output = memtrace(&["doctor"]);
        assert_eq!(output.status.code(), Some(0));
        assert!(text(&output.stdout).contains("\nCUDA:           "));
        return;
    }
    let output = memtrace(&["doctor"]);
    assert_eq!(output.status.code(), Some(0), "a report, not a failure");
    assert_eq!(text(&output.stderr), "");
    let expected = format!(
        "cuda feature:   built in\n\
         driver library: not found; searched {}\n\
         driver version: unknown\n\
         devices:        0\n\
         CUDA:           unusable: NVIDIA driver missing or too old\n\
         diagnosis:      the NVIDIA driver library (libcuda) could not be loaded\n\
         advice:         Install the NVIDIA driver (then `nvidia-smi` lists your GPUs). If it \
         is installed, add the directory holding libcuda.so.1 to LD_LIBRARY_PATH; in a \
         container, start it with the GPUs exposed (`docker run --gpus all`, NVIDIA Container \
         Toolkit). Without a GPU, set BLOCKPOOL_BACKEND=sim to use the simulated device.\n",
        report.driver.searched_names.join(", ")
    );
    assert_eq!(text(&output.stdout), expected);
    assert!(
        report
            .driver
            .searched_names
            .iter()
            .any(|n| n == "libcuda.so.1"),
        "the driver's usual name is searched: {:?}",
        report.driver.searched_names
    );
}

#[test]
fn doctor_json_without_a_driver_has_the_diagnosis_fields() {
    if probe().diagnosis != Some(Diagnosis::DriverLibraryMissing) {
        return;
    }
    let output = memtrace(&["doctor", "--json"]);
    let printed: Value = serde_json::from_slice(&output.stdout).expect("doctor --json prints JSON");
    assert_eq!(printed["cuda_feature"], true);
    assert_eq!(printed["driver"]["library_found"], false);
    assert_eq!(printed["driver"]["library_path"], Value::Null);
    assert_eq!(printed["driver"]["version"], Value::Null);
    assert_eq!(printed["device_count"], 0);
    assert_eq!(printed["devices"], serde_json::json!([]));
    let diagnosis = &printed["diagnosis"];
    assert_eq!(diagnosis["condition"], "driver_missing_or_too_old");
    assert_eq!(diagnosis["cause"], "driver_library_missing");
    assert_eq!(
        diagnosis["summary"],
        "the NVIDIA driver library (libcuda) could not be loaded"
    );
    assert_eq!(
        diagnosis["advice"],
        Diagnosis::DriverLibraryMissing.advice()
    );
}

#[test]
fn doctor_rejects_a_stray_argument_with_one_line_and_exit_2() {
    let output = memtrace(&["doctor", "extra"]);
    assert_eq!(output.status.code(), Some(2));
    let err = text(&output.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("memtrace: "), "{err:?}");
    assert!(err.contains("'extra'"), "{err:?}");
}

#[test]
fn doctor_help_says_it_exits_0_either_way() {
    let output = memtrace(&["doctor", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        text(&output.stdout).contains("Exits 0 either way"),
        "{}",
        text(&output.stdout)
    );
}
