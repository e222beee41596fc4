//! blockpool's native trace file: JSON Lines, written while the program runs and read in one
//! pass.
//!
//! # The format (version 1)
//!
//! A UTF-8 text file of one JSON object per line (`\n` endings), gzip-compressed when its name
//! ends in `.gz`. Readers recognise gzip by its magic bytes, not the name. The kind of a line
//! is the first of these keys it has: `blockpool_trace`, `frame`, `event`, `segment`, `end`,
//! `context`. Readers skip keys they do not know, so later versions can add fields.
//!
//! | line | fields | notes |
//! |---|---|---|
//! | header (line 1, exactly once) | `blockpool_trace` (format version), `created_by`, `time_origin_unix_us`, `allocator_config` | readers refuse a version they do not know |
//! | frame | `frame` (id ≥ 1), `name`, `file` (default `""`), `line` (default 0) | before the first context that uses it |
//! | context | `context` (id ≥ 1), `tags` (outermost first), `frames` (frame ids, innermost first) | before the first line that uses it |
//! | event | `event` (an [`Action`](crate::trace::Action) name), `device`, `stream` (default 0), `addr`, `size`, `requested` (default 0), `time_us`, `context` (default 0 = none) | in the order recorded; each device's in time order |
//! | segment | `segment` (address), `device`, `size`, `stream` (default 0), `pool` (`small` / `large`), `expandable` (default `false`: mapped memory of an expandable segment), `context` (default 0), `blocks`: `[address, size, requested, state, context]` each | the end state; blocks tile the segment |
//! | end | `end`: `{"events": N, "segments": M, "dropped_events": K}` | last line, written on a clean close |
//!
//! Ids are local to the file. Times are microseconds since `time_origin_unix_us`. A file with
//! no end line (a streaming run that crashed) reads up to its last complete line; a last line
//! cut short (no line ending, not valid JSON) is dropped and reported in [`ReadReport`], not
//! an error. Every other problem is a [`JsonlError`] naming the line. Lines are at most
//! [`MAX_LINE_BYTES`].
//!
//! ```text
//! {"blockpool_trace":1,"created_by":"blockpool 0.1.0","time_origin_unix_us":1700000000000000,"allocator_config":"max_split_size_mb:512"}
//! {"frame":1,"name":"train::step","file":"src/train.rs","line":42}
//! {"context":1,"tags":["layer3","attn"],"frames":[1]}
//! {"event":"segment_alloc","device":0,"addr":139637976727552,"size":2097152,"time_us":10,"context":1}
//! {"event":"alloc","device":0,"addr":139637976727552,"size":1024,"requested":1000,"time_us":10,"context":1}
//! {"segment":139637976727552,"device":0,"size":2097152,"pool":"small","blocks":[[139637976727552,1024,1000,"active_allocated",1],[139637976728576,2096128,0,"inactive",0]]}
//! {"end":{"events":2,"segments":1}}
//! ```
//!
//! # Use
//!
//! [`save`] / [`load`] a [`Snapshot`](crate::trace::Snapshot) (or [`write_snapshot`] /
//! [`read_snapshot`] over any writer and reader);
//! [`CachingAllocator::dump_snapshot`](crate::CachingAllocator::dump_snapshot) saves the
//! allocator's; [`CachingAllocator::stream_history_to`](crate::CachingAllocator::stream_history_to)
//! writes events to a file as they are recorded ([`HistoryStream`]). [`JsonlReader`] reads a
//! file one record at a time, for traces too large to hold; [`TraceWriter`] writes one line
//! at a time.
//!
//! ```
//! use blockpool::trace::jsonl::{read_snapshot, write_snapshot};
//! use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
//!
//! let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
//! alloc.record_memory_history(HistorySettings::default())?;
//! let a = alloc.allocate(0, 1000, StreamId::DEFAULT)?;
//! let snapshot = alloc.snapshot();
//! let mut file = Vec::new();
//! write_snapshot(&snapshot, &mut file)?;
//! let (read, report) = read_snapshot(file.as_slice())?;
//! assert_eq!(read, snapshot);
//! assert!(report.complete);
//! # drop(a);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod details;
mod error;
mod format;
mod line;
mod reader;
mod sink;
mod writer;

#[cfg(test)]
mod tests;

pub use error::JsonlError;
pub use format::{Header, ReadReport, FORMAT_VERSION, MAX_LINE_BYTES};
pub use reader::{load, read_snapshot, read_snapshot_with, JsonlReader, Record};
pub(crate) use sink::{spawn_stream, StreamSource, StreamState};
pub use sink::{HistoryStream, StreamSummary, FLUSH_INTERVAL};
pub(crate) use writer::create_file;
pub use writer::{save, write_snapshot, TraceWriter};
