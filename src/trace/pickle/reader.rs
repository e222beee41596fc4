//! The restricted pickle reader: [`read`] turns the bytes of a pickle (protocols 0 to 5) into a
//! [`Value`] tree of plain data, refusing every opcode that would import or call code.
//!
//! Pickle is a small stack machine, and most of its danger is in a handful of opcodes:
//! `GLOBAL` and `STACK_GLOBAL` import, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ` and
//! `NEWOBJ_EX` call, `PERSID`, `BINPERSID` and `EXT1/2/4` hand the writer's references to the
//! reader's code. This reader refuses all of them by name, along with out-of-band buffers
//! (`NEXT_BUFFER`), and executes the rest: numbers, strings, bytes, lists, tuples, dicts, sets,
//! marks and the memo. PyTorch's memory snapshots (`torch.cuda.memory._dump_snapshot`) are
//! plain data of this kind.
//!
//! Two properties matter for real snapshots and hostile files alike:
//!
//! * **Sharing is kept.** An object the file stores in its memo and pushes again with `GET` is
//!   the same `Arc` everywhere in the result. A snapshot references one frame dict hundreds of
//!   thousands of times; the result holds it once, and `Arc::ptr_eq` tells shared objects
//!   apart. A container that contains itself is refused ([`PickleError::Cycle`]), as a tree
//!   cannot hold it.
//! * **Work and memory are bounded.** No input makes the reader panic, recurse without bound
//!   or allocate more than the input justifies: a declared length past the end of the input is
//!   refused before anything is allocated, every opcode pushes at most one value, and
//!   [`ReadLimits`] caps nesting, values and memo entries.
//!
//! Containers are built in an arena while the pickle runs, because pickle fills a container
//! after storing it in the memo; the arena becomes the `Arc` tree at `STOP`.

mod absorb;
mod arena;
#[cfg(test)]
mod container_tests;
mod error;
mod freeze;
#[cfg(test)]
mod hostile_tests;
mod input;
mod items;
mod keys;
mod machine;
mod memo;
use super::opcodes;
#[cfg(test)]
mod proptests;
mod scalars;
#[cfg(test)]
mod tests;

pub(crate) use absorb::{Absorb, Container, Offer, View};
pub(crate) use arena::{Kind, Slot};
pub use error::PickleError;

use super::Value;

/// Bounds on what one [`read`] may build. The defaults read any real PyTorch snapshot; lower
/// them for untrusted input on a small machine, or raise them for a huge trusted file.
///
/// ```
/// use blockpool::trace::pickle::{read, ReadLimits};
///
/// let mut limits = ReadLimits::default();
/// limits.max_depth = 2;
/// // [[[]]]: three lists nested.
/// let nested = b"\x80\x04]]]aa.";
/// assert!(read(nested, &limits).is_err());
/// assert!(read(nested, &ReadLimits::default()).is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadLimits {
    /// The deepest nesting of containers in the result, and of `MARK`s while reading
    /// (default 1,000; snapshots nest about 6 deep). Dropping a [`Value`] recurses once per
    /// level, so a limit in the hundreds of thousands can overflow a thread's stack.
    pub max_depth: usize,
    /// The most values the pickle may push, memo references included (default and most
    /// 2^32 - 1, what the reader can index). No input pushes more values than it has bytes,
    /// so memory grows with the input's size, and the size of a compressed one is bounded
    /// where it is decompressed
    /// ([`ImportLimits`](crate::trace::ImportLimits)`::max_decompression_ratio`): a fixed
    /// lower default would refuse real files for their size alone (ten million events push a
    /// few hundred million values).
    pub max_items: usize,
    /// The most memo entries (default 2^32 - 1; a pickle memoizes at most one entry per
    /// value).
    pub max_memo_entries: usize,
    /// The longest single argument of an opcode: a string, a byte string or a text line
    /// (default 256 MiB; snapshot strings are file names and function names). A longer one is
    /// refused as soon as its length is read, so a compressed file cannot make the reader
    /// buffer gigabytes for one value.
    pub max_argument_bytes: usize,
}

/// The most values and memo entries the reader can index.
const MOST_VALUES: usize = u32::MAX as usize;

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_depth: 1_000,
            max_items: MOST_VALUES,
            max_memo_entries: MOST_VALUES,
            max_argument_bytes: 256 << 20,
        }
    }
}

/// Reads the pickle at the start of `bytes` into a [`Value`]; bytes after its `STOP` are
/// ignored, as `pickle.loads` ignores them.
///
/// Integers that fit in 64 bits are [`Value::Int`], larger ones [`Value::BigInt`]; Python 2
/// strings (`STRING`, `BINSTRING`) must be ASCII, as Python 3's default decoding requires;
/// `bytearray` becomes [`Value::Bytes`] and `frozenset` [`Value::Set`]. A dict key or set item
/// given twice keeps one entry, as in Python (tuple keys count as equal only when they are the
/// same memoized object).
///
/// # Errors
///
/// A [`PickleError`] naming the byte offset: a refused opcode (anything that imports or calls
/// code), an unknown opcode, a truncated or corrupt input, a reference cycle, or a limit of
/// `limits` exceeded.
///
/// # Examples
///
/// ```
/// use blockpool::trace::pickle::{read, ReadLimits, Value};
/// use std::sync::Arc;
///
/// // pickle.dumps([f, f], protocol=4) with f = {"line": 7}: the dict is stored once.
/// let bytes = b"\x80\x04\x95\x13\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x04line\x94K\x07sh\x01e.";
/// let Value::List(list) = read(bytes, &ReadLimits::default())? else { panic!("not a list") };
/// let (Value::Dict(first), Value::Dict(second)) = (&list[0], &list[1]) else { panic!() };
/// assert!(Arc::ptr_eq(first, second));
/// assert_eq!(first[0], (Value::Str("line".into()), Value::Int(7)));
///
/// // Anything that would run code is refused by name.
/// let error = read(b"cos\nsystem\n(S'touch /tmp/pwned'\ntR.", &ReadLimits::default())
///     .unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "refused opcode GLOBAL (0x63) at byte 0: this reader loads plain data only and never \
///      imports or calls code"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read(bytes: &[u8], limits: &ReadLimits) -> Result<Value, PickleError> {
    machine::run(bytes, limits)
}

/// Reads the pickle at the start of `source` into a [`Value`], as [`read`] does, pulling bytes
/// only as the opcodes need them: a compressed file is parsed while it inflates, so an input
/// that goes wrong early is refused after reading that far. Bytes after `STOP` are not read.
///
/// # Errors
///
/// As [`read`], and [`PickleError::Read`] when `source` fails. A declared length is not
/// checked against the input's end up front (a stream's end is unknown); it is read a chunk
/// at a time and refused where the input runs out.
///
/// ```
/// use blockpool::trace::pickle::{read_from, PickleError, ReadLimits};
/// use std::io::Read;
///
/// // PROTO 4, then zeros forever: refused at byte 2 after one chunk.
/// let mut zeros = b"\x80\x04".chain(std::io::repeat(0));
/// let error = read_from(&mut zeros, &ReadLimits::default()).unwrap_err();
/// assert!(matches!(error, PickleError::UnknownOpcode { byte: 0, offset: 2 }));
/// ```
pub fn read_from(
    source: &mut dyn std::io::Read,
    limits: &ReadLimits,
) -> Result<Value, PickleError> {
    machine::run_from(source, limits)
}

/// Reads the pickle at the start of `source` as [`read_from`] does, offering each item that
/// `APPEND` or `APPENDS` puts into a list to `absorber`, which may take it: the result then
/// lacks what was taken. `Ok(None)` when the absorber abandoned the read (read the input
/// again with [`read_from`]). An error may come from something the absorber took (a memo
/// entry of a taken item pushed again): read again with [`read_from`] for the plain error.
pub(crate) fn read_absorbing(
    source: &mut dyn std::io::Read,
    limits: &ReadLimits,
    absorber: &mut dyn Absorb,
) -> Result<Option<Value>, PickleError> {
    machine::run_absorbing(source, limits, absorber)
}
