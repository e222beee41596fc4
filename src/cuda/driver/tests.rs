//! The symbol list against the source: [`REQUIRED_SYMBOLS`] names exactly the driver functions
//! `driver.rs` and `driver/vmm.rs` call, and no other file of the crate calls a function of
//! cudarc's `sys` or `result` layer.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::*;

/// The functions of cudarc's `sys` layer that `source` calls: `sys::` and a lower-case name,
/// then an opening parenthesis (the layer's types and constants are upper case).
fn sys_calls(source: &str) -> BTreeSet<&str> {
    source
        .match_indices("sys::")
        .filter_map(|(at, prefix)| {
            let rest = &source[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            let lower = name.starts_with(|c: char| c.is_ascii_lowercase());
            (lower && rest[end..].starts_with('(')).then_some(name)
        })
        .collect()
}

/// Whether `name` is a driver entry point (`cuInit`), not one of cudarc's loader functions
/// (`culib`, `is_culib_present`).
fn is_driver_function(name: &str) -> bool {
    name.len() > 2
        && name.starts_with("cu")
        && name[2..].starts_with(|c: char| c.is_ascii_uppercase())
}

/// Every `.rs` file under `dir`, depth first.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn required_symbols_are_exactly_the_driver_functions_called_here() {
    let source = [include_str!("../driver.rs"), include_str!("vmm.rs")].concat();
    let calls = sys_calls(&source);
    let called: BTreeSet<&str> = calls
        .iter()
        .copied()
        .filter(|n| is_driver_function(n))
        .collect();
    let listed: BTreeSet<&str> = REQUIRED_SYMBOLS.into_iter().collect();
    assert_eq!(
        listed.len(),
        REQUIRED_SYMBOLS.len(),
        "a symbol is listed twice in REQUIRED_SYMBOLS"
    );
    let unlisted: Vec<_> = called.difference(&listed).collect();
    let uncalled: Vec<_> = listed.difference(&called).collect();
    assert!(
        unlisted.is_empty() && uncalled.is_empty(),
        "the driver module calls {unlisted:?} without listing them in REQUIRED_SYMBOLS (a driver \
         lacking one would panic in cudarc), and lists {uncalled:?} without calling them"
    );
    let loader: BTreeSet<&str> = calls.difference(&called).copied().collect();
    assert_eq!(
        loader,
        BTreeSet::from(["culib", "is_culib_present"]),
        "the driver module calls only driver functions and cudarc's two loader functions"
    );
}

#[test]
fn the_calls_cudarc_makes_for_the_backends_contexts_are_required() {
    // `CudaContext::new` (init, device, retain, the memory-pool attribute, bind_to_thread),
    // and its drop (bind_to_thread, release), for each device the backend opens.
    let context_calls = [
        "cuInit",
        "cuDeviceGet",
        "cuDevicePrimaryCtxRetain",
        "cuDeviceGetAttribute",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuDevicePrimaryCtxRelease_v2",
    ];
    for symbol in context_calls {
        assert!(
            REQUIRED_SYMBOLS.contains(&symbol),
            "cudarc calls {symbol} for the backend, so a driver without it must be refused"
        );
    }
}

#[test]
fn no_other_file_calls_the_driver() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // The driver module, and this file, which quotes what it looks for.
    let driver = src.join("cuda").join("driver.rs");
    let driver_dir = src.join("cuda").join("driver");
    let mut scanned = 0;
    for path in files
        .iter()
        .filter(|path| **path != driver && !path.starts_with(&driver_dir))
    {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let calls = sys_calls(&text);
        assert!(
            calls.is_empty(),
            "{} calls {calls:?} of cudarc's sys layer: go through cuda/driver.rs",
            path.display()
        );
        assert!(
            !text.contains("driver::result"),
            "{} uses cudarc's result layer: go through cuda/driver.rs",
            path.display()
        );
        scanned += 1;
    }
    assert!(
        files.contains(&src.join("cuda").join("backend.rs")) && files.contains(&driver),
        "the walk missed the CUDA module: {files:?}"
    );
    assert!(
        scanned > 50,
        "only {scanned} files scanned under {}",
        src.display()
    );
}

#[test]
fn calls_are_found_in_source_text() {
    let text = "let a = unsafe { sys::cuMemMap(p, n, 0, h, 0) }; let t: sys::CUevent = x;\n\
                sys::CU_MEMHOSTALLOC_PORTABLE; sys::culib(); sys::cuInit;";
    assert_eq!(sys_calls(text), BTreeSet::from(["cuMemMap", "culib"]));
    assert!(is_driver_function("cuMemMap") && !is_driver_function("culib"));
}
