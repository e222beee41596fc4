//! Where the fixture files are, for the default suite and for the external one.
//!
//! The default suite (`cargo test --workspace --release`) reads only files in the project:
//! `allocator-tests/fixtures/pytorch-snapshots/` (third-party PyTorch snapshots whose license
//! allows copying them, each named with its source and license in `fixtures/README.md`),
//! `allocator-tests/fixtures/made/` (snapshots the project writes itself with `make.py`, one
//! per schema variant) and `allocator-tests/fixtures/rmm/`.
//!
//! Third-party files without a license stay outside the project. The tests over them form the
//! external suite: each is `#[ignore]`d with a reason that says how to run it, and its name
//! starts with `external_`, so
//!
//! ```text
//! BLOCKPOOL_FIXTURES=../shared/fixtures cargo test --workspace --release -- --ignored external_
//! ```
//!
//! runs them all from the workspace root, reading `$BLOCKPOOL_FIXTURES/pytorch-snapshots/` (a
//! relative path is taken from the workspace root). Without the variable they fail with a
//! message that says so; they are never skipped silently.

use std::path::{Path, PathBuf};

/// The environment variable naming the folder of the external fixtures (the one holding
/// `pytorch-snapshots/`).
pub const EXTERNAL_VAR: &str = "BLOCKPOOL_FIXTURES";

/// The prefix of the files the project makes itself (in `fixtures/made/`).
pub const MADE_PREFIX: &str = "made_";

/// The workspace root, the folder above `allocator-tests/`.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from(".."), Path::to_path_buf)
}

/// `allocator-tests/fixtures/`.
pub fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The project's third-party PyTorch snapshots: `allocator-tests/fixtures/pytorch-snapshots/`.
pub fn third_party_snapshots_dir() -> PathBuf {
    project_dir().join("pytorch-snapshots")
}

/// The project's own PyTorch snapshots: `allocator-tests/fixtures/made/`.
pub fn made_snapshots_dir() -> PathBuf {
    project_dir().join("made")
}

/// The external PyTorch snapshots, `$BLOCKPOOL_FIXTURES/pytorch-snapshots/`; a relative
/// `$BLOCKPOOL_FIXTURES` is taken from the workspace root (cargo runs each test binary in its
/// own package's folder). Panics, naming the variable and how to set it, when it is unset:
/// only external tests call this.
pub fn external_snapshots_dir() -> PathBuf {
    match std::env::var_os(EXTERNAL_VAR) {
        Some(dir) => workspace_root().join(dir).join("pytorch-snapshots"),
        None => panic!(
            "this test belongs to the external suite, which reads third-party files that the \
             project may not redistribute: set {EXTERNAL_VAR} to the folder that holds \
             pytorch-snapshots/ (in this workplace ../shared/fixtures), e.g. \
             `{EXTERNAL_VAR}=../shared/fixtures cargo test --workspace --release -- --ignored external_`"
        ),
    }
}

/// The path of the PyTorch snapshot `name`: a made file (`made_...`), a third-party file in
/// the project, or else one of the external suite's files.
pub fn pytorch_snapshot_path(name: &str) -> PathBuf {
    if name.starts_with(MADE_PREFIX) {
        return made_snapshots_dir().join(name);
    }
    let in_project = third_party_snapshots_dir().join(name);
    if in_project.exists() {
        return in_project;
    }
    external_snapshots_dir().join(name)
}

/// The bytes of the PyTorch snapshot `name` (see [`pytorch_snapshot_path`]); a missing file
/// fails the test with its path.
pub fn pytorch_snapshot_bytes(name: &str) -> Vec<u8> {
    let path = pytorch_snapshot_path(name);
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!(
            "cannot read the PyTorch snapshot fixture {}: {error}",
            path.display()
        )
    })
}

/// The snapshot files in `dir` (every file but `README.md` and the generator script), sorted.
pub fn snapshot_names_in(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("cannot list the fixtures in {}: {error}", dir.display()));
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".pickle") || name.ends_with(".pkl"))
        .collect();
    names.sort();
    names
}

/// Every PyTorch snapshot the default suite reads: the third-party ones in the project, then
/// the made ones, each sorted by name.
pub fn project_snapshot_names() -> Vec<String> {
    let mut names = snapshot_names_in(&third_party_snapshots_dir());
    names.extend(snapshot_names_in(&made_snapshots_dir()));
    names
}

/// Every PyTorch snapshot of the external suite, sorted by name.
pub fn external_snapshot_names() -> Vec<String> {
    snapshot_names_in(&external_snapshots_dir())
}

/// The path of the RMM log fixture `name`, in `allocator-tests/fixtures/rmm/`.
pub fn rmm_log_path(name: &str) -> PathBuf {
    project_dir().join("rmm").join(name)
}
