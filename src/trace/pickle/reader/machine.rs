//! The pickle machine: executes opcodes against a stack, a mark stack and the memo, building
//! containers in the [`Arena`], until `STOP`.
//!
//! Stack discipline follows CPython's `_pickle.c`: an opcode sees only the values above the
//! last `MARK` (its fence), `POP` on an empty fenced stack discards the mark, and bytes after
//! `STOP` are ignored as `pickle.loads` ignores them. Every value pushed counts against
//! [`ReadLimits::max_items`]; as every opcode is at least one byte and pushes at most one
//! value, memory stays linear in the input's length whatever the limits.

use super::super::Value;
use super::absorb::{Absorb, Absorbing};
use super::arena::{Arena, Full, Kind, Slot};
use super::error::PickleError;
use super::input::{At, Input};
use super::items::{add_items, out_of_memory, python2_string, set_items};
use super::memo::Memo;
use super::opcodes::*;
use super::{freeze, scalars, ReadLimits};

/// The newest protocol this reader knows.
const HIGHEST_PROTOCOL: u8 = 5;

/// Reads one pickle from `bytes`.
pub(super) fn run(bytes: &[u8], limits: &ReadLimits) -> Result<Value, PickleError> {
    let mut source = bytes;
    run_input(
        Input::new(&mut source, Some(bytes.len()), limits.max_argument_bytes),
        limits,
    )
}

/// Reads one pickle from `source`, pulling bytes as the machine needs them.
pub(super) fn run_from(
    source: &mut dyn std::io::Read,
    limits: &ReadLimits,
) -> Result<Value, PickleError> {
    run_input(Input::new(source, None, limits.max_argument_bytes), limits)
}

fn run_input(input: Input<'_>, limits: &ReadLimits) -> Result<Value, PickleError> {
    let mut machine = Machine::new(input, limits, None);
    let result = machine.run()?;
    freeze::freeze(machine.arena, result, limits.max_depth)
}

/// Reads one pickle from `source` with `absorber` taking items as they are appended to
/// lists: `None` when it abandoned the read.
pub(super) fn run_absorbing(
    source: &mut dyn std::io::Read,
    limits: &ReadLimits,
    absorber: &mut dyn Absorb,
) -> Result<Option<Value>, PickleError> {
    let input = Input::new(source, None, limits.max_argument_bytes);
    let mut machine = Machine::new(input, limits, Some(Absorbing::new(absorber)));
    let result = machine.run()?;
    let Some(mut absorbing) = machine.absorbing.take() else {
        return freeze::freeze(machine.arena, result, limits.max_depth).map(Some);
    };
    if !absorbing.finish(&machine.arena, result) {
        return Ok(None);
    }
    let restore = &mut |list| absorbing.restore(list);
    freeze::freeze_with(machine.arena, result, limits.max_depth, restore).map(Some)
}

/// The state of the unpickler.
struct Machine<'a, 'l> {
    input: Input<'a>,
    stack: Vec<Slot>,
    /// Stack lengths at each `MARK`, innermost last.
    marks: Vec<usize>,
    memo: Memo,
    arena: Arena,
    limits: &'l ReadLimits,
    /// Values pushed so far.
    items: usize,
    /// The absorber of an absorbing read.
    absorbing: Option<Absorbing<'a>>,
}

impl<'a, 'l> Machine<'a, 'l> {
    fn new(input: Input<'a>, limits: &'l ReadLimits, absorbing: Option<Absorbing<'a>>) -> Self {
        Machine {
            input,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Memo::default(),
            arena: Arena::default(),
            limits,
            items: 0,
            absorbing,
        }
    }

    /// Executes opcodes up to `STOP` and returns the top of the stack (whatever is there
    /// once an absorber abandoned the read).
    fn run(&mut self) -> Result<Slot, PickleError> {
        loop {
            if self.absorbing.as_ref().is_some_and(|a| a.abandoned) {
                return Ok(Slot::NONE);
            }
            let offset = self.input.pos();
            let Some(byte) = self.input.next_byte()? else {
                return Err(PickleError::MissingStop { offset });
            };
            let at = At { byte, offset };
            if byte == STOP {
                return self.pop(at);
            }
            self.step(byte, at)?;
        }
    }

    /// Executes one opcode other than `STOP`, its byte already read; refuses the opcodes it
    /// does not execute.
    fn step(&mut self, byte: u8, at: At) -> Result<(), PickleError> {
        match byte {
            PROTO => {
                let [version] = self.input.array(at)?;
                if version > HIGHEST_PROTOCOL {
                    return Err(PickleError::UnsupportedProtocol {
                        version,
                        offset: at.offset,
                    });
                }
            }
            FRAME => {
                // A frame only groups the opcodes that follow; CPython checks just that its
                // bytes are present.
                let length = u64::from_le_bytes(self.input.array(at)?);
                self.input.check_declared(length, at)?;
            }
            MARK => {
                if self.marks.len() >= self.limits.max_depth {
                    return Err(PickleError::TooDeep {
                        limit: self.limits.max_depth,
                        offset: at.offset,
                    });
                }
                self.marks.push(self.stack.len());
            }
            POP => {
                if self.stack.len() > self.fence() {
                    self.stack.pop();
                } else if self.marks.pop().is_none() {
                    return Err(self.underflow(1, at));
                }
            }
            POP_MARK => {
                let mark = self.pop_mark(at)?;
                self.stack.truncate(mark);
            }
            DUP => {
                let top = self.top(at)?;
                self.push(top, at)?;
            }

            NONE => self.push_value(Value::None, at)?,
            NEWTRUE => self.push_value(Value::Bool(true), at)?,
            NEWFALSE => self.push_value(Value::Bool(false), at)?,
            INT => {
                let value = match self.input.line(at)? {
                    b"00" => Value::Bool(false),
                    b"01" => Value::Bool(true),
                    text => scalars::int_from_decimal(text).map_err(|p| at.bad(p))?,
                };
                self.push_value(value, at)?;
            }
            LONG => {
                let text = self.input.line(at)?;
                let text = text.strip_suffix(b"L").unwrap_or(text);
                let value = scalars::int_from_decimal(text).map_err(|p| at.bad(p))?;
                self.push_value(value, at)?;
            }
            BININT => {
                let value = i32::from_le_bytes(self.input.array(at)?);
                self.push_value(Value::Int(value.into()), at)?;
            }
            BININT1 => {
                let [value] = self.input.array(at)?;
                self.push_value(Value::Int(value.into()), at)?;
            }
            BININT2 => {
                let value = u16::from_le_bytes(self.input.array(at)?);
                self.push_value(Value::Int(value.into()), at)?;
            }
            LONG1 => {
                let [length] = self.input.array(at)?;
                let value = scalars::int_from_le(self.input.declared(length.into(), at)?);
                self.push_value(value, at)?;
            }
            LONG4 => {
                let length = self.signed_length(at)?;
                let value = scalars::int_from_le(self.input.declared(length, at)?);
                self.push_value(value, at)?;
            }
            FLOAT => {
                let text = self.input.line(at)?;
                let value = scalars::float_from_text(text).map_err(|p| at.bad(p))?;
                self.push_value(Value::Float(value), at)?;
            }
            BINFLOAT => {
                let value = f64::from_be_bytes(self.input.array(at)?);
                self.push_value(Value::Float(value), at)?;
            }

            STRING => {
                let line = self.input.line(at)?;
                let bytes = scalars::python2_string(line).map_err(|p| at.bad(p))?;
                let value = python2_string(&bytes, at)?;
                self.push_value(value, at)?;
            }
            BINSTRING => {
                let length = self.signed_length(at)?;
                let value = python2_string(self.input.declared(length, at)?, at)?;
                self.push_value(value, at)?;
            }
            SHORT_BINSTRING => {
                let [length] = self.input.array(at)?;
                let value = python2_string(self.input.declared(length.into(), at)?, at)?;
                self.push_value(value, at)?;
            }
            UNICODE => {
                let line = self.input.line(at)?;
                let text = scalars::raw_unicode_escape(line).map_err(|p| at.bad_string(p))?;
                self.push_value(Value::Str(text.into()), at)?;
            }
            SHORT_BINUNICODE => {
                let [length] = self.input.array(at)?;
                self.push_utf8(length.into(), at)?;
            }
            BINUNICODE => {
                let length = u32::from_le_bytes(self.input.array(at)?);
                self.push_utf8(length.into(), at)?;
            }
            BINUNICODE8 => {
                let length = u64::from_le_bytes(self.input.array(at)?);
                self.push_utf8(length, at)?;
            }
            SHORT_BINBYTES => {
                let [length] = self.input.array(at)?;
                self.push_bytes(length.into(), at)?;
            }
            BINBYTES => {
                let length = u32::from_le_bytes(self.input.array(at)?);
                self.push_bytes(length.into(), at)?;
            }
            BINBYTES8 | BYTEARRAY8 => {
                let length = u64::from_le_bytes(self.input.array(at)?);
                self.push_bytes(length, at)?;
            }
            READONLY_BUFFER => {
                // In-band buffers are bytes already; read-only changes nothing here.
                let top = self.top(at)?;
                if !self.arena.is_bytes(top) {
                    return Err(self.wrong_type(at, "a bytes-like buffer", top));
                }
            }

            EMPTY_LIST => self.push_new(Kind::List, Vec::new(), at)?,
            EMPTY_TUPLE => self.push_new(Kind::Tuple, Vec::new(), at)?,
            EMPTY_DICT => self.push_new(Kind::Dict, Vec::new(), at)?,
            EMPTY_SET => self.push_new(Kind::Set, Vec::new(), at)?,
            LIST => {
                let items = self.take_mark(at)?;
                self.push_new(Kind::List, items, at)?;
            }
            TUPLE => {
                let items = self.take_mark(at)?;
                self.push_new(Kind::Tuple, items, at)?;
            }
            TUPLE1 | TUPLE2 | TUPLE3 => {
                let items = self.pop_n(usize::from(byte - TUPLE1) + 1, at)?;
                self.push_new(Kind::Tuple, items, at)?;
            }
            DICT => {
                let items = self.take_mark(at)?;
                let dict = self.create(Kind::Dict, Vec::new(), at)?;
                if let Some(id) = dict.node_id() {
                    set_items(&mut self.arena, id, items.into_iter(), at)?;
                }
                self.push(dict, at)?;
            }
            FROZENSET => {
                let items = self.take_mark(at)?;
                let set = self.create(Kind::FrozenSet, Vec::new(), at)?;
                if let Some(id) = set.node_id() {
                    add_items(&mut self.arena, id, items.into_iter(), at)?;
                }
                self.push(set, at)?;
            }
            APPEND => {
                self.require(2, at)?;
                let list = self.container_at(self.stack.len() - 2, Kind::List, at)?;
                let item = self.pop(at)?;
                self.append(list, [item].into_iter(), at)?;
            }
            APPENDS => {
                let mark = self.pop_mark(at)?;
                if let Some(list) = self.container_below(mark, Kind::List, at)? {
                    // Taken out while its items are appended, which needs the machine.
                    let mut stack = std::mem::take(&mut self.stack);
                    self.append(list, stack.drain(mark..), at)?;
                    self.stack = stack;
                }
            }
            SETITEM => {
                self.require(3, at)?;
                let start = self.stack.len() - 2;
                let dict = self.container_at(start - 1, Kind::Dict, at)?;
                set_items(&mut self.arena, dict, self.stack.drain(start..), at)?;
            }
            SETITEMS => {
                let mark = self.pop_mark(at)?;
                if let Some(dict) = self.container_below(mark, Kind::Dict, at)? {
                    set_items(&mut self.arena, dict, self.stack.drain(mark..), at)?;
                }
            }
            ADDITEMS => {
                let mark = self.pop_mark(at)?;
                if let Some(set) = self.container_below(mark, Kind::Set, at)? {
                    add_items(&mut self.arena, set, self.stack.drain(mark..), at)?;
                }
            }

            PUT => {
                let line = self.input.line(at)?;
                let index = scalars::memo_index_from_text(line).map_err(|p| at.bad(p))?;
                self.memo_put(index, at)?;
            }
            BINPUT => {
                let [index] = self.input.array(at)?;
                self.memo_put(index.into(), at)?;
            }
            LONG_BINPUT => {
                let index = u32::from_le_bytes(self.input.array(at)?);
                self.memo_put(index.into(), at)?;
            }
            MEMOIZE => {
                let index = u64::try_from(self.memo.len()).map_err(|_| self.memo_full(at))?;
                self.memo_put(index, at)?;
            }
            GET => {
                let line = self.input.line(at)?;
                let index = scalars::memo_index_from_text(line).map_err(|p| at.bad(p))?;
                self.memo_get(index, at)?;
            }
            BINGET => {
                let [index] = self.input.array(at)?;
                self.memo_get(index.into(), at)?;
            }
            LONG_BINGET => {
                let index = u32::from_le_bytes(self.input.array(at)?);
                self.memo_get(index.into(), at)?;
            }

            // Refused and unknown opcodes.
            _ => return Err(at.not_executed()),
        }
        Ok(())
    }

    /// Appends `items` to the list `list`, through the absorber if there is one.
    fn append(
        &mut self,
        list: u32,
        items: impl ExactSizeIterator<Item = Slot>,
        at: At,
    ) -> Result<(), PickleError> {
        match &mut self.absorbing {
            Some(absorbing) => absorbing.append(&mut self.arena, &mut self.memo, list, items),
            None => self.arena.extend(list, items),
        }
        .map_err(|_| out_of_memory(at))
    }

    /// The stack length at the last mark: values below it are out of reach.
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Values above the fence.
    fn available(&self) -> usize {
        self.stack.len().saturating_sub(self.fence())
    }

    fn underflow(&self, needed: usize, at: At) -> PickleError {
        PickleError::StackUnderflow {
            opcode: at.opcode(),
            offset: at.offset,
            needed,
            found: self.available(),
        }
    }

    /// Fails unless `needed` values are above the fence.
    fn require(&self, needed: usize, at: At) -> Result<(), PickleError> {
        if self.available() >= needed {
            Ok(())
        } else {
            Err(self.underflow(needed, at))
        }
    }

    /// The error of an opcode whose value the arena could not take.
    fn full(&self, full: Full, at: At) -> PickleError {
        match full {
            Full::Handles => self.too_many_items(at),
            Full::Memory => out_of_memory(at),
        }
    }

    fn too_many_items(&self, at: At) -> PickleError {
        PickleError::TooManyItems {
            limit: self.limits.max_items,
            offset: at.offset,
        }
    }

    fn push(&mut self, slot: Slot, at: At) -> Result<(), PickleError> {
        if self.items >= self.limits.max_items {
            return Err(self.too_many_items(at));
        }
        self.items += 1;
        self.stack.try_reserve(1).map_err(|_| out_of_memory(at))?;
        self.stack.push(slot);
        Ok(())
    }

    /// Stores a scalar and pushes it.
    fn push_value(&mut self, value: Value, at: At) -> Result<(), PickleError> {
        let slot = self
            .arena
            .scalar(value)
            .map_err(|full| self.full(full, at))?;
        self.push(slot, at)
    }

    /// Creates a container.
    fn create(&mut self, kind: Kind, items: Vec<Slot>, at: At) -> Result<Slot, PickleError> {
        self.arena
            .create(kind, at.offset, items)
            .map_err(|full| self.full(full, at))
    }

    /// Creates a container and pushes it.
    fn push_new(&mut self, kind: Kind, items: Vec<Slot>, at: At) -> Result<(), PickleError> {
        let slot = self.create(kind, items, at)?;
        self.push(slot, at)
    }

    /// A `str` of `length` UTF-8 bytes from the input.
    fn push_utf8(&mut self, length: u64, at: At) -> Result<(), PickleError> {
        let bytes = self.input.declared(length, at)?;
        let text = std::str::from_utf8(bytes).map_err(|_| {
            at.bad_string(
                "the string is not valid UTF-8 (a lone surrogate, which Python writes with \
                 'surrogatepass', cannot be held by a Rust string either)",
            )
        })?;
        let value = Value::Str(text.into());
        self.push_value(value, at)
    }

    /// `bytes` of `length` bytes from the input.
    fn push_bytes(&mut self, length: u64, at: At) -> Result<(), PickleError> {
        let value = Value::Bytes(self.input.declared(length, at)?.into());
        self.push_value(value, at)
    }

    /// A length field of 4 signed bytes (`BINSTRING`, `LONG4`).
    fn signed_length(&mut self, at: At) -> Result<u64, PickleError> {
        let length = i32::from_le_bytes(self.input.array(at)?);
        u64::try_from(length).map_err(|_| at.bad("the declared length is negative"))
    }

    fn pop(&mut self, at: At) -> Result<Slot, PickleError> {
        self.require(1, at)?;
        self.stack.pop().ok_or_else(|| self.underflow(1, at))
    }

    /// The top `n` values above the fence, bottom first.
    fn pop_n(&mut self, n: usize, at: At) -> Result<Vec<Slot>, PickleError> {
        self.require(n, at)?;
        Ok(self.stack.split_off(self.stack.len() - n))
    }

    /// Discards the last mark and returns where it was: the values from there up are its
    /// items.
    fn pop_mark(&mut self, at: At) -> Result<usize, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| PickleError::MissingMark {
            opcode: at.opcode(),
            offset: at.offset,
        })?;
        debug_assert!(mark <= self.stack.len(), "no opcode pops below a mark");
        Ok(mark.min(self.stack.len()))
    }

    /// The values above the last mark, bottom first, taken off the stack with the mark.
    fn take_mark(&mut self, at: At) -> Result<Vec<Slot>, PickleError> {
        let mark = self.pop_mark(at)?;
        Ok(self.stack.split_off(mark))
    }

    fn top(&self, at: At) -> Result<Slot, PickleError> {
        match self.stack.last() {
            Some(&top) if self.available() > 0 => Ok(top),
            _ => Err(self.underflow(1, at)),
        }
    }

    /// The container of `kind` just below the items from `mark` up, for `APPENDS`,
    /// `SETITEMS` and `ADDITEMS`. With no items there is nothing to do and, as in CPython, the
    /// value there need only exist: `None`.
    fn container_below(&self, mark: usize, kind: Kind, at: At) -> Result<Option<u32>, PickleError> {
        let index = mark.wrapping_sub(1);
        if mark == self.stack.len() && index < self.stack.len() && index >= self.fence() {
            return Ok(None);
        }
        self.container_at(index, kind, at).map(Some)
    }

    /// The container of `kind` at `index` on the stack: the one below an opcode's items. It
    /// must be above the fence; an index past the top (`usize::MAX` for "below the bottom")
    /// means there is none.
    fn container_at(&self, index: usize, kind: Kind, at: At) -> Result<u32, PickleError> {
        let slot = match self.stack.get(index) {
            Some(&slot) if index >= self.fence() => slot,
            _ => {
                return Err(PickleError::StackUnderflow {
                    opcode: at.opcode(),
                    offset: at.offset,
                    needed: 1,
                    found: 0,
                })
            }
        };
        match slot.node_id() {
            Some(id) if self.arena.kind(slot) == Some(kind) => Ok(id),
            _ => {
                let expected = match kind {
                    Kind::List => "a list",
                    Kind::Tuple => "a tuple",
                    Kind::Dict => "a dict",
                    Kind::Set => "a set",
                    Kind::FrozenSet => "a frozenset",
                    Kind::Absorbed => "an absorbed list",
                };
                Err(self.wrong_type(at, expected, slot))
            }
        }
    }

    fn wrong_type(&self, at: At, expected: &'static str, found: Slot) -> PickleError {
        PickleError::WrongType {
            opcode: at.opcode(),
            offset: at.offset,
            expected,
            found: self.arena.type_name(found),
        }
    }

    fn memo_full(&self, at: At) -> PickleError {
        PickleError::TooManyMemoEntries {
            limit: self.limits.max_memo_entries,
            offset: at.offset,
        }
    }

    /// Stores the top of the stack in the memo at `index`.
    fn memo_put(&mut self, index: u64, at: At) -> Result<(), PickleError> {
        let top = self.top(at)?;
        if self.memo.put(index, top, self.limits.max_memo_entries) {
            self.arena.memoized(top, index);
            Ok(())
        } else {
            Err(self.memo_full(at))
        }
    }

    /// Pushes the memo entry `index`.
    fn memo_get(&mut self, index: u64, at: At) -> Result<(), PickleError> {
        let slot = self
            .memo
            .get(index)
            .ok_or_else(|| PickleError::MissingMemo {
                opcode: at.opcode(),
                offset: at.offset,
                index,
            })?;
        self.push(slot, at)
    }
}
