//! Reading an RMM log: the header, then one [`RmmRecord`] per line, in one pass.
//!
//! Why a hand parser and not the `csv` crate: RMM writes its fields with `printf` and spdlog,
//! never quoted, and none can hold a comma, quote or newline (numbers, a fixed-width time, three
//! fixed action words, `(nil)`), so CSV's quoting rules never apply and splitting on `,` is
//! the whole grammar. Reading lines ourselves also bounds the memory one line may take
//! ([`MAX_LINE_BYTES`]) and lets every error name its line and field. A quoted field (a log
//! re-saved by a spreadsheet) is reported as a bad field rather than silently unquoted.
//!
//! What the reader accepts beyond what current RMM writes, each because some RMM version or a
//! common mishap produces it: the columns in any order and extra columns (RMM's own replay
//! parser looks columns up by name), a UTF-8 byte-order mark, `\r\n` line endings, the header
//! repeated (several adaptors logging to one stream), `0x0` for a null pointer and `0x` before
//! the stream (RMM before 24.12), and `:` before the microseconds (RMM before 21.06).

use super::error::{FieldProblem, RmmError, RmmField};
use super::record::{RmmAction, RmmRecord};
use crate::trace::lines::{impl_record_iterator, LineError};
use std::io::BufRead;
use std::num::NonZeroU64;

/// The longest line the reader accepts, in bytes, not counting the line ending. RMM's lines are
/// under 100 bytes; the limit only keeps a file that is not a log from being read whole into
/// one line.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Longest field or line text quoted in an error, in characters.
const MAX_QUOTED_CHARS: usize = 64;

/// Reads a whole RMM log into memory.
///
/// Stops at the first problem and reports it with its line; use [`RmmReader`] to keep the
/// records before a bad line (say, a last line cut short by a crash).
///
/// ```
/// use blockpool::trace::rmm::{read_rmm_csv, RmmAction};
///
/// let log = "Thread,Time,Action,Pointer,Size,Stream\n\
///            7,23:59:59.999999,allocate failure,(nil),1099511627776,0x2\n";
/// let records = read_rmm_csv(log.as_bytes())?;
/// assert_eq!(records.len(), 1);
/// assert_eq!(records[0].action, RmmAction::AllocateFailure);
/// assert_eq!((records[0].pointer, records[0].stream), (None, 2));
///
/// let bad = "Thread,Time,Action,Pointer,Size,Stream\n7,00:00:00.000000,free,0xZZ,8,0\n";
/// let err = read_rmm_csv(bad.as_bytes()).unwrap_err();
/// assert_eq!(err.to_string(), "line 2: pointer `0xZZ` is not hexadecimal");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_rmm_csv<R: BufRead>(r: R) -> Result<Vec<RmmRecord>, RmmError> {
    RmmReader::new(r)?.collect()
}

/// Reads an RMM log one record at a time: an iterator of `Result<RmmRecord, RmmError>`.
///
/// It holds one line (at most [`MAX_LINE_BYTES`]) and yields nothing more after its first
/// error.
///
/// ```
/// use blockpool::trace::rmm::RmmReader;
///
/// // A log whose last line was cut short by a crash.
/// let log = "Thread,Time,Action,Pointer,Size,Stream\n\
///            7,10:00:00.000001,allocate,0x7f0000000000,512,0\n\
///            7,10:00:00.00";
/// let mut reader = RmmReader::new(log.as_bytes())?;
/// assert_eq!(reader.next().transpose()?.map(|r| r.size), Some(512));
/// let err = reader.next().expect("the cut line is reported").unwrap_err();
/// assert_eq!(err.line(), Some(3));
/// assert!(reader.next().is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RmmReader<R> {
    input: R,
    /// Number of the line in `line`: 1-based, the header is 1.
    line_number: u64,
    /// The line being parsed, without its line ending.
    line: Vec<u8>,
    /// The header line, to skip it where it is repeated.
    header: Vec<u8>,
    /// For each column of the header, which field it holds, if one this reader reads.
    columns: Vec<Option<RmmField>>,
    /// Set after the end of input or the first error.
    finished: bool,
}

impl<R: BufRead> RmmReader<R> {
    /// Reads and checks the header (line 1); records are read as the iterator is advanced.
    ///
    /// Fails if the input is empty, the header lacks one of the six columns or names one twice.
    pub fn new(input: R) -> Result<Self, RmmError> {
        let mut reader = RmmReader {
            input,
            line_number: 0,
            line: Vec::new(),
            header: Vec::new(),
            columns: Vec::new(),
            finished: false,
        };
        if !reader.read_line()? {
            return Err(RmmError::Empty);
        }
        const BOM: &[u8] = "\u{feff}".as_bytes();
        if reader.line.starts_with(BOM) {
            reader.line.drain(..BOM.len());
        }
        reader.columns = parse_header(&reader.line, reader.line_number)?;
        std::mem::swap(&mut reader.header, &mut reader.line);
        Ok(reader)
    }

    /// The number of the last line read, or being read when an error stopped the reader
    /// (1-based; the header is line 1).
    pub fn line_number(&self) -> u64 {
        self.line_number
    }

    /// Reads the next line into `self.line` without its ending; `false` at the end of input.
    fn read_line(&mut self) -> Result<bool, RmmError> {
        let number = self.line_number + 1;
        let read = crate::trace::lines::read_line(&mut self.input, &mut self.line, MAX_LINE_BYTES)
            .map_err(|e| {
                self.line_number = number;
                match e {
                    LineError::TooLong => RmmError::LineTooLong {
                        line: number,
                        limit_bytes: MAX_LINE_BYTES,
                    },
                    LineError::Io(source) => RmmError::Io {
                        line: number,
                        source,
                    },
                }
            })?;
        if read.is_none() {
            return Ok(false);
        }
        self.line_number = number;
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        Ok(true)
    }

    fn next_record(&mut self) -> Result<Option<RmmRecord>, RmmError> {
        loop {
            if !self.read_line()? {
                return Ok(None);
            }
            if self.line != self.header {
                return parse_record(&self.line, self.line_number, &self.columns).map(Some);
            }
        }
    }
}

impl_record_iterator!(RmmReader, RmmRecord, RmmError);

/// Which field each header column holds; every field must be there exactly once.
fn parse_header(header: &[u8], line: u64) -> Result<Vec<Option<RmmField>>, RmmError> {
    let mut columns = Vec::new();
    for name in header.split(|&b| b == b',') {
        let field = RmmField::ALL
            .into_iter()
            .find(|field| field.column_name().as_bytes() == name);
        if let Some(field) = field {
            if columns.contains(&Some(field)) {
                return Err(RmmError::DuplicateColumn {
                    line,
                    column: field,
                });
            }
        }
        columns.push(field);
    }
    if let Some(column) = RmmField::ALL
        .into_iter()
        .find(|field| !columns.contains(&Some(*field)))
    {
        return Err(RmmError::MissingColumn {
            line,
            column,
            header: quote(header),
        });
    }
    Ok(columns)
}

/// One record from a line whose columns are `columns`.
fn parse_record(
    text: &[u8],
    line: u64,
    columns: &[Option<RmmField>],
) -> Result<RmmRecord, RmmError> {
    let found = if text.is_empty() {
        0
    } else {
        text.split(|&b| b == b',').count()
    };
    if found != columns.len() {
        return Err(RmmError::FieldCount {
            line,
            expected: columns.len(),
            found,
            text: quote(text),
        });
    }
    // The header check guarantees each field's column is present, so every slot is filled;
    // slots are indexed by `RmmField as usize`, the column's position in RMM's order.
    let mut fields: [&[u8]; 6] = [&[]; 6];
    for (value, column) in text.split(|&b| b == b',').zip(columns) {
        if let Some(field) = column {
            fields[*field as usize] = value;
        }
    }
    let action = |text: &[u8]| RmmAction::from_log_text(text).ok_or(FieldProblem::UnknownAction);
    Ok(RmmRecord {
        thread: parse_field(&fields, line, RmmField::Thread, parse_decimal)?,
        time_us: parse_field(&fields, line, RmmField::Time, parse_time_of_day)?,
        action: parse_field(&fields, line, RmmField::Action, action)?,
        pointer: parse_field(&fields, line, RmmField::Pointer, parse_pointer)?,
        size: parse_field(&fields, line, RmmField::Size, parse_decimal)?,
        stream: parse_field(&fields, line, RmmField::Stream, parse_stream)?,
    })
}

/// Parses one field, naming line, field and text if it is bad.
fn parse_field<T>(
    fields: &[&[u8]; 6],
    line: u64,
    field: RmmField,
    parse: impl Fn(&[u8]) -> Result<T, FieldProblem>,
) -> Result<T, RmmError> {
    let text = fields[field as usize];
    parse(text).map_err(|problem| RmmError::Field {
        line,
        field,
        text: quote(text),
        problem,
    })
}

/// An unsigned decimal integer: digits only (`str::parse` would also take a `+`).
fn parse_decimal(text: &[u8]) -> Result<u64, FieldProblem> {
    parse_digits(text, 10, FieldProblem::NotDecimal)
}

/// `%p`: `0x` and hex digits, `(nil)` for null (`0x0` in RMM before 24.12, also null).
fn parse_pointer(text: &[u8]) -> Result<Option<NonZeroU64>, FieldProblem> {
    if text == b"(nil)" {
        return Ok(None);
    }
    let digits = text
        .strip_prefix(b"0x")
        .ok_or(FieldProblem::NotHexadecimal)?;
    Ok(NonZeroU64::new(parse_digits(
        digits,
        16,
        FieldProblem::NotHexadecimal,
    )?))
}

/// A stream through `std::hex`: hex digits, with `0x` unless zero (fmt in RMM before 24.12
/// wrote `0x0` too).
fn parse_stream(text: &[u8]) -> Result<u64, FieldProblem> {
    parse_digits(
        text.strip_prefix(b"0x").unwrap_or(text),
        16,
        FieldProblem::NotHexadecimal,
    )
}

/// Digits of `radix` (10 or 16, either case), at least one, with no sign or space.
fn parse_digits(text: &[u8], radix: u32, not_digits: FieldProblem) -> Result<u64, FieldProblem> {
    if text.is_empty() {
        return Err(not_digits);
    }
    text.iter().try_fold(0u64, |value, &byte| {
        let digit = char::from(byte).to_digit(radix).ok_or(not_digits)?;
        value
            .checked_mul(u64::from(radix))
            .and_then(|value| value.checked_add(u64::from(digit)))
            .ok_or(FieldProblem::TooLarge)
    })
}

/// `HH:MM:SS.ffffff` (spdlog's `%H:%M:%S.%f`, `:` before the microseconds in RMM before 21.06)
/// as microseconds since midnight.
fn parse_time_of_day(text: &[u8]) -> Result<u64, FieldProblem> {
    let bad = FieldProblem::NotTimeOfDay;
    let [h1, h0, b':', m1, m0, b':', s1, s0, b'.' | b':', micros @ ..] = text else {
        return Err(bad);
    };
    if micros.len() != 6 {
        return Err(bad);
    }
    let two_digits = |tens: u8, ones: u8, limit: u64| {
        let value = parse_digits(&[tens, ones], 10, bad).map_err(|_| bad)?;
        if value < limit {
            Ok(value)
        } else {
            Err(bad)
        }
    };
    let hours = two_digits(*h1, *h0, 24)?;
    let minutes = two_digits(*m1, *m0, 60)?;
    let seconds = two_digits(*s1, *s0, 60)?;
    let micros = parse_digits(micros, 10, bad).map_err(|_| bad)?;
    Ok(((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros)
}

/// `bytes` for an error message: lossy UTF-8, at most [`MAX_QUOTED_CHARS`] characters.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_takes_digits_only() {
        assert_eq!(parse_decimal(b"007"), Ok(7));
        assert_eq!(parse_decimal(b"18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse_decimal(b"18446744073709551616"),
            Err(FieldProblem::TooLarge)
        );
        for bad in [&b""[..], b"+1", b"-1", b" 1", b"1 ", b"1e3", b"0x1"] {
            assert_eq!(
                parse_decimal(bad),
                Err(FieldProblem::NotDecimal),
                "`{}` must not be read as a decimal",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn pointer_is_hex_after_0x_or_nil() {
        assert_eq!(parse_pointer(b"(nil)"), Ok(None));
        assert_eq!(
            parse_pointer(b"0x0"),
            Ok(None),
            "fmt's null pointer is null"
        );
        assert_eq!(parse_pointer(b"0x7fAB"), Ok(NonZeroU64::new(0x7fab)));
        assert_eq!(
            parse_pointer(b"0xffffffffffffffff"),
            Ok(NonZeroU64::new(u64::MAX))
        );
        assert_eq!(
            parse_pointer(b"0x10000000000000000"),
            Err(FieldProblem::TooLarge)
        );
        for bad in [
            &b""[..],
            b"0x",
            b"7fab",
            b"0X7f",
            b"0x+7",
            b"(null)",
            b"nil",
        ] {
            assert_eq!(
                parse_pointer(bad),
                Err(FieldProblem::NotHexadecimal),
                "`{}` must not be read as a pointer",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn stream_is_hex_with_or_without_0x() {
        assert_eq!(parse_stream(b"0"), Ok(0));
        assert_eq!(parse_stream(b"0x0"), Ok(0));
        assert_eq!(parse_stream(b"0x2"), Ok(2));
        assert_eq!(
            parse_stream(b"10"),
            Ok(16),
            "digits without 0x are still hex"
        );
        assert_eq!(parse_stream(b"0x"), Err(FieldProblem::NotHexadecimal));
        assert_eq!(parse_stream(b"-1"), Err(FieldProblem::NotHexadecimal));
    }

    #[test]
    fn time_of_day_is_exact_and_bounded() {
        assert_eq!(parse_time_of_day(b"00:00:00.000000"), Ok(0));
        assert_eq!(
            parse_time_of_day(b"23:59:59.999999"),
            Ok(super::super::MICROS_PER_DAY - 1)
        );
        assert_eq!(
            parse_time_of_day(b"15:47:02:841961"),
            Ok(((15 * 60 + 47) * 60 + 2) * 1_000_000 + 841_961),
            "RMM before 21.06 wrote a colon before the microseconds"
        );
        for bad in [
            &b""[..],
            b"24:00:00.000000",
            b"12:60:00.000000",
            b"12:00:60.000000",
            b"12:00:00.00000",
            b"12:00:00.0000000",
            b"1:00:00.000000",
            b"12:00:00,000000",
            b"12:00:00.+00000",
            b"12:0a:00.000000",
        ] {
            assert_eq!(
                parse_time_of_day(bad),
                Err(FieldProblem::NotTimeOfDay),
                "`{}` must not be read as a time of day",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn long_text_is_shortened_in_errors() {
        let long = "x".repeat(1000);
        let quoted = quote(long.as_bytes());
        assert_eq!(quoted.chars().count(), MAX_QUOTED_CHARS + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(
            quote(b"ok\xff"),
            "ok\u{fffd}",
            "bytes that are not UTF-8 are shown as U+FFFD"
        );
    }
}
