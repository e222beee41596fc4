//! The data a restricted pickle can hold.

use std::sync::Arc;

/// A pickled value: Python's plain data types. Containers are behind `Arc`, so objects a file
/// shares through its memo are shared here too (`Arc::ptr_eq` tells them apart).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A larger integer, as little-endian two's-complement bytes (`LONG1` / `LONG4`).
    BigInt(Arc<[u8]>),
    /// A float.
    Float(f64),
    /// A `str`.
    Str(Arc<str>),
    /// `bytes` or `bytearray`.
    Bytes(Arc<[u8]>),
    /// A `list`.
    List(Arc<Vec<Value>>),
    /// A `tuple`.
    Tuple(Arc<Vec<Value>>),
    /// A `dict`, in insertion order.
    Dict(Arc<Vec<(Value, Value)>>),
    /// A `set` or `frozenset`.
    Set(Arc<Vec<Value>>),
}
