//! The writer against the crate's reader: what one writes the other reads back, sharing
//! included, and a CPython pickle read and written again is the same bytes.
//!
//! Byte equality of `write(read(write(v)))` and `write(v)` is the complete check: a pickle
//! spells out every value and, through its memo, which containers are the same object, so two
//! values with equal pickles are equal in content and in sharing. Comparing `Value`s with `==`
//! instead would walk shared subtrees once per path, exponentially many in a DAG.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::write;
use super::{cpython_pickles, dict, first_difference, int, list, s, set, tuple, Value};
use crate::trace::pickle::{read, ReadLimits};

/// Reads `pickle` with the default limits, panicking with the reader's error.
fn read_back(pickle: &[u8]) -> Value {
    read(pickle, &ReadLimits::default()).unwrap_or_else(|err| panic!("the reader refused: {err}"))
}

#[test]
fn cpython_pickles_read_then_written_are_the_same_bytes() {
    let exprs = [
        "[1, -1, 2**31, 2**64, -(2**100), 1.5, float('-inf'), None, True, False, '', 'é', b'', b'x']",
        "(lambda d: [d, d, {'y': d}, (d, d), {(1, 2): d}])({'x': [1, (2,), {3}]})",
        "(lambda l: l + [l[-1], l[255], l[0]])([str(i) for i in range(300)])",
        "[{'k%d' % i: (i, 'v%d' % i, [i * 1.5])} for i in range(5000)]",
        "{i: set(range(i % 5)) for i in range(2000)}",
        "['x' * 65535, 'y' * 65536, b'z' * 70000, 2**2048, -(2**2039)]",
        "(lambda f: {'segments': [], 'device_traces': [[{'frames': [f]} for _ in range(3000)]]})\
         ({'filename': 'a.py', 'line': 3, 'name': 'f'})",
    ];
    for (expr, theirs) in exprs.iter().zip(cpython_pickles(&exprs)) {
        let ours = write(&read_back(&theirs));
        assert!(
            ours == theirs,
            "pickle.dumps({expr}, protocol=4), read and written again, differs: {}",
            first_difference(&ours, &theirs)
        );
    }
}

#[test]
fn shared_frames_are_one_arc_after_a_round_trip() {
    let frame = dict(vec![(s("filename"), s("a.py")), (s("line"), int(3))]);
    let entry = |frame: &Value| dict(vec![(s("frames"), list(vec![frame.clone()]))]);
    let value = list(vec![entry(&frame), entry(&frame), entry(&frame)]);
    let back = read_back(&write(&value));
    assert_eq!(back, value, "the value read back differs");
    let frames_of = |entry: &Value| match entry {
        Value::Dict(pairs) => match &pairs[0].1 {
            Value::List(frames) => match &frames[0] {
                Value::Dict(frame) => Arc::clone(frame),
                other => panic!("a frame read back as {other:?}"),
            },
            other => panic!("frames read back as {other:?}"),
        },
        other => panic!("an entry read back as {other:?}"),
    };
    let Value::List(entries) = &back else {
        panic!("read back {back:?}, not a list")
    };
    let first = frames_of(&entries[0]);
    assert!(
        entries.iter().all(|e| Arc::ptr_eq(&frames_of(e), &first)),
        "the shared frame was read back as separate dicts"
    );
}

/// One step of building a random value bottom-up; containers take earlier values by index,
/// so a value taken twice is shared.
#[derive(Clone, Debug)]
enum Step {
    Scalar(Value),
    List(Vec<Index>),
    Tuple(Vec<Index>),
    /// Values for keys `"k0"`, `"k1"`, ...: distinct, so the reader keeps every pair.
    Dict(Vec<Index>),
    /// Distinct ints from the given start, so the reader keeps every item.
    Set(i64, usize),
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::None),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        // Outside i64: BigInt with redundant sign bytes, which the writer trims.
        (any::<i64>(), any::<bool>()).prop_map(|(i, high)| {
            let wide = if high {
                i128::from(i) << 64 | 1
            } else {
                i128::from(i)
            };
            if let Ok(fits) = i64::try_from(wide) {
                Value::Int(fits)
            } else {
                Value::BigInt(wide.to_le_bytes().to_vec().into())
            }
        }),
        any::<u64>().prop_map(|bits| Value::Float(f64::from_bits(bits))),
        ".{0,12}".prop_map(|text| Value::Str(text.into())),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(|b| Value::Bytes(b.into())),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let indices = || prop::collection::vec(any::<Index>(), 0..6);
    prop_oneof![
        3 => scalar().prop_map(Step::Scalar),
        2 => indices().prop_map(Step::List),
        1 => indices().prop_map(Step::Tuple),
        1 => indices().prop_map(Step::Dict),
        1 => (any::<i64>(), 0..4usize).prop_map(|(from, n)| Step::Set(from, n)),
    ]
}

/// Runs the steps; the result is a list of everything built, so every step is written.
fn build(steps: &[Step]) -> Value {
    let mut built: Vec<Value> = Vec::new();
    for step in steps {
        let pick = |indices: &[Index]| -> Vec<Value> {
            if built.is_empty() {
                return Vec::new();
            }
            indices
                .iter()
                .map(|i| built[i.index(built.len())].clone())
                .collect()
        };
        let value = match step {
            Step::Scalar(value) => value.clone(),
            Step::List(indices) => list(pick(indices)),
            Step::Tuple(indices) => tuple(pick(indices)),
            Step::Dict(indices) => dict(
                pick(indices)
                    .into_iter()
                    .enumerate()
                    .map(|(k, v)| (s(&format!("k{k}")), v))
                    .collect(),
            ),
            Step::Set(from, n) => set((0..*n as i64).map(|k| int(from.wrapping_add(k))).collect()),
        };
        built.push(value);
    }
    list(built)
}

proptest! {
    #[test]
    fn any_value_reads_back_with_the_same_content_and_sharing(
        steps in prop::collection::vec(step(), 1..40)
    ) {
        let value = build(&steps);
        let pickle = write(&value);
        let again = write(&read_back(&pickle));
        prop_assert!(
            again == pickle,
            "read back and written again, the pickle differs: {}",
            first_difference(&again, &pickle)
        );
    }
}
