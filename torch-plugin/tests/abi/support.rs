//! What every test of the C interface shares: the one simulated allocator of this test binary
//! (2 devices of 1 GiB), a lock that runs the tests one at a time, a clean slate at the start
//! of each, the log lines the plugin wrote, and readers for its text outputs.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

use blockpool_torch::*;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

pub const MIB: i64 = 1 << 20;
/// The simulated devices of this binary.
pub const DEVICES: usize = 2;

static LOCK: Mutex<()> = Mutex::new(());
static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records every event as `LEVEL message field=value`.
struct Capture;

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0.push_str(&format!("{value:?}"));
                } else {
                    self.0.push_str(&format!(" {}={value:?}", field.name()));
                }
            }
        }
        let mut line = Line(format!("{} ", event.metadata().level()));
        event.record(&mut line);
        LOGS.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Starts a test: makes the allocator on first use (simulated, 2 devices of 1 GiB), then
/// holds the lock and leaves the allocator clean: no live allocation, no cached segment, no
/// history, every statistic 0 (and device 1's memory fraction 1.0), no log line.
pub fn session() -> MutexGuard<'static, ()> {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        std::env::set_var("BLOCKPOOL_BACKEND", "sim");
        std::env::set_var("BLOCKPOOL_SIM_DEVICES", DEVICES.to_string());
        std::env::set_var("BLOCKPOOL_SIM_CAPACITY", "1G");
        std::env::remove_var("BLOCKPOOL_ALLOC_CONF");
        std::env::remove_var("PYTORCH_CUDA_ALLOC_CONF");
        std::env::remove_var("RANK");
        // Before the plugin's first call, so it keeps ours instead of installing its own.
        tracing::subscriber::set_global_default(Capture).expect("the first subscriber");
    });
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let alloc = allocator().expect("the simulated allocator starts");
    // What an earlier failed test may have left behind.
    for device in 0..DEVICES {
        for live in alloc.live_allocations(device).expect("a device") {
            blockpool_free(
                live.ptr as usize as *mut c_void,
                0,
                device as i32,
                std::ptr::null_mut(),
            );
        }
    }
    // Only the fraction test sets one, on device 1; device 0 never has one.
    assert_eq!(blockpool_set_memory_fraction(1.0, 1), BLOCKPOOL_OK);
    assert_eq!(blockpool_record_memory_history(0, 0, 0), BLOCKPOOL_OK);
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
    for device in 0..DEVICES as i32 {
        assert_eq!(
            blockpool_reset_accumulated_memory_stats(device),
            BLOCKPOOL_OK
        );
        assert_eq!(blockpool_reset_peak_memory_stats(device), BLOCKPOOL_OK);
    }
    take_logs();
    guard
}

/// The log lines written since the last call.
pub fn take_logs() -> Vec<String> {
    std::mem::take(&mut *LOGS.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Reads a text output: asks for the length with (NULL, 0), then fetches it with exactly
/// the room it needs, checking both calls agree.
pub fn read(f: impl Fn(*mut c_char, usize) -> isize) -> String {
    let length = f(std::ptr::null_mut(), 0);
    assert!(length >= 0, "text call failed ({length}): {}", last_error());
    let mut buf = vec![0 as c_char; length as usize + 1];
    assert_eq!(
        f(buf.as_mut_ptr(), buf.len()),
        length,
        "the two calls disagree"
    );
    assert_eq!(buf[length as usize], 0, "the text is NUL-terminated");
    let bytes: Vec<u8> = buf[..length as usize].iter().map(|&c| c as u8).collect();
    String::from_utf8(bytes).expect("UTF-8 text")
}

pub fn last_error() -> String {
    // SAFETY: `read` passes a NULL buffer with 0 or a live buffer with its exact length.
    read(|buf, len| unsafe { blockpool_last_error(buf, len) })
}

pub fn last_oom() -> String {
    // SAFETY: as in `last_error`.
    read(|buf, len| unsafe { blockpool_last_oom_message(buf, len) })
}

/// The statistics JSON of `device`, parsed.
pub fn stats_json(device: i32) -> String {
    // SAFETY: as in `last_error`.
    read(|buf, len| unsafe { blockpool_memory_stats_json(device, buf, len) })
}

/// The statistics of `device` as a map of integers.
pub fn stats(device: i32) -> BTreeMap<String, i64> {
    let json = stats_json(device);
    let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let object = value.as_object().expect("a JSON object");
    object
        .iter()
        .map(|(key, value)| {
            let n = value
                .as_i64()
                .unwrap_or_else(|| panic!("{key} is not an integer: {value}"));
            (key.clone(), n)
        })
        .collect()
}

/// Checks each `(key, value)` of `device`'s statistics, naming every one that differs.
#[track_caller]
pub fn assert_stats(device: i32, expected: &[(&str, i64)]) {
    let stats = stats(device);
    let wrong: Vec<String> = expected
        .iter()
        .filter(|(key, value)| stats.get(*key) != Some(value))
        .map(|(key, value)| format!("{key}: expected {value}, got {:?}", stats.get(*key)))
        .collect();
    assert!(
        wrong.is_empty(),
        "device {device} statistics:\n  {}",
        wrong.join("\n  ")
    );
}

/// `blockpool_malloc` on `stream` (a handle value), with the pointer as a number.
pub fn malloc(size: isize, device: i32, stream: usize) -> usize {
    blockpool_malloc(size, device, stream as *mut c_void) as usize
}

/// `blockpool_free` of a pointer from [`malloc`].
pub fn free(ptr: usize, device: i32) {
    blockpool_free(ptr as *mut c_void, 0, device, std::ptr::null_mut());
}

/// Parses JSON text, naming it when it is not JSON.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The simulated backend behind the plugin, for what a test must drive itself (completing
/// streams).
pub fn sim() -> blockpool::SimBackend {
    match allocator().expect("started").backend() {
        blockpool::global::DefaultBackend::Sim(sim) => sim.clone(),
        _ => panic!("this test binary runs on the simulated backend"),
    }
}

/// A scratch directory for this test's files, removed when dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("blockpool-torch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
