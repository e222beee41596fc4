//! `memtrace doctor` and `memtrace demo` through the real CUDA code paths, on any machine: the
//! fake driver library (`fake-libcuda`) is put first in `LD_LIBRARY_PATH`, and its knobs play
//! a 4 GiB GPU, a driver too old, and a machine whose driver finds no GPU.
#![cfg(target_os = "linux")]

mod common;

use common::{memtrace_with_env, scratch, stderr, stdout};
use serde_json::Value;

/// Runs `memtrace` on the fake driver with the extra `env`.
fn on_fake(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let path = fake_libcuda::library_path_with_fake(
        std::env::var_os(fake_libcuda::LIBRARY_PATH_VARIABLE).as_deref(),
    );
    let path = path.to_str().expect("a UTF-8 library path");
    let mut all = vec![
        (fake_libcuda::LIBRARY_PATH_VARIABLE, path),
        ("BLOCKPOOL_FAKE_CUDA_MEMORY_MIB", "4096"),
    ];
    all.extend_from_slice(env);
    // Whatever the caller's shell says, the demo picks the device itself here.
    all.push(("BLOCKPOOL_BACKEND", ""));
    memtrace_with_env(args, &all)
}

#[test]
fn doctor_reports_the_fake_gpu_as_usable() {
    let output = on_fake(&["doctor"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The doctor reads the path from /proc/self/maps, where the loader writes it resolved:
    // compare canonical paths, so a target folder reached through a symlink reads the same.
    let library = std::path::Path::new(fake_libcuda::LIBRARY_DIR).join("libcuda.so");
    let library = library
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", library.display()));
    assert_eq!(
        stdout(&output),
        format!(
            "cuda feature:   built in\n\
             driver library: found, {}\n\
             driver version: CUDA 12.8\n\
             devices:        1\n\
             device 0:       blockpool fake GPU 0, compute capability 9.0, 4.00 GiB total, \
             4.00 GiB free, expandable segments\n\
             CUDA:           usable\n",
            library.display()
        )
    );
    let output = on_fake(&["doctor", "--json"], &[]);
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let path = report["driver"]["library_path"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        std::path::Path::new(path).canonicalize().ok(),
        Some(library.clone()),
        "the loaded library's file is reported: {report}"
    );
    assert_eq!(report["devices"][0]["total_bytes"], 4_u64 << 30);
    assert_eq!(report["devices"][0]["expandable_segments"], true);
    assert_eq!(report.get("diagnosis"), Some(&Value::Null), "{report}");
    // A driver without virtual memory management: said, and still usable.
    let output = on_fake(&["doctor"], &[("BLOCKPOOL_FAKE_CUDA_VMM", "0")]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("4.00 GiB free, no expandable segments (no virtual memory management)\n"),
        "{text}"
    );
    assert!(text.contains("CUDA:           usable\n"), "{text}");
    let output = on_fake(&["doctor", "--json"], &[("BLOCKPOOL_FAKE_CUDA_VMM", "0")]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        report["devices"][0]["expandable_segments"], false,
        "{report}"
    );
    assert_eq!(report.get("diagnosis"), Some(&Value::Null), "{report}");
}

#[test]
fn doctor_says_the_driver_is_too_old() {
    let output = on_fake(
        &["doctor"],
        &[("BLOCKPOOL_FAKE_CUDA_DRIVER_VERSION", "11000")],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "driver version: CUDA 11.0\n",
        "devices:        0\n",
        "CUDA:           unusable: NVIDIA driver missing or too old\n",
        "diagnosis:      the NVIDIA driver supports CUDA 11.0, older than the 11.4 blockpool \
         needs\n",
        "advice:         Update the NVIDIA driver",
    ] {
        assert!(text.contains(line), "`{line}` not in:\n{text}");
    }
}

#[test]
fn doctor_names_the_function_an_old_driver_lacks() {
    // The fake built without cuMemCreate: the driver library blockpool would call and crash on.
    let path = fake_libcuda::library_path_with(
        fake_libcuda::LIBRARY_WITHOUT_SYMBOL_DIR,
        std::env::var_os(fake_libcuda::LIBRARY_PATH_VARIABLE).as_deref(),
    );
    let path = path.to_str().expect("a UTF-8 library path");
    let output = memtrace_with_env(
        &["doctor"],
        &[
            (fake_libcuda::LIBRARY_PATH_VARIABLE, path),
            ("BLOCKPOOL_BACKEND", ""),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "CUDA:           unusable: NVIDIA driver missing or too old\n",
        "diagnosis:      the NVIDIA driver library has no `cuMemCreate`: the driver is too old\n",
        "advice:         Update the NVIDIA driver",
    ] {
        assert!(text.contains(line), "`{line}` not in:\n{text}");
    }
}

#[test]
fn doctor_says_the_driver_found_no_gpu() {
    for env in [
        ("BLOCKPOOL_FAKE_CUDA_INIT_ERROR", "100"), // cuInit: CUDA_ERROR_NO_DEVICE
        ("BLOCKPOOL_FAKE_CUDA_DEVICES", "0"),
    ] {
        let output = on_fake(&["doctor", "--json"], &[env]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert_eq!(report["driver"]["library_found"], true, "{env:?}");
        assert_eq!(report["device_count"], 0, "{env:?}");
        assert_eq!(
            report["diagnosis"]["condition"], "no_usable_gpu",
            "{env:?}: {report}"
        );
        assert_eq!(
            report["diagnosis"]["summary"], "the NVIDIA driver found no GPU",
            "{env:?}"
        );
    }
}

#[test]
fn demo_runs_on_the_gpu_with_a_model_that_fits() {
    let trace = scratch("fake-gpu-demo.jsonl.gz");
    let output = on_fake(&["demo", "--out", trace.to_str().unwrap()], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "a training-like workload on GPU 0 (blockpool fake GPU 0, 4.00 GiB) through CUDA, \
             hidden size 512: its peak of 2.89 GiB on a simulated device fits in 80% of the \
             4.00 GiB free\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "step 4: seq_len 2048  peak allocated  1.97 GiB  peak reserved  2.88 GiB  \
             device allocs 94\n"
        ),
        "{text}"
    );
    let info = memtrace_with_env(&["info", trace.to_str().unwrap(), "--json"], &[]);
    let report: Value = serde_json::from_slice(&info.stdout).expect("JSON");
    let device = &report["devices"][0];
    // 24 layers x (3 weights + 1 bias) + 6 steps x (24 x 3 forward + 1 bucket + 48 grads).
    assert_eq!(device["events_by_action"]["alloc"], 96 + 6 * (72 + 1 + 48));
    assert_eq!(device["events_by_action"]["segment_alloc"], 94);
    // The weights, moments and biases are live at the end: 72 x 512 KiB + 24 x 1 KiB.
    assert_eq!(device["allocated_bytes"], 72 * (512_u64 << 10) + 24 * 1024);
}

#[test]
fn demo_on_a_gpu_too_small_says_what_to_do() {
    let unused = scratch("demo-too-small.jsonl");
    let output = on_fake(
        &["demo", "--out", unused.to_str().unwrap()],
        &[("BLOCKPOOL_FAKE_CUDA_MEMORY_MIB", "256")],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    assert_eq!(
        stderr(&output),
        "memtrace: GPU 0 has 256.00 MiB free, too little for the demo's smallest model; free \
         some memory or run it on the simulated device with BLOCKPOOL_BACKEND=sim\n"
    );
}

#[test]
fn a_busy_gpu_is_diagnosed_and_the_demo_says_what_to_do() {
    let busy = [("BLOCKPOOL_FAKE_CUDA_RETAIN_ERROR", "46")]; // CUDA_ERROR_DEVICE_UNAVAILABLE
    let output = on_fake(&["doctor"], &busy);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    for line in [
        "device 0:       blockpool fake GPU 0, compute capability 9.0, 4.00 GiB total, \
         expandable segments, unusable: cuDevicePrimaryCtxRetain failed with \
         CUDA_ERROR_DEVICE_UNAVAILABLE (46)\n",
        "CUDA:           unusable: no usable NVIDIA GPU\n",
        "advice:         Run `nvidia-smi` to see whether the GPUs are used by another process",
    ] {
        assert!(text.contains(line), "`{line}` not in:\n{text}");
    }
    // The demo does not fall back to the simulated device on a machine with a GPU by itself.
    let unused = scratch("demo-busy-gpu.jsonl");
    let output = on_fake(&["demo", "--out", unused.to_str().unwrap()], &busy);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
    let message = stderr(&output);
    assert!(
        message.starts_with(
            "memtrace: CUDA looks usable, but GPU 0 could not be opened: driver error 46 \
             (CUDA_ERROR_DEVICE_UNAVAILABLE) on device 0"
        ),
        "{message}"
    );
    assert!(
        message.ends_with("(BLOCKPOOL_BACKEND=sim uses the simulated device instead)\n"),
        "{message}"
    );
}
