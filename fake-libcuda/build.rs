//! Compiles `src/driver.rs` (and the modules it names) into a shared library named like NVIDIA's driver (`libcuda.so`) in
//! a folder of its own under `OUT_DIR`, and tells the library crate where it is.
//!
//! The folder holds nothing else and is on no search path: only a process started with it in
//! `LD_LIBRARY_PATH` loads the fake instead of (or without) a real driver.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    // The driver's files (`lib.rs` too: not part of the driver, but harmless).
    println!("cargo:rerun-if-changed=src");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out_dir.join("driver");
    std::fs::create_dir_all(&dir).expect("create the fake driver's folder in OUT_DIR");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    // The file name cudarc tries first: `{DLL_PREFIX}cuda{DLL_SUFFIX}`.
    let file = match target_os.as_str() {
        "windows" => "cuda.dll",
        "macos" => "libcuda.dylib",
        _ => "libcuda.so",
    };
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let status = Command::new(rustc)
        .args([
            "--crate-name",
            "cuda",
            "--crate-type",
            "cdylib",
            "--edition",
            "2021",
        ])
        .args(["--target", &target, "-C", "opt-level=2", "-D", "warnings"])
        .args(["-W", "missing_docs", "-D", "unsafe_op_in_unsafe_fn"])
        .arg("-o")
        .arg(dir.join(file))
        .arg("src/driver.rs")
        .status()
        .expect("run rustc to build the fake driver library");
    assert!(
        status.success(),
        "rustc failed to build src/driver.rs ({status})"
    );
    println!("cargo:rustc-env=FAKE_LIBCUDA_DIR={}", dir.display());
}
