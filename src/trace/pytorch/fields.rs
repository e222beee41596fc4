//! Typed access to the plain-data tree: dict fields, ints, strings and lists, each failing with
//! a [`SnapshotError`] that names its path. Paths are a chain of borrowed steps and are only
//! rendered into a string when something fails, so converting a large file allocates nothing
//! for them.

use std::fmt::{self, Write as _};
use std::sync::Arc;

use super::error::SnapshotError;
use crate::trace::pickle::Value;

/// Where a value sits in the snapshot: a chain of keys and indices from the root.
#[derive(Clone, Copy)]
pub(super) struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    step: Step,
}

#[derive(Clone, Copy)]
enum Step {
    Root,
    Key(&'static str),
    Index(usize),
}

impl<'a> Path<'a> {
    /// The whole snapshot.
    pub(super) const ROOT: Path<'static> = Path {
        parent: None,
        step: Step::Root,
    };

    /// The value under `key` of the dict here.
    pub(super) fn key(&'a self, key: &'static str) -> Path<'a> {
        Path {
            parent: Some(self),
            step: Step::Key(key),
        }
    }

    /// Item `index` of the list here.
    pub(super) fn index(&'a self, index: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            step: Step::Index(index),
        }
    }

    fn write_to(&self, out: &mut String) {
        if let Some(parent) = self.parent {
            parent.write_to(out);
        }
        match self.step {
            Step::Root => {}
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(index) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "[{index}]");
            }
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        self.write_to(&mut out);
        if out.is_empty() {
            f.write_str("the snapshot")
        } else {
            f.write_str(&out)
        }
    }
}

/// The Python type name of `value`, as an error message shows it.
pub(super) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::None => "NoneType",
        Value::Bool(_) => "bool",
        Value::Int(_) | Value::BigInt(_) => "int",
        Value::Float(_) => "float",
        Value::Str(_) => "str",
        Value::Bytes(_) => "bytes",
        Value::List(_) => "list",
        Value::Tuple(_) => "tuple",
        Value::Dict(_) => "dict",
        Value::Set(_) => "set",
    }
}

pub(super) fn wrong_type(path: &Path<'_>, expected: &'static str, found: &Value) -> SnapshotError {
    SnapshotError::WrongType {
        path: path.to_string(),
        expected,
        found: type_name(found),
    }
}

/// The items of a list (or tuple) at `path`.
pub(super) fn list<'v>(value: &'v Value, path: &Path<'_>) -> Result<&'v [Value], SnapshotError> {
    match value {
        Value::List(items) | Value::Tuple(items) => Ok(items),
        other => Err(wrong_type(path, "a list", other)),
    }
}

/// An int that fits in `u64`.
pub(super) fn u64_at(value: &Value, path: &Path<'_>) -> Result<u64, SnapshotError> {
    const EXPECTED: &str = "an int in 0..=18446744073709551615";
    match value {
        Value::Int(int) => u64::try_from(*int).map_err(|_| SnapshotError::OutOfRange {
            path: path.to_string(),
            expected: EXPECTED,
            found: int.to_string(),
        }),
        Value::BigInt(bytes) => big_u64(bytes).ok_or_else(|| SnapshotError::OutOfRange {
            path: path.to_string(),
            expected: EXPECTED,
            found: format!("an int of {} bytes", bytes.len()),
        }),
        other => Err(wrong_type(path, "an int", other)),
    }
}

/// An int that fits in `u32`.
pub(super) fn u32_at(value: &Value, path: &Path<'_>) -> Result<u32, SnapshotError> {
    let wide = u64_at(value, path)?;
    u32::try_from(wide).map_err(|_| SnapshotError::OutOfRange {
        path: path.to_string(),
        expected: "an int in 0..=4294967295",
        found: wide.to_string(),
    })
}

/// A little-endian two's-complement integer (`LONG1` / `LONG4`) as `u64`, if it is one.
fn big_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.last().is_some_and(|top| top & 0x80 != 0) {
        return None; // negative
    }
    let (low, high) = bytes.split_at(bytes.len().min(8));
    if high.iter().any(|&byte| byte != 0) {
        return None;
    }
    let mut word = [0u8; 8];
    word[..low.len()].copy_from_slice(low);
    Some(u64::from_le_bytes(word))
}

/// A frame's line: any int reads, one that is no line number as 0 (see [`Fields::line`]).
pub(super) fn line_at(value: &Value, path: &Path<'_>) -> Result<u32, SnapshotError> {
    match value {
        Value::Int(int) => Ok(u32::try_from(*int).unwrap_or(0)),
        Value::BigInt(bytes) => Ok(big_u64(bytes)
            .and_then(|wide| u32::try_from(wide).ok())
            .unwrap_or(0)),
        other => Err(wrong_type(path, "an int", other)),
    }
}

/// A str.
pub(super) fn str_at<'v>(value: &'v Value, path: &Path<'_>) -> Result<&'v Arc<str>, SnapshotError> {
    match value {
        Value::Str(text) => Ok(text),
        other => Err(wrong_type(path, "a str", other)),
    }
}

/// A bool.
pub(super) fn bool_at(value: &Value, path: &Path<'_>) -> Result<bool, SnapshotError> {
    match value {
        Value::Bool(flag) => Ok(*flag),
        other => Err(wrong_type(path, "a bool", other)),
    }
}

/// A dict with string keys, read field by field; keys it is never asked for are ignored.
#[derive(Clone, Copy)]
pub(super) struct Fields<'v, 'p> {
    pairs: &'v [(Value, Value)],
    path: &'p Path<'p>,
}

impl<'v, 'p> Fields<'v, 'p> {
    /// The dict at `path`.
    pub(super) fn new(value: &'v Value, path: &'p Path<'p>) -> Result<Self, SnapshotError> {
        match value {
            Value::Dict(pairs) => Ok(Fields { pairs, path }),
            other => Err(wrong_type(path, "a dict", other)),
        }
    }

    /// The path of the dict.
    pub(super) fn path(&self) -> &'p Path<'p> {
        self.path
    }

    /// The value under `key`, if there is one.
    pub(super) fn get(&self, key: &str) -> Option<&'v Value> {
        self.pairs
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(name) if &**name == key))
            .map(|(_, value)| value)
    }

    /// The values under `keys` in one pass over the dict, each `None` when absent. `cache`
    /// remembers the address of the key string that matched each of `keys` last time: files
    /// share one string object for each key, so later dicts match by address, without
    /// comparing text. (The borrowed tree keeps every string alive and unchanged, so an
    /// address seen once names the same text for the whole conversion.)
    pub(super) fn lookup<const N: usize>(
        &self,
        keys: &[&'static str; N],
        cache: &mut [usize; N],
    ) -> [Option<&'v Value>; N] {
        let mut found = [None; N];
        for (key, value) in self.pairs {
            let Value::Str(name) = key else { continue };
            let address = Arc::as_ptr(name).cast::<u8>() as usize;
            let slot = match cache.iter().position(|&cached| cached == address) {
                Some(slot) => slot,
                None => match keys.iter().position(|&key| key == &**name) {
                    Some(slot) => {
                        cache[slot] = address;
                        slot
                    }
                    None => continue,
                },
            };
            // Python keeps dict keys unique; the first one wins here as in `get`.
            if found[slot].is_none() {
                found[slot] = Some(value);
            }
        }
        found
    }

    /// A [`MissingKey`](SnapshotError::MissingKey) error for `key` of this dict, or the value.
    pub(super) fn required(
        &self,
        key: &'static str,
        value: Option<&'v Value>,
    ) -> Result<&'v Value, SnapshotError> {
        value.ok_or_else(|| SnapshotError::MissingKey {
            path: self.path.to_string(),
            key,
        })
    }

    /// The value under `key`, which must be there.
    pub(super) fn require(&self, key: &'static str) -> Result<&'v Value, SnapshotError> {
        self.get(key).ok_or_else(|| SnapshotError::MissingKey {
            path: self.path.to_string(),
            key,
        })
    }

    /// The `u64` under `key`, which must be there.
    pub(super) fn u64(&self, key: &'static str) -> Result<u64, SnapshotError> {
        u64_at(self.require(key)?, &self.path.key(key))
    }

    /// The `u64` under `key`, if there is one.
    pub(super) fn opt_u64(&self, key: &'static str) -> Result<Option<u64>, SnapshotError> {
        self.get(key)
            .map(|value| u64_at(value, &self.path.key(key)))
            .transpose()
    }

    /// The `u32` under `key`, which must be there.
    pub(super) fn u32(&self, key: &'static str) -> Result<u32, SnapshotError> {
        u32_at(self.require(key)?, &self.path.key(key))
    }

    /// A frame's line under `key`, which must be an int: any int a file holds reads, and one
    /// that is no line number (PyTorch writes C++ frames without a line as 2^64 - 1; a negative
    /// or wider int) reads as 0, the unknown line ([`Frame::line`](crate::event::Frame::line)),
    /// instead of refusing the file.
    pub(super) fn line(&self, key: &'static str) -> Result<u32, SnapshotError> {
        line_at(self.require(key)?, &self.path.key(key))
    }

    /// The str under `key`, which must be there.
    pub(super) fn str(&self, key: &'static str) -> Result<&'v Arc<str>, SnapshotError> {
        str_at(self.require(key)?, &self.path.key(key))
    }

    /// The list under `key`, which must be there.
    pub(super) fn list(&self, key: &'static str) -> Result<&'v [Value], SnapshotError> {
        list(self.require(key)?, &self.path.key(key))
    }
}
