//! Where the shared third-party fixtures live: `../shared/fixtures/` beside the workspace root.
//! Tests read them from there (never copies); a missing file fails the test with its path.

use std::path::PathBuf;

/// The folder of the real PyTorch snapshot files.
pub fn pytorch_snapshots_dir() -> PathBuf {
    [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "shared",
        "fixtures",
        "pytorch-snapshots",
    ]
    .iter()
    .collect()
}

/// The bytes of the PyTorch snapshot fixture `name`.
pub fn pytorch_snapshot_bytes(name: &str) -> Vec<u8> {
    let path = pytorch_snapshots_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!(
            "cannot read the PyTorch snapshot fixture {}: {error}; the fixtures live in \
             ../shared/fixtures/pytorch-snapshots/ beside the workspace root",
            path.display()
        )
    })
}
