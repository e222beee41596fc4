//! Loading large traces: a generated PyTorch memory snapshot of 1M trace events, read by the
//! restricted pickle reader into a `Value` tree and converted into a `PytorchSnapshot`, beside
//! floors measured in the same run: a plain byte scan of the file, and `serde_json` parsing an
//! equivalent JSON document into `serde_json::Value`; and the same trace as JSON Lines, read
//! by `trace::jsonl::read_snapshot`.
//!
//! The snapshot has the shape `torch.cuda.memory._dump_snapshot` writes (see
//! `allocator-tests/fixtures/pytorch-snapshots/`): a few hundred segments with blocks, and one device
//! trace of trace-entry dicts (`action`, `addr`, `size`, `stream`, `time_us`, `frames`) whose
//! keys and action names are interned strings and whose frame lists are shared by reference
//! among events (a few thousand distinct stacks of 10-30 frames, drawn from a thousand shared
//! frame dicts). It is written with the crate's own writer, which memoizes exactly as CPython's
//! pickler does, so every repeated key, action, stack and frame is a `BINGET`/`LONG_BINGET`.
//!
//! `TRACE_LOAD_EVENTS` sets the number of events (default 1,000,000), e.g. for a smaller
//! instance under `valgrind --tool=callgrind`.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use blockpool::trace::jsonl::{read_snapshot, write_snapshot};
use blockpool::trace::pickle::{read, write, ReadLimits, Value};
use blockpool::trace::pytorch::{load_pytorch_snapshot_as_snapshot, snapshot_from_value};
use criterion::{BenchmarkGroup, Criterion, Throughput};

/// Events in the generated trace unless `TRACE_LOAD_EVENTS` says otherwise.
const DEFAULT_EVENTS: usize = 1_000_000;
/// Distinct call stacks the events share.
const STACKS: usize = 4_000;
/// Distinct frame dicts the stacks share.
const FRAMES: usize = 1_000;
/// Segments (each with a few blocks) before the trace.
const SEGMENTS: usize = 300;

/// xorshift64*: a fixed, dependency-free stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0), near enough for a benchmark input.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Interned strings: one `Arc` per distinct text, as CPython interns identifiers and dict keys.
#[derive(Default)]
struct Strings(HashMap<String, Arc<str>>);

impl Strings {
    fn get(&mut self, text: &str) -> Value {
        let arc = self
            .0
            .entry(text.to_owned())
            .or_insert_with(|| Arc::from(text))
            .clone();
        Value::Str(arc)
    }
}

fn dict(pairs: Vec<(Value, Value)>) -> Value {
    Value::Dict(Arc::new(pairs))
}

fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

fn int(value: u64) -> Value {
    Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

/// The snapshot as a value: `{"segments": [...], "device_traces": [[events]]}`.
fn snapshot_value(events: usize) -> Value {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = Strings::default();

    // Frame dicts: Python frames in a few dozen files, C++ frames with "??" and line 0.
    let frames: Vec<Value> = (0..FRAMES)
        .map(|i| {
            let (filename, line) = if i % 3 == 0 {
                ("??".to_owned(), 0)
            } else {
                (
                    format!(
                        "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/m{}.py",
                        i % 40
                    ),
                    1 + rng.below(2_000) as u64,
                )
            };
            dict(vec![
                (
                    s.get("name"),
                    Value::Str(Arc::from(format!("function_{i}").as_str())),
                ),
                (s.get("filename"), s.get(&filename)),
                (s.get("line"), int(line)),
            ])
        })
        .collect();
    // Stacks of 10-30 frames; the outermost few frames are common to all, as `_start`,
    // `main` and the training loop are.
    let stacks: Vec<Value> = (0..STACKS)
        .map(|_| {
            let depth = 10 + rng.below(21);
            let mut stack: Vec<Value> = (0..depth - 3)
                .map(|_| frames[rng.below(FRAMES)].clone())
                .collect();
            stack.extend(frames[..3].iter().cloned());
            list(stack)
        })
        .collect();

    let base = 0x7f00_0000_0000_u64;
    let segments: Vec<Value> = (0..SEGMENTS)
        .map(|i| {
            let address = base + (i as u64) * (64 << 20);
            let blocks: Vec<Value> = (0..4)
                .map(|b| {
                    dict(vec![
                        (s.get("address"), int(address + b * (16 << 20))),
                        (s.get("size"), int(16 << 20)),
                        (s.get("requested_size"), int((16 << 20) - 512)),
                        (
                            s.get("state"),
                            s.get(if b % 2 == 0 {
                                "active_allocated"
                            } else {
                                "inactive"
                            }),
                        ),
                        (s.get("frames"), stacks[rng.below(STACKS)].clone()),
                    ])
                })
                .collect();
            dict(vec![
                (s.get("device"), int(0)),
                (s.get("address"), int(address)),
                (s.get("total_size"), int(64 << 20)),
                (s.get("allocated_size"), int(32 << 20)),
                (s.get("active_size"), int(32 << 20)),
                (s.get("requested_size"), int((32 << 20) - 1024)),
                (s.get("stream"), int(0)),
                (s.get("segment_type"), s.get("large")),
                (s.get("is_expandable"), Value::Bool(false)),
                (s.get("frames"), stacks[rng.below(STACKS)].clone()),
                (s.get("blocks"), list(blocks)),
            ])
        })
        .collect();

    // Events: alloc, then free_requested and free_completed of the same block with the same
    // stack, as the allocator records them; now and then a segment_alloc.
    let mut trace = Vec::with_capacity(events);
    let mut time_us = 1_748_729_097_138_624_u64;
    let mut event = |action: &str, addr: u64, size: u64, stack: &Value, time_us: u64| {
        dict(vec![
            (s.get("action"), s.get(action)),
            (s.get("addr"), int(addr)),
            (s.get("size"), int(size)),
            (s.get("stream"), int(0)),
            (s.get("time_us"), int(time_us)),
            (s.get("frames"), stack.clone()),
        ])
    };
    while trace.len() < events {
        let stack = &stacks[rng.below(STACKS)];
        let addr = base + (rng.below(1 << 20) as u64) * 512;
        let size = 512 * (1 + rng.below(1 << 14) as u64);
        time_us += 1 + rng.below(50) as u64;
        if rng.below(100) == 0 {
            trace.push(event("segment_alloc", addr, size << 4, stack, time_us));
        }
        for action in ["alloc", "free_requested", "free_completed"] {
            if trace.len() < events {
                trace.push(event(action, addr, size, stack, time_us));
            }
        }
    }
    trace.truncate(events);

    dict(vec![
        (s.get("segments"), list(segments)),
        (s.get("device_traces"), list(vec![list(trace)])),
    ])
}

/// The same data as a JSON document, for the `serde_json` floor. JSON has no references, so a
/// list or dict met again is written as `{"ref": n}`, `n` numbering first appearances: the
/// JSON carries what the pickle carries, at the size a trace format with a frame table has.
fn to_json(value: &Value, seen: &mut HashMap<usize, usize>) -> serde_json::Value {
    let shared = match value {
        Value::List(items) => Some(Arc::as_ptr(items) as usize),
        Value::Dict(pairs) => Some(Arc::as_ptr(pairs) as usize),
        _ => None,
    };
    if let Some(ptr) = shared {
        let next = seen.len();
        match seen.entry(ptr) {
            Entry::Occupied(index) => return serde_json::json!({ "ref": *index.get() }),
            Entry::Vacant(slot) => {
                slot.insert(next);
            }
        }
    }
    match value {
        Value::None | Value::BigInt(_) | Value::Bytes(_) => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(f) => (*f).into(),
        Value::Str(s) => (**s).into(),
        Value::List(items) | Value::Tuple(items) | Value::Set(items) => {
            items.iter().map(|item| to_json(item, seen)).collect()
        }
        Value::Dict(pairs) => pairs
            .iter()
            .map(|(k, v)| match k {
                Value::Str(k) => (k.to_string(), to_json(v, seen)),
                _ => (format!("{k:?}"), to_json(v, seen)),
            })
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

fn events_from_env() -> usize {
    std::env::var("TRACE_LOAD_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_EVENTS)
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, events: usize) {
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(events as u64));
}

fn trace_load(c: &mut Criterion) {
    let events = events_from_env();
    let value = snapshot_value(events);
    let pickle = write(&value);
    let limits = ReadLimits::default();
    let sanity = snapshot_from_value(&read(&pickle, &limits).expect("the generated pickle reads"))
        .expect("the generated pickle converts");
    assert_eq!(
        sanity.device_traces[0].len(),
        events,
        "every generated event loads"
    );
    drop(sanity);
    eprintln!(
        "trace_load: {events} events, pickle {:.1} MB",
        pickle.len() as f64 / 1e6
    );

    let mut group = c.benchmark_group("pickle_1M_events");
    configure(&mut group, events);
    group.bench_function("byte_scan", |b| {
        b.iter(|| black_box(&pickle).iter().fold(0u8, |acc, &byte| acc ^ byte))
    });
    group.bench_function("read", |b| {
        b.iter(|| read(black_box(&pickle), &limits).map(drop))
    });
    group.bench_function("read_and_convert", |b| {
        b.iter(|| {
            let value = read(black_box(&pickle), &limits).expect("reads");
            snapshot_from_value(&value).map(drop)
        })
    });
    group.finish();

    // serde_json floor: the equivalent JSON document, parsed into serde_json::Value.
    let json = serde_json::to_vec(&to_json(&value, &mut HashMap::new())).expect("serializes");
    drop(value);
    eprintln!(
        "trace_load: equivalent JSON {:.1} MB",
        json.len() as f64 / 1e6
    );
    let mut group = c.benchmark_group("json_1M_events");
    configure(&mut group, events);
    group.bench_function("serde_json_value", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&json)).map(drop))
    });
    group.finish();

    // JSONL: the same trace converted to the format-neutral `Snapshot` and written as JSON
    // Lines, then read back with `trace::jsonl::read_snapshot`.
    let mut jsonl = Vec::new();
    let written = load_pytorch_snapshot_as_snapshot(&pickle)
        .map_err(|error| error.to_string())
        .and_then(|snapshot| {
            write_snapshot(&snapshot, &mut jsonl).map_err(|error| error.to_string())
        });
    if let Err(error) = written {
        eprintln!("trace_load: skipping the JSONL group, the trace did not convert: {error}");
        return;
    }
    eprintln!("trace_load: JSONL {:.1} MB", jsonl.len() as f64 / 1e6);
    let mut group = c.benchmark_group("jsonl_1M_events");
    configure(&mut group, events);
    group.bench_function("read_snapshot", |b| {
        b.iter(|| read_snapshot(black_box(&jsonl[..])).map(drop))
    });
    group.finish();
}

fn main() {
    // `criterion_main!` would do the same, but its generated functions lack docs and trip
    // the workspace's `missing_docs` lint.
    let mut c = Criterion::default().configure_from_args();
    trace_load(&mut c);
    c.final_summary();
}
