//! Reading text files one bounded line at a time, for the trace readers that stream their
//! input (JSON Lines, RMM's CSV): a line longer than the limit is refused before it is held,
//! so no input can make a reader hold more than one limit's worth of a line. Both readers are
//! iterators that stop at their first error, through [`impl_record_iterator`].

use std::io::{self, BufRead};

/// Why [`read_line`] stopped.
#[derive(Debug)]
pub(crate) enum LineError {
    /// The line is longer than the limit.
    TooLong,
    /// The input failed; what was read of the line is in the buffer.
    Io(io::Error),
}

/// Reads the next line of `input` into `line` (cleared first, without its `\n`), refusing one
/// of more than `max_bytes`. `Some(true)` for a line with its ending, `Some(false)` for a last
/// line without one, `None` at the end of the input.
pub(crate) fn read_line<R: BufRead>(
    input: &mut R,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> Result<Option<bool>, LineError> {
    line.clear();
    let mut read_any = false;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if available.is_empty() {
            return Ok(read_any.then_some(false));
        }
        read_any = true;
        let newline = available.iter().position(|&b| b == b'\n');
        let content = newline.unwrap_or(available.len());
        if line.len() + content > max_bytes {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&available[..content]);
        match newline {
            Some(at) => {
                input.consume(at + 1);
                return Ok(Some(true));
            }
            None => input.consume(content),
        }
    }
}

/// Consumes the whitespace-only lines at the front of `input` (with their line ends) and
/// returns how many there were: a stretch of blank lines costs one scan of its bytes, not a
/// line read each, so a compressed file of nothing but blank lines is read at the speed of
/// decompression. A blank stretch that a buffer boundary cuts is left to [`read_line`].
pub(crate) fn skip_blank_lines<R: BufRead>(input: &mut R) -> Result<u64, LineError> {
    let mut skipped = 0u64;
    loop {
        let available = match input.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        let blank = available
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(available.len());
        let Some(last_end) = available[..blank].iter().rposition(|&b| b == b'\n') else {
            return Ok(skipped);
        };
        let lines = available[..=last_end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        skipped += lines as u64;
        let more = blank == available.len();
        input.consume(last_end + 1);
        if !more {
            return Ok(skipped);
        }
    }
}

/// Implements `Iterator` and `FusedIterator` for the streaming reader `$reader<R: BufRead>`:
/// it yields `Result<$record, $error>` until the end of its input or its first error, and
/// nothing after either. The reader provides `fn next_record(&mut self) ->
/// Result<Option<$record>, $error>` (`None` at the end of the input) and a `finished: bool`
/// field, false until then.
macro_rules! impl_record_iterator {
    ($reader:ident, $record:ty, $error:ty) => {
        impl<R: ::std::io::BufRead> ::std::iter::Iterator for $reader<R> {
            type Item = ::std::result::Result<$record, $error>;

            fn next(&mut self) -> ::std::option::Option<Self::Item> {
                if self.finished {
                    return None;
                }
                let next = self.next_record();
                if !matches!(next, Ok(Some(_))) {
                    self.finished = true;
                }
                next.transpose()
            }
        }

        impl<R: ::std::io::BufRead> ::std::iter::FusedIterator for $reader<R> {}
    };
}
pub(crate) use impl_record_iterator;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_are_skipped_whole_and_counted() {
        let mut input = io::BufReader::with_capacity(8, &b"\n \n\t\r\n\n  {\"a\":1}\n"[..]);
        assert_eq!(skip_blank_lines(&mut input).ok(), Some(4));
        let mut line = Vec::new();
        assert!(matches!(
            read_line(&mut input, &mut line, 64),
            Ok(Some(true))
        ));
        assert_eq!(
            line, b"  {\"a\":1}",
            "the next line keeps its leading blanks"
        );
        assert_eq!(skip_blank_lines(&mut input).ok(), Some(0));
        let mut empty: &[u8] = b"";
        assert_eq!(skip_blank_lines(&mut empty).ok(), Some(0));
    }

    #[test]
    fn lines_are_read_whole_bounded_and_the_last_may_lack_its_ending() {
        let mut input: &[u8] = b"ab\n\ncdef";
        let mut line = Vec::new();
        assert!(matches!(
            read_line(&mut input, &mut line, 4),
            Ok(Some(true))
        ));
        assert_eq!(line, b"ab");
        assert!(matches!(
            read_line(&mut input, &mut line, 4),
            Ok(Some(true))
        ));
        assert_eq!(line, b"");
        assert!(matches!(
            read_line(&mut input, &mut line, 4),
            Ok(Some(false))
        ));
        assert_eq!(line, b"cdef");
        assert!(matches!(read_line(&mut input, &mut line, 4), Ok(None)));
        let mut long: &[u8] = b"abcde\n";
        assert!(matches!(
            read_line(&mut long, &mut line, 4),
            Err(LineError::TooLong)
        ));
    }
}
