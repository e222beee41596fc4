//! RMM's CSV allocation log, as `rmm::mr::logging_resource_adaptor` writes it: reader and
//! writer.
//!
//! RAPIDS RMM (the memory manager of cuDF, cuML and Spark RAPIDS) can log every allocation and
//! free of a memory resource. The log is a CSV file with the header
//! `Thread,Time,Action,Pointer,Size,Stream` and one line per event:
//!
//! ```text
//! Thread,Time,Action,Pointer,Size,Stream
//! 2342727,15:47:02.841961,allocate,0x10012400000,1048576,0
//! 2342727,15:47:02.841977,free,0x10012400000,1048576,0
//! 1979932,14:21:19.998533,allocate failure,(nil),256,0x2
//! ```
//!
//! What each field holds, from RMM's source (`logging_resource_adaptor_impl.cpp`: spdlog pattern
//! `%t,%H:%M:%S.%f,%v`, message `"<action>,%p,%zu,%s"`) and its history:
//!
//! | column | written by current RMM as | older RMM | read into |
//! |---|---|---|---|
//! | `Thread` | the OS thread id (`gettid`), decimal | none before 0.14.1 (refused) | [`RmmRecord::thread`] |
//! | `Time` | local wall-clock time `HH:MM:SS.ffffff`, no date | `HH:MM:SS:ffffff` before 21.06 | [`RmmRecord::time_us`], microseconds since local midnight |
//! | `Action` | `allocate`, `free` or `allocate failure` | no `allocate failure` before 22.04 | [`RmmAction`] |
//! | `Pointer` | `%p`: `0x` and hex, `(nil)` for null | `0x0` for null before 24.12 | [`RmmRecord::pointer`], `None` for null |
//! | `Size` | bytes asked or freed, decimal | same | [`RmmRecord::size`] |
//! | `Stream` | `std::hex` of the `cudaStream_t`: `0` (default stream), `0x2` (per-thread) | `0x0` for the default stream before 24.12 | [`RmmRecord::stream`] |
//!
//! The reader ([`read_rmm_csv`], or [`RmmReader`] to stream records one at a time) checks
//! every field and reports the first bad one with its 1-based line number and text
//! ([`RmmError`]); it never panics and holds at most [`MAX_LINE_BYTES`] of one line at a time.
//! The writer ([`write_rmm_csv`]) writes what current RMM writes, so reading what it wrote
//! gives back the same records.
//!
//! [`snapshot_from_rmm`] turns a log into a [`Snapshot`](crate::trace::Snapshot) (thread ids
//! become `thread <id>` tags) and [`snapshot_to_rmm`] turns a snapshot's allocations, frees and
//! failures back into records, so a log converted both ways comes back unchanged.
//!
//! ```
//! use blockpool::trace::rmm::{read_rmm_csv, write_rmm_csv, RmmAction};
//!
//! let log = "Thread,Time,Action,Pointer,Size,Stream\n\
//!            2342727,15:47:02.841961,allocate,0x10012400000,1048576,0\n";
//! let records = read_rmm_csv(log.as_bytes())?;
//! assert_eq!(records[0].action, RmmAction::Allocate);
//! assert_eq!(records[0].pointer.map(|p| p.get()), Some(0x100_1240_0000));
//! assert_eq!(records[0].time_us, ((15 * 60 + 47) * 60 + 2) * 1_000_000 + 841_961);
//!
//! let mut out = Vec::new();
//! write_rmm_csv(&records, &mut out)?;
//! assert_eq!(String::from_utf8(out)?, log);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod convert;
mod error;
mod reader;
mod record;
mod writer;

pub use convert::{snapshot_from_rmm, snapshot_to_rmm, RmmImport};
pub use error::{FieldProblem, RmmError, RmmField};
pub use reader::{read_rmm_csv, RmmReader, MAX_LINE_BYTES};
pub use record::{time_of_day_us, RmmAction, RmmRecord, HEADER, MICROS_PER_DAY};
pub use writer::write_rmm_csv;
