//! The import cache: a second command on a trace reads the cache entry (the same file, not
//! rewritten) and answers the same; a trace changed in any way (its size, or its content under
//! the old size and time) and an entry damaged in any way are read again from the trace; the
//! settings in the environment turn it off, set what is cached and bound the folder.
#![cfg(unix)]

mod common;

use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
use common::{memtrace_with_env, scratch, stderr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A fresh folder holding a trace of `allocations` allocations, and a cache folder beside it.
fn setup(name: &str, allocations: usize) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let trace = dir.join("trace.jsonl");
    write_trace(&trace, allocations);
    (trace, dir.join("cache"))
}

/// Writes a trace of `allocations` allocations of 64 KiB, 128 KiB, ... to `trace`.
fn write_trace(trace: &Path, allocations: usize) {
    let alloc = CachingAllocator::new(SimBackend::new(1, 8 << 30), AllocatorConfig::default());
    alloc
        .record_memory_history(HistorySettings::default())
        .expect("records");
    let kept: Vec<_> = (0..allocations)
        .map(|i| {
            alloc
                .allocate(0, (i + 1) << 16, StreamId::DEFAULT)
                .expect("fits")
        })
        .collect();
    alloc.dump_snapshot(trace).expect("writes the trace");
    drop(kept);
}

/// `memtrace summary TRACE --json` with the cache in `cache`, every trace cached, and `env`.
fn summary(trace: &Path, cache: &Path, env: &[(&str, &str)]) -> String {
    let mut all = vec![
        ("MEMTRACE_CACHE_DIR", cache.to_str().unwrap()),
        ("MEMTRACE_CACHE_MIN_BYTES", "0"),
    ];
    all.extend_from_slice(env);
    let output = memtrace_with_env(&["summary", trace.to_str().unwrap(), "--json"], &all);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The cache's entries.
fn entries(cache: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(cache) {
        Ok(listing) => listing.map(|e| e.expect("entry").path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn only_entry(cache: &Path) -> PathBuf {
    let all = entries(cache);
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().expect("one")
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).expect("exists").ino()
}

#[test]
fn the_second_command_reads_the_entry_and_answers_the_same() {
    let (trace, cache) = setup("hit", 3);
    let first = summary(&trace, &cache, &[]);
    let entry = only_entry(&cache);
    assert!(entry.extension().is_some_and(|e| e == "snapshot"));
    let written = inode(&entry);
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    std::fs::File::options()
        .append(true)
        .open(&entry)
        .and_then(|f| f.set_modified(old))
        .expect("sets the time");

    assert_eq!(summary(&trace, &cache, &[]), first);
    // Read, not rewritten (a new entry is a new file), and marked used.
    assert_eq!(inode(&entry), written);
    assert!(std::fs::metadata(&entry).unwrap().modified().unwrap() > old);
    // The same as without the cache.
    assert_eq!(summary(&trace, &cache, &[("MEMTRACE_CACHE", "off")]), first);
}

#[test]
fn a_changed_trace_is_read_again() {
    let (trace, cache) = setup("changed", 3);
    let first = summary(&trace, &cache, &[]);
    let entry = only_entry(&cache);

    // One more allocation: another size.
    write_trace(&trace, 4);
    let longer = summary(&trace, &cache, &[("MEMTRACE_CACHE", "off")]);
    assert_ne!(longer, first);
    let written = inode(&entry);
    assert_eq!(summary(&trace, &cache, &[]), longer);
    assert_ne!(
        inode(&only_entry(&cache)),
        written,
        "the entry is written again"
    );

    // Another content under the same size and time: a time of the last event, digit for digit.
    let before = std::fs::metadata(&trace).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    let at = text.rfind("\"time_us\":").expect("a time") + "\"time_us\":".len();
    let digit = text.as_bytes()[at];
    let other = if digit == b'9' { b'8' } else { digit + 1 };
    let mut bytes = text.into_bytes();
    bytes[at] = other;
    std::fs::write(&trace, &bytes).unwrap();
    std::fs::File::options()
        .append(true)
        .open(&trace)
        .and_then(|f| f.set_modified(before))
        .unwrap();
    let edited = summary(&trace, &cache, &[("MEMTRACE_CACHE", "off")]);
    assert_ne!(edited, longer);
    assert_eq!(summary(&trace, &cache, &[]), edited);
}

#[test]
fn a_damaged_entry_is_never_trusted() {
    let (trace, cache) = setup("damaged", 4);
    let first = summary(&trace, &cache, &[]);
    let entry = only_entry(&cache);
    let whole = std::fs::read(&entry).unwrap();
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("the last byte flipped", {
            let mut b = whole.clone();
            *b.last_mut().unwrap() ^= 0x40;
            b
        }),
        ("a byte of the header flipped", {
            let mut b = whole.clone();
            b[30] ^= 0x01;
            b
        }),
        ("cut short", whole[..whole.len() / 2].to_vec()),
        ("one byte more", [whole.as_slice(), b"x"].concat()),
        ("empty", Vec::new()),
        (
            "another file's bytes",
            b"memtrace import cache\n\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (what, bytes) in damages {
        std::fs::write(&entry, &bytes).unwrap();
        assert_eq!(summary(&trace, &cache, &[]), first, "{what}");
        assert_eq!(
            std::fs::read(&entry).unwrap(),
            whole,
            "{what}: written again"
        );
    }
}

#[test]
fn the_environment_turns_it_off_sets_the_size_cached_and_bounds_the_folder() {
    let (trace, cache) = setup("settings", 2);
    summary(&trace, &cache, &[("MEMTRACE_CACHE", "off")]);
    assert!(entries(&cache).is_empty());
    // A small trace is not cached by default (16 MiB and up are).
    let output = memtrace_with_env(
        &["summary", trace.to_str().unwrap()],
        &[("MEMTRACE_CACHE_DIR", cache.to_str().unwrap())],
    );
    assert!(output.status.success());
    assert!(entries(&cache).is_empty());

    // A folder of at most 1 byte keeps only the entry just written.
    let (other, _) = setup("settings-other", 5);
    summary(&trace, &cache, &[]);
    let first = only_entry(&cache);
    summary(&other, &cache, &[("MEMTRACE_CACHE_MAX_BYTES", "1")]);
    let second = only_entry(&cache);
    assert_ne!(first, second);
}

#[test]
fn a_cache_that_cannot_be_written_is_one_note() {
    let (trace, dir) = setup("unwritable", 2);
    // The cache "folder" is a file: nothing can be written there.
    std::fs::write(&dir, "not a folder").unwrap();
    let output = memtrace_with_env(
        &["summary", trace.to_str().unwrap(), "--json"],
        &[
            ("MEMTRACE_CACHE_DIR", dir.to_str().unwrap()),
            ("MEMTRACE_CACHE_MIN_BYTES", "0"),
        ],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let note = stderr(&output);
    assert!(
        note.starts_with("memtrace: note: the import cache was not written (")
            && note.ends_with("MEMTRACE_CACHE=off stops trying\n")
            && note.lines().count() == 1,
        "{note}"
    );
}
