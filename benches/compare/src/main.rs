//! `blockpool-compare`: the side-by-side comparison of issue 6. Identical operation streams
//! (RMM's random allocations, a synthetic transformer training loop, a multi-stream
//! producer/consumer, vLLM's new stream per call, and PyTorch's own traces from a fixture
//! folder) run through
//! (a) blockpool with PyTorch's policy, (b) blockpool's other configurations, (c) cubecl's
//! `MemoryManagement`, (d) no caching and (e) the system allocator, in one process, and the
//! results are printed as tables (and JSON) with every ratio taken within this one run.
//!
//! ```text
//! cargo run --release --manifest-path benches/compare/Cargo.toml -- [--quick]
//!     [--only FAMILY]... [--memtrace PATH] [--fixtures DIR] [--json PATH|-] [--seed N]
//! ```
//!
//! `ops.rs` is the stream format, `workloads/` builds the streams, `subjects/` adapts the
//! allocators, `measure.rs` times one cell, `threads.rs` the scaling, `faithful.rs` runs
//! `memtrace replay`, `report.rs` prints and judges.

mod faithful;
mod measure;
mod ops;
mod report;
mod subjects;
mod threads;
mod workloads;

use anyhow::Context as _;
use measure::Repeat;
use ops::Workload;
use report::{Legend, Report, Row};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use subjects::blockpool::Blockpool;
use subjects::Subject;

/// blockpool's other policies (b): configurations of its knobs, key and config string.
const POLICIES: [(&str, &str); 5] = [
    // What PyTorch's own out-of-memory message recommends against fragmentation: large cached
    // blocks are not split for smaller requests.
    ("b1", "max_split_size_mb:64"),
    // Fewer distinct block sizes (4 steps per power of two), so freed blocks fit more requests.
    ("b2", "roundup_power2_divisions:4"),
    // The other half of that message's advice: one segment per stream and pool that grows
    // and shrinks in 2 MiB / 20 MiB units instead of fixed segments.
    ("b3", "expandable_segments:True"),
    // blockpool's own: memory cached for one stream serves another after a device-side wait.
    ("b4", "stream_reuse:ordered"),
    // With fewer distinct sizes too: stream-ordered reuse on top of (b2).
    ("b5", "stream_reuse:ordered,roundup_power2_divisions:4"),
];

const USAGE: &str = "usage: blockpool-compare [--quick] [--only FAMILY] [--memtrace PATH] [--fixtures DIR] [--json PATH|-] [--seed N]";

/// The command line.
#[derive(Debug)]
struct Args {
    quick: bool,
    /// Run only the workloads of these families (`random`, `multi_stream`, ...); all if empty.
    only: Vec<String>,
    memtrace: Option<PathBuf>,
    fixtures: PathBuf,
    json: Option<PathBuf>,
    seed: u64,
}

fn parse_args() -> anyhow::Result<Option<Args>> {
    let mut args = Args {
        quick: false,
        only: Vec::new(),
        memtrace: None,
        fixtures: Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../allocator-tests/fixtures/pytorch-snapshots"),
        json: None,
        seed: 42,
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(arg) = it.next() {
        let arg = arg.to_string_lossy().into_owned();
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value ({USAGE})"))
        };
        match arg.as_str() {
            "--quick" => args.quick = true,
            "--only" => args
                .only
                .push(value("--only")?.to_string_lossy().into_owned()),
            "--memtrace" => args.memtrace = Some(value("--memtrace")?.into()),
            "--fixtures" => args.fixtures = value("--fixtures")?.into(),
            "--json" => args.json = Some(value("--json")?.into()),
            "--seed" => {
                let text = value("--seed")?;
                args.seed = text
                    .to_string_lossy()
                    .parse()
                    .with_context(|| format!("--seed needs a number, not {text:?}"))?;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            other => anyhow::bail!("unknown argument `{other}` ({USAGE})"),
        }
    }
    Ok(Some(args))
}

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) if is_broken_pipe(&e) => {}
        Err(e) => {
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("blockpool-compare: {}", chain.join(": ").replace('\n', " "));
            std::process::exit(2);
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run() -> anyhow::Result<()> {
    let Some(args) = parse_args()? else {
        return Ok(());
    };
    let mut subjects: Vec<Box<dyn Subject>> = vec![Box::new(Blockpool::new("a", "")?)];
    for (key, config) in POLICIES {
        subjects.push(Box::new(Blockpool::new(key, config)?));
    }
    subjects.push(Box::new(subjects::cubecl::Cubecl));
    subjects.push(Box::new(subjects::no_cache::NoCache));
    subjects.push(Box::new(subjects::system::System));

    let (mut synthetic, repeat) = synthetic_workloads(args.quick, args.seed);
    let mut fixtures = load_fixtures(&args.fixtures)?;
    if !args.only.is_empty() {
        let picked = |family: &str| args.only.iter().any(|f| f == family);
        synthetic.retain(|w| picked(w.family));
        fixtures.retain(|(_, f)| picked(f.workload.family));
    }

    let mut rows = Vec::new();
    let all = synthetic
        .iter()
        .map(|w| (w, None))
        .chain(fixtures.iter().map(|(_, f)| (&f.workload, Some(f))));
    for (workload, fixture) in all {
        eprintln!("running {} ({} ops)", workload.name, workload.shape.ops);
        for subject in &subjects {
            let measured = measure::measure(subject.as_ref(), workload, repeat)
                .with_context(|| format!("{} through ({})", workload.name, subject.key()))?;
            let live = workload.shape.peak_live_bytes;
            let over_live = |bytes: u64| (live > 0).then(|| bytes as f64 / live as f64);
            let pytorch = fixture.and_then(|f| f.recorded_peak_reserved_bytes);
            rows.push(Row {
                workload: workload.name.clone(),
                family: workload.family,
                allocator: subject.key().to_string(),
                ops: workload.shape.ops,
                allocations: workload.shape.allocations,
                ns_per_op: measured.ns_per_op,
                runs: measured.runs,
                over_c: None,
                over_e: None,
                peak_reserved_bytes: measured.counters.peak_reserved_bytes,
                peak_live_bytes: live,
                reserved_over_live: measured.counters.peak_reserved_bytes.and_then(over_live),
                device_allocs: measured.counters.device_allocs,
                failed_allocations: measured.failed_allocations,
                pytorch_peak_reserved_bytes: pytorch,
                pytorch_reserved_over_live: pytorch.and_then(over_live),
            });
        }
    }
    report::add_ratios(&mut rows);

    let mut faithfulness = Vec::new();
    match &args.memtrace {
        Some(memtrace) => {
            for (path, fixture) in fixtures.iter().filter(|(_, f)| f.has_segment_allocs) {
                eprintln!("memtrace replay {}", path.display());
                let name = &fixture.workload.name;
                faithfulness.push(faithful::measure(
                    memtrace,
                    path,
                    name,
                    "a",
                    fixture.device,
                    None,
                    true,
                )?);
                for (key, config) in POLICIES {
                    faithfulness.push(faithful::measure(
                        memtrace,
                        path,
                        name,
                        key,
                        fixture.device,
                        Some(config),
                        false,
                    )?);
                }
            }
        }
        None => eprintln!("no --memtrace: the faithfulness rows are left out"),
    }

    let scaling_workload =
        workloads::random::build(1 << 20, if args.quick { 2_000 } else { 10_000 }, args.seed);
    let mut scaling = Vec::new();
    for subject in subjects
        .iter()
        .filter(|s| matches!(s.key(), "a" | "c" | "e"))
    {
        eprintln!("threads: ({})", subject.key());
        scaling.push(threads::measure(
            subject.as_ref(),
            &scaling_workload,
            if args.quick { 3 } else { 7 },
        )?);
    }

    let targets = report::judge(&rows, &faithfulness, &scaling);
    let report = Report {
        machine: machine(),
        mode: if args.quick { "quick" } else { "full" },
        seed: args.seed,
        allocators: subjects
            .iter()
            .map(|s| Legend {
                key: s.key().to_string(),
                description: s.describe(),
            })
            .collect(),
        rows,
        faithfulness,
        scaling,
        targets,
    };
    let json = serde_json::to_string_pretty(&report)?;
    let mut stdout = std::io::stdout().lock();
    match args.json.as_deref() {
        Some(path) if path == Path::new("-") => writeln!(stdout, "{json}")?,
        Some(path) => {
            std::fs::write(path, json)
                .with_context(|| format!("cannot write {}", path.display()))?;
            write!(stdout, "{}", report::render(&report))?;
        }
        None => write!(stdout, "{}", report::render(&report))?,
    }
    stdout.flush()?;
    Ok(())
}

/// The synthetic workloads, and how often to repeat each cell.
fn synthetic_workloads(quick: bool, seed: u64) -> (Vec<Workload>, Repeat) {
    let op_counts: &[usize] = if quick {
        &[10_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut list = Vec::new();
    for max_mib in [1usize, 4, 64, 256] {
        for &ops in op_counts {
            list.push(workloads::random::build(max_mib << 20, ops, seed));
        }
    }
    let steps = if quick { 2 } else { 6 };
    list.push(workloads::transformer::build(
        workloads::transformer::MEDIUM,
        steps,
        seed,
    ));
    list.push(workloads::multi_stream::build(
        if quick { 2_000 } else { 20_000 },
        seed,
    ));
    list.push(workloads::stream_per_call::build(
        if quick { 4 } else { 20 },
        50,
        seed,
    ));
    let repeat = if quick {
        Repeat {
            min_runs: 3,
            max_runs: 5,
            budget: Duration::from_millis(50),
        }
    } else {
        Repeat {
            min_runs: 5,
            max_runs: 21,
            budget: Duration::from_millis(300),
        }
    };
    (list, repeat)
}

/// Every trace in `dir` with something to replay, sorted by file name.
fn load_fixtures(dir: &Path) -> anyhow::Result<Vec<(PathBuf, workloads::fixture::Fixture)>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read the fixtures folder {} (--fixtures DIR)",
            dir.display()
        )
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pickle" | "pkl" | "jsonl" | "gz")
            )
        })
        .collect();
    paths.sort();
    let mut fixtures = Vec::new();
    for path in paths {
        if let Some(fixture) = workloads::fixture::load(&path)? {
            fixtures.push((path, fixture));
        }
    }
    Ok(fixtures)
}

/// CPU model and core count, from /proc/cpuinfo where there is one.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{model}, {cores} cores")
}
