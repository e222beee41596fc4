//! The results: one row per workload and allocator, the faithfulness rows from `memtrace`,
//! the thread scaling, and each target of issue 6 judged from them; printed as tables on
//! stdout and written as the same data in JSON.

use crate::faithful::Faithfulness;
use crate::threads::Scaling;
use blockpool::error::format_size;
use serde::Serialize;
use std::fmt::Write as _;

/// Share of allocations (a) may send to the device for its workload to count as cache-hit
/// heavy.
pub const CACHE_HIT_DEVICE_SHARE: f64 = 0.05;

/// One workload through one allocator.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Workload name.
    pub workload: String,
    /// Workload family.
    pub family: &'static str,
    /// Allocator key.
    pub allocator: String,
    /// Operations per run.
    pub ops: u64,
    /// Allocations per run.
    pub allocations: u64,
    /// Median nanoseconds per operation.
    pub ns_per_op: f64,
    /// Runs timed.
    pub runs: usize,
    /// ns/op over (c)'s ns/op on the same workload.
    pub over_c: Option<f64>,
    /// ns/op over (e)'s ns/op on the same workload.
    pub over_e: Option<f64>,
    /// Highest bytes held from the device.
    pub peak_reserved_bytes: Option<u64>,
    /// Highest requested bytes live at once (the same for every allocator).
    pub peak_live_bytes: u64,
    /// Peak reserved over peak live.
    pub reserved_over_live: Option<f64>,
    /// Device allocations.
    pub device_allocs: Option<u64>,
    /// Allocations refused for lack of memory.
    pub failed_allocations: u64,
    /// For fixtures: what PyTorch reserved at its peak, rebuilt from the file.
    pub pytorch_peak_reserved_bytes: Option<u64>,
    /// For fixtures: PyTorch's peak reserved over the same peak live.
    pub pytorch_reserved_over_live: Option<f64>,
}

/// An allocator in the legend.
#[derive(Clone, Debug, Serialize)]
pub struct Legend {
    /// Its key.
    pub key: String,
    /// What it is.
    pub description: String,
}

/// A target of the issue and whether this run met it.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// The target.
    pub name: String,
    /// Met, not met, or `None` when this run could not judge it.
    pub met: Option<bool>,
    /// The figures behind the verdict.
    pub detail: String,
}

/// Everything one run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The machine, as far as the harness can tell.
    pub machine: String,
    /// `quick` or `full`.
    pub mode: &'static str,
    /// The seed of the synthetic workloads.
    pub seed: u64,
    /// The allocators.
    pub allocators: Vec<Legend>,
    /// Workload x allocator.
    pub rows: Vec<Row>,
    /// Fixtures replayed from their start by `memtrace` (empty without `--memtrace`).
    pub faithfulness: Vec<Faithfulness>,
    /// Two threads against one.
    pub scaling: Vec<Scaling>,
    /// The targets, judged.
    pub targets: Vec<Target>,
}

/// Fills in each row's ratios to (c) and (e) on its workload.
pub fn add_ratios(rows: &mut [Row]) {
    let time_of = |rows: &[Row], workload: &str, key: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.allocator == key)
            .map(|r| r.ns_per_op)
            .filter(|&ns| ns > 0.0)
    };
    let ratios: Vec<(Option<f64>, Option<f64>)> = rows
        .iter()
        .map(|r| {
            let c = time_of(rows, &r.workload, "c");
            let e = time_of(rows, &r.workload, "e");
            (c.map(|c| r.ns_per_op / c), e.map(|e| r.ns_per_op / e))
        })
        .collect();
    for (row, (over_c, over_e)) in rows.iter_mut().zip(ratios) {
        row.over_c = over_c;
        row.over_e = over_e;
    }
}

/// Judges the targets of issue 6 from the measurements.
pub fn judge(rows: &[Row], faithfulness: &[Faithfulness], scaling: &[Scaling]) -> Vec<Target> {
    let mut targets = Vec::new();
    // Speed, on the workloads where (a) serves >= 95% of allocations from its cache.
    for a in rows.iter().filter(|r| r.allocator == "a") {
        let device_share = a.device_allocs.unwrap_or(u64::MAX) as f64 / a.allocations.max(1) as f64;
        if device_share > CACHE_HIT_DEVICE_SHARE {
            continue;
        }
        let (Some(over_c), Some(over_e)) = (a.over_c, a.over_e) else {
            continue;
        };
        targets.push(Target {
            name: format!("speed: {}", a.workload),
            met: Some(over_c <= 0.1 && over_e <= 3.0),
            detail: format!(
                "(a) {:.0} ns/op: {:.1}x faster than (c) (needs 10x), {:.2}x (e)'s time (needs <= 3x); {:.1}% of allocations went to the device",
                a.ns_per_op,
                1.0 / over_c,
                over_e,
                device_share * 100.0
            ),
        });
    }
    for f in faithfulness.iter().filter(|f| f.allocator == "a") {
        let within = f
            .peak_reserved_ratio
            .is_some_and(|r| (r - 1.0).abs() <= 0.02);
        let same_count = f.segment_allocs == f.recorded_segment_allocs;
        let exact_ok = f.exact_share.map(|s| s >= 0.99);
        targets.push(Target {
            name: format!("faithfulness: {}", f.workload),
            met: Some(within && same_count && exact_ok.unwrap_or(false)),
            detail: format!(
                "segment allocations {} vs PyTorch's {}; peak reserved {} vs {} ({}); exact addresses {}",
                f.segment_allocs,
                f.recorded_segment_allocs,
                format_size(f.peak_reserved_bytes),
                format_size(f.recorded_peak_reserved_bytes),
                f.peak_reserved_ratio.map_or("n/a".into(), |r| format!("{r:.4}x")),
                f.exact_share.map_or("not measured".into(), |s| format!("{:.2}%", s * 100.0)),
            ),
        });
    }
    let efficiency_workloads = rows
        .iter()
        .filter(|r| r.allocator == "a" && matches!(r.family, "fixture" | "transformer"));
    for a in efficiency_workloads {
        let best = rows
            .iter()
            .filter(|r| {
                r.workload == a.workload && (r.allocator == "a" || r.allocator.starts_with('b'))
            })
            .filter_map(|r| Some((r.reserved_over_live?, r.allocator.as_str())))
            .min_by(|x, y| x.0.total_cmp(&y.0));
        let Some((ratio, key)) = best else { continue };
        let pytorch = a
            .pytorch_reserved_over_live
            .map_or(String::new(), |p| format!("; PyTorch's own {p:.3}x"));
        targets.push(Target {
            name: format!("efficiency: {} (fresh)", a.workload),
            met: Some(ratio <= 1.03),
            detail: format!("best policy ({key}) peak reserved / peak live {ratio:.3}x (needs <= 1.03x){pytorch}"),
        });
    }
    for s in scaling {
        targets.push(Target {
            name: format!("threads: ({})", s.allocator),
            met: None,
            detail: format!(
                "two threads over one: {:.2}x on separate devices, {:.2}x on one device (2.00x is perfect; reported, no threshold)",
                s.separate_devices, s.same_device
            ),
        });
    }
    targets
}

/// The report as text tables.
pub fn render(report: &Report) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "machine: {}; mode: {}; seed {}\n",
        report.machine, report.mode, report.seed
    );
    for legend in &report.allocators {
        let _ = writeln!(text, "  ({}) {}", legend.key, legend.description);
    }
    let _ = writeln!(
        text,
        "\n{:<46} {:>3} {:>10} {:>8} {:>8} {:>11} {:>7} {:>9} {:>6}",
        "workload", "", "ns/op", "/ (c)", "/ (e)", "peak resv", "/live", "dev alloc", "fail"
    );
    let mut last = "";
    for row in &report.rows {
        if row.workload != last {
            let pytorch = match (
                row.pytorch_peak_reserved_bytes,
                row.pytorch_reserved_over_live,
            ) {
                (Some(bytes), Some(ratio)) => {
                    format!(
                        "  [PyTorch reserved {} = {ratio:.3}x live]",
                        format_size(bytes)
                    )
                }
                _ => String::new(),
            };
            let _ = writeln!(
                text,
                "{} ({} ops, {} allocations, peak live {}){pytorch}",
                row.workload,
                row.ops,
                row.allocations,
                format_size(row.peak_live_bytes)
            );
            last = &row.workload;
        }
        let ratio = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.3}"));
        let line = format!(
            "{:<46} {:>3} {:>10.1} {:>8} {:>8} {:>11} {:>7} {:>9} {:>6}",
            "",
            row.allocator,
            row.ns_per_op,
            ratio(row.over_c),
            ratio(row.over_e),
            row.peak_reserved_bytes.map_or("-".to_string(), format_size),
            ratio(row.reserved_over_live),
            row.device_allocs.map_or("-".to_string(), |n| n.to_string()),
            row.failed_allocations,
        );
        let _ = writeln!(text, "{}", line.trim_end());
    }
    if !report.faithfulness.is_empty() {
        let _ = writeln!(
            text,
            "\nFixtures replayed from their rebuilt start (memtrace replay):"
        );
        let _ = writeln!(
            text,
            "{:<46} {:>3} {:>15} {:>23} {:>8} {:>8}",
            "fixture", "", "segment allocs", "peak reserved", "ratio", "exact"
        );
        for f in &report.faithfulness {
            let line = format!(
                "{:<46} {:>3} {:>15} {:>23} {:>8} {:>8}",
                f.workload,
                f.allocator,
                format!("{} / {}", f.segment_allocs, f.recorded_segment_allocs),
                format!(
                    "{} / {}",
                    format_size(f.peak_reserved_bytes),
                    format_size(f.recorded_peak_reserved_bytes)
                ),
                f.peak_reserved_ratio
                    .map_or("-".into(), |r| format!("{r:.4}")),
                f.exact_share
                    .map_or("-".into(), |s| format!("{:.2}%", s * 100.0)),
            );
            let _ = writeln!(text, "{}", line.trim_end());
        }
        let _ = writeln!(
            text,
            "(blockpool / PyTorch; exact: allocations at PyTorch's address)"
        );
    }
    if !report.scaling.is_empty() {
        let _ = writeln!(
            text,
            "\nTwo threads over one (throughput ratio; 2.00 is perfect):"
        );
        let _ = writeln!(
            text,
            "{:<4} {:<30} {:>12} {:>17} {:>12}",
            "", "workload per thread", "1 thread ns/op", "separate devices", "same device"
        );
        for s in &report.scaling {
            let _ = writeln!(
                text,
                "{:<4} {:<30} {:>12.1} {:>17.2} {:>12.2}",
                s.allocator, s.workload, s.one_thread_ns_per_op, s.separate_devices, s.same_device
            );
        }
    }
    let _ = writeln!(text, "\nTargets:");
    for target in &report.targets {
        let verdict = match target.met {
            Some(true) => "met    ",
            Some(false) => "NOT met",
            None => "report ",
        };
        let _ = writeln!(text, "  [{verdict}] {}: {}", target.name, target.detail);
    }
    text
}
