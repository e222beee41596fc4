//! Tests of refusals and limits: every opcode that imports or calls code, unknown opcodes,
//! hostile pickles, deep nesting, huge declared lengths, memo abuse and exponential sharing.
//! Each must end in a typed error (or a correct value) without a panic, and with its work
//! bounded: the error's offset says how far the read got, and sharing and key lookups are
//! checked by counts (`Arc` owners, keys compared), never by the clock.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;

use super::super::Value;
use super::keys::KEYS_COMPARED;
use super::opcodes::{self, REFUSED};
use super::tests::{err4, ok4};
use super::{read, PickleError, ReadLimits};

/// Reads `bytes` with `limits` and expects an error. Callers assert the exact error, whose
/// offset shows where the read stopped (at the limit, not after the rest of the input).
#[track_caller]
fn refused(bytes: &[u8], limits: &ReadLimits) -> PickleError {
    match read(bytes, limits) {
        Ok(value) => panic!("should be refused, read {value:?}"),
        Err(error) => error,
    }
}

#[test]
fn every_refused_opcode_is_refused_by_name() {
    let names: Vec<_> = REFUSED.iter().map(|&byte| opcodes::name(byte)).collect();
    assert_eq!(
        names,
        [
            "GLOBAL",
            "STACK_GLOBAL",
            "REDUCE",
            "BUILD",
            "INST",
            "OBJ",
            "NEWOBJ",
            "NEWOBJ_EX",
            "PERSID",
            "BINPERSID",
            "EXT1",
            "EXT2",
            "EXT4",
            "NEXT_BUFFER"
        ]
        .map(Some)
    );
    for byte in REFUSED {
        let name = opcodes::name(byte).unwrap_or_default();
        // Arguments that would be valid, so only the opcode itself can be the reason.
        let error = err4(&[b'N', b'N', b'N', byte, b'K', 1, b'\n']);
        assert_eq!(
            error,
            PickleError::Refused {
                opcode: name,
                byte,
                offset: 5,
                reason: opcodes::refusal(byte).unwrap_or_default(),
            },
            "{name} must be refused at its own offset"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(&format!("refused opcode {name} ({byte:#04x}) at byte 5: ")),
            "{message}"
        );
    }
    assert_eq!(
        err4(b"c").to_string(),
        "refused opcode GLOBAL (0x63) at byte 2: this reader loads plain data only and never \
         imports or calls code"
    );
}

#[test]
fn every_byte_that_is_no_opcode_is_refused_by_value() {
    let unknown: Vec<u8> = (0..=255u8)
        .filter(|&byte| opcodes::name(byte).is_none())
        .collect();
    // pickletools.opcodes lists 68 opcodes for protocols 0 to 5.
    assert_eq!(unknown.len(), 256 - 68);
    for byte in unknown {
        let error = err4(&[b'N', byte]);
        assert_eq!(error, PickleError::UnknownOpcode { byte, offset: 3 });
        assert!(
            error
                .to_string()
                .starts_with(&format!("unknown opcode {byte:#04x} at byte 3")),
            "{error}"
        );
    }
}

#[test]
fn os_system_in_protocol_0_is_refused_and_runs_nothing() {
    let marker = "/tmp/blockpool-pickle-pwned-0";
    let bytes = format!("cos\nsystem\n(S'touch {marker}'\ntR.");
    let error = refused(bytes.as_bytes(), &ReadLimits::default());
    assert!(matches!(
        error,
        PickleError::Refused {
            opcode: "GLOBAL",
            offset: 0,
            ..
        }
    ));
    assert!(!Path::new(marker).exists(), "{marker} was created");
}

#[test]
fn os_system_in_protocols_2_and_4_is_refused_and_runs_nothing() {
    // pickle.dumps(X(), 4) for a class whose __reduce__ returns (os.system, ("touch ...",)).
    let protocol_4 = b"\x80\x04\x95>\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\
        \x94\x93\x94\x8c#touch /tmp/blockpool-pickle-pwned-4\x94\x85\x94R\x94.";
    assert!(matches!(
        refused(protocol_4, &ReadLimits::default()),
        PickleError::Refused {
            opcode: "STACK_GLOBAL",
            byte: 0x93,
            offset: 28,
            ..
        }
    ));
    // The same with protocol 2, which uses GLOBAL.
    let protocol_2 = b"\x80\x02cposix\nsystem\nq\x00X#\x00\x00\x00touch \
        /tmp/blockpool-pickle-pwned-2q\x01\x85q\x02Rq\x03.";
    assert!(matches!(
        refused(protocol_2, &ReadLimits::default()),
        PickleError::Refused {
            opcode: "GLOBAL",
            offset: 2,
            ..
        }
    ));
    // REDUCE on plain data (a str standing in for the callable) is refused at REDUCE itself.
    assert!(matches!(
        err4(b"\x8c\x06systemK\x01\x85R"),
        PickleError::Refused {
            opcode: "REDUCE",
            offset: 13,
            ..
        }
    ));
    for marker in [
        "/tmp/blockpool-pickle-pwned-4",
        "/tmp/blockpool-pickle-pwned-2",
    ] {
        assert!(!Path::new(marker).exists(), "{marker} was created");
    }
}

#[test]
fn a_hundred_thousand_marks_stop_at_the_depth_limit() {
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend(std::iter::repeat(b'(').take(100_000));
    bytes.push(b'.');
    assert_eq!(
        refused(&bytes, &ReadLimits::default()),
        PickleError::TooDeep {
            limit: 1_000,
            offset: 2 + 1_000
        }
    );
}

#[test]
fn a_hundred_thousand_nested_lists_stop_at_the_depth_limit() {
    // ] x 100,000 then APPEND x 99,999: each list goes into the one below it.
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend(std::iter::repeat(b']').take(100_000));
    bytes.extend(std::iter::repeat(b'a').take(99_999));
    bytes.push(b'.');
    assert_eq!(
        refused(&bytes, &ReadLimits::default()),
        PickleError::TooDeep {
            limit: 1_000,
            offset: 2 + 1_000
        },
        "the 1,001st list from the outside is the one past the limit"
    );
}

#[test]
fn a_hundred_thousand_nested_tuples_stop_at_the_depth_limit() {
    // N, then TUPLE1 x 100,000: the outermost tuple is created last.
    let mut bytes = b"\x80\x04N".to_vec();
    bytes.extend(std::iter::repeat(0x85).take(100_000));
    bytes.push(b'.');
    let outermost = 3 + 99_999;
    assert_eq!(
        refused(&bytes, &ReadLimits::default()),
        PickleError::TooDeep {
            limit: 1_000,
            offset: outermost - 1_000
        }
    );
}

#[test]
fn nesting_exactly_at_the_limit_reads_and_drops() {
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend(std::iter::repeat(b']').take(1_000));
    bytes.extend(std::iter::repeat(b'a').take(999));
    bytes.push(b'.');
    let mut value = read(&bytes, &ReadLimits::default()).expect("1,000 levels are allowed");
    let mut depth = 0;
    while let Value::List(items) = value {
        depth += 1;
        value = items.first().cloned().unwrap_or(Value::None);
    }
    assert_eq!(depth, 1_000);
}

#[test]
fn huge_declared_lengths_are_refused_before_allocating() {
    let cases: [(&str, &[u8]); 10] = [
        ("BINUNICODE8", b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff"),
        ("BINBYTES8", b"\x8e\x00\x00\x00\x00\x00\x00\x00\x40"),
        ("BYTEARRAY8", b"\x96\x00\x00\x00\x00\x00\x00\x00\x80"),
        ("BINUNICODE", b"X\xff\xff\xff\xff"),
        ("BINBYTES", b"B\xff\xff\xff\xff"),
        ("BINSTRING", b"T\xff\xff\xff\x7f"),
        ("LONG4", b"\x8b\xff\xff\xff\x7f"),
        ("LONG1", b"\x8a\xff"),
        ("SHORT_BINUNICODE", b"\x8c\xff"),
        ("FRAME", b"\x95\xff\xff\xff\xff\xff\xff\xff\xff"),
    ];
    for (name, body) in cases {
        let mut bytes = b"\x80\x04".to_vec();
        bytes.extend_from_slice(body);
        bytes.extend_from_slice(b"N.");
        match refused(&bytes, &ReadLimits::default()) {
            PickleError::LengthBeyondInput {
                opcode,
                offset,
                remaining,
                ..
            } => {
                assert_eq!((opcode, offset, remaining), (name, 2, 2), "{name}");
            }
            other => panic!("{name}: expected LengthBeyondInput, got {other:?}"),
        }
    }
}

#[test]
fn memo_abuse_ends_in_typed_errors() {
    assert_eq!(
        err4(b"j\xff\xff\xff\xff"),
        PickleError::MissingMemo {
            opcode: "LONG_BINGET",
            offset: 2,
            index: u32::MAX.into()
        }
    );
    assert!(matches!(
        err4(b"g-1\n"),
        PickleError::BadArgument { opcode: "GET", .. }
    ));
    assert!(matches!(
        err4(b"Np99999999999999999999999\n"),
        PickleError::BadArgument { opcode: "PUT", .. }
    ));
    assert!(matches!(
        err4(b"\x94"),
        PickleError::StackUnderflow {
            opcode: "MEMOIZE",
            ..
        }
    ));
    // A huge index is stored without allocating in proportion to it.
    assert_eq!(ok4(b"Nr\xff\xff\xff\xff0j\xff\xff\xff\xff"), Value::None);
    let limits = ReadLimits {
        max_memo_entries: 3,
        ..ReadLimits::default()
    };
    let bytes = b"\x80\x04Nr\x00\x00\x00\x10r\x00\x00\x00\x20r\x00\x00\x00\x30\x94.";
    assert_eq!(
        refused(bytes, &limits),
        PickleError::TooManyMemoEntries {
            limit: 3,
            offset: 18
        }
    );
    // Replacing an entry does not count as a new one.
    assert!(read(b"\x80\x04Nq\x00q\x00q\x00q\x00.", &limits).is_ok());
}

#[test]
fn the_item_limit_counts_every_push() {
    let limits = ReadLimits {
        max_items: 10,
        ..ReadLimits::default()
    };
    let mut bytes = b"\x80\x04".to_vec();
    bytes.extend(std::iter::repeat(b'N').take(11));
    bytes.push(b'.');
    assert_eq!(
        refused(&bytes, &limits),
        PickleError::TooManyItems {
            limit: 10,
            offset: 12
        }
    );
    bytes.remove(2);
    assert!(
        read(&bytes, &limits).is_ok(),
        "10 values are within the limit"
    );
}

#[test]
fn exponential_sharing_is_converted_once_per_object() {
    // l0 = []; l(i) = [l(i-1), l(i-1)] for 64 levels: 2^64 leaves if copied.
    let mut bytes = b"\x80\x04]\x94".to_vec();
    for level in 0..64u32 {
        bytes.push(b'(');
        for _ in 0..2 {
            bytes.push(b'j');
            bytes.extend_from_slice(&level.to_le_bytes());
        }
        bytes.extend_from_slice(b"l\x94");
    }
    bytes.push(b'.');
    let value = read(&bytes, &ReadLimits::default()).expect("shared lists read");
    let Value::List(mut list) = value else {
        panic!("not a list")
    };
    assert_eq!(
        Arc::strong_count(&list),
        1,
        "the result alone holds the outermost list"
    );
    // Each level holds the one below twice, and nothing else holds it: 65 lists in all.
    for level in (1..=64).rev() {
        let below = match list.as_slice() {
            [Value::List(left), Value::List(right)] => {
                assert!(
                    Arc::ptr_eq(left, right),
                    "level {level}: both halves must be one object, not copies"
                );
                assert_eq!(
                    Arc::strong_count(left),
                    2,
                    "level {level}: the list below must be held by its two references only"
                );
                Arc::clone(left)
            }
            other => panic!("level {level}: expected two lists, found {other:?}"),
        };
        list = below;
    }
    assert!(list.is_empty(), "level 0 is the empty list");
}

#[test]
fn many_keys_are_looked_up_without_scanning_the_dict_or_set() {
    // Distinct keys, so every lookup misses; a scan would compare each key with every key
    // before it (keys^2 / 2 = 2 * 10^8 comparisons), an index with almost none. The count,
    // not the time, tells them apart, so a slow machine cannot fail this test.
    let keys = 20_000u32;
    let compared = |bytes: &[u8]| {
        let before = KEYS_COMPARED.with(Cell::get);
        let value = read(bytes, &ReadLimits::default());
        (value, KEYS_COMPARED.with(Cell::get) - before)
    };

    let mut dict = b"\x80\x04}(".to_vec();
    for key in 0..keys {
        dict.push(b'J');
        dict.extend_from_slice(&key.to_le_bytes());
        dict.push(b'N');
    }
    dict.extend_from_slice(b"u.");
    let (value, comparisons) = compared(&dict);
    let Ok(Value::Dict(pairs)) = value else {
        panic!("not a dict: {value:?}")
    };
    assert_eq!(pairs.len(), keys as usize, "every int key is distinct");
    assert!(
        comparisons < u64::from(keys),
        "{comparisons} key comparisons for {keys} distinct int keys: lookups scan the dict"
    );

    let mut set = b"\x80\x04\x8f(".to_vec();
    for key in 0..keys {
        let text = format!("k{key}");
        set.push(0x8c);
        set.push(u8::try_from(text.len()).expect("short key"));
        set.extend_from_slice(text.as_bytes());
    }
    set.extend_from_slice(b"\x90.");
    let (value, comparisons) = compared(&set);
    let Ok(Value::Set(items)) = value else {
        panic!("not a set: {value:?}")
    };
    assert_eq!(items.len(), keys as usize, "every str key is distinct");
    assert!(
        comparisons < u64::from(keys),
        "{comparisons} key comparisons for {keys} distinct str keys: lookups scan the set"
    );
}

#[test]
fn an_argument_past_the_limit_is_refused_by_its_length_or_its_unended_line() {
    let limits = ReadLimits {
        max_argument_bytes: 8,
        ..ReadLimits::default()
    };
    // SHORT_BINUNICODE of 9 bytes: refused on its declared length.
    assert_eq!(
        refused(b"\x80\x04\x8c\x09abcdefghi.", &limits),
        PickleError::ArgumentTooLong {
            opcode: "SHORT_BINUNICODE",
            offset: 2,
            declared: 9,
            limit: 8,
        }
    );
    // At the limit it is read.
    assert!(read(b"\x80\x04\x8c\x08abcdefgh.", &limits).is_ok());
    // A text line (protocol 0 INT) that runs past the limit without its end.
    let mut line = b"I".to_vec();
    line.extend(std::iter::repeat(b'1').take(100));
    line.extend_from_slice(b"\n.");
    assert!(matches!(
        refused(&line, &limits),
        PickleError::ArgumentTooLong {
            opcode: "INT",
            offset: 0,
            limit: 8,
            ..
        }
    ));
}
