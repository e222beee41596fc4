//! How opcodes put items into containers (`SETITEMS`, `ADDITEMS`, `DICT`, `FROZENSET`), and
//! the scalar a Python 2 string becomes.

use super::super::Value;
use super::arena::{Arena, Slot};
use super::error::PickleError;
use super::input::At;

/// Fails unless Python could hash `key`.
fn check_hashable(arena: &Arena, key: Slot, at: At) -> Result<(), PickleError> {
    match arena.kind(key) {
        Some(kind) if !kind.is_hashable() => Err(PickleError::Unhashable {
            opcode: at.opcode(),
            offset: at.offset,
            kind: kind.python_name(),
        }),
        _ => Ok(()),
    }
}

/// Sets alternating keys and values from `items` in the dict `dict`.
pub(super) fn set_items(
    arena: &mut Arena,
    dict: u32,
    mut items: impl ExactSizeIterator<Item = Slot>,
    at: At,
) -> Result<(), PickleError> {
    if items.len() % 2 != 0 {
        return Err(PickleError::OddItemCount {
            opcode: at.opcode(),
            offset: at.offset,
            count: items.len(),
        });
    }
    arena
        .reserve(dict, items.len())
        .map_err(|_| out_of_memory(at))?;
    while let (Some(key), Some(value)) = (items.next(), items.next()) {
        check_hashable(arena, key, at)?;
        arena.insert(dict, key, Some(value));
    }
    Ok(())
}

/// The error of an opcode whose value the machine could not give memory for.
pub(super) fn out_of_memory(at: At) -> PickleError {
    PickleError::OutOfMemory { offset: at.offset }
}

/// Adds `items` to the set or frozenset `set`.
pub(super) fn add_items(
    arena: &mut Arena,
    set: u32,
    items: impl ExactSizeIterator<Item = Slot>,
    at: At,
) -> Result<(), PickleError> {
    arena
        .reserve(set, items.len())
        .map_err(|_| out_of_memory(at))?;
    for item in items {
        check_hashable(arena, item, at)?;
        arena.insert(set, item, None);
    }
    Ok(())
}

/// A Python 2 `str`, decoded as Python 3's default `encoding='ASCII'` does.
pub(super) fn python2_string(bytes: &[u8], at: At) -> Result<Value, PickleError> {
    let text = std::str::from_utf8(bytes)
        .ok()
        .filter(|text| text.is_ascii())
        .ok_or_else(|| {
            at.bad_string(
                "a Python 2 str holds non-ASCII bytes, whose encoding the file does not \
                 say (Python 3 too refuses them unless told an encoding)",
            )
        })?;
    Ok(Value::Str(text.into()))
}
