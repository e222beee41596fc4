//! Byte-exact comparisons with bytes CPython 3.11's `pickle.dumps(obj, protocol=4)` gave,
//! hard-coded as hex.

use std::sync::Arc;

use super::super::{write, WriteOptions};
use super::{big, bytes, dict, first_difference, int, list, s, set, tuple, unhex};
use crate::trace::pickle::Value;

/// Asserts that each value writes as the CPython pickle given in hex.
fn assert_writes_as_cpython(cases: &[(&str, Value, &str)]) {
    for (python, value, hex) in cases {
        let ours = write(value);
        let theirs = unhex(hex);
        assert!(
            ours == theirs,
            "pickle.dumps({python}, protocol=4) differs: {}",
            first_difference(&ours, &theirs)
        );
    }
}

#[test]
fn ints_use_the_opcode_cpython_picks_at_every_width_boundary() {
    assert_writes_as_cpython(&[
        // BININT1, in a pickle too short for a frame.
        ("0", int(0), "80044b002e"),
        ("1", int(1), "80044b012e"),
        ("255", int(255), "80044bff2e"),
        // BININT2.
        ("256", int(256), "80049504000000000000004d00012e"),
        ("65535", int(65535), "80049504000000000000004dffff2e"),
        // BININT, signed 32-bit, also for every negative int that fits.
        ("65536", int(65536), "80049506000000000000004a000001002e"),
        (
            "2**31-1",
            int((1 << 31) - 1),
            "80049506000000000000004affffff7f2e",
        ),
        ("-1", int(-1), "80049506000000000000004affffffff2e"),
        ("-128", int(-128), "80049506000000000000004a80ffffff2e"),
        ("-129", int(-129), "80049506000000000000004a7fffffff2e"),
        (
            "-2**31",
            int(-(1 << 31)),
            "80049506000000000000004a000000802e",
        ),
        // LONG1 with the fewest two's-complement bytes.
        (
            "2**31",
            int(1 << 31),
            "80049508000000000000008a0500000080002e",
        ),
        (
            "-2**31-1",
            int(-(1 << 31) - 1),
            "80049508000000000000008a05ffffff7fff2e",
        ),
        (
            "2**32",
            int(1 << 32),
            "80049508000000000000008a0500000000012e",
        ),
        (
            "2**63-1",
            int(i64::MAX),
            "8004950b000000000000008a08ffffffffffffff7f2e",
        ),
        (
            "-2**63",
            int(i64::MIN),
            "8004950b000000000000008a0800000000000000802e",
        ),
    ]);
}

#[test]
fn big_ints_are_written_with_their_fewest_bytes_whatever_length_they_come_in() {
    assert_writes_as_cpython(&[
        (
            "2**63",
            big(1 << 63),
            "8004950c000000000000008a090000000000000080002e",
        ),
        (
            "2**64-1",
            big((1 << 64) - 1),
            "8004950c000000000000008a09ffffffffffffffff002e",
        ),
        (
            "2**64",
            big(1 << 64),
            "8004950c000000000000008a090000000000000000012e",
        ),
        (
            "-2**63-1",
            big(-(1 << 63) - 1),
            "8004950c000000000000008a09ffffffffffffff7fff2e",
        ),
        (
            "2**100",
            big(1 << 100),
            "80049510000000000000008a0d000000000000000000000000102e",
        ),
        (
            "-2**100",
            big(-(1 << 100)),
            "80049510000000000000008a0d000000000000000000000000f02e",
        ),
        (
            "-2**127",
            big(i128::MIN),
            "80049513000000000000008a10000000000000000000000000000000802e",
        ),
        // A BigInt that fits 64 bits is written as CPython writes that int.
        ("5", big(5), "80044b052e"),
        ("0", big(0), "80044b002e"),
        (
            "0 (no bytes)",
            Value::BigInt(Arc::from(&[][..])),
            "80044b002e",
        ),
        ("-1", big(-1), "80049506000000000000004affffffff2e"),
        (
            "-2**63",
            big(i128::from(i64::MIN)),
            "8004950b000000000000008a0800000000000000802e",
        ),
    ]);
}

#[test]
fn floats_are_eight_big_endian_bytes() {
    assert_writes_as_cpython(&[
        (
            "0.0",
            Value::Float(0.0),
            "8004950a000000000000004700000000000000002e",
        ),
        (
            "-0.0",
            Value::Float(-0.0),
            "8004950a000000000000004780000000000000002e",
        ),
        (
            "1.5",
            Value::Float(1.5),
            "8004950a00000000000000473ff80000000000002e",
        ),
        (
            "-2.25e-300",
            Value::Float(-2.25e-300),
            "8004950a000000000000004781b81be3bb5811c42e",
        ),
        (
            "inf",
            Value::Float(f64::INFINITY),
            "8004950a00000000000000477ff00000000000002e",
        ),
        (
            "-inf",
            Value::Float(f64::NEG_INFINITY),
            "8004950a0000000000000047fff00000000000002e",
        ),
        (
            "nan",
            Value::Float(f64::NAN),
            "8004950a00000000000000477ff80000000000002e",
        ),
        (
            "1e308",
            Value::Float(1e308),
            "8004950a00000000000000477fe1ccf385ebc8a02e",
        ),
    ]);
}

#[test]
fn strings_and_bytes_are_memoized_including_empty_and_non_ascii() {
    assert_writes_as_cpython(&[
        ("''", s(""), "80049504000000000000008c00942e"),
        ("'a'", s("a"), "80049505000000000000008c0161942e"),
        (
            "'hello'",
            s("hello"),
            "80049509000000000000008c0568656c6c6f942e",
        ),
        (
            "'héllo ✓ 😀'",
            s("héllo ✓ 😀"),
            "80049513000000000000008c0f68c3a96c6c6f20e29c9320f09f9880942e",
        ),
        ("b''", bytes(b""), "80049504000000000000004300942e"),
        (
            "b'\\x00\\xff\\x80'",
            bytes(b"\x00\xff\x80"),
            "8004950700000000000000430300ff80942e",
        ),
    ]);
}

#[test]
fn none_bools_and_nested_containers_match_cpython() {
    let nested = list(vec![
        int(1),
        list(vec![int(2), int(3)]),
        dict(vec![
            (s("a"), tuple(vec![int(1)])),
            (s("b"), tuple(vec![int(1), int(2)])),
            (s("c"), tuple(vec![int(1), int(2), int(3)])),
            (s("d"), tuple(vec![int(1), int(2), int(3), int(4)])),
        ]),
        tuple(vec![]),
        Value::None,
        Value::Bool(true),
        Value::Bool(false),
        set(vec![int(1), int(2), int(3)]),
        Value::Float(1.5),
        bytes(b"xy"),
        set(vec![]),
    ]);
    let empties = list(vec![
        list(vec![]),
        dict(vec![]),
        set(vec![]),
        tuple(vec![]),
        tuple(vec![list(vec![int(1)])]),
    ]);
    assert_writes_as_cpython(&[
        (
            "[1, [2, 3], {'a': (1,), 'b': (1, 2), 'c': (1, 2, 3), 'd': (1, 2, 3, 4)}, (), None, \
             True, False, {1, 2, 3}, 1.5, b'xy', set()]",
            nested,
            "8004955e000000000000005d94284b015d94284b024b03657d94288c0161944b0185948c0162944b01\
             4b0286948c0163944b014b024b0387948c016494284b014b024b034b04749475294e88898f94284b01\
             4b024b0390473ff800000000000043027879948f94652e",
        ),
        (
            "[[], {}, set(), (), ([1],)]",
            empties,
            "80049513000000000000005d94285d947d948f94295d944b01618594652e",
        ),
    ]);
}

#[test]
fn a_dict_shared_by_arc_is_written_once_then_referenced() {
    let d = dict(vec![(s("x"), int(1))]);
    let shared = list(vec![d.clone(), d.clone(), dict(vec![(s("y"), d)])]);
    assert_writes_as_cpython(&[(
        "(lambda d: [d, d, {'y': d}])({'x': 1})",
        shared,
        // ... 7d 94 (the dict, memo 1) ... 68 01 (BINGET 1) ... 68 01 ...
        "80049519000000000000005d94287d948c0178944b017368017d948c017994680173652e",
    )]);
}

#[test]
fn equal_strings_in_different_arcs_are_written_twice_as_cpython_does() {
    assert_writes_as_cpython(&[(
        "['ab', ''.join(['a', 'b'])]",
        list(vec![s("ab"), s("ab")]),
        "8004950f000000000000005d94288c026162948c02616294652e",
    )]);
}

#[test]
fn share_equal_strings_writes_equal_strings_once() {
    let value = list(vec![s("ab"), s("ab")]);
    let ours = WriteOptions::new().share_equal_strings(true).write(&value);
    // CPython's bytes for one string object referenced twice: (lambda s: [s, s])('ab').
    let theirs = unhex("8004950c000000000000005d94288c026162946801652e");
    assert!(
        ours == theirs,
        "equal strings were not shared: {}",
        first_difference(&ours, &theirs)
    );
}

#[test]
fn empty_str_and_empty_bytes_are_never_taken_for_each_other() {
    // `Arc::default()` may hand out one static allocation for both; the memo must tell a
    // `str` from a `bytes` at the same address.
    let value = list(vec![
        Value::Str(Arc::default()),
        Value::Bytes(Arc::default()),
        Value::Str(Arc::default()),
    ]);
    let ours = write(&value);
    // A str written (8c 00 94), a bytes written (43 00 94), then the str either referenced
    // (68 01, as CPython's ['', b'', '']) or, from another allocation, written again.
    let referenced = unhex("8004950d000000000000005d94288c00944300946801652e");
    let rewritten = unhex("8004950e000000000000005d94288c00944300948c0094652e");
    assert!(
        ours == referenced || ours == rewritten,
        "empty str and bytes were confused: {ours:02x?}"
    );
}
