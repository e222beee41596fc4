//! The import cache: a large trace is read once, and every later command (and the viewer) on
//! the same file reads the import back instead, in a fraction of the time. An entry is one
//! file per trace in the cache folder, named by the trace's path, holding a header (the trace's
//! path, size, modification time and a hash of its whole content; the entry's own length and
//! hash) and the imported snapshot (serde, postcard). It is used only when all of that still
//! holds, so an entry is never trusted without its check: a trace edited in place, copied over
//! with its old time, or an entry cut short or damaged is read again from the trace; and the
//! snapshot read back passes the checks the import makes of every trace
//! ([`Snapshot::validate`]). Entries
//! are safe to delete at any time; the folder is kept under a size, oldest used first out.
//!
//! Settings (environment): `MEMTRACE_CACHE=off` turns the cache off; `MEMTRACE_CACHE_DIR` is
//! the folder (default `$XDG_CACHE_HOME/memtrace`, else `~/.cache/memtrace`);
//! `MEMTRACE_CACHE_MIN_BYTES` the smallest trace cached (default 16 MiB: smaller ones read in
//! well under a second); `MEMTRACE_CACHE_MAX_BYTES` the folder's size (default 4 GiB).

use blockpool::trace::file::{LoadedTrace, TraceFormat};
use blockpool::trace::Snapshot;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use twox_hash::XxHash3_128;

/// The environment variable that turns the cache off (`off`).
pub const CACHE_ENV: &str = "MEMTRACE_CACHE";
/// The environment variable naming the cache folder.
pub const CACHE_DIR_ENV: &str = "MEMTRACE_CACHE_DIR";
/// The environment variable with the smallest trace cached, in bytes.
pub const CACHE_MIN_BYTES_ENV: &str = "MEMTRACE_CACHE_MIN_BYTES";
/// The environment variable with the folder's largest size, in bytes.
pub const CACHE_MAX_BYTES_ENV: &str = "MEMTRACE_CACHE_MAX_BYTES";

const DEFAULT_MIN_BYTES: u64 = 16 << 20;
const DEFAULT_MAX_BYTES: u64 = 4 << 30;
/// What every entry starts with.
const MAGIC: &[u8; 22] = b"memtrace import cache\n";
/// The entry layout; raised when it, or a stored type, changes.
const LAYOUT: u32 = 1;
/// An entry's file name ends with this.
const EXTENSION: &str = "snapshot";

/// What an entry says of itself and of its trace.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Header {
    layout: u32,
    /// The memtrace build that wrote it: another one may import differently.
    build: String,
    source: PathBuf,
    size: u64,
    modified_ns: u128,
    source_hash: u128,
    payload_len: u64,
    payload_hash: u128,
}

/// What an entry holds.
#[derive(Deserialize)]
struct Payload {
    format: TraceFormat,
    gzip: bool,
    snapshot: Snapshot,
}

/// A [`Payload`] to write, borrowing the snapshot (the same encoding).
#[derive(Serialize)]
struct PayloadRef<'a> {
    format: TraceFormat,
    gzip: bool,
    snapshot: &'a Snapshot,
}

/// The cache, as the environment sets it.
pub struct Cache {
    dir: PathBuf,
    min_bytes: u64,
    max_bytes: u64,
}

impl Cache {
    /// The cache the environment asks for; `None` when it is off or there is no folder for it.
    pub fn from_env() -> Option<Cache> {
        if std::env::var(CACHE_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("off")) {
            return None;
        }
        let dir = match std::env::var_os(CACHE_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => match std::env::var_os("XDG_CACHE_HOME") {
                Some(base) if !base.is_empty() => PathBuf::from(base).join("memtrace"),
                _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache/memtrace"),
            },
        };
        let bytes = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(default)
        };
        Some(Cache {
            dir,
            min_bytes: bytes(CACHE_MIN_BYTES_ENV, DEFAULT_MIN_BYTES),
            max_bytes: bytes(CACHE_MAX_BYTES_ENV, DEFAULT_MAX_BYTES),
        })
    }

    /// Whether `path` is large enough to be cached.
    pub fn wants(&self, path: &Path) -> bool {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() >= self.min_bytes)
    }

    /// The import of `path` from its entry, when there is one and every check holds.
    pub fn load(&self, path: &Path) -> Option<LoadedTrace> {
        let source = path.canonicalize().ok()?;
        let entry = self.entry_of(&source);
        let loaded = read_entry(&entry, &source);
        if loaded.is_some() {
            // Used now: the last to leave when the folder is trimmed.
            let _ = File::options()
                .append(true)
                .open(&entry)
                .and_then(|f| f.set_modified(SystemTime::now()));
        }
        loaded
    }

    /// Writes the entry of `path`, then trims the folder. A failure leaves no entry.
    pub fn store(&self, path: &Path, trace: &LoadedTrace) -> std::io::Result<()> {
        let source = path.canonicalize()?;
        std::fs::create_dir_all(&self.dir)?;
        let entry = self.entry_of(&source);
        let partial = entry.with_extension(format!("partial-{}", std::process::id()));
        let written =
            write_entry(&partial, &source, trace).and_then(|()| std::fs::rename(&partial, &entry));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        written?;
        self.trim(&entry);
        Ok(())
    }

    /// The entry of the trace at the canonical path `source`.
    fn entry_of(&self, source: &Path) -> PathBuf {
        let name = XxHash3_128::oneshot(source.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{name:032x}.{EXTENSION}"))
    }

    /// Removes the least recently used entries, never `keep`, until the folder is within its
    /// size.
    fn trim(&self, keep: &Path) {
        let Ok(listing) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == EXTENSION))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// The file's size and modification time.
fn stamp(path: &Path) -> std::io::Result<(u64, u128)> {
    let meta = std::fs::metadata(path)?;
    let modified = meta
        .modified()?
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    Ok((meta.len(), modified))
}

/// The hash of the file's whole content.
fn hash_file(path: &Path) -> std::io::Result<u128> {
    let mut hasher = XxHash3_128::new();
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            return Ok(hasher.finish_128());
        }
        hasher.write(&buffer[..n]);
    }
}

fn write_entry(entry: &Path, source: &Path, trace: &LoadedTrace) -> std::io::Result<()> {
    let invalid = |e: postcard::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let (size, modified_ns) = stamp(source)?;
    let source_hash = hash_file(source)?;
    let payload = postcard::to_allocvec(&PayloadRef {
        format: trace.format,
        gzip: trace.gzip,
        snapshot: &trace.snapshot,
    })
    .map_err(invalid)?;
    // The trace must not have changed while it was read and hashed.
    if stamp(source)? != (size, modified_ns) {
        return Err(std::io::Error::other("the trace changed while it was read"));
    }
    let header = postcard::to_allocvec(&Header {
        layout: LAYOUT,
        build: build_version(),
        source: source.to_owned(),
        size,
        modified_ns,
        source_hash,
        payload_len: payload.len() as u64,
        payload_hash: XxHash3_128::oneshot(&payload),
    })
    .map_err(invalid)?;
    let mut out = BufWriter::new(File::create(entry)?);
    out.write_all(MAGIC)?;
    out.write_all(&(header.len() as u32).to_le_bytes())?;
    out.write_all(&header)?;
    out.write_all(&payload)?;
    // Not synced to the disk: an entry a crash cuts short fails its length or hash check.
    out.flush()
}

/// The entry's import, when its header matches `source` as it is now and its payload is whole.
fn read_entry(entry: &Path, source: &Path) -> Option<LoadedTrace> {
    let mut file = BufReader::new(File::open(entry).ok()?);
    let mut magic = [0u8; MAGIC.len()];
    file.read_exact(&mut magic).ok()?;
    let mut length = [0u8; 4];
    file.read_exact(&mut length).ok()?;
    let length = u32::from_le_bytes(length);
    // A header is a few hundred bytes; a larger length is damage.
    if magic != *MAGIC || length > 1 << 16 {
        return None;
    }
    let mut header = vec![0u8; length as usize];
    file.read_exact(&mut header).ok()?;
    let header: Header = postcard::from_bytes(&header).ok()?;
    let (size, modified_ns) = stamp(source).ok()?;
    let entry_len = std::fs::metadata(entry).ok()?.len();
    let expected_len = (MAGIC.len() as u64 + 4 + u64::from(length)).checked_add(header.payload_len);
    if header.layout != LAYOUT
        || header.build != build_version()
        || header.source != source
        || (header.size, header.modified_ns) != (size, modified_ns)
        || expected_len != Some(entry_len)
        || hash_file(source).ok()? != header.source_hash
    {
        return None;
    }
    let mut payload = Vec::new();
    payload
        .try_reserve_exact(header.payload_len as usize)
        .ok()?;
    file.read_to_end(&mut payload).ok()?;
    if XxHash3_128::oneshot(&payload) != header.payload_hash {
        return None;
    }
    let payload: Payload = postcard::from_bytes(&payload).ok()?;
    // What the import checks of every trace it reads holds of what it reads back too.
    payload.snapshot.validate().ok()?;
    Some(LoadedTrace {
        format: payload.format,
        gzip: payload.gzip,
        snapshot: payload.snapshot,
    })
}

/// This memtrace build: its version, and the size and time of its executable, so that a
/// rebuilt memtrace (whose import may differ) reads every trace again.
fn build_version() -> String {
    let build = std::env::current_exe()
        .ok()
        .and_then(|exe| stamp(&exe).ok())
        .unwrap_or_default();
    format!("{} {}:{}", env!("CARGO_PKG_VERSION"), build.0, build.1)
}
