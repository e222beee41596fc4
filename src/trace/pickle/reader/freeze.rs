//! The conversion of the arena into the result: each container becomes one `Arc` once, and
//! every further reference to it clones that `Arc`, so a frame dict referenced hundreds of
//! thousands of times is converted (and stored) once.
//!
//! The walk keeps its own stack instead of recursing, so no input can overflow the thread's
//! stack; it refuses a container that contains itself, and nesting deeper than the limit (a
//! deeper tree would overflow the stack when the caller drops it, which recurses).

use std::sync::Arc;

use super::super::Value;
use super::arena::{Arena, Kind, Slot, Unpacked};
use super::error::PickleError;

/// How far the walk has got with one container.
enum State {
    /// Not reached yet.
    Pending,
    /// On the walk's path: reaching it again is a cycle.
    Open,
    /// Converted, and kept for the references still to come.
    Done(Value),
    /// Converted and moved into the one container that holds it.
    Moved,
}

/// A container on the walk's path, with the items still to convert and those converted.
struct Open {
    id: usize,
    kind: Kind,
    rest: std::vec::IntoIter<Slot>,
    done: Built,
}

/// The converted items of a container: values, or for a dict, pairs.
enum Built {
    Items(Vec<Value>),
    Pairs(Vec<(Value, Value)>),
}

impl Open {
    /// Adds the converted item just taken from `rest`.
    #[inline]
    fn push(&mut self, value: Value) {
        match &mut self.done {
            Built::Items(items) => items.push(value),
            // Keys and values alternate and a dict's slots come in pairs, so an odd number
            // left means a key was taken, and its value is next.
            Built::Pairs(pairs) => match pairs.last_mut() {
                Some(last) if self.rest.len() % 2 == 0 => last.1 = value,
                _ => pairs.push((value, Value::None)),
            },
        }
    }
}

/// The items of a list an absorber took over, given back when the result reaches it.
pub(super) type Restore<'r> = &'r mut dyn FnMut(u32) -> Option<Vec<Slot>>;

/// Converts `root` and everything it reaches, consuming the arena.
pub(super) fn freeze(arena: Arena, root: Slot, max_depth: usize) -> Result<Value, PickleError> {
    freeze_with(arena, root, max_depth, &mut |_| None)
}

/// As [`freeze`], with the items of each list an absorber took over from `restore`.
pub(super) fn freeze_with(
    mut arena: Arena,
    root: Slot,
    max_depth: usize,
    restore: Restore<'_>,
) -> Result<Value, PickleError> {
    let Some(root) = root.node_id() else {
        return Ok(scalar(&arena, root));
    };
    let mut states: Vec<State> = Vec::new();
    states.resize_with(arena.nodes.len(), || State::Pending);
    let mut path: Vec<Open> = Vec::new();
    open(
        &mut arena,
        &mut states,
        &mut path,
        root as usize,
        max_depth,
        restore,
    )?;
    while let Some(top) = path.last_mut() {
        // Convert items until one is a container not converted yet, which is walked first.
        let mut pending = None;
        while let Some(slot) = top.rest.next() {
            let value = match slot.unpack() {
                Unpacked::Node(child) => match states.get(child as usize) {
                    Some(State::Done(value)) => value.clone(),
                    Some(State::Pending) => {
                        pending = Some(child as usize);
                        break;
                    }
                    Some(State::Open) => {
                        let node = &arena.nodes[child as usize];
                        return Err(PickleError::Cycle {
                            kind: node.kind.python_name(),
                            offset: node.offset,
                        });
                    }
                    // The reference counts never undercount, so a moved container is never
                    // reached again; a bug here must not panic on a user's input.
                    Some(State::Moved) | None => {
                        debug_assert!(false, "container {child} moved or dangling");
                        Value::None
                    }
                },
                _ => scalar(&arena, slot),
            };
            top.push(value);
        }
        if let Some(child) = pending {
            open(
                &mut arena,
                &mut states,
                &mut path,
                child,
                max_depth,
                restore,
            )?;
            continue;
        }
        let Some(Open { id, kind, done, .. }) = path.pop() else {
            break;
        };
        let value = build(kind, done);
        let Some(parent) = path.last_mut() else {
            return Ok(value);
        };
        // A container held once is moved into its holder; one held more often is kept for
        // the other holders, each of which clones the `Arc`.
        if arena.refs.get(id).is_some_and(|&refs| refs > 1) {
            parent.push(value.clone());
            states[id] = State::Done(value);
        } else {
            parent.push(value);
            states[id] = State::Moved;
        }
    }
    debug_assert!(false, "the walk ends when the root closes");
    Ok(Value::None)
}

/// The scalar `slot` names or holds.
#[inline]
fn scalar(arena: &Arena, slot: Slot) -> Value {
    let value = arena.scalar_value(slot);
    debug_assert!(value.is_some(), "dangling scalar handle {slot:?}");
    value.unwrap_or(Value::None)
}

/// Puts container `id` on the walk's path, taking its items out of the arena.
fn open(
    arena: &mut Arena,
    states: &mut [State],
    path: &mut Vec<Open>,
    id: usize,
    max_depth: usize,
    restore: Restore<'_>,
) -> Result<(), PickleError> {
    let node = &mut arena.nodes[id];
    if node.kind == Kind::Absorbed {
        // An absorber took its items: it gives them back, or the read fails (only an
        // absorbing read makes one, and its caller reads the input again without it).
        let Some(items) = u32::try_from(id).ok().and_then(restore) else {
            return Err(PickleError::WrongType {
                opcode: "STOP",
                offset: node.offset,
                expected: "a list the reader kept",
                found: node.kind.python_name(),
            });
        };
        node.kind = Kind::List;
        node.slots = items;
    }
    if path.len() >= max_depth {
        return Err(PickleError::TooDeep {
            limit: max_depth,
            offset: node.offset,
        });
    }
    states[id] = State::Open;
    let slots = std::mem::take(&mut node.slots);
    let done = match node.kind {
        Kind::Dict => Built::Pairs(Vec::with_capacity(slots.len() / 2)),
        _ => Built::Items(Vec::with_capacity(slots.len())),
    };
    path.push(Open {
        id,
        kind: node.kind,
        done,
        rest: slots.into_iter(),
    });
    Ok(())
}

/// The value of a container of `kind` whose items are converted.
fn build(kind: Kind, done: Built) -> Value {
    match (kind, done) {
        (_, Built::Pairs(pairs)) => Value::Dict(Arc::new(pairs)),
        (Kind::List, Built::Items(items)) => Value::List(Arc::new(items)),
        (Kind::Tuple, Built::Items(items)) => Value::Tuple(Arc::new(items)),
        (_, Built::Items(items)) => Value::Set(Arc::new(items)),
    }
}
