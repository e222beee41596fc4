//! RMM's CSV allocation log: the documented examples load to exact records, every malformed
//! field is reported with its line and text, and no input makes the reader panic.
//!
//! The fixture (`allocator-tests/fixtures/rmm/doc_examples.csv`) holds example lines from RMM's and
//! Spark RAPIDS' documentation; it must exist, so a missing fixture fails rather than skips.

use blockpool::trace::rmm::{
    read_rmm_csv, write_rmm_csv, FieldProblem, RmmAction, RmmError, RmmField, RmmReader, RmmRecord,
    MAX_LINE_BYTES, MICROS_PER_DAY,
};
use proptest::prelude::*;
use std::io::{self, BufRead, BufReader, Read};
use std::num::NonZeroU64;

const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream\n";

fn fixture(name: &str) -> Vec<u8> {
    let path = crate::fixtures::rmm_log_path(name);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} is missing or unreadable ({e}); it is required",
            path.display()
        )
    })
}

use blockpool::trace::rmm::time_of_day_us as time_us;

fn read_str(text: &str) -> Result<Vec<RmmRecord>, RmmError> {
    read_rmm_csv(text.as_bytes())
}

fn written(records: &[RmmRecord]) -> String {
    let mut out = Vec::new();
    write_rmm_csv(records, &mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("the writer writes ASCII")
}

#[test]
fn documented_examples_load_to_exact_records() {
    let records = read_rmm_csv(fixture("doc_examples.csv").as_slice())
        .unwrap_or_else(|e| panic!("doc_examples.csv must load: {e}"));
    assert_eq!(
        records,
        [
            RmmRecord::new(
                2342727,
                time_us(15, 47, 2, 841961),
                RmmAction::Allocate,
                0x100_1240_0000,
                1048576,
                0
            ),
            RmmRecord::new(
                2342727,
                time_us(15, 47, 2, 841977),
                RmmAction::Free,
                0x100_1240_0000,
                1048576,
                0
            ),
            RmmRecord::new(
                1979932,
                time_us(14, 21, 19, 998533),
                RmmAction::Allocate,
                0x3_0a00_0000,
                256,
                2
            ),
            RmmRecord::new(
                1980043,
                time_us(14, 21, 32, 661875),
                RmmAction::Free,
                0x3_0a00_0000,
                256,
                2
            ),
        ]
    );
}

#[test]
fn documented_examples_are_written_back_byte_for_byte() {
    let original = fixture("doc_examples.csv");
    let records = read_rmm_csv(original.as_slice()).expect("doc_examples.csv loads");
    assert_eq!(
        written(&records),
        String::from_utf8_lossy(&original),
        "the writer must write what current RMM writes"
    );
}

#[test]
fn allocate_failure_with_nil_pointer_is_read() {
    let records = read_str(&format!(
        "{HEADER}12,00:00:00.000001,allocate failure,(nil),1024,0x2\n"
    ))
    .expect("an allocate failure line is valid");
    assert_eq!(
        records,
        [RmmRecord::new(
            12,
            1,
            RmmAction::AllocateFailure,
            0,
            1024,
            2
        )]
    );
}

/// Every malformed field, put in place of one field of a valid line: the message names line 3
/// (after a valid line 2), the field and its text, and the error carries them typed.
#[test]
fn every_malformed_field_is_reported_with_line_and_text() {
    use FieldProblem::*;
    use RmmField::*;
    let good = ["1", "10:00:00.000000", "allocate", "0x1000", "8", "0"];
    let too_large = "18446744073709551616";
    #[rustfmt::skip]
    let cases: &[(RmmField, &str, FieldProblem)] = &[
        (Thread, "x1", NotDecimal), (Thread, "-1", NotDecimal), (Thread, "+1", NotDecimal),
        (Thread, "", NotDecimal), (Thread, " 1", NotDecimal), (Thread, too_large, TooLarge),
        (Time, "24:00:00.000000", NotTimeOfDay), (Time, "10:00:00", NotTimeOfDay),
        (Time, "10:00:00.0000001", NotTimeOfDay), (Time, "2024-01-01 10:00:00.000000", NotTimeOfDay),
        (Time, "", NotTimeOfDay),
        (Action, "Free", UnknownAction), (Action, "allocate_failure", UnknownAction),
        (Action, "\"free\"", UnknownAction), (Action, "free ", UnknownAction), (Action, "", UnknownAction),
        (Pointer, "0xZZ", NotHexadecimal), (Pointer, "1000", NotHexadecimal),
        (Pointer, "(null)", NotHexadecimal), (Pointer, "0x", NotHexadecimal), (Pointer, "", NotHexadecimal),
        (Pointer, "0x1ffffffffffffffff", TooLarge),
        (Size, "8.5", NotDecimal), (Size, "0x8", NotDecimal), (Size, "", NotDecimal),
        (Size, too_large, TooLarge),
        (Stream, "0xg", NotHexadecimal), (Stream, "", NotHexadecimal), (Stream, "0x", NotHexadecimal),
        (Stream, "-1", NotHexadecimal), (Stream, "0x10000000000000000", TooLarge),
    ];
    for &(want_field, want_text, want_problem) in cases {
        let mut fields = good;
        fields[want_field as usize] = want_text;
        let line = fields.join(",");
        let err = read_str(&format!("{HEADER}{}\n{line}\n", good.join(",")))
            .expect_err(&format!("`{line}` must be refused"));
        assert_eq!(
            err.to_string(),
            format!("line 3: {want_field} `{want_text}` {want_problem}"),
            "message for `{line}`"
        );
        match err {
            RmmError::Field {
                line: 3,
                field,
                text,
                problem,
            } => assert_eq!(
                (field, text.as_str(), problem),
                (want_field, want_text, want_problem),
                "`{line}`"
            ),
            other => panic!("`{line}`: expected a field error on line 3, got {other:?}"),
        }
    }
}

#[test]
fn messages_read_as_sentences() {
    let err = read_str(&format!("{HEADER}1,10:00:00.000000,free,0xZZ,8,0\n")).unwrap_err();
    assert_eq!(err.to_string(), "line 2: pointer `0xZZ` is not hexadecimal");
    let err = read_str(&format!("{HEADER}1,10:00:00.000000,malloc,0x10,8,0\n")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: action `malloc` is not `allocate`, `free` or `allocate failure`"
    );
}

#[test]
fn lines_with_another_field_count_are_refused() {
    for (line, found) in [
        ("1,10:00:00.000000,free,0x10,8", 5),
        ("1,10:00:00.000000,free,0x10,8,0,extra", 7),
        ("", 0),
        ("1,10:00:00.00", 2),
    ] {
        let err = read_str(&format!(
            "{HEADER}{line}\n1,10:00:00.000000,free,0x10,8,0\n"
        ))
        .expect_err(&format!("`{line}` must be refused"));
        match &err {
            RmmError::FieldCount {
                line: 2,
                expected: 6,
                found: f,
                text,
            } => {
                assert_eq!((*f, text.as_str()), (found, line), "`{line}`");
            }
            other => panic!("`{line}`: expected a field-count error on line 2, got {other:?}"),
        }
        assert!(
            err.to_string()
                .starts_with("line 2: expected 6 comma-separated fields"),
            "{err}"
        );
    }
}

#[test]
fn header_problems_are_refused() {
    assert!(matches!(read_str(""), Err(RmmError::Empty)), "empty input");
    let cases: &[(&str, &str)] = &[
        // RMM 0.13 and 0.14 wrote no Thread column.
        (
            "Time,Action,Pointer,Size,Stream\n",
            "line 1: header `Time,Action,Pointer,Size,Stream` has no `Thread` column",
        ),
        (
            "thread,time,action,pointer,size,stream\n",
            "line 1: header `thread,time,action,pointer,size,stream` has no `Thread` column",
        ),
        (
            "1,10:00:00.000000,free,0x10,8,0\n",
            "line 1: header `1,10:00:00.000000,free,0x10,8,0` has no `Thread` column",
        ),
        (
            "Thread,Time,Action,Pointer,Size\n",
            "line 1: header `Thread,Time,Action,Pointer,Size` has no `Stream` column",
        ),
        (
            "Thread,Time,Action,Pointer,Size,Stream,Time\n",
            "line 1: header names the `Time` column twice",
        ),
    ];
    for &(input, message) in cases {
        let err = read_str(input).expect_err(&format!("header `{input}` must be refused"));
        assert_eq!(err.to_string(), message);
        assert_eq!(err.line(), Some(1));
    }
}

#[test]
fn variations_of_real_logs_are_accepted() {
    let want = [
        RmmRecord::new(1, time_us(10, 0, 0, 1), RmmAction::Allocate, 0x7f00, 512, 0),
        RmmRecord::new(
            1,
            time_us(10, 0, 0, 2),
            RmmAction::AllocateFailure,
            0,
            512,
            0x2,
        ),
    ];
    let cases = [
        // RMM 22.04 to 24.10 (fmt): null pointer and default stream as `0x0`.
        "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x7f00,512,0x0\n1,10:00:00.000002,allocate failure,0x0,512,0x2\n",
        // RMM before 21.06: a colon before the microseconds.
        "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00:000001,allocate,0x7f00,512,0\n1,10:00:00:000002,allocate failure,(nil),512,0x2\n",
        // Windows line endings, a byte-order mark, no final newline.
        "\u{feff}Thread,Time,Action,Pointer,Size,Stream\r\n1,10:00:00.000001,allocate,0x7f00,512,0\r\n1,10:00:00.000002,allocate failure,(nil),512,0x2",
        // The header repeated: two adaptors logging to one stream.
        "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x7f00,512,0\nThread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000002,allocate failure,(nil),512,0x2\n",
        // Columns looked up by name, as RMM's replay parser does; extra columns ignored.
        "Stream,Size,Note,Pointer,Action,Time,Thread\n0,512,a,0x7f00,allocate,10:00:00.000001,1\n2,512,b,(nil),allocate failure,10:00:00.000002,1\n",
        // Upper-case hex digits.
        "Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.000001,allocate,0x7F00,512,0\n1,10:00:00.000002,allocate failure,(nil),512,0x2\n",
    ];
    for (i, input) in cases.iter().enumerate() {
        match read_str(input) {
            Ok(records) => assert_eq!(records, want, "case {i}: {input:?}"),
            Err(e) => panic!("case {i} must be accepted: {e}\n{input:?}"),
        }
    }
    // `0X` is no spelling RMM uses: refused, naming the field.
    let err = read_str(&format!("{HEADER}1,10:00:00.000000,free,0x10,8,0X2\n")).unwrap_err();
    assert_eq!(err.to_string(), "line 2: stream `0X2` is not hexadecimal");
    assert_eq!(
        read_str(HEADER).expect("a header alone is a valid, empty log"),
        []
    );
}

#[test]
fn reader_keeps_records_before_a_bad_line_and_then_stops() {
    let input = format!(
        "{HEADER}1,10:00:00.000000,allocate,0x10,8,0\n1,10:00:00.000001,free,0xZZ,8,0\n1,10:00:00.000002,free,0x10,8,0\n"
    );
    let mut reader = RmmReader::new(input.as_bytes()).expect("the header is valid");
    let first = reader
        .next()
        .expect("a first record")
        .expect("line 2 is valid");
    assert_eq!(
        first,
        RmmRecord::new(1, time_us(10, 0, 0, 0), RmmAction::Allocate, 0x10, 8, 0)
    );
    let err = reader.next().expect("line 3 is reported").unwrap_err();
    assert_eq!(err.line(), Some(3));
    assert_eq!(reader.line_number(), 3);
    assert!(reader.next().is_none(), "nothing after the first error");
    assert!(reader.next().is_none(), "the reader stays finished");
    assert_eq!(
        reader.line_number(),
        3,
        "lines after the error are not read"
    );

    let mut reader = RmmReader::new(HEADER.as_bytes()).expect("the header is valid");
    assert!(reader.next().is_none(), "a header alone has no records");
    assert_eq!(reader.line_number(), 1, "the end of input is no line");
}

#[test]
fn an_overlong_line_is_refused_without_reading_it_whole() {
    let long = format!(
        "{HEADER}1,10:00:00.000000,free,0x10,8,0\n{}\n",
        "9".repeat(MAX_LINE_BYTES + 1)
    );
    match read_str(&long) {
        Err(RmmError::LineTooLong {
            line: 3,
            limit_bytes,
        }) => assert_eq!(limit_bytes, MAX_LINE_BYTES),
        other => panic!("expected line 3 too long, got {other:?}"),
    }
    // A line exactly at the limit is read (and refused for its content, not its length).
    let at_limit = format!("{HEADER}{}\n", "9".repeat(MAX_LINE_BYTES));
    assert!(matches!(
        read_str(&at_limit),
        Err(RmmError::FieldCount {
            line: 2,
            found: 1,
            ..
        })
    ));
    // An endless line without a newline: the reader must stop at the limit, not run out of
    // memory.
    let endless = HEADER.as_bytes().chain(io::repeat(b'7'));
    match read_rmm_csv(BufReader::new(endless)) {
        Err(RmmError::LineTooLong { line: 2, .. }) => {}
        other => panic!("expected line 2 too long, got {other:?}"),
    }
}

/// A reader that hands out its bytes and then fails.
struct FailingAfter<'a>(&'a [u8]);

impl Read for FailingAfter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() {
            return Err(io::Error::other("device unplugged"));
        }
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn read_errors_name_the_line_being_read() {
    let input = format!("{HEADER}1,10:00:00.000000,free,0x10,8,0\n1,10:00");
    match read_rmm_csv(BufReader::new(FailingAfter(input.as_bytes()))) {
        Err(e @ RmmError::Io { line: 3, .. }) => {
            assert_eq!(
                e.to_string(),
                "line 3: reading the RMM log failed: device unplugged"
            )
        }
        other => panic!("expected a read error on line 3, got {other:?}"),
    }
}

#[test]
fn writer_refuses_a_time_that_is_not_a_time_of_day() {
    let mut out = Vec::new();
    let late = RmmRecord::new(1, MICROS_PER_DAY, RmmAction::Free, 0x10, 8, 0);
    let err = write_rmm_csv(
        &[RmmRecord::new(1, 0, RmmAction::Free, 0x10, 8, 0), late],
        &mut out,
    )
    .expect_err("24:00:00 cannot be written");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(
        err.to_string().starts_with("record 1: time 86400000000 µs"),
        "{err}"
    );
    assert!(
        out.is_empty(),
        "nothing is written when a record is refused"
    );
}

#[test]
fn writer_spells_nulls_and_streams_as_rmm_does() {
    let text = written(&[
        RmmRecord::new(
            u64::MAX,
            MICROS_PER_DAY - 1,
            RmmAction::AllocateFailure,
            0,
            u64::MAX,
            0,
        ),
        RmmRecord::new(0, 0, RmmAction::Free, u64::MAX, 0, u64::MAX),
    ]);
    assert_eq!(
        text,
        format!(
            "{HEADER}18446744073709551615,23:59:59.999999,allocate failure,(nil),18446744073709551615,0\n\
             0,00:00:00.000000,free,0xffffffffffffffff,0,0xffffffffffffffff\n"
        )
    );
}

fn any_record() -> impl Strategy<Value = RmmRecord> {
    (
        any::<u64>(),
        0..MICROS_PER_DAY,
        prop::sample::select(RmmAction::ALL.to_vec()),
        prop_oneof![Just(None), any::<NonZeroU64>().prop_map(Some)],
        any::<u64>(),
        prop_oneof![Just(0u64), Just(2), any::<u64>()],
    )
        .prop_map(
            |(thread, time_us, action, pointer, size, stream)| RmmRecord {
                thread,
                time_us,
                action,
                pointer,
                size,
                stream,
            },
        )
}

/// Lines made of the log's own pieces, so that random input gets past the header and into
/// every field parser.
fn log_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b",".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"0x".to_vec()),
        Just(b"(nil)".to_vec()),
        Just(b"allocate".to_vec()),
        Just(b" failure".to_vec()),
        Just(b"free".to_vec()),
        Just(b"12:34:56.789012".to_vec()),
        Just(b":".to_vec()),
        Just(b".".to_vec()),
        Just(b"Thread,Time,Action,Pointer,Size,Stream".to_vec()),
        "[0-9a-fA-F]{0,20}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..4),
    ];
    prop::collection::vec(piece, 0..60).prop_map(|pieces| {
        let mut bytes = HEADER.as_bytes().to_vec();
        bytes.extend(pieces.concat());
        bytes
    })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_rmm_csv(bytes.as_slice());
        let mut with_header = HEADER.as_bytes().to_vec();
        with_header.extend_from_slice(&bytes);
        let _ = read_rmm_csv(with_header.as_slice());
    }

    #[test]
    fn log_like_bytes_never_panic_and_errors_name_a_read_line(bytes in log_like_bytes()) {
        let lines = bytes.split(|&b| b == b'\n').count() as u64;
        if let Err(e) = read_rmm_csv(bytes.as_slice()) {
            let line = e.line().expect("input with a header has line numbers");
            prop_assert!((1..=lines).contains(&line), "line {line} of {lines}: {e}");
        }
    }

    #[test]
    fn written_records_read_back_equal(records in prop::collection::vec(any_record(), 0..40)) {
        let text = written(&records);
        let read = read_str(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(read, records);
    }

    #[test]
    fn a_corrupted_field_is_reported_on_its_line(
        records in prop::collection::vec(any_record(), 1..20),
        pick in any::<prop::sample::Index>(),
        column in 0..6usize,
        junk in prop_oneof![Just("0xZZ"), Just(""), Just("-1"), Just("nope"), Just("99:99:99.999999")],
    ) {
        let text = written(&records);
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let bad = 1 + pick.index(records.len());
        let mut fields: Vec<&str> = lines[bad].split(',').collect();
        fields[column] = junk;
        lines[bad] = fields.join(",");
        let corrupted = lines.join("\n");
        let err = read_str(&corrupted).expect_err("a junk field is refused");
        prop_assert_eq!(err.line(), Some(bad as u64 + 1), "{}", err);
        match err {
            RmmError::Field { field, text, .. } => {
                prop_assert_eq!(field, RmmField::ALL[column]);
                prop_assert_eq!(text, junk);
            }
            other => prop_assert!(false, "expected a field error, got {:?}", other),
        }
    }
}

#[test]
fn bufread_input_is_read_in_one_pass() {
    // A reader whose buffer is one byte long still assembles every line correctly.
    let text = written(&[
        RmmRecord::new(7, 1, RmmAction::Allocate, 0x20, 64, 0),
        RmmRecord::new(7, 2, RmmAction::Free, 0x20, 64, 0),
    ]);
    let reader = BufReader::with_capacity(1, text.as_bytes());
    let mut reader: Box<dyn BufRead> = Box::new(reader);
    let records = read_rmm_csv(&mut reader).expect("tiny buffers change nothing");
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[1],
        RmmRecord::new(7, 2, RmmAction::Free, 0x20, 64, 0)
    );
}
