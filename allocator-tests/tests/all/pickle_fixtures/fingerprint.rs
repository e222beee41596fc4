//! The independent facts the pickle tests compare with: a fingerprint of every distinct
//! container and the sharing of frames, computed as `fixtures/fingerprint.py` computes them
//! with CPython.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use blockpool::trace::pickle::Value;

use super::keys;

/// The identity of a container: its `Arc`'s address.
fn identity(value: &Value) -> Option<usize> {
    match value {
        Value::List(items) | Value::Tuple(items) | Value::Set(items) => {
            Some(Arc::as_ptr(items) as usize)
        }
        Value::Dict(pairs) => Some(Arc::as_ptr(pairs) as usize),
        _ => None,
    }
}

/// The direct children of a container (a dict's keys and values alternate).
fn children(value: &Value) -> Vec<&Value> {
    match value {
        Value::List(items) | Value::Tuple(items) | Value::Set(items) => items.iter().collect(),
        Value::Dict(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => Vec::new(),
    }
}

/// Totals over every distinct container (by identity) and its direct scalar children, as
/// the Python script computes them over distinct `id()`s.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Fingerprint {
    pub(super) dicts: usize,
    pub(super) lists: usize,
    pub(super) tuples: usize,
    pub(super) sets: usize,
    /// Direct children of distinct containers, a dict's keys and values both counted.
    pub(super) edges: usize,
    pub(super) ints: usize,
    /// Sum of those ints modulo 2^64.
    pub(super) int_sum: u64,
    pub(super) strs: usize,
    pub(super) str_bytes: usize,
    pub(super) trues: usize,
    pub(super) falses: usize,
    pub(super) nones: usize,
    pub(super) floats: usize,
}

pub(super) fn fingerprint(root: &Value) -> Fingerprint {
    let mut f = Fingerprint::default();
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    while let Some(value) = stack.pop() {
        if !identity(value).is_some_and(|id| seen.insert(id)) {
            continue;
        }
        match value {
            Value::Dict(_) => f.dicts += 1,
            Value::List(_) => f.lists += 1,
            Value::Tuple(_) => f.tuples += 1,
            _ => f.sets += 1,
        }
        for child in children(value) {
            f.edges += 1;
            match child {
                Value::Bool(true) => f.trues += 1,
                Value::Bool(false) => f.falses += 1,
                Value::None => f.nones += 1,
                Value::Int(i) => {
                    f.ints += 1;
                    f.int_sum = f.int_sum.wrapping_add(*i as u64);
                }
                Value::Float(_) => f.floats += 1,
                Value::Str(s) => {
                    f.strs += 1;
                    f.str_bytes += s.len();
                }
                Value::BigInt(_) | Value::Bytes(_) => panic!("unexpected {child:?}"),
                _ => stack.push(child),
            }
        }
    }
    f
}

/// Whether `value` is a stack frame: a dict of exactly `filename`, `line`, `name`.
fn is_frame(value: &Value) -> bool {
    matches!(value, Value::Dict(_)) && {
        let mut keys = keys(value);
        keys.sort_unstable();
        keys == ["filename", "line", "name"]
    }
}

/// References to frames from distinct containers, and distinct frames.
pub(super) fn frame_sharing(root: &Value) -> (usize, usize) {
    let (mut references, mut frames, mut seen) = (0, HashSet::new(), HashSet::new());
    let mut stack = vec![root];
    while let Some(value) = stack.pop() {
        if !identity(value).is_some_and(|id| seen.insert(id)) {
            continue;
        }
        for child in children(value) {
            if is_frame(child) {
                references += 1;
                frames.extend(identity(child));
            }
            stack.push(child);
        }
    }
    (references, frames.len())
}

/// Frames a deep copy of `value` would hold, counted once per shared container.
pub(super) fn expanded_frames(value: &Value, memo: &mut HashMap<usize, u64>) -> u64 {
    let Some(id) = identity(value) else { return 0 };
    if let Some(&count) = memo.get(&id) {
        return count;
    }
    let own = u64::from(is_frame(value));
    let count = own
        + children(value)
            .into_iter()
            .map(|c| expanded_frames(c, memo))
            .sum::<u64>();
    memo.insert(id, count);
    count
}
