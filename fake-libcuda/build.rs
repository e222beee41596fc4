//! Compiles `src/driver.rs` (and the modules it names) into a shared library named like NVIDIA's
//! driver (`libcuda.so`) in a folder of its own under `OUT_DIR`, and tells the library crate
//! where it is. A second copy, built without `cuMemCreate` (as a driver older than virtual
//! memory management would be), goes into another folder.
//!
//! Each folder holds nothing else and is on no search path: only a process started with it in
//! `LD_LIBRARY_PATH` loads the fake instead of (or without) a real driver.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `--cfg` that leaves `cuMemCreate` out of the second library (`src/vmm.rs`).
const WITHOUT_MEM_CREATE: &str = "fake_cuda_without_mem_create";

fn main() {
    // The driver's files (`lib.rs` too: not part of the driver, but harmless).
    println!("cargo:rerun-if-changed=src");
    // Clippy sees `src/driver.rs` through `lib.rs`, where the cfg is never set.
    println!("cargo:rustc-check-cfg=cfg({WITHOUT_MEM_CREATE})");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let dir = out_dir.join("driver");
    build(&dir, None);
    println!("cargo:rustc-env=FAKE_LIBCUDA_DIR={}", dir.display());
    let old = out_dir.join("driver-without-cuMemCreate");
    build(&old, Some(WITHOUT_MEM_CREATE));
    println!(
        "cargo:rustc-env=FAKE_LIBCUDA_WITHOUT_MEM_CREATE_DIR={}",
        old.display()
    );
}

/// Builds the driver into `dir`, with `cfg` set if given.
fn build(dir: &Path, cfg: Option<&str>) {
    std::fs::create_dir_all(dir).expect("create the fake driver's folder in OUT_DIR");
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    // The file name cudarc tries first: `{DLL_PREFIX}cuda{DLL_SUFFIX}`.
    let file = match target_os.as_str() {
        "windows" => "cuda.dll",
        "macos" => "libcuda.dylib",
        _ => "libcuda.so",
    };
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = env::var("TARGET").expect("cargo sets TARGET");
    let mut command = Command::new(rustc);
    command
        .args([
            "--crate-name",
            "cuda",
            "--crate-type",
            "cdylib",
            "--edition",
            "2021",
        ])
        .args(["--target", &target, "-C", "opt-level=2", "-D", "warnings"])
        .args(["-W", "missing_docs", "-D", "unsafe_op_in_unsafe_fn"]);
    if let Some(cfg) = cfg {
        command.args(["--cfg", cfg]);
    }
    let status = command
        .arg("-o")
        .arg(dir.join(file))
        .arg("src/driver.rs")
        .status()
        .expect("run rustc to build the fake driver library");
    assert!(
        status.success(),
        "rustc failed to build src/driver.rs into {} ({status})",
        dir.display()
    );
}
