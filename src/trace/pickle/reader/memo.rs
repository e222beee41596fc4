//! The memo: values a pickle stores by index (`PUT`, `MEMOIZE`) to push again later (`GET`),
//! which is how a file shares one object between many places.
//!
//! Writers number entries 0, 1, 2, ... so those live in a vector; an index past the end (which
//! only a hand-made file uses) goes to a map, so a huge `LONG_BINPUT` index allocates nothing
//! in proportion to it.

use std::collections::HashMap;

use super::arena::Slot;

/// The memo, bounded by a maximum number of entries.
#[derive(Default)]
pub(super) struct Memo {
    dense: Vec<Option<Slot>>,
    sparse: HashMap<u64, Slot>,
    len: usize,
}

impl Memo {
    /// Entries stored; `MEMOIZE` stores at this index, as CPython does.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The entry at `index`.
    pub(super) fn get(&self, index: u64) -> Option<Slot> {
        match usize::try_from(index) {
            Ok(i) if i < self.dense.len() => self.dense[i],
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get(&index).copied(),
        }
    }

    /// Stores `slot` at `index`, replacing any entry there. Returns `false`, storing nothing,
    /// when that would make more than `max_entries` entries.
    #[must_use]
    pub(super) fn put(&mut self, index: u64, slot: Slot, max_entries: usize) -> bool {
        // What writers do: the next index, with no sparse entry to move over.
        if usize::try_from(index).is_ok_and(|i| i == self.dense.len())
            && self.sparse.is_empty()
            && self.len < max_entries
        {
            self.dense.push(Some(slot));
            self.len += 1;
            return true;
        }
        let dense_index = usize::try_from(index)
            .ok()
            .filter(|&i| i <= self.dense.len());
        let is_new = match dense_index {
            Some(i) if i < self.dense.len() => self.dense[i].is_none(),
            _ => !self.sparse.contains_key(&index),
        };
        if is_new && self.len >= max_entries {
            return false;
        }
        match dense_index {
            Some(i) if i < self.dense.len() => self.dense[i] = Some(slot),
            Some(_) => {
                // The index just past the vector extends it; a sparse entry there moves over.
                self.sparse.remove(&index);
                self.dense.push(Some(slot));
            }
            None => {
                self.sparse.insert(index, slot);
            }
        }
        if is_new {
            self.len += 1;
        }
        true
    }
}
