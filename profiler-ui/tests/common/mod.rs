//! What every `memtrace` test file needs: running the binary, the PyTorch fixtures and a
//! scratch folder. Each test file uses what it needs of it.
#![allow(dead_code)]

pub mod server;
pub mod sites;

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `memtrace` with `args` and collects its output.
pub fn memtrace(args: &[&str]) -> Output {
    memtrace_with_env(args, &[])
}

/// Runs `memtrace` with `args` and the environment variables `env` set, and collects its
/// output.
pub fn memtrace_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("memtrace runs")
}

// Not every test file lists the fixtures.
#[allow(unused_imports)]
pub use allocator_tests::fixtures::{external_snapshot_names, project_snapshot_names};

/// The path of the PyTorch snapshot fixture `name` (`allocator_tests::fixtures` says where
/// each kind lives); a missing one fails the test with its path.
pub fn fixture(name: &str) -> String {
    let path = allocator_tests::fixtures::pytorch_snapshot_path(name);
    assert!(path.exists(), "missing fixture {}", path.display());
    path.to_string_lossy().into_owned()
}

/// A path named `name` in this test process's own scratch folder.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memtrace-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

/// What the command printed on stdout.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What the command printed on stderr.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `memtrace ARGS` and asserts it succeeded; returns stdout.
pub fn run_ok(args: &[&str]) -> String {
    let output = memtrace(args);
    assert!(
        output.status.success(),
        "memtrace {args:?}: {:?} {}",
        output.status,
        stderr(&output)
    );
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    stdout(&output)
}

/// Runs `memtrace ARGS --json` and parses it.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&run_ok(&all)).expect("--json prints JSON")
}

/// Asserts `memtrace` failed with exit status 2 and one line on stderr, starting `memtrace: `,
/// that mentions `mentions`.
pub fn assert_bad_input(output: &Output, mentions: &str) {
    assert_eq!(output.status.code(), Some(2), "stderr: {}", stderr(output));
    let err = stderr(output);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("memtrace: "), "{err:?}");
    assert!(
        err.contains(mentions),
        "{err:?} should mention {mentions:?}"
    );
    assert!(!err.contains("panicked"), "{err:?}");
}
