//! The values under construction. Pickle memoizes a container before filling it
//! (`EMPTY_LIST`, `MEMOIZE`, `MARK`, ..., `APPENDS`), so containers are built in place in an
//! arena and named by index; the stack and the memo hold [`Slot`]s, small copyable handles to
//! a scalar or a container here. [`freeze`](super::freeze) turns the arena into the `Arc`
//! tree once the pickle is read.
//!
//! Handles keep the hot paths cheap: a memo `GET` copies 8 bytes instead of cloning a value,
//! and `APPENDS` moves handles, not values.

use super::super::Value;
use super::keys::KeyIndex;

/// A value on the stack, in the memo or in a container: a handle to a scalar or a container
/// of the [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// A scalar, by index into [`Arena::scalars`].
    Scalar(u32),
    /// A container, by index into [`Arena::nodes`].
    Node(u32),
}

/// The Python type of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
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
    /// The offset of the opcode that created it, for messages.
    pub(super) offset: usize,
    /// Its items; for a dict, keys and values alternate.
    pub(super) slots: Vec<Slot>,
    /// A hash index of the keys of a large dict or set.
    keys: Option<Box<KeyIndex>>,
}

/// Every scalar and container created so far, by index.
#[derive(Default)]
pub(super) struct Arena {
    /// Scalars (never containers), each stored once however often it is referenced.
    pub(super) scalars: Vec<Value>,
    /// Containers.
    pub(super) nodes: Vec<Node>,
}

impl Arena {
    /// Stores a scalar; `None` when 2^32 handles are used up.
    pub(super) fn scalar(&mut self, value: Value) -> Option<Slot> {
        debug_assert!(!matches!(
            value,
            Value::List(_) | Value::Tuple(_) | Value::Dict(_) | Value::Set(_)
        ));
        let index = u32::try_from(self.scalars.len()).ok()?;
        self.scalars.push(value);
        Some(Slot::Scalar(index))
    }

    /// A new container of `kind` holding `slots`, created by the opcode at `offset`; `None`
    /// when 2^32 handles are used up. Dicts and sets start empty and are filled with
    /// [`insert`](Self::insert), which keeps keys unique.
    pub(super) fn create(&mut self, kind: Kind, offset: usize, slots: Vec<Slot>) -> Option<Slot> {
        debug_assert!(
            slots.is_empty() || matches!(kind, Kind::List | Kind::Tuple),
            "dict and set items go through insert"
        );
        let index = u32::try_from(self.nodes.len()).ok()?;
        self.nodes.push(Node {
            kind,
            offset,
            slots,
            keys: None,
        });
        Some(Slot::Node(index))
    }

    /// The scalar `slot` names, or `None` for a container.
    pub(super) fn scalar_value(&self, slot: Slot) -> Option<&Value> {
        match slot {
            Slot::Scalar(index) => self.scalars.get(index as usize),
            Slot::Node(_) => None,
        }
    }

    /// The container type of `slot`, or `None` for a scalar.
    pub(super) fn kind(&self, slot: Slot) -> Option<Kind> {
        match slot {
            Slot::Scalar(_) => None,
            Slot::Node(id) => self.nodes.get(id as usize).map(|node| node.kind),
        }
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

    /// Makes room for `additional` more slots in container `id`.
    pub(super) fn reserve(&mut self, id: u32, additional: usize) {
        if let Some(node) = self.nodes.get_mut(id as usize) {
            node.slots.reserve(additional);
        }
    }

    /// Appends `items` to the list `id`.
    pub(super) fn extend(&mut self, id: u32, items: impl IntoIterator<Item = Slot>) {
        if let Some(node) = self.nodes.get_mut(id as usize) {
            debug_assert_eq!(node.kind, Kind::List);
            node.slots.extend(items);
        }
    }

    /// Sets `key` to `value` in the dict `id`, or (with `value` `None`) adds `key` to the set
    /// `id`. As in Python, a key already there keeps its place and the first key object; a dict
    /// takes the new value. The caller has checked that `key` is hashable.
    pub(super) fn insert(&mut self, id: u32, key: Slot, value: Option<Slot>) {
        let Arena { scalars, nodes } = self;
        let Some(node) = nodes.get_mut(id as usize) else {
            debug_assert!(false, "dangling container handle {id}");
            return;
        };
        debug_assert_eq!(value.is_some(), node.kind == Kind::Dict);
        let stride = if value.is_some() { 2 } else { 1 };
        let found = KeyIndex::find(node.keys.as_deref(), scalars, &node.slots, stride, key);
        match (found, value) {
            (Some(entry), Some(value)) => {
                if let Some(old) = node.slots.get_mut(entry * stride + 1) {
                    *old = value;
                }
            }
            (Some(_), None) => {}
            (None, value) => {
                let entry = node.slots.len() / stride;
                node.slots.push(key);
                node.slots.extend(value);
                KeyIndex::record(&mut node.keys, scalars, &node.slots, stride, entry);
            }
        }
    }
}
