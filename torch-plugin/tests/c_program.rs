//! `tests/c/smoke.c`, compiled with `cc` against the header and linked to the built
//! libblockpool_torch.so, run as its own process: on the simulated device, on the fake driver
//! (the CUDA backend without a GPU), and with a driver that has no device (`cuda` and `auto`
//! fail every call with the reason; only `sim` gives the simulated device, and says so).
//!
//! A missing C compiler fails these tests (CI has one); `CC` picks another than `cc`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use blockpool::trace::pytorch::load_pytorch_snapshot_as_snapshot;
use serde_json::{json, Value};

const MIB: i64 = 1 << 20;

/// target/<profile>/deps: where the test binary runs from, and where cargo builds the
/// library for it. Not target/<profile>: cargo copies the library up there only when it is
/// built for itself (`cargo build`), so the copy there can be older than the tests.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Compiles smoke.c once for the whole binary; the path of the program.
fn smoke() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let lib_dir = library_dir();
        let library = lib_dir.join(format!(
            "{}blockpool_torch{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        assert!(
            library.is_file(),
            "{} is missing: cargo builds it with the tests (crate-type cdylib)",
            library.display()
        );
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = lib_dir.join("blockpool-torch-smoke");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let compiled = Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
            .arg(crate_dir.join("include"))
            .arg(crate_dir.join("tests/c/smoke.c"))
            .arg("-L")
            .arg(&lib_dir)
            .args(["-lblockpool_torch", "-o"])
            .arg(&out)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "could not run the C compiler `{cc}` ({e}): this test compiles \
                     tests/c/smoke.c and needs one (apt-get install gcc, or set CC)"
                )
            });
        assert!(
            compiled.status.success(),
            "{cc} failed to compile smoke.c:\n{}",
            String::from_utf8_lossy(&compiled.stderr)
        );
        out
    })
}

/// A folder for one run's snapshot, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// The snapshot the program dumps (its `{rank}` filled in with 0: RANK is unset).
    fn snapshot(&self) -> PathBuf {
        self.0.join("smoke-0.pickle")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the program with `vars` (and no other blockpool variable), the library found through
/// LD_LIBRARY_PATH after `extra_lib_dir`; its output and the folder of its snapshot.
fn run(name: &str, extra_lib_dir: Option<&str>, vars: &[(&str, &str)]) -> (Output, Scratch) {
    let program = smoke();
    let scratch =
        std::env::temp_dir().join(format!("blockpool-torch-c-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).expect("a scratch directory");
    let lib_dir = library_dir();
    let lib_path = match extra_lib_dir {
        Some(dir) => format!("{dir}:{}", lib_dir.display()),
        None => lib_dir.display().to_string(),
    };
    let mut command = Command::new(program);
    for (var, _) in std::env::vars() {
        if var.starts_with("BLOCKPOOL_") || var == "PYTORCH_CUDA_ALLOC_CONF" || var == "RANK" {
            command.env_remove(var);
        }
    }
    let output = command
        .arg(scratch.join("smoke-{rank}.pickle"))
        .env("LD_LIBRARY_PATH", lib_path)
        .envs(vars.iter().copied())
        .output()
        .expect("the compiled program runs");
    (output, Scratch(scratch))
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The part of a `prefix: ...` line after the prefix.
fn after<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starts with {prefix:?}: {lines:#?}"))
}

/// Checks what smoke.c printed on a 1 GiB device whose free memory the allocator alone
/// uses, and the snapshot it dumped.
fn check_smoke_run(output: &Output, snapshot: &Path) {
    let out = lines(&output.stdout);
    let err = lines(&output.stderr);
    assert!(
        output.status.success(),
        "smoke failed ({}):\n{out:#?}\n{err:#?}",
        output.status
    );
    assert_eq!(
        out.iter()
            .filter(|l| !l.starts_with("scope: ") && !l.starts_with("stats: "))
            .collect::<Vec<_>>(),
        [
            "devices: 1",
            "threads: 4 x 50 rounds of 4 allocations, none NULL",
            "second 600 MiB: NULL; out of memory: tried to allocate 600.00 MiB. Device 0 has a \
             total capacity of 1024.00 MiB of which 424.00 MiB is free. Of the allocated memory \
             600.00 MiB is allocated by blockpool, and 0 bytes is reserved by blockpool but \
             unallocated. If reserved but unallocated memory is large try setting \
             max_split_size_mb or expandable_segments:True in BLOCKPOOL_ALLOC_CONF to avoid \
             fragmentation.",
            "double free and NULL free: returned",
            "pop with no tag: -1, no annotation tag to pop: this thread has none pushed \
             (blockpool_annotate_push)",
            format!(
                "stats into 16 bytes: \"{{\"active.all.al\", length {}, same as whole: yes",
                after(&out, "stats: ").len()
            )
            .as_str(),
            "dump_snapshot: 0",
        ]
    );
    let scope: Value = serde_json::from_str(after(&out, "scope: ")).expect("scope JSON");
    let site = scope["leaks"]["sites"][0]["site"]
        .as_str()
        .unwrap_or_default();
    assert!(
        site.starts_with("kept @ torch-plugin/src/memory.rs:"),
        "{scope}"
    );
    assert_eq!(
        (
            &scope["name"],
            &scope["peak_bytes"],
            &scope["leaks"]["summary"]
        ),
        (
            &json!("smoke"),
            &json!([4096]),
            &json!("4096 bytes in 1 allocation at 1 site")
        )
    );

    let stats: BTreeMap<String, i64> =
        serde_json::from_str(after(&out, "stats: ")).expect("stats JSON of integers");
    assert_eq!(stats.len(), 122);
    let round: i64 = 512 + 4096 + 100_352 + MIB;
    let expected: [(&str, i64); 13] = [
        // 800 from the threads, the first 600 MiB and the kept 4096 bytes; all freed.
        ("allocation.all.allocated", 802),
        ("allocation.all.freed", 802),
        ("allocated_bytes.all.current", 0),
        (
            "allocated_bytes.all.allocated",
            200 * round + 600 * MIB + 4096,
        ),
        // One small segment per thread's stream, released to retry the second 600 MiB; the
        // first 600 MiB's segment and the kept block's new small one stay cached.
        ("num_device_alloc", 6),
        ("num_device_free", 4),
        ("segment.all.current", 2),
        ("reserved_bytes.all.current", 602 * MIB),
        ("num_alloc_retries", 1),
        ("num_ooms", 1),
        ("reserved_bytes.all.peak", 608 * MIB),
        ("segment.small_pool.allocated", 5),
        ("segment.large_pool.allocated", 1),
    ];
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(k, v)| stats.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: expected {v}, got {:?}", stats.get(*k)))
        .collect();
    assert!(wrong.is_empty(), "statistics:\n  {}", wrong.join("\n  "));

    let warnings: Vec<&String> = err
        .iter()
        .filter(|l| {
            l.starts_with("blockpool: WARN") && !l.contains("as BLOCKPOOL_BACKEND=sim asks")
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one warning, the double free: {err:#?}");
    assert!(
        warnings[0].starts_with("blockpool: WARN blockpool_free(0x")
            && warnings[0].contains("double free")
            && warnings[0].ends_with("; nothing changed"),
        "{}",
        warnings[0]
    );

    let bytes = std::fs::read(snapshot).unwrap_or_else(|e| panic!("{}: {e}", snapshot.display()));
    let snapshot = load_pytorch_snapshot_as_snapshot(&bytes).expect("PyTorch's pickle");
    let mut actions: BTreeMap<&str, usize> = BTreeMap::new();
    for event in &snapshot.events {
        *actions.entry(event.action.as_str()).or_default() += 1;
    }
    assert_eq!(
        actions,
        BTreeMap::from([
            ("alloc", 802),
            ("free_requested", 802),
            ("free_completed", 802),
            ("segment_alloc", 6),
            ("segment_free", 4),
            ("oom", 1),
            ("annotate", 2),
            ("snapshot", 1),
        ])
    );
}

#[test]
fn the_c_program_runs_on_the_simulated_device() {
    let (output, scratch) = run(
        "sim",
        None,
        &[
            ("BLOCKPOOL_BACKEND", "sim"),
            ("BLOCKPOOL_SIM_CAPACITY", "1G"),
        ],
    );
    check_smoke_run(&output, &scratch.snapshot());
}

#[test]
fn the_c_program_runs_on_the_cuda_backend_over_the_fake_driver() {
    let (output, scratch) = run(
        "cuda",
        Some(fake_libcuda::LIBRARY_DIR),
        &[
            ("BLOCKPOOL_BACKEND", "cuda"),
            ("BLOCKPOOL_FAKE_CUDA_MEMORY_MIB", "1024"),
        ],
    );
    check_smoke_run(&output, &scratch.snapshot());
}

#[test]
fn cuda_without_a_device_fails_every_call_with_the_reason() {
    let (output, _) = run(
        "cuda-none",
        Some(fake_libcuda::LIBRARY_DIR),
        &[
            ("BLOCKPOOL_BACKEND", "cuda"),
            ("BLOCKPOOL_FAKE_CUDA_INIT_ERROR", "100"),
        ],
    );
    let out = lines(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{out:#?}");
    assert_eq!(out.len(), 2, "{out:#?}");
    assert!(
        out[1].starts_with(
            "malloc: NULL: blockpool could not start: BLOCKPOOL_BACKEND=cuda, but CUDA is unusable"
        ),
        "{}",
        out[1]
    );
    assert!(
        out[0].starts_with("no allocator (-3): blockpool could not start: BLOCKPOOL_BACKEND=cuda, but CUDA is unusable"),
        "{}",
        out[0]
    );
    let err = lines(&output.stderr);
    assert!(
        err.iter()
            .any(|l| l.starts_with("blockpool: ERROR blockpool could not start")),
        "said once in the log: {err:#?}"
    );
}

/// `auto` (here: unset) and no usable driver: the plugin refuses, it never serves the
/// simulated device's addresses to a caller that will write to them.
#[test]
fn unset_backend_without_a_device_refuses_with_the_diagnosis_and_the_fix() {
    let (output, _) = run(
        "unset-none",
        Some(fake_libcuda::LIBRARY_DIR),
        &[("BLOCKPOOL_FAKE_CUDA_INIT_ERROR", "100")],
    );
    let out = lines(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{out:#?}");
    assert_eq!(out.len(), 2, "{out:#?}");
    let reason = "blockpool could not start: the PyTorch plugin needs CUDA, and CUDA is \
                  unusable: the NVIDIA driver found no GPU.";
    assert!(
        out[0].starts_with(&format!("no allocator (-3): {reason}")),
        "{}",
        out[0]
    );
    assert!(
        out[1].starts_with(&format!("malloc: NULL: {reason}")),
        "{}",
        out[1]
    );
    assert!(
        out[1].ends_with(
            "(BLOCKPOOL_BACKEND=sim serves simulated addresses with no memory behind them, \
             for tests that never touch the memory)"
        ),
        "the fix is named: {}",
        out[1]
    );
    let err = lines(&output.stderr);
    assert!(
        err.iter()
            .any(|l| l.starts_with(&format!("blockpool: ERROR {reason}"))),
        "said in the log: {err:#?}"
    );
    assert!(
        !err.iter().any(|l| l.contains("simulated device:")),
        "no simulated device is made: {err:#?}"
    );
}

/// `sim` is the one way to the simulated device, and it is said when the allocator is made.
#[test]
fn sim_is_said_at_load() {
    let (output, _) = run(
        "sim-said",
        None,
        &[
            ("BLOCKPOOL_BACKEND", "sim"),
            ("BLOCKPOOL_SIM_CAPACITY", "1G"),
        ],
    );
    let err = lines(&output.stderr);
    let said: Vec<&String> = err.iter().filter(|l| l.contains("sim asks")).collect();
    assert_eq!(
        said,
        [
            "blockpool: WARN using the simulated device: 1 device(s) of 1024.00 MiB, as \
             BLOCKPOOL_BACKEND=sim asks: its pointers are not device memory, for tests that \
             never touch it"
        ],
        "{err:#?}"
    );
}
