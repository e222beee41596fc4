//! The values under construction. Pickle memoizes a container before filling it
//! (`EMPTY_LIST`, `MEMOIZE`, `MARK`, ..., `APPENDS`), so containers are built in place in an
//! arena and named by index; the stack and the memo hold [`Slot`]s, small copyable handles to
//! a scalar or a container here. [`freeze`](super::freeze) turns the arena into the `Arc`
//! tree once the pickle is read.
//!
//! Handles keep the hot paths cheap: a memo `GET` copies 8 bytes instead of cloning a value,
//! and `APPENDS` moves handles, not values.

use std::collections::TryReserveError;
use std::num::NonZeroU64;

use super::super::Value;
use super::keys::KeyIndex;

/// A value on the stack, in the memo or in a container, packed in 8 bytes: a handle to a
/// scalar or a container of the [`Arena`], or the value itself for `None`, a bool or an int
/// of up to 61 bits (every address, size and time a snapshot holds), which then costs no
/// arena entry. The low 3 bits are the tag; a slot is never zero, so `Option<Slot>` is 8
/// bytes too. Two equal slots stand for the same object, or for equal atoms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot(NonZeroU64);

/// What a [`Slot`] holds, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unpacked {
    /// A container, by index into [`Arena::nodes`].
    Node(u32),
    /// A scalar, by index into [`Arena::scalars`].
    Scalar(u32),
    /// An int held in the slot.
    Int(i64),
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
}

const TAG_BITS: u32 = 3;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const TAG_NODE: u64 = 1;
const TAG_SCALAR: u64 = 2;
const TAG_INT: u64 = 3;
const TAG_NONE: u64 = 4;
const TAG_FALSE: u64 = 5;
const TAG_TRUE: u64 = 6;
/// A scalar that is a `str`: told apart in the slot, with 29 bits of a hash of its text
/// above the index, so that two different keys of a dict almost always differ in their slots
/// alone.
const TAG_STR: u64 = 7;
/// Where the text hash of a `str` slot starts.
const STR_HASH_SHIFT: u32 = TAG_BITS + 32;
/// Ints in `-INLINE_INT_LIMIT..INLINE_INT_LIMIT` are held in the slot.
const INLINE_INT_LIMIT: i64 = 1 << (63 - TAG_BITS);

impl Slot {
    fn tagged(payload: u64, tag: u64) -> Slot {
        Slot::from_raw((payload << TAG_BITS) | tag)
    }

    /// Every tag is non-zero, so a packed word is.
    const fn from_raw(raw: u64) -> Slot {
        match NonZeroU64::new(raw) {
            Some(raw) => Slot(raw),
            None => Slot(NonZeroU64::MIN),
        }
    }

    /// The container `id`.
    pub(crate) fn node(id: u32) -> Slot {
        Slot::tagged(id.into(), TAG_NODE)
    }

    /// The scalar `index`, a `str` with text `text` if there is one.
    fn scalar(index: u32, text: Option<&str>) -> Slot {
        match text {
            Some(text) => Slot::from_raw(
                (text_hash(text) << STR_HASH_SHIFT) | Slot::tagged(index.into(), TAG_STR).0.get(),
            ),
            None => Slot::tagged(index.into(), TAG_SCALAR),
        }
    }

    /// `None`.
    pub(super) const NONE: Slot = Slot::from_raw(TAG_NONE);

    /// `True` or `False`.
    pub(super) fn bool(flag: bool) -> Slot {
        Slot::tagged(0, if flag { TAG_TRUE } else { TAG_FALSE })
    }

    /// An int held in the slot, or `None` when it needs more than 61 bits.
    pub(super) fn small_int(int: i64) -> Option<Slot> {
        // The shift keeps the sign; the range check makes it lossless.
        (-INLINE_INT_LIMIT..INLINE_INT_LIMIT)
            .contains(&int)
            .then(|| Slot::from_raw(((int << TAG_BITS) as u64) | TAG_INT))
    }

    /// What the slot holds.
    #[inline]
    pub(super) fn unpack(self) -> Unpacked {
        let raw = self.0.get();
        // The index of a node or scalar, packed from a u32.
        let index = (raw >> TAG_BITS) as u32;
        match raw & TAG_MASK {
            TAG_NODE => Unpacked::Node(index),
            TAG_SCALAR | TAG_STR => Unpacked::Scalar(index),
            // The arithmetic shift restores the sign.
            TAG_INT => Unpacked::Int((raw as i64) >> TAG_BITS),
            TAG_FALSE => Unpacked::Bool(false),
            TAG_TRUE => Unpacked::Bool(true),
            _ => Unpacked::None,
        }
    }

    /// The container this names, if it is one.
    #[inline]
    pub(super) fn node_id(self) -> Option<u32> {
        match self.unpack() {
            Unpacked::Node(id) => Some(id),
            _ => None,
        }
    }

    /// Whether the slot holds an int itself.
    #[inline]
    pub(super) fn is_small_int(self) -> bool {
        self.0.get() & TAG_MASK == TAG_INT
    }

    /// The scalar index of a `str`, if the slot names one.
    #[inline]
    pub(super) fn str_index(self) -> Option<u32> {
        let raw = self.0.get();
        (raw & TAG_MASK == TAG_STR).then_some((raw >> TAG_BITS) as u32) // packed from a u32
    }

    /// Whether two `str` slots may hold equal texts: false when their text hashes differ.
    #[inline]
    pub(super) fn may_equal_str(self, other: Slot) -> bool {
        (self.0.get() ^ other.0.get()) >> STR_HASH_SHIFT == 0
    }
}

/// 29 bits of a hash of `text` (FxHash's multiply-rotate over 8-byte words), for
/// [`Slot::may_equal_str`]; equal texts hash equally, and collisions only cost a comparison.
fn text_hash(text: &str) -> u64 {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut hash = text.len() as u64;
    let mut words = text.as_bytes().chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(bytes)).wrapping_mul(SEED);
    }
    let mut last = [0u8; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    hash = (hash.rotate_left(5) ^ u64::from_le_bytes(last)).wrapping_mul(SEED);
    // The top bits, which the multiplications mixed best, as many as fit above the index.
    hash >> STR_HASH_SHIFT
}

/// The Python type of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `list`.
    List,
    /// `tuple`.
    Tuple,
    /// `dict`.
    Dict,
    /// `set`.
    Set,
    /// `frozenset`.
    FrozenSet,
    /// A list whose items an [`Absorb`](super::absorb::Absorb) took over: it stands in for
    /// them, and every other use of it (filling it, freezing it) is an error.
    Absorbed,
}

impl Kind {
    /// The Python type name, for messages.
    pub(super) fn python_name(self) -> &'static str {
        match self {
            Kind::List => "list",
            Kind::Tuple => "tuple",
            Kind::Dict => "dict",
            Kind::Set => "set",
            Kind::FrozenSet => "frozenset",
            Kind::Absorbed => "absorbed list",
        }
    }

    /// Whether Python can hash it (use it as a dict key or set item): the immutable ones.
    pub(super) fn is_hashable(self) -> bool {
        matches!(self, Kind::Tuple | Kind::FrozenSet)
    }
}

/// One container under construction.
pub(super) struct Node {
    /// Its type.
    pub(super) kind: Kind,
    /// The memo index that holds it: [`NOT_MEMOIZED`], or [`MEMOIZED_AGAIN`] when more than
    /// one may (then it is never recycled).
    pub(super) memo_index: u32,
    /// The offset of the opcode that created it, for messages.
    pub(super) offset: usize,
    /// Its items; for a dict, keys and values alternate.
    pub(super) slots: Vec<Slot>,
    /// A hash index of the keys of a large dict or set.
    keys: Option<Box<KeyIndex>>,
}

/// [`Node::memo_index`] of a container no memo entry holds.
const NOT_MEMOIZED: u32 = u32::MAX;
/// [`Node::memo_index`] of a container more than one memo entry may hold.
const MEMOIZED_AGAIN: u32 = u32::MAX - 1;

/// Every scalar and container created so far, by index.
#[derive(Default)]
pub(super) struct Arena {
    /// Scalars that a [`Slot`] cannot hold itself, each stored once however often it is
    /// referenced.
    pub(super) scalars: Vec<Value>,
    /// Containers.
    pub(super) nodes: Vec<Node>,
    /// For each container, how many times a container holds it: [`freeze`](super::freeze)
    /// keeps a converted value for later references only when there can be some. Never below
    /// the real count (a replaced dict value is not subtracted), so an error can only cost a
    /// kept value, never a lost one.
    pub(super) refs: Vec<u32>,
    /// Indices of containers an absorber took and nothing can reach any more, for
    /// [`create`](Self::create) to use again.
    free: Vec<u32>,
}

/// Counts a reference to `slot` if it is a container.
#[inline]
fn count_ref(refs: &mut [u32], slot: Slot) {
    if let Some(count) = slot.node_id().and_then(|id| refs.get_mut(id as usize)) {
        *count = count.saturating_add(1);
    }
}

/// Why the arena could not take one more value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// 2^32 handles of the kind are used up.
    Handles,
    /// The machine could not give the memory (asked for fallibly: a file larger than the
    /// machine's memory is an error, not an abort).
    Memory,
}

impl From<TryReserveError> for Full {
    fn from(_: TryReserveError) -> Full {
        Full::Memory
    }
}

impl Arena {
    /// Stores a scalar, in the slot itself when it fits.
    pub(super) fn scalar(&mut self, value: Value) -> Result<Slot, Full> {
        debug_assert!(!matches!(
            value,
            Value::List(_) | Value::Tuple(_) | Value::Dict(_) | Value::Set(_)
        ));
        match value {
            Value::None => return Ok(Slot::NONE),
            Value::Bool(flag) => return Ok(Slot::bool(flag)),
            Value::Int(int) => {
                if let Some(slot) = Slot::small_int(int) {
                    return Ok(slot);
                }
            }
            _ => {}
        }
        let index = u32::try_from(self.scalars.len()).map_err(|_| Full::Handles)?;
        self.scalars.try_reserve(1)?;
        let slot = match &value {
            Value::Str(text) => Slot::scalar(index, Some(text)),
            _ => Slot::scalar(index, None),
        };
        self.scalars.push(value);
        Ok(slot)
    }

    /// A new container of `kind` holding `slots`, created by the opcode at `offset`. Dicts
    /// and sets start empty and are filled with [`insert`](Self::insert), which keeps keys
    /// unique.
    pub(super) fn create(
        &mut self,
        kind: Kind,
        offset: usize,
        slots: Vec<Slot>,
    ) -> Result<Slot, Full> {
        debug_assert!(
            slots.is_empty() || matches!(kind, Kind::List | Kind::Tuple),
            "dict and set items go through insert"
        );
        for &slot in &slots {
            count_ref(&mut self.refs, slot);
        }
        let node = Node {
            kind,
            memo_index: NOT_MEMOIZED,
            offset,
            slots,
            keys: None,
        };
        if let Some(index) = self.free.pop() {
            if let (Some(old), Some(refs)) = (
                self.nodes.get_mut(index as usize),
                self.refs.get_mut(index as usize),
            ) {
                // An empty container takes over the old one's (cleared) memory: the next
                // trace entry fills what the last one left.
                let mut node = node;
                if node.slots.is_empty() {
                    std::mem::swap(&mut node.slots, &mut old.slots);
                }
                *old = node;
                *refs = 0;
                return Ok(Slot::node(index));
            }
        }
        let index = u32::try_from(self.nodes.len()).map_err(|_| Full::Handles)?;
        self.nodes.try_reserve(1)?;
        self.refs.try_reserve(1)?;
        self.refs.push(0);
        self.nodes.push(node);
        Ok(Slot::node(index))
    }

    /// The scalar `slot` names or holds, or `None` for a container.
    pub(super) fn scalar_value(&self, slot: Slot) -> Option<Value> {
        match slot.unpack() {
            Unpacked::Scalar(index) => self.scalars.get(index as usize).cloned(),
            Unpacked::Node(_) => None,
            Unpacked::Int(int) => Some(Value::Int(int)),
            Unpacked::None => Some(Value::None),
            Unpacked::Bool(flag) => Some(Value::Bool(flag)),
        }
    }

    /// Whether `slot` is a `bytes` scalar.
    pub(super) fn is_bytes(&self, slot: Slot) -> bool {
        match slot.unpack() {
            Unpacked::Scalar(index) => {
                matches!(self.scalars.get(index as usize), Some(Value::Bytes(_)))
            }
            _ => false,
        }
    }

    /// The container type of `slot`, or `None` for a scalar.
    pub(super) fn kind(&self, slot: Slot) -> Option<Kind> {
        let id = slot.node_id()?;
        self.nodes.get(id as usize).map(|node| node.kind)
    }

    /// The Python type name of `slot`, for messages.
    pub(super) fn type_name(&self, slot: Slot) -> &'static str {
        if let Some(kind) = self.kind(slot) {
            return kind.python_name();
        }
        match self.scalar_value(slot) {
            Some(Value::None) => "None",
            Some(Value::Bool(_)) => "bool",
            Some(Value::Int(_) | Value::BigInt(_)) => "int",
            Some(Value::Float(_)) => "float",
            Some(Value::Str(_)) => "str",
            Some(Value::Bytes(_)) => "bytes",
            // Containers are never scalars; a dangling handle is a bug.
            _ => "?",
        }
    }

    /// Makes room for `additional` more slots in container `id`, fallibly.
    pub(super) fn reserve(&mut self, id: u32, additional: usize) -> Result<(), TryReserveError> {
        match self.nodes.get_mut(id as usize) {
            Some(node) => node.slots.try_reserve(additional),
            None => Ok(()),
        }
    }

    /// Appends `items` to the list `id`, asking for their memory fallibly first.
    pub(super) fn extend(
        &mut self,
        id: u32,
        items: impl ExactSizeIterator<Item = Slot>,
    ) -> Result<(), TryReserveError> {
        let Arena { nodes, refs, .. } = self;
        if let Some(node) = nodes.get_mut(id as usize) {
            debug_assert_eq!(node.kind, Kind::List);
            node.slots.try_reserve(items.len())?;
            node.slots
                .extend(items.inspect(|&slot| count_ref(refs, slot)));
        }
        Ok(())
    }

    /// Notes that the memo entry `index` now holds `slot`.
    pub(super) fn memoized(&mut self, slot: Slot, index: u64) {
        let Some(node) = slot
            .node_id()
            .and_then(|id| self.nodes.get_mut(id as usize))
        else {
            return;
        };
        node.memo_index = match u32::try_from(index) {
            Ok(index) if node.memo_index == NOT_MEMOIZED && index < MEMOIZED_AGAIN => index,
            _ => MEMOIZED_AGAIN,
        };
    }

    /// Whether container `id` is held by no container and by at most one memo entry, and
    /// which one: then an absorber may take it, once that entry is cleared.
    pub(super) fn free_node(&self, id: u32) -> Option<Option<u32>> {
        let index = id as usize;
        let node = self.nodes.get(index)?;
        match (self.refs.get(index), node.memo_index) {
            (Some(0), MEMOIZED_AGAIN) | (None, _) => None,
            (Some(0), NOT_MEMOIZED) => Some(None),
            (Some(0), memo_index) => Some(Some(memo_index)),
            _ => None,
        }
    }

    /// Lets go of the free container `id` an absorber took, for its index to be used again.
    /// The memo entry that held it must be cleared first: a later `GET` of it must fail, not
    /// push whatever container uses the index next.
    pub(super) fn recycle(&mut self, id: u32) {
        let Some(node) = self.nodes.get_mut(id as usize) else {
            return;
        };
        // Cleared, not freed: the next container created takes it over.
        node.slots.clear();
        node.keys = None;
        node.memo_index = MEMOIZED_AGAIN;
        // Without memory for the free list the index is simply not used again.
        if self.free.try_reserve(1).is_ok() {
            self.free.push(id);
        }
    }

    /// Drops the items of list `id`, which an absorber has taken over: the list stays, so
    /// references to it still name it, but every other use of it is an error.
    pub(super) fn absorb(&mut self, id: u32) {
        if let Some(node) = self.nodes.get_mut(id as usize) {
            debug_assert_eq!(node.kind, Kind::List);
            node.kind = Kind::Absorbed;
            node.slots = Vec::new();
        }
    }

    /// The type and items (for a dict, keys and values alternating) of container `id`.
    pub(super) fn node(&self, id: u32) -> Option<(Kind, &[Slot])> {
        self.nodes
            .get(id as usize)
            .map(|node| (node.kind, node.slots.as_slice()))
    }

    /// The scalar `slot` names, if it is one the slot does not hold itself.
    pub(super) fn stored_scalar(&self, slot: Slot) -> Option<&Value> {
        match slot.unpack() {
            Unpacked::Scalar(index) => self.scalars.get(index as usize),
            _ => None,
        }
    }

    /// Sets `key` to `value` in the dict `id`, or (with `value` `None`) adds `key` to the set
    /// `id`. As in Python, a key already there keeps its place and the first key object; a dict
    /// takes the new value. The caller has checked that `key` is hashable.
    pub(super) fn insert(&mut self, id: u32, key: Slot, value: Option<Slot>) {
        let Arena {
            scalars,
            nodes,
            refs,
            ..
        } = self;
        let Some(node) = nodes.get_mut(id as usize) else {
            debug_assert!(false, "dangling container handle {id}");
            return;
        };
        debug_assert_eq!(value.is_some(), node.kind == Kind::Dict);
        let stride = if value.is_some() { 2 } else { 1 };
        match KeyIndex::find(node.keys.as_deref(), scalars, &node.slots, stride, key) {
            Some(entry) => {
                if let Some(value) = value {
                    if let Some(old) = node.slots.get_mut(entry * stride + 1) {
                        *old = value;
                    }
                    count_ref(refs, value);
                }
            }
            None => {
                let entry = node.slots.len() / stride;
                node.slots.push(key);
                count_ref(refs, key);
                if let Some(value) = value {
                    node.slots.push(value);
                    count_ref(refs, value);
                }
                KeyIndex::record(&mut node.keys, scalars, &node.slots, stride, entry);
            }
        }
    }
}
