//! A million distinct call stacks through one allocator's context table stay within a fixed
//! memory bound: the table keeps its `max_contexts` and counts the rest as dropped.
//!
//! Its own test binary, because it counts every heap byte of the process with a counting
//! global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use blockpool::event::{ContextTable, Frame, DEFAULT_MAX_CONTEXTS};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to `System` unchanged; the counter is only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's obligations are `System`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const MIB: usize = 1 << 20;

#[test]
fn a_million_distinct_stacks_stay_within_a_fixed_memory_bound() {
    let table = ContextTable::default();
    let (name, file): (Arc<str>, Arc<str>) = ("train_step".into(), "src/train.rs".into());
    // Eight frames a stack, the innermost line making each stack distinct.
    let stack = |i: u32| -> Vec<Frame> {
        (0..8)
            .map(|depth| Frame {
                name: Arc::clone(&name),
                filename: Arc::clone(&file),
                line: if depth == 0 { i } else { depth },
            })
            .collect()
    };
    let before = LIVE.load(Ordering::Relaxed);
    let mut at_full = 0;
    for i in 0..1_000_000u32 {
        table.intern(stack(i));
        if table.len() == DEFAULT_MAX_CONTEXTS && at_full == 0 {
            at_full = LIVE.load(Ordering::Relaxed);
        }
    }
    let after = LIVE.load(Ordering::Relaxed);
    assert_eq!(
        table.len(),
        DEFAULT_MAX_CONTEXTS,
        "the table keeps its bound"
    );
    assert_eq!(
        table.dropped(),
        1_000_000 - (DEFAULT_MAX_CONTEXTS as u64 - 1),
        "every stack past the bound is counted"
    );
    assert!(
        after - before < 48 * MIB,
        "{} MiB for the table's {} contexts",
        (after - before) / MIB,
        DEFAULT_MAX_CONTEXTS
    );
    assert!(
        after <= at_full + MIB,
        "memory grew by {} bytes after the table was full",
        after.saturating_sub(at_full)
    );
    drop(table);
    assert!(
        LIVE.load(Ordering::Relaxed) <= before + MIB,
        "dropping the table (the allocator's) gives its memory back"
    );
}
