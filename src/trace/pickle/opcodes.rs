//! The pickle opcodes of protocols 0 to 5, by byte, with their names as `pickletools` spells
//! them, and the verdict on the ones the reader refuses. The reader and the writer share this
//! one table; the writer emits only opcodes the reader accepts.
//!
//! The bytes and names follow CPython's `Lib/pickle.py`. Every opcode that can import a module,
//! call an object, or reach data outside the given bytes is refused, whatever its arguments.

/// Declares one `pub(super) const` per opcode and [`name`], from a single list.
macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $byte:expr;)*) => {
        $($(#[$doc])* pub(super) const $name: u8 = $byte;)*

        /// The name of the opcode `byte`, or `None` for a byte that is no opcode of protocols
        /// 0 to 5.
        pub(super) fn name(byte: u8) -> Option<&'static str> {
            match byte {
                $($name => Some(stringify!($name)),)*
                _ => None,
            }
        }
    };
}

opcodes! {
    /// Push a mark: the start of the items of `LIST`, `TUPLE`, `DICT`, `APPENDS` and the like.
    MARK = b'(';
    /// End of the pickle: the top of the stack is the result.
    STOP = b'.';
    /// Discard the top of the stack (or, on an empty stack, the last mark).
    POP = b'0';
    /// Discard the stack down to and including the last mark.
    POP_MARK = b'1';
    /// Push the top of the stack again.
    DUP = b'2';
    /// A float written as text.
    FLOAT = b'F';
    /// An integer written as text; `00` and `01` are `False` and `True`.
    INT = b'I';
    /// A 4-byte signed integer.
    BININT = b'J';
    /// A 1-byte unsigned integer.
    BININT1 = b'K';
    /// An integer written as text, optionally ending in `L`.
    LONG = b'L';
    /// A 2-byte unsigned integer.
    BININT2 = b'M';
    /// `None`.
    NONE = b'N';
    /// A persistent id written as text: the caller's code resolves it. Refused.
    PERSID = b'P';
    /// A persistent id from the stack: the caller's code resolves it. Refused.
    BINPERSID = b'Q';
    /// Call an object with a tuple of arguments. Refused.
    REDUCE = b'R';
    /// A Python 2 `str` as a quoted, escaped text line.
    STRING = b'S';
    /// A Python 2 `str` with a 4-byte signed length.
    BINSTRING = b'T';
    /// A Python 2 `str` with a 1-byte length.
    SHORT_BINSTRING = b'U';
    /// A `str` as a raw-unicode-escape text line.
    UNICODE = b'V';
    /// A `str` in UTF-8 with a 4-byte length.
    BINUNICODE = b'X';
    /// Append the top of the stack to the list below it.
    APPEND = b'a';
    /// Set an object's state, calling its `__setstate__`. Refused.
    BUILD = b'b';
    /// Import `module.name`. Refused.
    GLOBAL = b'c';
    /// A dict from the key-value pairs after the last mark.
    DICT = b'd';
    /// An empty dict.
    EMPTY_DICT = b'}';
    /// Append the items after the last mark to the list below the mark.
    APPENDS = b'e';
    /// Push a memo entry, its index written as text.
    GET = b'g';
    /// Push a memo entry with a 1-byte index.
    BINGET = b'h';
    /// Import a class and call it. Refused.
    INST = b'i';
    /// Push a memo entry with a 4-byte index.
    LONG_BINGET = b'j';
    /// A list of the items after the last mark.
    LIST = b'l';
    /// An empty list.
    EMPTY_LIST = b']';
    /// Call the class after the last mark. Refused.
    OBJ = b'o';
    /// Store the top of the stack in the memo, its index written as text.
    PUT = b'p';
    /// Store the top of the stack in the memo with a 1-byte index.
    BINPUT = b'q';
    /// Store the top of the stack in the memo with a 4-byte index.
    LONG_BINPUT = b'r';
    /// Set a key-value pair in the dict below them.
    SETITEM = b's';
    /// A tuple of the items after the last mark.
    TUPLE = b't';
    /// An empty tuple.
    EMPTY_TUPLE = b')';
    /// Set the key-value pairs after the last mark in the dict below the mark.
    SETITEMS = b'u';
    /// An 8-byte big-endian IEEE 754 float.
    BINFLOAT = b'G';
    /// The protocol version, 0 to 5.
    PROTO = 0x80;
    /// Call `cls.__new__(cls, *args)`. Refused.
    NEWOBJ = 0x81;
    /// An object from the copyreg extension registry by a 1-byte code. Refused.
    EXT1 = 0x82;
    /// An object from the copyreg extension registry by a 2-byte code. Refused.
    EXT2 = 0x83;
    /// An object from the copyreg extension registry by a 4-byte code. Refused.
    EXT4 = 0x84;
    /// A tuple of the top item.
    TUPLE1 = 0x85;
    /// A tuple of the top two items.
    TUPLE2 = 0x86;
    /// A tuple of the top three items.
    TUPLE3 = 0x87;
    /// `True`.
    NEWTRUE = 0x88;
    /// `False`.
    NEWFALSE = 0x89;
    /// An integer as little-endian two's complement with a 1-byte length.
    LONG1 = 0x8a;
    /// An integer as little-endian two's complement with a 4-byte signed length.
    LONG4 = 0x8b;
    /// `bytes` with a 4-byte length.
    BINBYTES = b'B';
    /// `bytes` with a 1-byte length.
    SHORT_BINBYTES = b'C';
    /// A `str` in UTF-8 with a 1-byte length.
    SHORT_BINUNICODE = 0x8c;
    /// A `str` in UTF-8 with an 8-byte length.
    BINUNICODE8 = 0x8d;
    /// `bytes` with an 8-byte length.
    BINBYTES8 = 0x8e;
    /// An empty set.
    EMPTY_SET = 0x8f;
    /// Add the items after the last mark to the set below the mark.
    ADDITEMS = 0x90;
    /// A frozenset of the items after the last mark.
    FROZENSET = 0x91;
    /// Call `cls.__new__(cls, *args, **kwargs)`. Refused.
    NEWOBJ_EX = 0x92;
    /// Import `module.name`, both taken from the stack. Refused.
    STACK_GLOBAL = 0x93;
    /// Store the top of the stack in the memo at the next free index.
    MEMOIZE = 0x94;
    /// The length in bytes of the frame that follows (8 bytes).
    FRAME = 0x95;
    /// A `bytearray` with an 8-byte length.
    BYTEARRAY8 = 0x96;
    /// The next out-of-band buffer, which lives outside the pickle. Refused.
    NEXT_BUFFER = 0x97;
    /// Make the buffer on top of the stack read-only.
    READONLY_BUFFER = 0x98;
}

/// Why the reader refuses the opcode `byte`, or `None` when it reads it.
pub(super) fn refusal(byte: u8) -> Option<&'static str> {
    match byte {
        GLOBAL | STACK_GLOBAL | REDUCE | BUILD | INST | OBJ | NEWOBJ | NEWOBJ_EX | EXT1 | EXT2
        | EXT4 => Some("this reader loads plain data only and never imports or calls code"),
        PERSID | BINPERSID => Some(
            "persistent ids are resolved by the writer's own code, and this reader loads plain \
             data only and never imports or calls code",
        ),
        NEXT_BUFFER => Some(
            "out-of-band buffers live outside the pickle, and this reader reads only the bytes \
             it is given",
        ),
        _ => None,
    }
}

/// Every opcode the reader refuses, for tests.
#[cfg(test)]
pub(super) const REFUSED: [u8; 14] = [
    GLOBAL,
    STACK_GLOBAL,
    REDUCE,
    BUILD,
    INST,
    OBJ,
    NEWOBJ,
    NEWOBJ_EX,
    PERSID,
    BINPERSID,
    EXT1,
    EXT2,
    EXT4,
    NEXT_BUFFER,
];
