//! `memtrace` end to end on a 1M-event trace: `summary` and `replay` as a user runs them (the
//! built binary, one process per iteration), beside `info` (load the file and count: the floor
//! every command pays), for our JSON Lines and for PyTorch's pickle; and the web viewer's
//! level-of-detail responses for the whole timeline, from one `memtrace serve` process, beside
//! its cheapest routes.
//!
//! The trace is generated here once, by blockpool itself: a training-like workload (weights and
//! Adam moments; per step, activations kept layer by layer in the forward pass and freed in
//! the backward pass, short-lived scratch, weight gradients, optimizer temporaries, gradient
//! buckets read on a side stream) through `CachingAllocator<SimBackend>` with history recorded
//! and `annotate`d steps, passes and layers, until it has about a million events. It is written
//! with `dump_snapshot` (JSON Lines, gzip) and with `write_pytorch_snapshot` (a pickle).
//!
//! `MEMTRACE_BENCH_EVENTS` sets the number of events (default 1,000,000).

use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use blockpool::trace::pytorch::write_pytorch_snapshot;
use blockpool::DeviceIndex;
use blockpool::{
    annotate, Allocation, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
use criterion::{BenchmarkGroup, Criterion, Throughput};

/// Events in the generated trace unless `MEMTRACE_BENCH_EVENTS` says otherwise.
const DEFAULT_EVENTS: usize = 1_000_000;
/// Columns of the level-of-detail requests: a wide browser window.
const WIDTH: usize = 1400;
/// The binary under test.
const MEMTRACE: &str = env!("CARGO_BIN_EXE_memtrace");

const LAYERS: usize = 24;
const HIDDEN: usize = 2048;
const HEADS: usize = 16;
const BATCH: usize = 4;
/// Bytes per element (bf16).
const ELEMENT: usize = 2;
/// Sequence lengths the steps cycle through, so block sizes change from step to step.
const SEQUENCE_LENGTHS: [usize; 7] = [512, 1024, 768, 256, 2048, 640, 1536];
/// Every this many steps the program calls `empty_cache`, as some training loops do after
/// evaluation, so the trace also returns segments.
const EMPTY_CACHE_EVERY: usize = 100;

/// The generated files, removed with their directory on drop.
struct Traces {
    dir: PathBuf,
    jsonl: PathBuf,
    pickle: PathBuf,
    events: usize,
}

impl Drop for Traces {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A layer's parameters: the attention's fused QKV and output projections, the MLP's two.
fn parameter_sizes() -> [usize; 4] {
    [
        3 * HIDDEN * HIDDEN * ELEMENT,
        HIDDEN * HIDDEN * ELEMENT,
        4 * HIDDEN * HIDDEN * ELEMENT,
        4 * HIDDEN * HIDDEN * ELEMENT,
    ]
}

type Held = Vec<Allocation<SimBackend>>;

/// Weights and the two Adam moments of every layer.
fn init(alloc: &CachingAllocator<SimBackend>) -> blockpool::Result<Held> {
    let _init = annotate("init");
    let mut held = Vec::new();
    for layer in 0..LAYERS {
        let _layer = annotate(&format!("layer{layer}"));
        for size in parameter_sizes() {
            for _ in 0..3 {
                held.push(alloc.allocate(0, size, StreamId::DEFAULT)?);
            }
        }
    }
    Ok(held)
}

/// One training step; weight gradients are allocated in the first backward pass and kept.
fn step(
    alloc: &CachingAllocator<SimBackend>,
    sim: &SimBackend,
    step: usize,
    grads: &mut Held,
) -> blockpool::Result<()> {
    let main = StreamId::DEFAULT;
    let side = StreamId::from_raw(1);
    let seq = SEQUENCE_LENGTHS[step % SEQUENCE_LENGTHS.len()];
    let tokens = BATCH * seq;
    let _step = annotate(&format!("step{step}"));
    let mut activations: Vec<Held> = Vec::new();
    {
        let _forward = annotate("forward");
        for layer in 0..LAYERS {
            let _layer = annotate(&format!("layer{layer}"));
            let mut kept = Vec::new();
            for size in [
                tokens * HIDDEN * ELEMENT,           // layer norm output
                3 * tokens * HIDDEN * ELEMENT,       // q, k, v
                BATCH * HEADS * seq * seq * ELEMENT, // attention probabilities
                tokens * HIDDEN * ELEMENT,           // attention output
                4 * tokens * HIDDEN * ELEMENT,       // MLP up projection
                4 * tokens * HIDDEN * ELEMENT,       // activation function output
            ] {
                kept.push(alloc.allocate(0, size, main)?);
                // Scratch that dies at once: norm statistics, a dropout mask.
                drop(alloc.allocate(0, tokens * 4, main)?);
            }
            activations.push(kept);
        }
        drop(alloc.allocate(0, 4, main)?); // the loss
    }
    {
        let _backward = annotate("backward");
        for layer in (0..LAYERS).rev() {
            let _layer = annotate(&format!("layer{layer}"));
            let mut kept = activations.pop().unwrap_or_default();
            while let Some(activation) = kept.pop() {
                let grad = alloc.allocate(0, activation.size(), main)?;
                drop(activation);
                drop(grad);
            }
            if grads.len() < LAYERS * 4 {
                for size in parameter_sizes() {
                    grads.push(alloc.allocate(0, size, main)?);
                }
            }
            // A gradient bucket all-reduced on a side stream: reused only once it completes.
            if layer % 4 == 0 {
                let bucket = alloc.allocate(0, 25 << 20, main)?;
                bucket.record_stream(side)?;
                drop(bucket);
            }
        }
        sim.complete_stream(DeviceIndex::new(0), side)?;
    }
    {
        let _optimizer = annotate("optimizer");
        for size in parameter_sizes().into_iter().cycle().take(LAYERS * 4) {
            // foreach temporaries: one per parameter, freed at once.
            drop(alloc.allocate(0, size, main)?);
        }
    }
    if (step + 1).is_multiple_of(EMPTY_CACHE_EVERY) {
        alloc.empty_cache()?;
    }
    Ok(())
}

/// Runs the workload until the history holds about `events` events and writes both files.
fn generate(events: usize) -> Traces {
    let dir = std::env::temp_dir().join(format!("memtrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the bench's temporary directory");
    let mut traces = Traces {
        jsonl: dir.join("trace.jsonl.gz"),
        pickle: dir.join("trace.pickle"),
        dir,
        events: 0,
    };
    let started = Instant::now();
    let sim = SimBackend::new(1, 80 << 30);
    let alloc = CachingAllocator::new(sim.clone(), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings {
            max_entries: 2 * events.max(1),
            ..HistorySettings::default()
        })
        .expect("turn recording on");
    let weights = init(&alloc).expect("allocate the weights");
    let mut grads = Vec::new();
    // The second step's events (the first also allocates the weight gradients) say about
    // how many steps to run; steps that only reuse cached segments record a few fewer, so the
    // last ones top up.
    let recorded = || alloc.history(0).expect("device 0").len();
    step(&alloc, &sim, 0, &mut grads).expect("run a step");
    let after_first = recorded();
    step(&alloc, &sim, 1, &mut grads).expect("run a step");
    let per_step = (recorded() - after_first).max(1);
    let mut steps = 2 + events.saturating_sub(recorded()).div_ceil(per_step);
    for s in 2..steps {
        step(&alloc, &sim, s, &mut grads).expect("run a step");
    }
    while recorded() < events {
        step(&alloc, &sim, steps, &mut grads).expect("run a step");
        steps += 1;
    }
    let snapshot = alloc.snapshot();
    drop((weights, grads));
    blockpool::trace::jsonl::save(&snapshot, &traces.jsonl).expect("write the JSON Lines trace");
    let pickle = std::fs::File::create(&traces.pickle).expect("create the pickle");
    write_pytorch_snapshot(&snapshot, std::io::BufWriter::new(pickle)).expect("write the pickle");
    let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len()) as f64 / 1e6;
    eprintln!(
        "memtrace bench: {} events ({steps} steps, {} contexts, {} segments at the end), \
         {:.1} MB JSONL.gz, {:.1} MB pickle, generated in {:.1} s",
        snapshot.events.len(),
        snapshot.contexts.len(),
        snapshot.segments.len(),
        size(&traces.jsonl),
        size(&traces.pickle),
        started.elapsed().as_secs_f64(),
    );
    traces.events = snapshot.events.len();
    traces
}

/// Runs `memtrace ARGS`, which must succeed; returns the length of what it printed.
fn memtrace(args: &[&str], file: &Path) -> usize {
    let output = Command::new(MEMTRACE)
        .args(args)
        .arg(file)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("run memtrace");
    assert!(
        output.status.success(),
        "memtrace {args:?} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout.len()
}

fn commands(c: &mut Criterion, traces: &Traces) {
    for (name, file) in [("jsonl_gz", &traces.jsonl), ("pickle", &traces.pickle)] {
        let mut group = c.benchmark_group(format!("commands_1M_events_{name}"));
        configure(&mut group, traces.events);
        for command in ["info", "summary", "replay"] {
            group.bench_function(command, |b| {
                b.iter(|| black_box(memtrace(&[command], black_box(file))))
            });
        }
        group.finish();
    }
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, events: usize) {
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(events as u64));
}

/// A `memtrace serve` process, killed on drop (also when a benchmark panics).
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    address: String,
}

impl Server {
    fn start(file: &Path) -> Server {
        let mut child = Command::new(MEMTRACE)
            .arg("serve")
            .arg(file)
            .args(["--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start memtrace serve");
        let stdout = child.stdout.take().expect("piped stdout");
        // The guard exists before the first read, so a failure below still kills the child.
        let mut server = Server {
            child,
            address: String::new(),
        };
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("read memtrace serve's output");
            if let Some(at) = line.find("http://") {
                let rest = &line[at + "http://".len()..];
                server.address = rest.trim_end_matches('/').to_owned();
                break;
            }
        }
        assert!(
            !server.address.is_empty(),
            "memtrace serve printed no address"
        );
        server
    }

    /// GETs `target` over a fresh HTTP/1.0 connection; the status must be 200. Returns the
    /// response's length.
    fn get(&self, target: &str) -> usize {
        let mut stream = TcpStream::connect(&self.address).expect("connect to memtrace serve");
        write!(
            stream,
            "GET {target} HTTP/1.0\r\nHost: {}\r\n\r\n",
            self.address
        )
        .expect("send the request");
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .expect("read the response");
        let status = response.split(|&b| b == b'\r').next().unwrap_or_default();
        assert!(
            status.starts_with(b"HTTP/1.") && status.windows(5).any(|w| w == b" 200 "),
            "GET {target}: {}",
            String::from_utf8_lossy(&response[..response.len().min(300)])
        );
        response.len()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(c: &mut Criterion, traces: &Traces) {
    let server = Server::start(&traces.jsonl);
    let routes = [
        ("context_baseline", "/api/context?id=0".to_owned()),
        ("meta", "/api/meta".to_owned()),
        (
            "timeline_events",
            format!("/api/timeline?device=0&axis=event&width={WIDTH}"),
        ),
        (
            "timeline_time",
            format!("/api/timeline?device=0&axis=time&width={WIDTH}"),
        ),
        (
            "curves_events",
            format!("/api/curves?device=0&axis=event&width={WIDTH}"),
        ),
        (
            "segments_events",
            format!("/api/segments?device=0&axis=event&width={WIDTH}"),
        ),
        (
            "summarized_events",
            format!("/api/summarized?device=0&axis=event&width={WIDTH}&column=700"),
        ),
        (
            "events_page",
            "/api/events?device=0&offset=500000&limit=200".to_owned(),
        ),
    ];
    for (_, target) in &routes {
        eprintln!("memtrace bench: GET {target}: {} bytes", server.get(target));
    }
    let mut group = c.benchmark_group("serve_1M_events_whole_timeline");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (name, target) in &routes {
        group.bench_function(*name, |b| {
            b.iter(|| black_box(server.get(black_box(target))))
        });
    }
    group.finish();
}

fn main() {
    let events = std::env::var("MEMTRACE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_EVENTS);
    let mut criterion = Criterion::default().configure_from_args();
    let traces = generate(events);
    commands(&mut criterion, &traces);
    serve(&mut criterion, &traces);
    criterion.final_summary();
}
