//! Unit tests of the reader on hand-assembled pickles: the helpers shared by all unit tests,
//! and the opcodes of protocol, framing and scalars. Containers, stack and memo opcodes are in
//! `container_tests.rs`; refusals, limits and hostile inputs in `hostile_tests.rs`; random
//! inputs in `proptests.rs`.

use std::sync::Arc;

use super::super::Value;
use super::{read, PickleError, ReadLimits};

/// Reads `body` wrapped in `PROTO 4` ... `STOP`.
pub(super) fn read4(body: &[u8]) -> Result<Value, PickleError> {
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend_from_slice(body);
    bytes.push(b'.');
    read(&bytes, &ReadLimits::default())
}

/// Reads `body` as [`read4`] does and expects success.
#[track_caller]
pub(super) fn ok4(body: &[u8]) -> Value {
    match read4(body) {
        Ok(value) => value,
        Err(error) => panic!("{body:?} should read, got: {error}"),
    }
}

/// Reads `body` as [`read4`] does and expects an error.
#[track_caller]
pub(super) fn err4(body: &[u8]) -> PickleError {
    match read4(body) {
        Ok(value) => panic!("{body:?} should be refused, read {value:?}"),
        Err(error) => error,
    }
}

pub(super) fn int(i: i64) -> Value {
    Value::Int(i)
}

pub(super) fn s(text: &str) -> Value {
    Value::Str(text.into())
}

pub(super) fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

pub(super) fn tuple(items: Vec<Value>) -> Value {
    Value::Tuple(Arc::new(items))
}

pub(super) fn dict(pairs: Vec<(Value, Value)>) -> Value {
    Value::Dict(Arc::new(pairs))
}

#[test]
fn proto_and_frame_are_accepted_for_protocols_0_to_5() {
    for version in 0..=5u8 {
        assert_eq!(
            read(&[0x80, version, b'N', b'.'], &ReadLimits::default()),
            Ok(Value::None),
            "protocol {version} should be accepted"
        );
    }
    let framed = b"\x80\x05\x95\x02\x00\x00\x00\x00\x00\x00\x00N.";
    assert_eq!(read(framed, &ReadLimits::default()), Ok(Value::None));
    // Protocol 0 needs no PROTO at all.
    assert_eq!(read(b"N.", &ReadLimits::default()), Ok(Value::None));
}

#[test]
fn protocol_newer_than_5_is_refused() {
    let error = read(b"\x80\x06N.", &ReadLimits::default()).unwrap_err();
    assert_eq!(
        error,
        PickleError::UnsupportedProtocol {
            version: 6,
            offset: 0
        }
    );
    assert!(error.to_string().contains("protocols 0 to 5"), "{error}");
}

#[test]
fn frame_longer_than_the_input_is_refused() {
    let error = err4(b"\x95\x00\x01\x00\x00\x00\x00\x00\x00N");
    assert_eq!(
        error,
        PickleError::LengthBeyondInput {
            opcode: "FRAME",
            offset: 2,
            declared: 256,
            remaining: 2,
        }
    );
}

#[test]
fn binary_integers_decode_with_their_widths_and_signs() {
    assert_eq!(ok4(b"K\xff"), int(255), "BININT1 is unsigned");
    assert_eq!(ok4(b"M\xff\xff"), int(65_535), "BININT2 is unsigned");
    assert_eq!(ok4(b"J\xff\xff\xff\xff"), int(-1), "BININT is signed");
    assert_eq!(ok4(b"J\x00\x00\x00\x80"), int(i32::MIN.into()));
}

#[test]
fn long1_and_long4_fit_i64_when_they_can_and_are_minimal_bigints_otherwise() {
    assert_eq!(ok4(b"\x8a\x00"), int(0), "no bytes is zero");
    assert_eq!(ok4(b"\x8a\x01\xff"), int(-1));
    assert_eq!(ok4(b"\x8a\x02\x00\x80"), int(-32_768));
    assert_eq!(ok4(b"\x8a\x03\x00\x80\x00"), int(32_768));
    assert_eq!(
        ok4(b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"),
        int(i64::MAX)
    );
    assert_eq!(
        ok4(b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"),
        int(i64::MIN)
    );
    // 5 with redundant sign bytes is still an Int.
    assert_eq!(
        ok4(b"\x8a\x0a\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00"),
        int(5)
    );
    // pickle.dumps(2**64, 2) and pickle.dumps(-2**63 - 1, 2).
    let two_pow_64: &[u8] = b"\x00\x00\x00\x00\x00\x00\x00\x00\x01";
    assert_eq!(
        ok4(b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01"),
        Value::BigInt(two_pow_64.into())
    );
    assert_eq!(
        ok4(b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff"),
        Value::BigInt(b"\xff\xff\xff\xff\xff\xff\xff\x7f\xff"[..].into())
    );
    assert_eq!(
        ok4(b"\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"),
        Value::BigInt(two_pow_64.into()),
        "LONG4 reads the same encoding with a 4-byte length"
    );
    assert_eq!(
        err4(b"\x8b\xff\xff\xff\xff"),
        PickleError::BadArgument {
            opcode: "LONG4",
            offset: 2,
            problem: "the declared length is negative",
        }
    );
}

#[test]
fn text_integers_read_bools_ints_and_big_longs() {
    assert_eq!(read(b"I42\n.", &ReadLimits::default()), Ok(int(42)));
    assert_eq!(read(b"I-7\n.", &ReadLimits::default()), Ok(int(-7)));
    assert_eq!(
        read(b"I00\n.", &ReadLimits::default()),
        Ok(Value::Bool(false))
    );
    assert_eq!(
        read(b"I01\n.", &ReadLimits::default()),
        Ok(Value::Bool(true))
    );
    assert_eq!(read(b"L5L\n.", &ReadLimits::default()), Ok(int(5)));
    // Bytes from Python's (123456789012345678901234567890).to_bytes(13, 'little', signed=True).
    assert_eq!(
        read(
            b"L123456789012345678901234567890L\n.",
            &ReadLimits::default()
        ),
        Ok(Value::BigInt(
            b"\xd2\n?N\xee\xe0s\xc3\xf6\x0f\xe9\x8e\x01"[..].into()
        ))
    );
    assert_eq!(
        read(
            b"L-123456789012345678901234567890L\n.",
            &ReadLimits::default()
        ),
        Ok(Value::BigInt(
            b".\xf5\xc0\xb1\x11\x1f\x8c<\t\xf0\x16q\xfe"[..].into()
        ))
    );
    assert_eq!(
        read(b"L-9223372036854775808\n.", &ReadLimits::default()),
        Ok(int(i64::MIN))
    );
    let error = read(b"I4x2\n.", &ReadLimits::default()).unwrap_err();
    assert_eq!(
        error,
        PickleError::BadArgument {
            opcode: "INT",
            offset: 0,
            problem: "the argument is not a decimal integer",
        }
    );
    let mut huge = b"L".to_vec();
    huge.extend(std::iter::repeat(b'9').take(5_000));
    huge.extend_from_slice(b"\n.");
    assert!(
        matches!(
            read(&huge, &ReadLimits::default()),
            Err(PickleError::BadArgument { opcode: "LONG", .. })
        ),
        "a 5,000-digit integer passes Python's 4,300-digit limit"
    );
}

#[test]
fn floats_read_binary_big_endian_and_text() {
    assert_eq!(ok4(b"G?\xf8\x00\x00\x00\x00\x00\x00"), Value::Float(1.5));
    assert_eq!(
        read(b"F1.5\n.", &ReadLimits::default()),
        Ok(Value::Float(1.5))
    );
    assert_eq!(
        read(b"F-inf\n.", &ReadLimits::default()),
        Ok(Value::Float(f64::NEG_INFINITY))
    );
    assert!(matches!(read(b"Fnan\n.", &ReadLimits::default()), Ok(Value::Float(f)) if f.is_nan()));
    assert!(matches!(
        read(b"Fabc\n.", &ReadLimits::default()),
        Err(PickleError::BadArgument {
            opcode: "FLOAT",
            ..
        })
    ));
    // CPython's unpickler refuses a finite number past the float range rather than read inf.
    assert_eq!(
        read(b"F1e400\n.", &ReadLimits::default()),
        Err(PickleError::BadArgument {
            opcode: "FLOAT",
            offset: 0,
            problem: "the float is too large to represent",
        })
    );
}

#[test]
fn binary_unicode_strings_read_utf8_with_each_length_width() {
    assert_eq!(ok4(b"\x8c\x06h\xc3\xa9llo"), s("h\u{e9}llo"));
    assert_eq!(ok4(b"X\x06\x00\x00\x00h\xc3\xa9llo"), s("h\u{e9}llo"));
    assert_eq!(
        ok4(b"\x8d\x06\x00\x00\x00\x00\x00\x00\x00h\xc3\xa9llo"),
        s("h\u{e9}llo")
    );
    assert_eq!(ok4(b"\x8c\x00"), s(""));
    let error = err4(b"\x8c\x01\xff");
    assert!(
        matches!(
            error,
            PickleError::InvalidString {
                opcode: "SHORT_BINUNICODE",
                offset: 2,
                ..
            }
        ),
        "{error:?}"
    );
    // A lone surrogate, as Python writes it with 'surrogatepass'.
    assert!(matches!(
        err4(b"\x8c\x03\xed\xa0\x80"),
        PickleError::InvalidString { .. }
    ));
}

#[test]
fn text_unicode_decodes_raw_unicode_escape() {
    // Bytes are Latin-1; \u and \U escape only after an odd number of backslashes.
    assert_eq!(
        read(
            b"Vh\\u00e9llo \\\\u0041 \\U0001F600 \xe9\n.",
            &ReadLimits::default()
        ),
        Ok(s("h\u{e9}llo \\\\u0041 \u{1F600} \u{e9}"))
    );
    assert_eq!(read(b"Va\\b\n.", &ReadLimits::default()), Ok(s("a\\b")));
    assert!(matches!(
        read(b"V\\u00\n.", &ReadLimits::default()),
        Err(PickleError::InvalidString {
            opcode: "UNICODE",
            ..
        })
    ));
    assert!(matches!(
        read(b"V\\ud800\n.", &ReadLimits::default()),
        Err(PickleError::InvalidString {
            opcode: "UNICODE",
            ..
        })
    ));
}

#[test]
fn python2_strings_decode_escapes_and_must_be_ascii() {
    // What Python 3 reads from S'a\nb\x41\101\q\\'.
    assert_eq!(
        read(b"S'a\\nb\\x41\\101\\q\\\\'\n.", &ReadLimits::default()),
        Ok(s("a\nbAA\\q\\"))
    );
    assert_eq!(read(b"S\"it's\"\n.", &ReadLimits::default()), Ok(s("it's")));
    assert!(matches!(
        read(b"Sabc\n.", &ReadLimits::default()),
        Err(PickleError::BadArgument {
            opcode: "STRING",
            ..
        })
    ));
    assert!(matches!(
        read(b"S'\\x4'\n.", &ReadLimits::default()),
        Err(PickleError::BadArgument {
            opcode: "STRING",
            ..
        })
    ));
    assert_eq!(ok4(b"U\x03abc"), s("abc"));
    assert_eq!(ok4(b"T\x03\x00\x00\x00abc"), s("abc"));
    assert!(matches!(
        err4(b"U\x01\xe9"),
        PickleError::InvalidString {
            opcode: "SHORT_BINSTRING",
            ..
        }
    ));
    assert!(matches!(
        err4(b"T\xff\xff\xff\xff"),
        PickleError::BadArgument {
            opcode: "BINSTRING",
            ..
        }
    ));
}

#[test]
fn bytes_and_bytearray_read_with_each_length_width() {
    let abc = Value::Bytes(b"abc"[..].into());
    assert_eq!(ok4(b"C\x03abc"), abc);
    assert_eq!(ok4(b"B\x03\x00\x00\x00abc"), abc);
    assert_eq!(ok4(b"\x8e\x03\x00\x00\x00\x00\x00\x00\x00abc"), abc);
    assert_eq!(ok4(b"\x96\x03\x00\x00\x00\x00\x00\x00\x00abc"), abc);
    assert_eq!(
        ok4(b"C\x03abc\x98"),
        abc,
        "READONLY_BUFFER leaves bytes as they are"
    );
    assert_eq!(
        err4(b"K\x01\x98"),
        PickleError::WrongType {
            opcode: "READONLY_BUFFER",
            offset: 4,
            expected: "a bytes-like buffer",
            found: "int",
        }
    );
}

#[test]
fn none_and_bools_read() {
    assert_eq!(ok4(b"N"), Value::None);
    assert_eq!(ok4(b"\x88"), Value::Bool(true));
    assert_eq!(ok4(b"\x89"), Value::Bool(false));
}

#[test]
fn trailing_bytes_after_stop_are_ignored_as_pickle_loads_does() {
    assert_eq!(
        read(b"\x80\x04N.garbage", &ReadLimits::default()),
        Ok(Value::None)
    );
}

#[test]
fn input_without_stop_is_truncated() {
    assert_eq!(
        read(b"\x80\x04N", &ReadLimits::default()),
        Err(PickleError::MissingStop { offset: 3 })
    );
    assert_eq!(
        read(b"", &ReadLimits::default()),
        Err(PickleError::MissingStop { offset: 0 })
    );
    assert_eq!(
        read(b"\x80\x04J\x01\x02", &ReadLimits::default()),
        Err(PickleError::Truncated {
            opcode: "BININT",
            offset: 2,
            needed: 4,
            remaining: 2
        })
    );
    assert!(matches!(
        read(b"I12", &ReadLimits::default()),
        Err(PickleError::Truncated {
            opcode: "INT",
            offset: 0,
            ..
        })
    ));
}

#[test]
fn error_messages_name_opcode_and_offset() {
    let error = err4(b"h\x05");
    assert_eq!(error.offset(), 2);
    assert_eq!(
        error.to_string(),
        "opcode BINGET at byte 2 reads memo entry 5, which was never stored: the file is corrupt"
    );
}
