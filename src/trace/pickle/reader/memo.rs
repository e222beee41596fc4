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
    /// A bit per dense index [`forget`](Self::forget) cleared: the entry still counts, as
    /// in CPython, but a `GET` of it fails.
    forgotten: Vec<u64>,
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
            Some(i) if i < self.dense.len() => self.dense[i].is_none() && !self.was_forgotten(i),
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

    /// Whether [`forget`](Self::forget) can clear the entry at `index`: it holds `slot`, in
    /// the dense entries every writer uses.
    pub(super) fn can_forget(&self, index: u32, slot: Slot) -> bool {
        self.dense.get(index as usize) == Some(&Some(slot))
    }

    /// Clears the entry at `index`, which [`can_forget`](Self::can_forget), so a `GET` of it
    /// fails. It still counts as an entry, so `MEMOIZE` numbers as CPython does, where the
    /// entry is still there.
    pub(super) fn forget(&mut self, index: u32) {
        let i = index as usize;
        let Some(entry) = self.dense.get_mut(i) else {
            return;
        };
        *entry = None;
        let word = i / 64;
        if self.forgotten.len() <= word {
            // Without memory for the bit, only a hand-made file that stores at this index
            // again (PUT, not MEMOIZE) would number later entries differently.
            if self
                .forgotten
                .try_reserve(word + 1 - self.forgotten.len())
                .is_err()
            {
                return;
            }
            self.forgotten.resize(word + 1, 0);
        }
        self.forgotten[word] |= 1 << (i % 64);
    }

    /// Whether the dense entry `i` was forgotten (and so still counts).
    fn was_forgotten(&self, i: usize) -> bool {
        self.forgotten
            .get(i / 64)
            .is_some_and(|word| word & (1 << (i % 64)) != 0)
    }
}
