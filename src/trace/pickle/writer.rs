//! Writing a [`Value`] as a protocol-4 pickle, byte for byte as CPython's `pickle.dumps`.
//!
//! The output is what `pickle.dumps(obj, protocol=4)` gives for the Python object the value
//! stands for, when the value shares an `Arc` exactly where the Python object shares an
//! object: the same compact opcodes, the same batches of 1000 items, the same frames
//! ([`framing`]) and the same memo. Every `str`, `bytes`, list, dict, set and non-empty tuple
//! is memoized (`MEMOIZE`) as it is written, and an `Arc` met again is written as a reference
//! (`BINGET`, two bytes, or `LONG_BINGET`, five) instead of a copy. That is what keeps a
//! PyTorch memory snapshot small: one frame dict referenced by hundreds of thousands of blocks
//! and trace entries costs two bytes per reference, not its full size again. Equal strings behind different
//! `Arc`s are written twice, as CPython writes equal strings that are different objects;
//! [`WriteOptions::share_equal_strings`] writes them once instead.
//!
//! The writer uses only data opcodes ([`opcodes`]), so its output loads under an unpickler
//! that refuses every global. It walks the value with an explicit stack, so nesting depth is
//! bounded by memory, not by the thread's stack.

mod framing;
mod memo;
use super::opcodes;
#[cfg(test)]
mod tests;

use std::io::{self, Write};

use framing::FramedOutput;
use memo::Memo;
use opcodes::*;

use super::Value;

/// Items per `APPENDS`, `SETITEMS` or `ADDITEMS`, as CPython's `BATCHSIZE`.
const BATCH_ITEMS: usize = 1000;

/// Writes `value` as a protocol-4 pickle, the bytes `pickle.dumps(obj, protocol=4)` gives.
///
/// Every `str`, `bytes`, list, dict, set and non-empty tuple is memoized as CPython memoizes
/// it, and one that is the same `Arc` as one written before is written as a two- or five-byte
/// reference. So the output is CPython's for the Python object whose shared objects are the
/// value's shared `Arc`s; equal strings in different `Arc`s are written twice, as CPython
/// writes equal strings that are different objects (see
/// [`WriteOptions::share_equal_strings`]).
///
/// # Panics
///
/// If the value holds a [`Value::BigInt`] of more than 2^31 - 1 bytes, which no pickle opcode
/// can carry (CPython refuses such an int too). [`write_to`] returns an error instead.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use blockpool::trace::pickle::{write, Value};
///
/// let frame = Value::Dict(Arc::new(vec![(Value::Str("line".into()), Value::Int(7))]));
/// let frames = Value::List(Arc::new(vec![frame.clone(), frame]));
/// // PROTO 4, FRAME, EMPTY_LIST MEMOIZE MARK EMPTY_DICT MEMOIZE SHORT_BINUNICODE "line"
/// // MEMOIZE BININT1 7 SETITEM BINGET 1 APPENDS STOP: the second frame is a 2-byte reference.
/// assert_eq!(
///     write(&frames),
///     b"\x80\x04\x95\x13\0\0\0\0\0\0\0]\x94(}\x94\x8c\x04line\x94K\x07sh\x01e."
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write(value: &Value) -> Vec<u8> {
    WriteOptions::default().write(value)
}

/// Writes `value` as a protocol-4 pickle to `out`, frame by frame, then flushes `out`.
///
/// The bytes are those of [`write()`]; at most one frame (64 KiB) is buffered on the way, so a
/// large snapshot streams to a file. Pass `&mut file` to keep using the writer afterwards.
///
/// # Errors
///
/// Any error of `out`, and [`io::ErrorKind::InvalidInput`] for a [`Value::BigInt`] of more
/// than 2^31 - 1 bytes, which no pickle opcode can carry; what was written before stays
/// written.
pub fn write_to<W: Write>(value: &Value, out: W) -> io::Result<()> {
    WriteOptions::default().write_to(value, out)
}

/// How to write a pickle; `WriteOptions::default()` is what [`write()`] and [`write_to`] use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Whether equal strings behind different `Arc`s are written once (see
    /// [`share_equal_strings`](Self::share_equal_strings)).
    share_equal_strings: bool,
}

impl WriteOptions {
    /// Options as [`write()`] uses them: only the same `Arc` is shared.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a `str` equal to one already written is written as a reference to it even when
    /// it is a different `Arc`. Off by default, which matches CPython byte for byte; on, a
    /// value built without interning its dict keys (`"filename"`, `"line"` in every frame)
    /// still costs two bytes per repeated key. Loading gives equal data either way.
    pub fn share_equal_strings(mut self, yes: bool) -> Self {
        self.share_equal_strings = yes;
        self
    }

    /// Writes `value` as a protocol-4 pickle with these options; see [`write()`].
    ///
    /// # Panics
    ///
    /// As [`write()`]: for a [`Value::BigInt`] of more than 2^31 - 1 bytes.
    pub fn write(&self, value: &Value) -> Vec<u8> {
        let mut bytes = Vec::new();
        match self.write_to(value, &mut bytes) {
            Ok(()) => bytes,
            // Writing to a Vec cannot fail, so this is the one value no pickle can hold.
            Err(err) => panic!("cannot pickle this value: {err}"),
        }
    }

    /// Writes `value` as a protocol-4 pickle to `out` with these options; see [`write_to`].
    ///
    /// # Errors
    ///
    /// As [`write_to`].
    pub fn write_to<W: Write>(&self, value: &Value, out: W) -> io::Result<()> {
        let mut pickler = Pickler::new(out, *self);
        pickler.out.write_unframed(&[PROTO, 4]);
        pickler.tasks.push(Task::Save(value));
        while let Some(task) = pickler.tasks.pop() {
            pickler.run(task)?;
        }
        pickler.out.write(&[STOP]);
        pickler.out.finish()?.flush()
    }
}

/// What remains to be written, innermost last; the walk is iterative so deep nesting cannot
/// overflow the thread's stack.
enum Task<'v> {
    /// Write one value (CPython's `save`).
    Save(&'v Value),
    /// Write these values in order.
    Items(&'v [Value]),
    /// Write these keys and values in order.
    Pairs(&'v [(Value, Value)]),
    /// Write one opcode.
    Opcode(u8),
    /// Close a tuple with its opcode, then memoize it (its elements come first in the memo).
    EndTuple(u8, &'v Value),
    /// The remaining items of a list, in batches of `MARK ... APPENDS`.
    ListBatches(&'v [Value]),
    /// The remaining pairs of a dict, in batches of `MARK ... SETITEMS`.
    DictBatches(&'v [(Value, Value)]),
    /// The remaining items of a set, in batches of `MARK ... ADDITEMS`.
    SetBatches(&'v [Value]),
}

/// One pickle being written: the output, the memo and the work left.
struct Pickler<'v, W> {
    out: FramedOutput<W>,
    memo: Memo<'v>,
    tasks: Vec<Task<'v>>,
}

impl<'v, W: Write> Pickler<'v, W> {
    fn new(sink: W, options: WriteOptions) -> Self {
        Self {
            out: FramedOutput::new(sink),
            memo: Memo::new(options.share_equal_strings),
            tasks: Vec::new(),
        }
    }

    fn run(&mut self, task: Task<'v>) -> io::Result<()> {
        match task {
            Task::Save(value) => return self.save(value),
            Task::Items(items) => {
                if let Some((first, rest)) = items.split_first() {
                    if !rest.is_empty() {
                        self.tasks.push(Task::Items(rest));
                    }
                    self.tasks.push(Task::Save(first));
                }
            }
            Task::Pairs(pairs) => {
                if let Some(((key, value), rest)) = pairs.split_first() {
                    if !rest.is_empty() {
                        self.tasks.push(Task::Pairs(rest));
                    }
                    self.tasks.push(Task::Save(value));
                    self.tasks.push(Task::Save(key));
                }
            }
            Task::Opcode(opcode) => self.out.write(&[opcode]),
            Task::EndTuple(opcode, tuple) => {
                self.out.write(&[opcode]);
                self.memoize(tuple);
            }
            Task::ListBatches(items) => {
                let (batch, rest) = items.split_at(items.len().min(BATCH_ITEMS));
                self.out.write(&[MARK]);
                if !rest.is_empty() {
                    self.tasks.push(Task::ListBatches(rest));
                }
                self.tasks.push(Task::Opcode(APPENDS));
                self.tasks.push(Task::Items(batch));
            }
            Task::DictBatches(pairs) => {
                let (batch, rest) = pairs.split_at(pairs.len().min(BATCH_ITEMS));
                self.out.write(&[MARK]);
                // CPython's loop asks for another batch whenever one was full, so a dict of
                // 1000 k pairs ends with an empty `MARK SETITEMS`; so does ours.
                if batch.len() == BATCH_ITEMS {
                    self.tasks.push(Task::DictBatches(rest));
                }
                self.tasks.push(Task::Opcode(SETITEMS));
                self.tasks.push(Task::Pairs(batch));
            }
            Task::SetBatches(items) => {
                let (batch, rest) = items.split_at(items.len().min(BATCH_ITEMS));
                self.out.write(&[MARK]);
                // As for dicts: a full batch is followed by another, possibly empty.
                if batch.len() == BATCH_ITEMS {
                    self.tasks.push(Task::SetBatches(rest));
                }
                self.tasks.push(Task::Opcode(ADDITEMS));
                self.tasks.push(Task::Items(batch));
            }
        }
        Ok(())
    }

    /// Writes one value, or a reference to it when it was written before (CPython's `save`);
    /// containers leave their contents as tasks.
    fn save(&mut self, value: &'v Value) -> io::Result<()> {
        self.out.object_boundary()?;
        if let Some(index) = self.memo.get(value) {
            self.write_get(index);
            return Ok(());
        }
        match value {
            Value::Str(s) => {
                let (header, len) =
                    length_header(s.len(), [SHORT_BINUNICODE, BINUNICODE, BINUNICODE8]);
                self.out.write_payload(&header[..len], s.as_bytes())?;
                self.memoize(value);
            }
            Value::Bytes(bytes) => {
                let (header, len) =
                    length_header(bytes.len(), [SHORT_BINBYTES, BINBYTES, BINBYTES8]);
                self.out.write_payload(&header[..len], bytes)?;
                self.memoize(value);
            }
            Value::List(items) => {
                self.out.write(&[EMPTY_LIST]);
                self.memoize(value);
                match items.as_slice() {
                    [] => {}
                    // CPython writes a one-item list with APPEND, without a mark.
                    [item] => {
                        self.tasks.push(Task::Opcode(APPEND));
                        self.tasks.push(Task::Save(item));
                    }
                    items => self.tasks.push(Task::ListBatches(items)),
                }
            }
            Value::Dict(pairs) => {
                self.out.write(&[EMPTY_DICT]);
                self.memoize(value);
                match pairs.as_slice() {
                    [] => {}
                    // CPython writes a one-pair dict with SETITEM, without a mark.
                    [(k, v)] => {
                        self.tasks.push(Task::Opcode(SETITEM));
                        self.tasks.push(Task::Save(v));
                        self.tasks.push(Task::Save(k));
                    }
                    pairs => self.tasks.push(Task::DictBatches(pairs)),
                }
            }
            Value::Set(items) => {
                self.out.write(&[EMPTY_SET]);
                self.memoize(value);
                if !items.is_empty() {
                    self.tasks.push(Task::SetBatches(items));
                }
            }
            Value::Tuple(items) => {
                let opcode = match items.len() {
                    // The empty tuple is never memoized, as in CPython.
                    0 => {
                        self.out.write(&[EMPTY_TUPLE]);
                        return Ok(());
                    }
                    1 => TUPLE1,
                    2 => TUPLE2,
                    3 => TUPLE3,
                    _ => {
                        self.out.write(&[MARK]);
                        TUPLE
                    }
                };
                self.tasks.push(Task::EndTuple(opcode, value));
                self.tasks.push(Task::Items(items));
            }
            // Atoms, which CPython never memoizes.
            Value::None => self.out.write(&[NONE]),
            Value::Bool(true) => self.out.write(&[NEWTRUE]),
            Value::Bool(false) => self.out.write(&[NEWFALSE]),
            Value::Int(int) => self.write_int(*int),
            Value::BigInt(bytes) => self.write_big_int(bytes)?,
            Value::Float(float) => {
                let [b0, b1, b2, b3, b4, b5, b6, b7] = float.to_be_bytes();
                self.out.write(&[BINFLOAT, b0, b1, b2, b3, b4, b5, b6, b7]);
            }
        }
        Ok(())
    }

    /// Memoizes the object just written, as CPython does after each `str`, `bytes` and
    /// container.
    fn memoize(&mut self, value: &'v Value) {
        if self.memo.put(value) {
            self.out.write(&[MEMOIZE]);
        }
    }

    /// Writes a reference to memo entry `index`.
    fn write_get(&mut self, index: u32) {
        match u8::try_from(index) {
            Ok(short) => self.out.write(&[BINGET, short]),
            Err(_) => {
                let [b0, b1, b2, b3] = index.to_le_bytes();
                self.out.write(&[LONG_BINGET, b0, b1, b2, b3]);
            }
        }
    }

    /// Writes an integer with the shortest opcode CPython picks for it.
    fn write_int(&mut self, int: i64) {
        if let Ok(byte) = u8::try_from(int) {
            self.out.write(&[BININT1, byte]);
        } else if let Ok(short) = u16::try_from(int) {
            let [b0, b1] = short.to_le_bytes();
            self.out.write(&[BININT2, b0, b1]);
        } else if let Ok(word) = i32::try_from(int) {
            let [b0, b1, b2, b3] = word.to_le_bytes();
            self.out.write(&[BININT, b0, b1, b2, b3]);
        } else {
            let bytes = int.to_le_bytes();
            let minimal = minimal_twos_complement(&bytes);
            // At most 8 bytes, so the length fits LONG1's one byte.
            self.out.write(&[LONG1, minimal.len() as u8]);
            self.out.write(minimal);
        }
    }

    /// Writes an integer given as little-endian two's-complement bytes, which need not be
    /// minimal: as CPython would write the same number.
    fn write_big_int(&mut self, bytes: &[u8]) -> io::Result<()> {
        let minimal = minimal_twos_complement(bytes);
        if minimal.len() <= 8 {
            let fill = match minimal.last() {
                Some(&top) if top & 0x80 != 0 => 0xff,
                _ => 0,
            };
            let mut word = [fill; 8];
            word[..minimal.len()].copy_from_slice(minimal);
            self.write_int(i64::from_le_bytes(word));
        } else if let Ok(len) = u8::try_from(minimal.len()) {
            self.out.write(&[LONG1, len]);
            self.out.write(minimal);
        } else if let Ok(len) = i32::try_from(minimal.len()) {
            let [b0, b1, b2, b3] = len.to_le_bytes();
            self.out.write(&[LONG4, b0, b1, b2, b3]);
            self.out.write(minimal);
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "an integer of {} bytes is longer than pickle's LONG4 can carry (2^31 - 1)",
                    minimal.len()
                ),
            ));
        }
        Ok(())
    }
}

/// The opcode and length for a `str` or `bytes` payload of `len` bytes, and how many of the
/// nine header bytes are used: `opcodes[0]` with one length byte up to 255, `opcodes[1]` with
/// four up to 2^32 - 1, else `opcodes[2]` with eight.
fn length_header(len: usize, opcodes: [u8; 3]) -> ([u8; 9], usize) {
    let mut header = [0; 9];
    let used = if let Ok(len) = u8::try_from(len) {
        header[..2].copy_from_slice(&[opcodes[0], len]);
        2
    } else if let Ok(len) = u32::try_from(len) {
        header[0] = opcodes[1];
        header[1..5].copy_from_slice(&len.to_le_bytes());
        5
    } else {
        header[0] = opcodes[2];
        // usize -> u64 is lossless on every platform Rust supports.
        header[1..9].copy_from_slice(&(len as u64).to_le_bytes());
        9
    };
    (header, used)
}

/// `bytes` (little-endian two's complement) without the high bytes that only repeat the sign:
/// the length CPython's `LONG1` uses. Zero is the empty slice.
fn minimal_twos_complement(bytes: &[u8]) -> &[u8] {
    let mut len = bytes.len();
    while len > 0 {
        let top = bytes[len - 1];
        let below_negative = len >= 2 && bytes[len - 2] & 0x80 != 0;
        let redundant = match top {
            0x00 => !below_negative,
            0xff => len >= 2 && below_negative,
            _ => false,
        };
        if !redundant {
            break;
        }
        len -= 1;
    }
    &bytes[..len]
}
