//! Faithfulness to PyTorch on its own traces, measured by `memtrace replay`: the trace
//! replayed through blockpool from the state rebuilt at its first event (segments adopted
//! where PyTorch had them), beside what PyTorch itself did, rebuilt from the file. The
//! harness runs the `memtrace` binary rather than repeating its replay engine here.

use anyhow::Context as _;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// One fixture replayed from its start under one configuration.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Faithfulness {
    /// The fixture's workload name.
    pub workload: String,
    /// The allocator key (`a`, `b1`, ...).
    pub allocator: String,
    /// The configuration memtrace replayed with, in config syntax (empty: the defaults).
    pub config: String,
    /// blockpool's segment allocations during the replay.
    pub segment_allocs: u64,
    /// PyTorch's `segment_alloc` events.
    pub recorded_segment_allocs: u64,
    /// blockpool's peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// PyTorch's peak reserved bytes.
    pub recorded_peak_reserved_bytes: u64,
    /// blockpool's over PyTorch's peak reserved.
    pub peak_reserved_ratio: Option<f64>,
    /// With `--exact`: the share of allocations at PyTorch's very address.
    pub exact_share: Option<f64>,
}

/// Runs `memtrace replay FILE --json` with `extra` arguments and returns its report.
pub fn replay(memtrace: &Path, file: &Path, extra: &[&str]) -> anyhow::Result<Value> {
    let output = Command::new(memtrace)
        .arg("replay")
        .arg(file)
        .arg("--json")
        .args(extra)
        .output()
        .with_context(|| format!("cannot run {}", memtrace.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        anyhow::bail!(
            "memtrace replay {} failed: {}",
            file.display(),
            stderr.lines().next().unwrap_or("no message")
        );
    }
    serde_json::from_slice(&output.stdout).context("memtrace replay printed no JSON")
}

/// Replays `file` from its start with `config` (`None`: the trace's own settings, else
/// PyTorch's defaults); with `exact`, also asks for exact placement.
pub fn measure(
    memtrace: &Path,
    file: &Path,
    workload: &str,
    allocator: &str,
    device: u32,
    config: Option<&str>,
    exact: bool,
) -> anyhow::Result<Faithfulness> {
    let device = device.to_string();
    let mut args = vec!["--device", device.as_str()];
    if let Some(config) = config {
        args.extend(["--config", config]);
    }
    let report = replay(memtrace, file, &args)?;
    let exact_share = if exact {
        args.push("--exact");
        let exact = replay(memtrace, file, &args)?;
        exact["blockpool"]["exact"]["share"].as_f64()
    } else {
        None
    };
    let number = |value: &Value| value.as_u64().unwrap_or(0);
    Ok(Faithfulness {
        workload: workload.to_string(),
        allocator: allocator.to_string(),
        config: report["config"].as_str().unwrap_or_default().to_string(),
        segment_allocs: number(&report["blockpool"]["device_allocs"]),
        recorded_segment_allocs: number(&report["recorded"]["segment_allocs"]),
        peak_reserved_bytes: number(&report["blockpool"]["peak_reserved_bytes"]),
        recorded_peak_reserved_bytes: number(&report["recorded"]["peak_reserved_bytes"]),
        peak_reserved_ratio: report["peak_reserved_ratio"].as_f64(),
        exact_share,
    })
}
