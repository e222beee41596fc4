//! What the trace-file tests share: a counting global allocator that measures the peak of
//! bytes allocated while a load runs, and scratch files. Each test file uses part of it.
#![allow(dead_code)]

use flate2::write::GzEncoder;
use flate2::Compression;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts the bytes allocated now and the most allocated at once.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the caller's layout and pointer unchanged;
// the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which `System.alloc` shares.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One measured test at a time.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// What one load cost: the peak of bytes allocated above the start, and the time.
pub struct Cost<T> {
    /// What the load returned.
    pub result: T,
    /// The most bytes allocated at once above the start.
    pub peak_bytes: usize,
    /// How long it took.
    pub elapsed: Duration,
}

pub fn measure<T>(f: impl FnOnce() -> T) -> Cost<T> {
    let start = NOW.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let began = Instant::now();
    let result = f();
    let elapsed = began.elapsed();
    let peak_bytes = PEAK.load(Ordering::Relaxed).saturating_sub(start);
    Cost {
        result,
        peak_bytes,
        elapsed,
    }
}

pub const MIB: usize = 1 << 20;

/// A fresh path in this process's scratch folder.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("blockpool-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir.join(name)
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = GzEncoder::new(Vec::new(), Compression::best());
    out.write_all(bytes).expect("gzip into memory");
    out.finish().expect("gzip into memory")
}

pub fn write_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, bytes).expect("write the input");
    path
}
