//! The pickle opcodes the writer emits, named as in CPython's `pickle.py`.
//!
//! Only data opcodes: nothing here imports a global or calls anything, so what the writer
//! produces loads under an unpickler whose `find_class` refuses everything.

/// Protocol header; followed by the protocol number.
pub(super) const PROTO: u8 = 0x80;
/// Frame header; followed by the frame's length in bytes as a little-endian `u64`.
pub(super) const FRAME: u8 = 0x95;
/// End of the pickle.
pub(super) const STOP: u8 = b'.';

/// Stores the top of the stack under the next memo index.
pub(super) const MEMOIZE: u8 = 0x94;
/// Pushes a memo entry; one-byte index.
pub(super) const BINGET: u8 = b'h';
/// Pushes a memo entry; four-byte little-endian index.
pub(super) const LONG_BINGET: u8 = b'j';

/// Pushes a mark for the variable-length opcodes (`APPENDS`, `SETITEMS`, `ADDITEMS`, `TUPLE`).
pub(super) const MARK: u8 = b'(';

/// `None`.
pub(super) const NONE: u8 = b'N';
/// `True`.
pub(super) const NEWTRUE: u8 = 0x88;
/// `False`.
pub(super) const NEWFALSE: u8 = 0x89;

/// An integer in 0..=255, one byte.
pub(super) const BININT1: u8 = b'K';
/// An integer in 256..=65535, two little-endian bytes.
pub(super) const BININT2: u8 = b'M';
/// A signed 32-bit integer, little-endian.
pub(super) const BININT: u8 = b'J';
/// An integer as up to 255 little-endian two's-complement bytes; one-byte length.
pub(super) const LONG1: u8 = 0x8a;
/// An integer as little-endian two's-complement bytes; four-byte signed length.
pub(super) const LONG4: u8 = 0x8b;
/// A float, eight big-endian bytes of IEEE 754 binary64.
pub(super) const BINFLOAT: u8 = b'G';

/// A `str` of up to 255 UTF-8 bytes; one-byte length.
pub(super) const SHORT_BINUNICODE: u8 = 0x8c;
/// A `str`; four-byte little-endian length.
pub(super) const BINUNICODE: u8 = b'X';
/// A `str`; eight-byte little-endian length.
pub(super) const BINUNICODE8: u8 = 0x8d;
/// A `bytes` of up to 255 bytes; one-byte length.
pub(super) const SHORT_BINBYTES: u8 = b'C';
/// A `bytes`; four-byte little-endian length.
pub(super) const BINBYTES: u8 = b'B';
/// A `bytes`; eight-byte little-endian length.
pub(super) const BINBYTES8: u8 = 0x8e;

/// An empty list.
pub(super) const EMPTY_LIST: u8 = b']';
/// Appends the top of the stack to the list below it.
pub(super) const APPEND: u8 = b'a';
/// Appends everything above the mark to the list below it.
pub(super) const APPENDS: u8 = b'e';
/// An empty dict.
pub(super) const EMPTY_DICT: u8 = b'}';
/// Sets one key and value in the dict below them.
pub(super) const SETITEM: u8 = b's';
/// Sets the key-value pairs above the mark in the dict below it.
pub(super) const SETITEMS: u8 = b'u';
/// An empty set.
pub(super) const EMPTY_SET: u8 = 0x8f;
/// Adds everything above the mark to the set below it.
pub(super) const ADDITEMS: u8 = 0x90;
/// The empty tuple.
pub(super) const EMPTY_TUPLE: u8 = b')';
/// A tuple of the top stack item.
pub(super) const TUPLE1: u8 = 0x85;
/// A tuple of the top two stack items.
pub(super) const TUPLE2: u8 = 0x86;
/// A tuple of the top three stack items.
pub(super) const TUPLE3: u8 = 0x87;
/// A tuple of everything above the mark.
pub(super) const TUPLE: u8 = b't';
