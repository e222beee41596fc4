//! Key equality for dicts and sets under construction: a key set again replaces the value, as
//! in Python, rather than adding a second entry.
//!
//! Keys compare as Python compares them where plain data allows: `True == 1 == 1.0`, strings by
//! content, `str` never equal to `bytes`, `NaN` equal to nothing. Tuple and frozenset keys
//! compare by identity (the same memoized object), not by content. Small containers are
//! scanned; larger ones get a hash index, so a hostile dict with many keys stays linear.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;

use super::super::Value;
use super::arena::{Slot, Unpacked};

/// Entries up to which a linear scan is cheaper than a hash index.
const LINEAR_SCAN_ENTRIES: usize = 32;

#[cfg(test)]
thread_local! {
    /// Entries whose key [`KeyIndex::find`] has compared with a key looked up, on this thread:
    /// tests bound the work of a read's key lookups by this count instead of by the clock.
    pub(super) static KEYS_COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one key comparison in [`KEYS_COMPARED`]; nothing outside tests.
#[inline(always)]
fn count_comparison() {
    #[cfg(test)]
    KEYS_COMPARED.with(|count| count.set(count.get() + 1));
}

/// A key as it compares: a borrowed, normalized view of a [`Slot`].
#[derive(Debug, PartialEq, Eq, Hash)]
enum KeyRef<'a> {
    None,
    /// Ints, bools, and floats with an integral value in range.
    Int(i64),
    /// Minimal two's complement bytes.
    BigInt(&'a [u8]),
    /// Other floats, by their bits (`NaN` has no key).
    Float(u64),
    Str(&'a str),
    Bytes(&'a [u8]),
    /// A tuple or frozenset, by identity.
    Node(u32),
}

impl<'a> KeyRef<'a> {
    /// The key of `slot`, whose scalars are in `scalars`, or `None` for a key equal to nothing
    /// (`NaN`).
    fn of(scalars: &'a [Value], slot: Slot) -> Option<Self> {
        Some(match slot.unpack() {
            Unpacked::Node(id) => KeyRef::Node(id),
            Unpacked::Int(int) => KeyRef::Int(int),
            Unpacked::Bool(flag) => KeyRef::Int(i64::from(flag)),
            Unpacked::None => KeyRef::None,
            Unpacked::Scalar(index) => match scalars.get(index as usize)? {
                Value::None => KeyRef::None,
                Value::Bool(b) => KeyRef::Int(i64::from(*b)),
                Value::Int(i) => KeyRef::Int(*i),
                Value::BigInt(bytes) => KeyRef::BigInt(bytes),
                Value::Float(f) if f.is_nan() => return None,
                // 2^63 is exact as a float; every integral float in [-2^63, 2^63) fits an i64.
                Value::Float(f)
                    if f.fract() == 0.0 && *f >= -(2f64.powi(63)) && *f < 2f64.powi(63) =>
                {
                    KeyRef::Int(*f as i64)
                }
                Value::Float(f) => KeyRef::Float(f.to_bits()),
                Value::Str(s) => KeyRef::Str(s),
                Value::Bytes(b) => KeyRef::Bytes(b),
                // Scalars are never containers.
                Value::List(_) | Value::Tuple(_) | Value::Dict(_) | Value::Set(_) => return None,
            },
        })
    }
}

/// The text of the `str` scalar `index`.
#[inline]
fn str_at(scalars: &[Value], index: u32) -> Option<&str> {
    match scalars.get(index as usize)? {
        Value::Str(text) => Some(text),
        _ => None,
    }
}

/// [`KeyIndex::find`] without an index for a `str` key: the common case of a small dict with
/// memoized string keys, where only another `str` with the same text hash can be equal.
fn find_str(scalars: &[Value], slots: &[Slot], stride: usize, key: Slot) -> Option<usize> {
    let same_text = |other: Slot| {
        let text = |slot: Slot| slot.str_index().and_then(|i| str_at(scalars, i));
        text(other).is_some_and(|other| Some(other) == text(key))
    };
    let mut entry = 0;
    while let Some(&other) = slots.get(entry * stride) {
        count_comparison();
        if other == key || (other.may_equal_str(key) && same_text(other)) {
            return Some(entry);
        }
        entry += 1;
    }
    None
}

/// A hash index from key to entry number for one large dict or set.
pub(super) struct KeyIndex {
    hasher: RandomState,
    entries: HashMap<u64, Vec<usize>>,
}

impl KeyIndex {
    /// The entry whose key equals `key` among `slots`, whose keys sit every `stride` slots
    /// (2 for a dict, 1 for a set) and whose scalars are in `scalars`.
    pub(super) fn find(
        index: Option<&KeyIndex>,
        scalars: &[Value],
        slots: &[Slot],
        stride: usize,
        key: Slot,
    ) -> Option<usize> {
        if index.is_none() && key.str_index().is_some() {
            return find_str(scalars, slots, stride, key);
        }
        let key_slot = key;
        let key = KeyRef::of(scalars, key)?;
        let matches = |entry: usize| {
            count_comparison();
            let other = *slots.get(entry * stride)?;
            // The same object, or equal atoms; two different ints held in slots differ.
            if other == key_slot {
                return Some(true);
            }
            if other.is_small_int() && key_slot.is_small_int() {
                return Some(false);
            }
            Some(KeyRef::of(scalars, other)? == key)
        };
        match index {
            None => (0..slots.len() / stride).find(|&entry| matches(entry) == Some(true)),
            Some(index) => index
                .entries
                .get(&index.hasher.hash_one(&key))?
                .iter()
                .copied()
                .find(|&entry| matches(entry) == Some(true)),
        }
    }

    /// Records the key of `entry`, just added; builds the index once the entries outgrow a
    /// linear scan.
    #[inline]
    pub(super) fn record(
        index: &mut Option<Box<KeyIndex>>,
        scalars: &[Value],
        slots: &[Slot],
        stride: usize,
        entry: usize,
    ) {
        match index {
            None if entry < LINEAR_SCAN_ENTRIES => {}
            Some(index) => index.add(scalars, slots, stride, entry),
            None => {
                let mut built = KeyIndex {
                    hasher: RandomState::new(),
                    entries: HashMap::new(),
                };
                for earlier in 0..=entry {
                    built.add(scalars, slots, stride, earlier);
                }
                *index = Some(Box::new(built));
            }
        }
    }

    fn add(&mut self, scalars: &[Value], slots: &[Slot], stride: usize, entry: usize) {
        let key = slots
            .get(entry * stride)
            .and_then(|&slot| KeyRef::of(scalars, slot));
        if let Some(key) = key {
            let hash = self.hasher.hash_one(&key);
            self.entries.entry(hash).or_default().push(entry);
        }
    }
}
