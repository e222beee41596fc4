//! Small, validly structured trace files that name far more than they hold: each test makes a
//! file of a few kilobytes that shares one value many times, loads it with `load_trace`, and
//! checks that the work and the memory stay bounded by the file's distinct content, with a
//! typed error where the limit is hit.
//!
//! Memory is measured by a counting global allocator: the peak of bytes allocated at once
//! while the load runs, above what was allocated before it. The tests take a lock so that one
//! runs at a time and the peak is its own.
#![cfg(feature = "trace-files")]

mod common;

use blockpool::trace::file::{load_trace, load_trace_with, TraceFileError};
use blockpool::trace::pickle::{write, Value};
use blockpool::trace::ImportLimits;
use common::{gzip, measure, write_file, MIB, SERIAL};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A JSON Lines trace with one frame (`name` of `name_len` bytes) that one context lists
/// `references` times, and one event of that context; gzip-compressed.
fn jsonl_one_frame_many_times(name_len: usize, references: usize) -> Vec<u8> {
    let mut text = String::from("{\"blockpool_trace\":1}\n");
    text += &format!(
        "{{\"frame\":1,\"name\":\"{}\",\"file\":\"a.py\",\"line\":1}}\n",
        "f".repeat(name_len)
    );
    text += "{\"context\":1,\"tags\":[],\"frames\":[1";
    text += &",1".repeat(references - 1);
    text += "]}\n";
    text += "{\"event\":\"alloc\",\"device\":0,\"addr\":4096,\"size\":512,\"time_us\":1,\"context\":1}\n";
    gzip(text.as_bytes())
}

fn str(s: &str) -> Value {
    Value::Str(s.into())
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

fn dict(pairs: Vec<(&str, Value)>) -> Value {
    Value::Dict(Arc::new(
        pairs.into_iter().map(|(k, v)| (str(k), v)).collect(),
    ))
}

fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

/// A PyTorch snapshot pickle; the writer keeps shared `Arc`s shared (memo references).
fn pytorch(segments: Value, device_traces: Value, extra: Vec<(&str, Value)>) -> Vec<u8> {
    let mut pairs = vec![("segments", segments), ("device_traces", device_traces)];
    pairs.extend(extra);
    write(&dict(pairs))
}

fn trace_entry(frames: Value) -> Value {
    dict(vec![
        ("action", str("alloc")),
        ("addr", int(4096)),
        ("size", int(512)),
        ("stream", int(0)),
        ("time_us", int(1)),
        ("frames", frames),
    ])
}

fn malformed_message(
    result: Result<blockpool::trace::file::LoadedTrace, TraceFileError>,
) -> String {
    match result {
        Err(TraceFileError::Malformed { message, .. }) => message,
        Err(other) => panic!("expected a malformed-file error, got {other}"),
        Ok(_) => panic!("the hostile file was accepted"),
    }
}

#[test]
fn a_jsonl_frame_listed_100k_times_is_shared_not_copied() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 1,000-byte name, 100,000 references: 100 MB if each reference copied the frame.
    let bytes = jsonl_one_frame_many_times(1000, 100_000);
    assert!(
        bytes.len() < 4096,
        "the input is small: {} bytes",
        bytes.len()
    );
    let path = write_file("frame100k.jsonl.gz", &bytes);
    let cost = measure(|| load_trace(&path));
    let trace = cost.result.expect("the file is valid and under the limit");
    let context = trace
        .snapshot
        .contexts
        .iter()
        .next()
        .expect("one context")
        .1;
    assert_eq!(context.frames.len(), 100_000, "every reference is kept");
    assert!(
        Arc::ptr_eq(&context.frames[0].name, &context.frames[99_999].name),
        "the frames share one name"
    );
    assert!(
        cost.peak_bytes < 32 * MIB,
        "loading took {} MiB at peak; sharing the frame should keep it near 100,000 x 40 bytes",
        cost.peak_bytes / MIB
    );
    assert!(
        cost.elapsed < Duration::from_secs(20),
        "took {:?}",
        cost.elapsed
    );
}

#[test]
fn a_jsonl_1_mib_name_listed_4m_times_is_refused_at_the_limit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bytes = jsonl_one_frame_many_times(MIB, 4_000_000);
    assert!(
        bytes.len() < 16 * 1024,
        "the input is small: {} bytes",
        bytes.len()
    );
    let path = write_file("name1mib.jsonl.gz", &bytes);
    let cost = measure(|| load_trace_with(&path, &ImportLimits::default()));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with("line 3: its contexts")
            && message.contains("exceed the import limit of 1073741824 bytes")
            && message.contains("BLOCKPOOL_MAX_CONTEXT_BYTES=<bytes>"),
        "the error names the line, the limit and how to raise it: {message}"
    );
    // The 8 MB line, its 4M ids (32 MB) and a thousand shared frames; not 4 TiB of copies.
    assert!(
        cost.peak_bytes < 96 * MIB,
        "refusing took {} MiB at peak",
        cost.peak_bytes / MIB
    );
    assert!(
        cost.elapsed < Duration::from_secs(30),
        "took {:?}",
        cost.elapsed
    );
}

#[test]
fn a_lower_context_limit_refuses_a_jsonl_file_above_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let path = write_file(
        "frame10k.jsonl.gz",
        &jsonl_one_frame_many_times(1000, 10_000),
    );
    let mut limits = ImportLimits::default();
    limits.max_context_bytes = 1 << 20;
    let message = malformed_message(load_trace_with(&path, &limits));
    assert!(
        message.contains("exceed the import limit of 1048576 bytes"),
        "{message}"
    );
    limits.max_context_bytes = 16 << 20;
    let trace = load_trace_with(&path, &limits).expect("under a raised limit it loads");
    assert_eq!(trace.snapshot.contexts.len(), 1);
}

#[test]
fn a_segment_referenced_5000_times_is_refused_at_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let block = dict(vec![
        ("address", int(0)),
        ("size", int(512)),
        ("requested_size", int(512)),
        ("state", str("active_allocated")),
        ("frames", list(vec![])),
    ]);
    let segment = dict(vec![
        ("device", int(0)),
        ("address", int(0)),
        ("total_size", int(512 * 5000)),
        ("stream", int(0)),
        ("segment_type", str("large")),
        ("allocated_size", int(0)),
        ("active_size", int(0)),
        ("requested_size", int(0)),
        ("blocks", list(vec![block; 5000])),
    ]);
    let bytes = pytorch(
        list(vec![segment; 5000]),
        list(vec![list(vec![])]),
        Vec::new(),
    );
    assert!(
        bytes.len() < 32 * 1024,
        "the input is small: {} bytes",
        bytes.len()
    );
    let path = write_file("segments.pickle", &bytes);
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with(
            "segments[0].blocks[1]: this block is one object the file references more than once"
        ),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 16 * MIB,
        "took {} MiB",
        cost.peak_bytes / MIB
    );
    assert!(
        cost.elapsed < Duration::from_secs(5),
        "took {:?}",
        cost.elapsed
    );
}

#[test]
fn a_trace_entry_referenced_25m_times_is_refused_at_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let entry = trace_entry(list(vec![]));
    let trace = list(vec![entry; 5000]);
    let bytes = pytorch(list(vec![]), list(vec![trace; 5000]), Vec::new());
    assert!(
        bytes.len() < 32 * 1024,
        "the input is small: {} bytes",
        bytes.len()
    );
    let path = write_file("traces.pickle", &bytes);
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert_eq!(
        message,
        "device_traces[0][1]: this trace entry is one object the file references more than \
         once; a PyTorch snapshot writes each trace entry once, so the file is not one PyTorch \
         wrote"
    );
    assert!(
        cost.peak_bytes < 16 * MIB,
        "took {} MiB",
        cost.peak_bytes / MIB
    );
    assert!(
        cost.elapsed < Duration::from_secs(5),
        "took {:?}",
        cost.elapsed
    );
}

#[test]
fn an_annotation_referenced_10000_times_is_refused_at_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let annotation = dict(vec![
        ("stage", str("START")),
        ("name", str("step")),
        ("device", int(0)),
        ("time_us", int(1)),
    ]);
    let bytes = pytorch(
        list(vec![]),
        list(vec![list(vec![])]),
        vec![("external_annotations", list(vec![annotation; 10_000]))],
    );
    let path = write_file("annotations.pickle", &bytes);
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with(
            "external_annotations[1]: this external annotation is one object the file \
             references more than once"
        ),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 16 * MIB,
        "took {} MiB",
        cost.peak_bytes / MIB
    );
}

#[test]
fn distinct_nested_annotations_are_charged_to_the_context_limit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 10,000 distinct STARTs of one name: each event holds the whole stack, 50M tags in all.
    let name = str("step");
    let annotations = (0..10_000)
        .map(|t| {
            Value::Dict(Arc::new(vec![
                (str("stage"), str("START")),
                (str("name"), name.clone()),
                (str("device"), int(0)),
                (str("time_us"), int(t)),
            ]))
        })
        .collect();
    let bytes = pytorch(
        list(vec![]),
        list(vec![list(vec![])]),
        vec![("external_annotations", list(annotations))],
    );
    let path = write_file("nested.pickle", &bytes);
    let mut limits = ImportLimits::default();
    limits.max_context_bytes = 64 << 20;
    let cost = measure(|| load_trace_with(&path, &limits));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with("external_annotations: its contexts")
            && message.contains("67108864 bytes"),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 96 * MIB,
        "took {} MiB",
        cost.peak_bytes / MIB
    );
}

#[test]
fn a_frame_of_two_100_kb_strings_referenced_100k_times_stays_shared() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let frame = dict(vec![
        ("filename", str(&"f".repeat(100_000))),
        ("line", int(1)),
        ("name", str(&"n".repeat(100_000))),
    ]);
    let entry = trace_entry(list(vec![frame; 100_000]));
    let bytes = pytorch(list(vec![]), list(vec![list(vec![entry])]), Vec::new());
    let path = write_file("frames.pickle", &bytes);
    // 100,000 x 200 KB spelled out is 20 GB: refused at the default limit, after 1 GiB.
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with("device_traces[0][0].frames: its contexts"),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 64 * MIB,
        "took {} MiB",
        cost.peak_bytes / MIB
    );
    assert!(
        cost.elapsed < Duration::from_secs(20),
        "took {:?}",
        cost.elapsed
    );
}

#[test]
fn a_pickle_inflating_to_256_mib_of_zeros_is_refused_after_a_chunk() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // gzip members concatenate: PROTO 4, then one member of 1 MiB of zeros 256 times.
    let mut bytes = gzip(b"\x80\x04");
    let zeros = gzip(&vec![0; MIB]);
    for _ in 0..256 {
        bytes.extend_from_slice(&zeros);
    }
    assert!(
        bytes.len() < 512 * 1024,
        "the input is small: {} bytes",
        bytes.len()
    );
    let path = write_file("zeros.pickle.gz", &bytes);
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert!(
        message.starts_with("not a readable pickle: unknown opcode 0x00 at byte 2"),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 8 * MIB,
        "refusing took {} MiB at peak: the stream was inflated before parsing",
        cost.peak_bytes / MIB
    );
}

#[test]
fn a_pickle_string_declared_at_3_gib_is_refused_before_it_is_buffered() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // PROTO 4, BINBYTES8 of 3 GiB, then 64 MiB of zeros that the declared length would
    // swallow: parsed while inflating, the length alone is refused.
    let mut head = b"\x80\x04\x8e".to_vec();
    head.extend_from_slice(&(3u64 << 30).to_le_bytes());
    let mut bytes = gzip(&head);
    let zeros = gzip(&vec![0; MIB]);
    for _ in 0..64 {
        bytes.extend_from_slice(&zeros);
    }
    let path = write_file("long-bytes.pickle.gz", &bytes);
    let cost = measure(|| load_trace(&path));
    let message = malformed_message(cost.result);
    assert!(
        message.contains(
            "BINBYTES8 at byte 2 has an argument of 3221225472 bytes, more than the limit of \
             268435456: raise ReadLimits::max_argument_bytes"
        ),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 8 * MIB,
        "refusing took {} MiB at peak: the argument was buffered",
        cost.peak_bytes / MIB
    );
}

/// `events` alloc/free pairs spread round-robin over `devices` devices, in time order.
fn spread_over_devices(events: usize, devices: u32) -> blockpool::trace::Snapshot {
    use blockpool::backend::StreamId;
    use blockpool::trace::{Action, ContextId, Snapshot, TraceEvent};
    let mut snapshot = Snapshot::default();
    for pair in 0..events / 2 {
        let device = pair as u32 % devices;
        let addr = 4096 * (1 + (pair as u64 / u64::from(devices)));
        for (k, action) in [Action::Alloc, Action::FreeCompleted]
            .into_iter()
            .enumerate()
        {
            snapshot.events.push(TraceEvent {
                action,
                device,
                stream: StreamId::from_raw(0),
                addr,
                size: 512,
                requested: 512,
                time_us: 2 * pair as u64 + k as u64,
                context: ContextId::NONE,
            });
        }
    }
    snapshot
}

#[test]
fn by_device_splits_every_event_once_in_order() {
    let snapshot = spread_over_devices(2_000, 250);
    let parts = snapshot.by_device();
    assert_eq!(parts.len(), 250);
    for (device, part) in &parts {
        assert_eq!(
            part.events.len(),
            8,
            "device {device} has 4 alloc/free pairs"
        );
        assert!(part.events.iter().all(|e| e.device == *device));
        assert!(part.events.windows(2).all(|w| w[0].time_us < w[1].time_us));
        let expected: Vec<_> = snapshot.device_events(*device).copied().collect();
        assert_eq!(part.events, expected, "device {device}'s events, in order");
    }
    let one = spread_over_devices(10, 1);
    let parts = one.by_device();
    assert!(
        matches!(parts[..], [(0, std::borrow::Cow::Borrowed(_))]),
        "one device is the snapshot itself, not a copy"
    );
}

#[test]
fn perfetto_export_over_2000_devices_takes_about_as_long_as_over_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let time = |snapshot: &blockpool::trace::Snapshot| {
        let began = Instant::now();
        blockpool::trace::perfetto::write_perfetto(snapshot, std::io::sink()).expect("writes");
        began.elapsed()
    };
    let one = time(&spread_over_devices(100_000, 1));
    let many = time(&spread_over_devices(100_000, 2_000));
    // Per device, the tracks and their metadata cost a little; devices times events is 2,000x.
    assert!(
        many < one * 4 + Duration::from_millis(500),
        "100,000 events over 2,000 devices took {many:?}, over one device {one:?}"
    );
}
