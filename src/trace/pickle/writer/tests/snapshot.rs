//! A value shaped like a PyTorch memory snapshot (`torch.cuda.memory._snapshot()`): it loads
//! under an unpickler that refuses every global, shared frames stay shared and cost two bytes
//! per reference, and [`write_to`] streams it frame by frame.

use std::io::{self, Write};

use super::super::{write, write_to};
use super::{dict, int, list, python, s, tuple, Value};

/// Frames, segments, blocks per segment and trace entries of [`snapshot`]; the Python mirror
/// in [`RESTRICTED_LOAD`] gets them on its command line.
const FRAMES: usize = 3;
const SEGMENTS: usize = 4;
const BLOCKS: usize = 8;
const ENTRIES: usize = 2000;

/// The base of the fake device addresses, above 2^32 as real ones are.
const BASE: i64 = 0x7f00_0000_0000;

/// A snapshot whose blocks and trace entries reference `FRAMES` shared frame dicts.
fn snapshot() -> Value {
    let frames: Vec<Value> = (0..FRAMES as i64)
        .map(|i| {
            dict(vec![
                (s("filename"), s("/work/train.py")),
                (s("line"), int(10 + i)),
                (s("name"), s(&format!("step_{i}"))),
            ])
        })
        .collect();
    let segments = (0..SEGMENTS as i64)
        .map(|seg| {
            let address = BASE + seg * 0x20_0000;
            let blocks = (0..BLOCKS as i64)
                .map(|b| {
                    dict(vec![
                        (s("address"), int(address + b * 512)),
                        (s("size"), int(512)),
                        (s("requested_size"), int(500)),
                        (s("state"), s("active_allocated")),
                        (
                            s("frames"),
                            list(vec![
                                frames[b as usize % FRAMES].clone(),
                                frames[(b as usize + 1) % FRAMES].clone(),
                            ]),
                        ),
                    ])
                })
                .collect();
            dict(vec![
                (s("device"), int(0)),
                (s("address"), int(address)),
                (s("total_size"), int(2 << 20)),
                (s("allocated_size"), int(512 * BLOCKS as i64)),
                (s("active_size"), int(512 * BLOCKS as i64)),
                (s("requested_size"), int(500 * BLOCKS as i64)),
                (s("stream"), int(0)),
                (s("segment_type"), s("small")),
                (s("segment_pool_id"), tuple(vec![int(0), int(0)])),
                (s("is_expandable"), Value::Bool(false)),
                (s("frames"), list(vec![])),
                (s("blocks"), list(blocks)),
            ])
        })
        .collect();
    let entries = (0..ENTRIES as i64)
        .map(|e| {
            let action = if e % 2 == 0 {
                "alloc"
            } else {
                "free_completed"
            };
            dict(vec![
                (s("action"), s(action)),
                (s("addr"), int(BASE + e * 512)),
                (s("size"), int(512)),
                (s("stream"), int(0)),
                (s("time_us"), int(1_700_000_000_000_000 + e)),
                (s("frames"), list(vec![frames[e as usize % FRAMES].clone()])),
            ])
        })
        .collect();
    let settings = dict(vec![
        (s("PYTORCH_CUDA_ALLOC_CONF"), s("expandable_segments:False")),
        (s("max_split_size"), int(-1)),
        (s("garbage_collection_threshold"), Value::Float(0.0)),
        (s("expandable_segments"), Value::Bool(false)),
        (s("pinned_num_register_threads"), int(1)),
        (s("release_lock_on_cudamalloc"), Value::Bool(false)),
        (s("last_allocator_settings"), Value::None),
    ]);
    dict(vec![
        (s("segments"), list(segments)),
        (s("device_traces"), list(vec![list(entries)])),
        (s("allocator_settings"), settings),
    ])
}

/// Loads stdin with an unpickler whose `find_class` raises, builds the same snapshot in
/// Python, and checks equality and that all frame references are the `FRAMES` shared dicts.
const RESTRICTED_LOAD: &str = r#"
import io, pickle, sys

class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

FRAMES, SEGMENTS, BLOCKS, ENTRIES = map(int, sys.argv[1:])
BASE = 0x7f0000000000
frames = [{'filename': '/work/train.py', 'line': 10 + i, 'name': f'step_{i}'} for i in range(FRAMES)]
segments = [{
    'device': 0, 'address': BASE + seg * 0x200000, 'total_size': 2 << 20,
    'allocated_size': 512 * BLOCKS, 'active_size': 512 * BLOCKS, 'requested_size': 500 * BLOCKS,
    'stream': 0, 'segment_type': 'small', 'segment_pool_id': (0, 0), 'is_expandable': False,
    'frames': [],
    'blocks': [{
        'address': BASE + seg * 0x200000 + b * 512, 'size': 512, 'requested_size': 500,
        'state': 'active_allocated', 'frames': [frames[b % FRAMES], frames[(b + 1) % FRAMES]],
    } for b in range(BLOCKS)],
} for seg in range(SEGMENTS)]
traces = [[{
    'action': 'alloc' if e % 2 == 0 else 'free_completed', 'addr': BASE + e * 512, 'size': 512,
    'stream': 0, 'time_us': 1_700_000_000_000_000 + e, 'frames': [frames[e % FRAMES]],
} for e in range(ENTRIES)]]
settings = {
    'PYTORCH_CUDA_ALLOC_CONF': 'expandable_segments:False', 'max_split_size': -1,
    'garbage_collection_threshold': 0.0, 'expandable_segments': False,
    'pinned_num_register_threads': 1, 'release_lock_on_cudamalloc': False,
    'last_allocator_settings': None,
}
expected = {'segments': segments, 'device_traces': traces, 'allocator_settings': settings}

loaded = Restricted(io.BytesIO(sys.stdin.buffer.read())).load()
assert loaded == expected, "the loaded snapshot differs from the one built in Python"
assert list(loaded) == list(expected), "the snapshot's keys are out of order"
referenced = [f for seg in loaded['segments'] for b in seg['blocks'] for f in b['frames']]
referenced += [f for e in loaded['device_traces'][0] for f in e['frames']]
distinct = len({id(f) for f in referenced})
assert distinct == FRAMES, f"{len(referenced)} frame references load as {distinct} dicts, not {FRAMES}"
print("ok")
"#;

#[test]
fn snapshot_loads_under_an_unpickler_that_refuses_every_global() {
    let pickle = write(&snapshot());
    let script = format!(
        "import sys; sys.argv[1:] = ['{FRAMES}', '{SEGMENTS}', '{BLOCKS}', '{ENTRIES}']\n{RESTRICTED_LOAD}"
    );
    let out = python(&script, &pickle);
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        "ok",
        "the restricted load did not finish"
    );
}

#[test]
fn a_frame_dict_referenced_100k_times_costs_about_two_bytes_per_reference() {
    let frame = dict(vec![
        (
            s("filename"),
            s("/usr/lib/python3/site-packages/torch/nn/modules/module.py"),
        ),
        (s("line"), int(1527)),
        (s("name"), s("_call_impl")),
    ]);
    let once = write(&list(vec![frame.clone()])).len();
    let many = write(&list(vec![frame; 100_000])).len();
    let per_reference = (many - once) as f64 / 99_999.0;
    // BINGET and its one-byte index, plus MARK and APPENDS once per 1000 items.
    assert!(
        per_reference < 2.01,
        "a shared frame costs {per_reference:.3} bytes per reference; it should be about 2"
    );
}

/// A sink that keeps each `write` call's bytes apart.
#[derive(Default)]
struct Chunks(Vec<Vec<u8>>);

impl Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.push(buf.to_vec());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_to_streams_the_bytes_of_write_a_frame_at_a_time() {
    // About 300 KiB, so several frames.
    let value = list((0..30_000).map(|i| s(&format!("entry {i}"))).collect());
    let mut chunks = Chunks::default();
    write_to(&value, &mut chunks).expect("writing to memory succeeds");
    assert_eq!(
        chunks.0.concat(),
        write(&value),
        "write_to and write disagree"
    );
    assert!(
        chunks.0.len() > 3,
        "the output came in {} writes, not frame by frame",
        chunks.0.len()
    );
    let largest = chunks.0.iter().map(Vec::len).max().unwrap_or(0);
    // A frame closes at the first object boundary past 64 KiB.
    assert!(
        largest < 65 * 1024,
        "one write carried {largest} bytes; frames should be ~64 KiB"
    );
}

/// A sink that fails once it has taken `left` bytes.
struct FailsAfter {
    left: usize,
}

impl Write for FailsAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() > self.left {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
        }
        self.left -= buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_to_returns_the_sinks_error() {
    let error = write_to(&snapshot(), FailsAfter { left: 100_000 })
        .expect_err("a sink that fails must fail the write");
    assert_eq!(
        error.kind(),
        io::ErrorKind::StorageFull,
        "the sink's error was replaced: {error}"
    );
}
