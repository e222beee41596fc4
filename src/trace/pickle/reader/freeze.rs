//! The conversion of the arena into the result: each container becomes one `Arc` once, and
//! every further reference to it clones that `Arc`, so a frame dict referenced hundreds of
//! thousands of times is converted (and stored) once.
//!
//! The walk keeps its own stack instead of recursing, so no input can overflow the thread's
//! stack; it refuses a container that contains itself, and nesting deeper than the limit (a
//! deeper tree would overflow the stack when the caller drops it, which recurses).

use std::sync::Arc;

use super::super::Value;
use super::arena::{Arena, Kind, Slot};
use super::error::PickleError;

/// How far the walk has got with one container.
enum State {
    /// Not reached yet.
    Pending,
    /// On the walk's path: reaching it again is a cycle.
    Open,
    /// Converted.
    Done(Value),
}

/// A container on the walk's path, with the items still to convert and those converted.
struct Open {
    id: usize,
    kind: Kind,
    rest: std::vec::IntoIter<Slot>,
    done: Built,
}

/// The converted items of a container: values, or for a dict, pairs and a pending key.
enum Built {
    Items(Vec<Value>),
    Pairs(Vec<(Value, Value)>, Option<Value>),
}

impl Built {
    fn push(&mut self, value: Value) {
        match self {
            Built::Items(items) => items.push(value),
            Built::Pairs(pairs, key) => match key.take() {
                Some(key) => pairs.push((key, value)),
                None => *key = Some(value),
            },
        }
    }
}

/// Converts `root` and everything it reaches, consuming the arena.
pub(super) fn freeze(mut arena: Arena, root: Slot, max_depth: usize) -> Result<Value, PickleError> {
    let root = match root {
        Slot::Scalar(index) => return Ok(scalar(&arena, index)),
        Slot::Node(id) => id as usize,
    };
    let mut states: Vec<State> = arena.nodes.iter().map(|_| State::Pending).collect();
    let mut path: Vec<Open> = Vec::new();
    open(&mut arena, &mut states, &mut path, root, max_depth)?;
    while let Some(top) = path.last_mut() {
        match top.rest.next() {
            Some(Slot::Scalar(index)) => top.done.push(scalar(&arena, index)),
            Some(Slot::Node(child)) => {
                let child = child as usize;
                match states.get(child) {
                    Some(State::Done(value)) => top.done.push(value.clone()),
                    Some(State::Open) => {
                        let node = &arena.nodes[child];
                        return Err(PickleError::Cycle {
                            kind: node.kind.python_name(),
                            offset: node.offset,
                        });
                    }
                    Some(State::Pending) => {
                        open(&mut arena, &mut states, &mut path, child, max_depth)?;
                    }
                    None => debug_assert!(false, "dangling container handle {child}"),
                }
            }
            None => {
                let Some(Open { id, kind, done, .. }) = path.pop() else {
                    break;
                };
                let value = build(kind, done);
                match path.last_mut() {
                    Some(parent) => {
                        parent.done.push(value.clone());
                        states[id] = State::Done(value);
                    }
                    None => return Ok(value),
                }
            }
        }
    }
    debug_assert!(false, "the walk ends when the root closes");
    Ok(Value::None)
}

/// The scalar at `index`.
fn scalar(arena: &Arena, index: u32) -> Value {
    let value = arena.scalars.get(index as usize).cloned();
    debug_assert!(value.is_some(), "dangling scalar handle {index}");
    value.unwrap_or(Value::None)
}

/// Puts container `id` on the walk's path, taking its items out of the arena.
fn open(
    arena: &mut Arena,
    states: &mut [State],
    path: &mut Vec<Open>,
    id: usize,
    max_depth: usize,
) -> Result<(), PickleError> {
    let node = &mut arena.nodes[id];
    if path.len() >= max_depth {
        return Err(PickleError::TooDeep {
            limit: max_depth,
            offset: node.offset,
        });
    }
    states[id] = State::Open;
    let slots = std::mem::take(&mut node.slots);
    let done = match node.kind {
        Kind::Dict => Built::Pairs(Vec::with_capacity(slots.len() / 2), None),
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
        (_, Built::Pairs(pairs, key)) => {
            debug_assert!(key.is_none(), "a dict holds keys and values in pairs");
            Value::Dict(Arc::new(pairs))
        }
        (Kind::List, Built::Items(items)) => Value::List(Arc::new(items)),
        (Kind::Tuple, Built::Items(items)) => Value::Tuple(Arc::new(items)),
        (_, Built::Items(items)) => Value::Set(Arc::new(items)),
    }
}
