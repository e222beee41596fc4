//! History recording, snapshot dumps (PyTorch's pickle, read back with the library's reader)
//! and annotation tags.

use std::ffi::CString;
use std::path::Path;

use blockpool::trace::pytorch::load_pytorch_snapshot_as_snapshot;
use blockpool::trace::{Action, Snapshot};
use blockpool_torch::*;

use crate::support::*;

fn dump(path: &Path) -> i32 {
    let path = CString::new(path.to_string_lossy().into_owned()).expect("no NUL in the path");
    // SAFETY: `path` is a live NUL-terminated string.
    unsafe { blockpool_dump_snapshot(path.as_ptr()) }
}

fn push(tag: &str) {
    let tag = CString::new(tag).expect("no NUL in the tag");
    // SAFETY: `tag` is a live NUL-terminated string.
    let pushed = unsafe { blockpool_annotate_push(tag.as_ptr()) };
    assert_eq!(pushed, BLOCKPOOL_OK);
}

fn load(path: &Path) -> Snapshot {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    load_pytorch_snapshot_as_snapshot(&bytes).expect("a PyTorch snapshot pickle")
}

/// Device `device`'s events, by action name.
fn actions(snapshot: &Snapshot, device: u32) -> Vec<&'static str> {
    snapshot
        .events
        .iter()
        .filter(|e| e.device == device)
        .map(|e| e.action.as_str())
        .collect()
}

#[test]
fn a_dumped_snapshot_is_a_pytorch_pickle_with_every_event_and_tag() {
    let _session = session();
    let scratch = Scratch::new("dump");
    assert_eq!(blockpool_record_memory_history(1, 0, 1), BLOCKPOOL_OK);
    push("forward");
    let p = malloc(4096, 0, 0);
    let q = malloc(8192, 0, 0);
    free(p, 0);
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_OK);
    assert_eq!(
        dump(&scratch.0.join("run-{rank}.pickle")),
        BLOCKPOOL_OK,
        "{}",
        last_error()
    );
    let path = scratch.0.join("run-0.pickle");
    let snapshot = load(&path);
    assert_eq!(
        actions(&snapshot, 0),
        [
            "annotate",
            "segment_alloc",
            "alloc",
            "alloc",
            "free_requested",
            "free_completed",
            "annotate",
            "snapshot"
        ]
    );
    assert_eq!(actions(&snapshot, 1), ["annotate", "annotate", "snapshot"]);
    let alloc = snapshot
        .events
        .iter()
        .find(|e| e.action == Action::Alloc)
        .expect("an alloc event");
    let tags = snapshot.contexts.get(alloc.context).map(|c| c.tags.clone());
    assert_eq!(
        tags,
        Some(vec!["forward".into()]),
        "the alloc carries its tag"
    );
    assert_eq!((alloc.size, alloc.requested), (4096, 4096));
    assert_eq!(snapshot.segments.len(), 1, "one small segment, holding q");
    free(q, 0);
    assert_eq!(blockpool_record_memory_history(0, 0, 0), BLOCKPOOL_OK);
}

#[test]
fn stopping_the_recording_keeps_it_for_later_dumps() {
    let _session = session();
    let scratch = Scratch::new("kept");
    assert_eq!(blockpool_record_memory_history(1, 0, 1), BLOCKPOOL_OK);
    let p = malloc(4096, 0, 0);
    assert_eq!(blockpool_record_memory_history(0, 0, 0), BLOCKPOOL_OK);
    let after_stop = malloc(1 << 20, 0, 0);
    let path = scratch.0.join("stopped.pickle");
    assert_eq!(dump(&path), BLOCKPOOL_OK, "{}", last_error());
    let snapshot = load(&path);
    // The snapshot taken when recording stopped: its events, and the state then (p only).
    assert_eq!(
        actions(&snapshot, 0),
        ["segment_alloc", "alloc", "snapshot"]
    );
    let live: Vec<u64> = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == blockpool::trace::BlockState::ActiveAllocated)
        .map(|b| b.size)
        .collect();
    assert_eq!(live, [4096], "after_stop is not in the kept state");
    // Starting again drops what was kept.
    assert_eq!(blockpool_record_memory_history(1, 10, 0), BLOCKPOOL_OK);
    assert_eq!(dump(&path), BLOCKPOOL_OK);
    assert_eq!(actions(&load(&path), 0), ["snapshot"]);
    assert_eq!(blockpool_record_memory_history(0, 0, 0), BLOCKPOOL_OK);
    free(p, 0);
    free(after_stop, 0);
}

#[test]
fn rank_names_the_file_and_bad_paths_are_errors() {
    let _session = session();
    let scratch = Scratch::new("rank");
    std::env::set_var("RANK", "3");
    assert_eq!(
        dump(&scratch.0.join("run-{rank}.pickle")),
        BLOCKPOOL_OK,
        "{}",
        last_error()
    );
    assert!(scratch.0.join("run-3.pickle").is_file(), "named by RANK");
    std::env::set_var("RANK", "three");
    assert_eq!(
        dump(&scratch.0.join("run-{rank}.pickle")),
        BLOCKPOOL_ERR_INVALID_ARGUMENT
    );
    assert!(
        last_error().starts_with("RANK is \"three\""),
        "{}",
        last_error()
    );
    assert_eq!(
        dump(&scratch.0.join("plain.pickle")),
        BLOCKPOOL_OK,
        "RANK unused, not read"
    );
    std::env::remove_var("RANK");
    let missing = scratch.0.join("no/such/dir/run.pickle");
    assert_eq!(dump(&missing), BLOCKPOOL_ERR_IO);
    assert!(
        last_error().starts_with(&format!("could not write {}: ", missing.display())),
        "{}",
        last_error()
    );
    // SAFETY: NULL is refused before it is read.
    let null = unsafe { blockpool_dump_snapshot(std::ptr::null()) };
    assert_eq!(null, BLOCKPOOL_ERR_INVALID_ARGUMENT);
    assert_eq!(last_error(), "path is NULL");
}

#[test]
fn history_settings_are_checked() {
    let _session = session();
    assert_eq!(
        blockpool_record_memory_history(1, 0, 3),
        BLOCKPOOL_ERR_INVALID_ARGUMENT
    );
    assert_eq!(
        last_error(),
        "history context 3 is not one of 0 (none), 1 (annotation tags), 2 (tags and native backtraces)"
    );
    assert_eq!(
        blockpool_record_memory_history(0, 0, 3),
        BLOCKPOOL_OK,
        "stopping ignores it"
    );
}

#[test]
fn annotation_tags_are_a_per_thread_stack() {
    let _session = session();
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_ERR_INVALID_ARGUMENT);
    // SAFETY: NULL is refused before it is read.
    let null = unsafe { blockpool_annotate_push(std::ptr::null()) };
    assert_eq!(null, BLOCKPOOL_ERR_INVALID_ARGUMENT);
    assert_eq!(last_error(), "tag is NULL");
    push("layer3");
    push("attn");
    let other_thread = std::thread::spawn(|| blockpool_annotate_pop())
        .join()
        .expect("runs");
    assert_eq!(
        other_thread, BLOCKPOOL_ERR_INVALID_ARGUMENT,
        "another thread has no tags"
    );
    let p = malloc(4096, 0, 0);
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_OK);
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_OK);
    assert_eq!(
        blockpool_annotate_pop(),
        BLOCKPOOL_ERR_INVALID_ARGUMENT,
        "both popped"
    );
    let site = &allocator()
        .expect("started")
        .live_allocations(0)
        .expect("device 0")[0]
        .site;
    assert!(
        site.starts_with("layer3/attn @ torch-plugin/src/memory.rs:"),
        "{site}"
    );
    free(p, 0);
}
