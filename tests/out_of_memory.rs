//! A trace larger than the machine's memory ends in an error, never an abort: each reader asks
//! for the memory that grows with the input fallibly. The machine is played by a global
//! allocator that, on the thread under test, refuses every single allocation above 4 MiB (as
//! a machine out of memory refuses the next doubling of a large vector), and each input
//! needs a vector larger than that.
#![cfg(feature = "trace-files")]

use blockpool::trace::file::{load_trace, TraceFileError};
use blockpool::trace::pickle::{write, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Allocations above this many bytes fail on a thread that set [`REFUSING`].
const MOST_BYTES: usize = 4 << 20;

thread_local! {
    static REFUSING: Cell<bool> = const { Cell::new(false) };
}

struct Refusing;

// SAFETY: every call is forwarded to `System` with the caller's layout and pointer unchanged,
// or answered with null, which `alloc` may return to say the memory is not there.
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MOST_BYTES && REFUSING.with(Cell::get) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller upholds `alloc`'s contract, which `System.alloc` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Refusing = Refusing;

fn write_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("blockpool-oom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write the input");
    path
}

/// `load_trace(path)`'s error, with big allocations refused on this thread meanwhile.
fn load_refusing(path: &Path) -> String {
    REFUSING.with(|r| r.set(true));
    let result = load_trace(path);
    REFUSING.with(|r| r.set(false));
    match result {
        Ok(trace) => panic!(
            "loaded {} events without a vector above {MOST_BYTES} bytes",
            trace.snapshot.events.len()
        ),
        Err(error) => error.to_string(),
    }
}

/// 200,000 events: their vector (56 bytes an event) passes 4 MiB.
const EVENTS: usize = 200_000;

#[test]
fn an_rmm_log_too_large_for_memory_is_an_error() {
    let mut log = String::from("Thread,Time,Action,Pointer,Size,Stream\n");
    for i in 0..EVENTS / 2 {
        let _ = writeln!(
            log,
            "7,10:00:00.{:06},allocate,0x{:x},4096,0",
            i % 1_000_000,
            0x1000 + i * 4096
        );
        let _ = writeln!(
            log,
            "7,10:00:00.{:06},free,0x{:x},4096,0",
            i % 1_000_000,
            0x1000 + i * 4096
        );
    }
    let path = write_file("big.csv", log.as_bytes());
    let message = load_refusing(&path);
    assert!(
        message.contains("memory ran out holding ") && message.contains("events, at line "),
        "{message}"
    );
    assert!(load_trace(&path).is_ok(), "with the memory there, it loads");
}

#[test]
fn a_jsonl_trace_too_large_for_memory_is_an_error() {
    let mut text = String::from("{\"blockpool_trace\":1}\n");
    for i in 0..EVENTS {
        let _ = writeln!(
            text,
            "{{\"event\":\"alloc\",\"device\":0,\"addr\":{},\"size\":512,\"time_us\":{i}}}",
            4096 + i * 512
        );
    }
    let path = write_file("big.jsonl", text.as_bytes());
    let message = load_refusing(&path);
    assert!(
        message.contains("memory ran out holding 65536 events"),
        "{message}"
    );
}

#[test]
fn a_pickle_too_large_for_memory_is_an_error() {
    let list = Value::List(Arc::new((0..1_000_000).map(Value::Int).collect()));
    let path = write_file("big.pickle", &write(&list));
    let message = load_refusing(&path);
    assert!(
        message.contains("memory ran out at byte ")
            && message.contains("holding the pickle's values"),
        "{message}"
    );
    match load_trace(&path) {
        Err(TraceFileError::Malformed { message, .. }) => {
            assert!(!message.contains("memory ran out"), "{message}")
        }
        other => panic!("a list is no snapshot: {:?}", other.map(|t| t.format)),
    }
}
