//! Byte-exact comparisons with `pickle.dumps(obj, protocol=4)` run by `python3` now, for
//! values too large to hard-code: batches, long memo indices, huge ints, frames.

use super::super::write;
use super::{bytes, cpython_pickles, dict, first_difference, int, list, python, s, set, Value};

/// Asserts that each value writes as CPython pickles the Python expression beside it.
fn assert_writes_as_cpython(cases: &[(&str, Value)]) {
    let exprs: Vec<&str> = cases.iter().map(|(expr, _)| *expr).collect();
    for ((expr, value), theirs) in cases.iter().zip(cpython_pickles(&exprs)) {
        let ours = write(value);
        assert!(
            ours == theirs,
            "pickle.dumps({expr}, protocol=4) differs: {}",
            first_difference(&ours, &theirs)
        );
    }
}

/// The integers `range` yields.
fn ints(range: std::ops::Range<i64>) -> Vec<Value> {
    range.map(int).collect()
}

#[test]
fn long_lists_dicts_and_sets_are_batched_by_1000_as_cpython() {
    let pairs = |n: i64, f: fn(i64) -> i64| (0..n).map(|i| (int(i), int(f(i)))).collect();
    assert_writes_as_cpython(&[
        ("list(range(2))", list(ints(0..2))),
        ("list(range(1000))", list(ints(0..1000))),
        ("list(range(1001))", list(ints(0..1001))),
        ("list(range(2500))", list(ints(0..2500))),
        // A dict or set of a multiple of 1000 ends with an empty MARK SETITEMS / ADDITEMS.
        ("{i: i for i in range(1000)}", dict(pairs(1000, |i| i))),
        ("{i: -i for i in range(2001)}", dict(pairs(2001, |i| -i))),
        ("{i: i for i in range(2000)}", dict(pairs(2000, |i| i))),
        ("{1}", set(ints(1..2))),
        ("set(range(1000))", set(ints(0..1000))),
        ("set(range(2500))", set(ints(0..2500))),
    ]);
}

#[test]
fn memo_indices_past_255_are_referenced_with_long_binget() {
    let strings: Vec<Value> = (0..300).map(|i| s(&i.to_string())).collect();
    let mut items = strings.clone();
    items.extend([
        strings[299].clone(),
        strings[255].clone(),
        strings[0].clone(),
    ]);
    assert_writes_as_cpython(&[(
        "(lambda l: l + [l[-1], l[255], l[0]])([str(i) for i in range(300)])",
        list(items),
    )]);
}

#[test]
fn ints_of_more_than_255_bytes_use_long4() {
    let with = |parts: &[(u8, usize)]| {
        let bytes: Vec<u8> = parts
            .iter()
            .flat_map(|&(b, n)| std::iter::repeat(b).take(n))
            .collect();
        Value::BigInt(bytes.into())
    };
    assert_writes_as_cpython(&[
        ("2**2039 - 1", with(&[(0xff, 254), (0x7f, 1)])),
        // The same number with ten redundant sign bytes.
        ("2**2039 - 1", with(&[(0xff, 254), (0x7f, 1), (0x00, 10)])),
        ("2**2039", with(&[(0x00, 254), (0x80, 1), (0x00, 1)])),
        ("-(2**2039)", with(&[(0x00, 254), (0x80, 1)])),
        ("-(2**2048)", with(&[(0x00, 256), (0xff, 1)])),
    ]);
}

#[test]
fn payloads_of_64_kib_or_more_are_written_outside_frames() {
    let text = |c: &str, n: usize| s(&c.repeat(n));
    assert_writes_as_cpython(&[
        ("'q' * 70000", text("q", 70000)),
        ("b'r' * 65536", bytes(&[b'r'; 65536])),
        ("[b'r' * 65536]", list(vec![bytes(&[b'r'; 65536])])),
        ("'é' * 40000", text("é", 40000)),
        (
            "['x' * 65535, 'y' * 65536, b'z' * 70000, 'a' * 300, b'b' * 300, 'tail']",
            list(vec![
                text("x", 65535),
                text("y", 65536),
                bytes(&[b'z'; 70000]),
                text("a", 300),
                bytes(&[b'b'; 300]),
                s("tail"),
            ]),
        ),
        (
            "['a%d' % i for i in range(10000)] + ['m' * 100000] + ['b%d' % i for i in range(10000)]",
            list(
                (0..10000)
                    .map(|i| s(&format!("a{i}")))
                    .chain([text("m", 100_000)])
                    .chain((0..10000).map(|i| s(&format!("b{i}"))))
                    .collect(),
            ),
        ),
    ]);
}

#[test]
fn many_small_objects_are_cut_into_64_kib_frames_as_cpython() {
    assert_writes_as_cpython(&[
        (
            "[str(i) for i in range(30000)]",
            list((0..30000).map(|i| s(&i.to_string())).collect()),
        ),
        (
            "[{'k%d' % i: (i, 'v%d' % i, [i * 1.5])} for i in range(5000)]",
            list(
                (0..5000)
                    .map(|i| {
                        let value = super::tuple(vec![
                            int(i),
                            s(&format!("v{i}")),
                            list(vec![Value::Float(i as f64 * 1.5)]),
                        ]);
                        dict(vec![(s(&format!("k{i}")), value)])
                    })
                    .collect(),
            ),
        ),
        (
            "[list(range(i % 50)) for i in range(3000)]",
            list((0..3000).map(|i| list(ints(0..i % 50))).collect()),
        ),
        (
            "{'key%d' % i: i for i in range(20000)}",
            dict(
                (0..20000)
                    .map(|i| (s(&format!("key{i}")), int(i)))
                    .collect(),
            ),
        ),
    ]);
}

#[test]
fn deeply_nested_lists_are_written_without_recursion() {
    const DEPTH: usize = 100_000;
    let mut value = list(vec![]);
    for _ in 0..DEPTH {
        value = list(vec![value]);
    }
    let pickle = write(&value);
    // CPython's pickler recurses and cannot write this; its unpickler does not recurse.
    let loaded = python(
        "import pickle, sys\n\
         x = pickle.loads(sys.stdin.buffer.read())\n\
         depth = 0\n\
         while x:\n    x = x[0]\n    depth += 1\n\
         print(depth)",
        &pickle,
    );
    assert_eq!(
        String::from_utf8_lossy(&loaded).trim(),
        DEPTH.to_string(),
        "CPython loaded a different nesting depth"
    );
    // Dropping the value recursively would overflow the test's stack; take it apart.
    while let Value::List(items) = value {
        value = match std::sync::Arc::try_unwrap(items) {
            Ok(mut items) => items.pop().unwrap_or(Value::None),
            Err(_) => Value::None,
        };
    }
}
