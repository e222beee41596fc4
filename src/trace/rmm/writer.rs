//! Writing an RMM log exactly as current RMM (24.12 and later) writes one, so RMM's replay
//! benchmark and our reader both take it.

use super::record::{RmmRecord, HEADER, MICROS_PER_DAY};
use std::io::{self, BufWriter, Write};

/// Writes `records` as an RMM log: the header, then one line per record, `\n`-terminated.
///
/// Null pointers are written `(nil)`, others `0x` and lowercase hex (glibc's `%p`); stream 0
/// as `0` and others `0x` and hex (`std::hex` of a `cudaStream_t`). Reading the output with
/// [`read_rmm_csv`](super::read_rmm_csv) gives back `records`.
///
/// Fails with [`io::ErrorKind::InvalidInput`], before writing anything, if a record's
/// `time_us` is not a time of day (not below [`MICROS_PER_DAY`]); otherwise only when `w`
/// fails. Output is buffered internally and flushed before returning.
///
/// ```
/// use blockpool::trace::rmm::{write_rmm_csv, RmmAction, RmmRecord};
/// use std::num::NonZeroU64;
///
/// let record = RmmRecord {
///     thread: 1979932,
///     time_us: ((14 * 60 + 21) * 60 + 19) * 1_000_000 + 998_533,
///     action: RmmAction::Allocate,
///     pointer: NonZeroU64::new(0x30a000000),
///     size: 256,
///     stream: 2,
/// };
/// let mut out = Vec::new();
/// write_rmm_csv(&[record], &mut out)?;
/// assert_eq!(
///     String::from_utf8(out)?,
///     "Thread,Time,Action,Pointer,Size,Stream\n1979932,14:21:19.998533,allocate,0x30a000000,256,0x2\n"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_rmm_csv<W: Write>(records: &[RmmRecord], w: W) -> io::Result<()> {
    if let Some((index, record)) = records
        .iter()
        .enumerate()
        .find(|(_, record)| record.time_us >= MICROS_PER_DAY)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "record {index}: time {} µs is not a time of day (RMM logs have no date, so it \
                 must be below {MICROS_PER_DAY} µs)",
                record.time_us
            ),
        ));
    }
    let mut out = BufWriter::new(w);
    writeln!(out, "{HEADER}")?;
    for record in records {
        write_record(&mut out, record)?;
    }
    out.flush()
}

fn write_record(out: &mut impl Write, record: &RmmRecord) -> io::Result<()> {
    let seconds = record.time_us / 1_000_000;
    write!(
        out,
        "{},{:02}:{:02}:{:02}.{:06},{},",
        record.thread,
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        record.time_us % 1_000_000,
        record.action,
    )?;
    match record.pointer {
        Some(pointer) => write!(out, "{pointer:#x},")?,
        None => write!(out, "(nil),")?,
    }
    match record.stream {
        0 => writeln!(out, "{},0", record.size),
        stream => writeln!(out, "{},{stream:#x}", record.size),
    }
}
