//! The pickler's memo: which objects were written, under which index, so that meeting one
//! again writes a reference instead of a copy.
//!
//! CPython memoizes every `str`, `bytes`, list, dict, set and non-empty tuple, keyed by object
//! identity; here identity is the `Arc`'s address. Every memoized object takes the next index
//! (that is what `MEMOIZE` means to the reader), but only objects that can be met again are
//! remembered: an `Arc` whose strong count is 1 has no other owner, so the value being written
//! cannot hold it twice. A snapshot's millions of trace entries are unshared, so the table
//! holds only the frames and strings that really are shared, and stays small and fast.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::Value;
use crate::trace::AddressHasher;

/// How the memo knows an object written before: its kind and its `Arc`'s address. The kind
/// keeps apart an empty `str` and an empty `bytes` that share one static allocation.
type Key = (Kind, usize);

/// The memoized kinds of value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Str,
    Bytes,
    List,
    Tuple,
    Dict,
    Set,
}

/// The objects written so far and their memo indices.
pub(super) struct Memo<'v> {
    /// Index of every memoized `Arc` that may be met again.
    by_address: HashMap<Key, u32, BuildHasherDefault<AddressHasher>>,
    /// Index by content of every memoized `str`, when equal strings are shared. Contents can
    /// come from an untrusted file, so this table keeps the standard, seeded hasher.
    by_content: Option<HashMap<&'v str, u32>>,
    /// Memo entries so far, that is the `MEMOIZE` opcodes written.
    len: u64,
}

impl<'v> Memo<'v> {
    /// An empty memo; with `share_equal_strings`, strings are also found by content.
    pub(super) fn new(share_equal_strings: bool) -> Self {
        Self {
            by_address: HashMap::default(),
            by_content: share_equal_strings.then(HashMap::new),
            len: 0,
        }
    }

    /// The memo index of `value` if it was written before: the same `Arc` or, when equal
    /// strings are shared, an equal `str`. `None` for values never memoized (atoms).
    pub(super) fn get(&self, value: &Value) -> Option<u32> {
        if let Some(key) = shared_key(value) {
            if let Some(&index) = self.by_address.get(&key) {
                return Some(index);
            }
        }
        match (value, &self.by_content) {
            (Value::Str(s), Some(by_content)) => by_content.get(&**s).copied(),
            _ => None,
        }
    }

    /// Records `value`, just written, under the next index; returns whether to write
    /// `MEMOIZE`. References carry at most a 32-bit index (CPython fails beyond it), so past
    /// 2^32 entries objects are not memoized: later copies are unshared but correct.
    pub(super) fn put(&mut self, value: &'v Value) -> bool {
        let Ok(index) = u32::try_from(self.len) else {
            return false;
        };
        self.len += 1;
        if let Some(key) = shared_key(value) {
            self.by_address.insert(key, index);
        }
        if let (Value::Str(s), Some(by_content)) = (value, &mut self.by_content) {
            by_content.entry(s).or_insert(index);
        }
        true
    }
}

/// The key of a memoized value that may be met again, `None` for one that cannot (its `Arc`
/// has no other owner) or is never memoized (atoms).
fn shared_key(value: &Value) -> Option<Key> {
    match value {
        Value::Str(s) => key(Kind::Str, s),
        Value::Bytes(bytes) => key(Kind::Bytes, bytes),
        Value::List(items) => key(Kind::List, items),
        Value::Tuple(items) => key(Kind::Tuple, items),
        Value::Dict(pairs) => key(Kind::Dict, pairs),
        Value::Set(items) => key(Kind::Set, items),
        Value::None | Value::Bool(_) | Value::Int(_) | Value::BigInt(_) | Value::Float(_) => None,
    }
}

/// The key of `arc` if another owner could make the value hold it twice.
fn key<T: ?Sized>(kind: Kind, arc: &Arc<T>) -> Option<Key> {
    // Another owner made after this check is outside the borrowed value, so cannot matter.
    (Arc::strong_count(arc) > 1).then(|| (kind, Arc::as_ptr(arc).cast::<u8>() as usize))
}
