//! Property tests: real snapshot files mutated at random (bit flips, truncations, insertions,
//! deletions), and random opcode sequences, must read or fail with a typed error, never panic,
//! and do work bounded by the input's size.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use proptest::prelude::*;

use super::keys::KEYS_COMPARED;
use super::opcodes::*;
use super::{read, ReadLimits};
use crate::trace::pickle::Value;

/// The smallest snapshot files, whole (the project's own, made as PyTorch writes them by
/// `allocator-tests/fixtures/made/make.py`); mutating them reaches every part of a file.
const SMALL_FIXTURES: [&str; 2] = [
    "made_empty_snapshot.pickle",
    "made_expandable_two_devices.pickle",
];

/// The bytes of a snapshot in `allocator-tests/fixtures/`: `made/` for the project's own
/// (`made_...`), `pytorch-snapshots/` for the third-party ones. A missing file fails the test,
/// it is never skipped.
fn fixture(name: &str) -> Vec<u8> {
    let folder = if name.starts_with("made_") {
        "made"
    } else {
        "pytorch-snapshots"
    };
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "allocator-tests",
        "fixtures",
        folder,
        name,
    ]
    .iter()
    .collect();
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!(
            "cannot read the snapshot fixture {}: {error}",
            path.display()
        )
    })
}

/// Reads `bytes` with default and with tight limits; returns whether the default read
/// succeeded. Fails the case if a read's work is not bounded by the input: more key
/// comparisons than [`COMPARISONS_PER_BYTE`] per input byte, or a result with more distinct
/// containers and references than input bytes (each costs at least one opcode).
fn read_quickly(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let tight = ReadLimits {
        max_depth: 4,
        max_items: 64,
        max_memo_entries: 16,
        max_argument_bytes: 32,
    };
    let ok = read_bounded(bytes, &ReadLimits::default())?;
    read_bounded(bytes, &tight)?;
    Ok(ok)
}

/// Reads `bytes` under `limits`, failing the case if the work was not bounded by the input
/// (see [`read_quickly`]); returns whether the read succeeded.
fn read_bounded(bytes: &[u8], limits: &ReadLimits) -> Result<bool, TestCaseError> {
    let budget = COMPARISONS_PER_BYTE * (bytes.len() as u64 + 1);
    KEYS_COMPARED.with(|count| count.set(0));
    let result = read(bytes, limits);
    let compared = KEYS_COMPARED.with(|count| count.get());
    prop_assert!(
        compared <= budget,
        "{compared} key comparisons for {} input bytes",
        bytes.len()
    );
    if let Ok(value) = &result {
        let size = distinct_size(value);
        prop_assert!(
            size <= bytes.len(),
            "{size} distinct containers and references from {} input bytes",
            bytes.len()
        );
    }
    Ok(result.is_ok())
}

/// Key comparisons a read may make per input byte: a dict lookup compares a few entries of
/// one hash bucket, never a scan of the dict.
const COMPARISONS_PER_BYTE: u64 = 8;

/// Distinct containers (by identity) plus the references they hold.
fn distinct_size(root: &Value) -> usize {
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    let mut size = 0;
    while let Some(value) = stack.pop() {
        let (id, children): (usize, Vec<&Value>) = match value {
            Value::List(items) | Value::Tuple(items) | Value::Set(items) => {
                (Arc::as_ptr(items) as usize, items.iter().collect())
            }
            Value::Dict(pairs) => (
                Arc::as_ptr(pairs) as usize,
                pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
            ),
            _ => continue,
        };
        if seen.insert(id) {
            size += 1 + children.len();
            stack.extend(children);
        }
    }
    size
}

/// One edit of a file, at a position taken modulo its length.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit { at: usize, bit: u8 },
    Overwrite { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
}

impl Mutation {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let len = bytes.len().max(1);
        match self {
            Mutation::FlipBit { at, bit } => {
                if let Some(byte) = bytes.get_mut(at % len) {
                    *byte ^= 1 << (bit % 8);
                }
            }
            Mutation::Overwrite { at, byte } => {
                if let Some(old) = bytes.get_mut(at % len) {
                    *old = *byte;
                }
            }
            Mutation::Insert {
                at,
                bytes: inserted,
            } => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, inserted.iter().copied());
            }
            Mutation::Delete { at, len: count } => {
                let at = at % len;
                let end = at.saturating_add(*count).min(bytes.len());
                if at < end {
                    bytes.drain(at..end);
                }
            }
        }
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Overwrite { at, byte }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..9))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1..16usize).prop_map(|(at, len)| Mutation::Delete { at, len }),
    ]
}

/// Opcodes with no argument, any of which a random sequence may use.
const NO_ARGUMENT: [u8; 25] = [
    MARK,
    POP,
    POP_MARK,
    DUP,
    NONE,
    NEWTRUE,
    NEWFALSE,
    EMPTY_LIST,
    EMPTY_TUPLE,
    EMPTY_DICT,
    EMPTY_SET,
    APPEND,
    APPENDS,
    SETITEM,
    SETITEMS,
    ADDITEMS,
    LIST,
    TUPLE,
    TUPLE1,
    TUPLE2,
    TUPLE3,
    DICT,
    FROZENSET,
    MEMOIZE,
    READONLY_BUFFER,
];

/// One opcode with a small, well-formed argument.
fn opcode() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(NO_ARGUMENT.to_vec()).prop_map(|op| vec![op]),
        1 => any::<u8>().prop_map(|n| vec![BININT1, n]),
        1 => (0..8u8).prop_map(|i| vec![BINGET, i]),
        1 => (0..8u8).prop_map(|i| vec![BINPUT, i]),
        1 => "[a-c]{0,3}".prop_map(|text| {
            let mut op = vec![SHORT_BINUNICODE, text.len() as u8];
            op.extend_from_slice(text.as_bytes());
            op
        }),
        1 => prop::collection::vec(any::<u8>(), 0..3).prop_map(|bytes| {
            let mut op = vec![SHORT_BINBYTES, bytes.len() as u8];
            op.extend_from_slice(&bytes);
            op
        }),
    ]
}

proptest! {
    #[test]
    fn mutated_small_fixtures_never_panic(
        file in 0..SMALL_FIXTURES.len(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut bytes = fixture(SMALL_FIXTURES[file]);
        for mutation in &mutations {
            mutation.apply(&mut bytes);
        }
        read_quickly(&bytes)?;
    }

    #[test]
    fn truncated_fixtures_are_refused(file in 0..SMALL_FIXTURES.len(), cut in any::<usize>()) {
        let bytes = fixture(SMALL_FIXTURES[file]);
        // Every fixture ends in its STOP, so any proper prefix lacks it.
        let cut = cut % bytes.len();
        prop_assert!(!read_quickly(&bytes[..cut])?, "a prefix of {cut} bytes read");
    }

    #[test]
    fn random_opcode_sequences_never_panic(ops in prop::collection::vec(opcode(), 0..64)) {
        let mut bytes = vec![PROTO, 4];
        bytes.extend(ops.concat());
        bytes.push(STOP);
        read_quickly(&bytes)?;
    }
}

#[test]
fn truncating_a_larger_fixture_anywhere_is_refused() {
    let bytes = fixture("Yiyi_LLM-inference_oom_snapshot.pickle");
    for cut in (0..bytes.len()).step_by(997) {
        assert!(
            read(&bytes[..cut], &ReadLimits::default()).is_err(),
            "a prefix of {cut} bytes read"
        );
    }
    assert!(
        read(&bytes, &ReadLimits::default()).is_ok(),
        "the whole file reads"
    );
}
