//! Reading a pickle without building all of it: an [`Absorb`] is offered each item as
//! `APPEND` or `APPENDS` puts it into a list, and may take it (keeping what it needs in its
//! own compact form) instead of letting the arena hold it until the end. PyTorch's trace
//! entries are taken this way, millions of dicts that would otherwise each become a tree of
//! `Arc`s.
//!
//! Taking is safe only for an item nothing else can reach: a container held by no other
//! container and by at most one memo entry, which is cleared (a later `GET` of it fails) and
//! whose index the arena then uses again. The absorber may also take over lists only the
//! taken item held (a trace entry's frame list): their items are dropped and the list stays
//! as a marker that fails every later use but the absorber's own. Whatever the absorber
//! cannot represent it abandons, and the caller reads the file again without it: an absorbing
//! read either gives what the plain read would, or says it cannot.

use std::collections::TryReserveError;
use std::sync::Arc;

use super::super::Value;
use super::arena::{Arena, Kind, Slot, Unpacked};
use super::memo::Memo;

/// What an [`Absorb`] does with an item offered to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// The list keeps it, as a plain read would.
    Keep,
    /// The absorber took it: the list does not hold it. Allowed only for a free item.
    Take,
    /// The absorber cannot represent the file: the read stops, to be done again without it.
    Abandon,
}

/// Takes items out of a pickle as it is read; see the module.
pub(crate) trait Absorb {
    /// `item` is about to join the list `list`, which holds `held` items before it; `free`
    /// says whether nothing else can reach it (only then may it be taken). Lists to take over
    /// with it are pushed to `lists`: each must be a list held by `item` alone.
    fn offer(
        &mut self,
        view: View<'_>,
        list: u32,
        held: usize,
        item: Slot,
        free: bool,
        lists: &mut Vec<u32>,
    ) -> Offer;

    /// The pickle is read and `root` is its result, not yet frozen: whether what was taken
    /// can be placed (`false` abandons the read).
    fn finish(&mut self, view: View<'_>, root: Slot) -> bool;

    /// The items of `list`, a list it took over, which the result reaches after all: `None`
    /// fails the read.
    fn restore(&mut self, list: u32) -> Option<Vec<Slot>>;
}

/// A container's type and items, as an [`Absorb`] sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Container<'a> {
    /// Its index, the same for as long as it can be reached.
    pub id: u32,
    /// Its type ([`Kind::Absorbed`] for a list an absorber took over).
    pub kind: Kind,
    /// Its items; a dict's keys and values alternate.
    pub items: &'a [Slot],
    /// How many times a container holds it.
    pub holders: u32,
}

/// The values read so far, as an [`Absorb`] sees them.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    arena: &'a Arena,
}

impl<'a> View<'a> {
    /// The container `slot` names, if it is one.
    pub(crate) fn container(self, slot: Slot) -> Option<Container<'a>> {
        let id = slot.node_id()?;
        let (kind, items) = self.arena.node(id)?;
        Some(Container {
            id,
            kind,
            items,
            holders: self.arena.refs.get(id as usize).copied().unwrap_or(0),
        })
    }

    /// The container with index `id`, as [`container`](Self::container) gives it.
    pub(crate) fn container_by_id(self, id: u32) -> Option<Container<'a>> {
        self.container(Slot::node(id))
    }

    /// The int `slot` holds itself (every int of up to 61 bits), without looking further.
    pub(crate) fn small_int(self, slot: Slot) -> Option<i64> {
        match slot.unpack() {
            Unpacked::Int(int) => Some(int),
            _ => None,
        }
    }

    /// The scalar `slot` holds or names, if it is one (a `str` is shared, not copied).
    pub(crate) fn scalar(self, slot: Slot) -> Option<Value> {
        self.arena.scalar_value(slot)
    }

    /// The `str` `slot` names, with an index that is the same for every reference to the
    /// same string object.
    pub(crate) fn str(self, slot: Slot) -> Option<(u32, &'a Arc<str>)> {
        let index = slot.str_index()?;
        match self.arena.stored_scalar(slot)? {
            Value::Str(text) => Some((index, text)),
            _ => None,
        }
    }
}

/// An absorbing read's state beside the machine.
pub(super) struct Absorbing<'a> {
    absorber: &'a mut dyn Absorb,
    /// The absorber gave up: the machine stops at the next opcode.
    pub(super) abandoned: bool,
    /// The items of one append that the list keeps, reused.
    kept: Vec<Slot>,
    /// The lists the absorber takes over with an item, reused.
    lists: Vec<u32>,
}

impl<'a> Absorbing<'a> {
    pub(super) fn new(absorber: &'a mut dyn Absorb) -> Self {
        Absorbing {
            absorber,
            abandoned: false,
            kept: Vec::new(),
            lists: Vec::new(),
        }
    }

    /// Appends `items` to the list `list`, offering each to the absorber first.
    pub(super) fn append(
        &mut self,
        arena: &mut Arena,
        memo: &mut Memo,
        list: u32,
        items: impl Iterator<Item = Slot>,
    ) -> Result<(), TryReserveError> {
        let held = arena.node(list).map_or(0, |(_, items)| items.len());
        self.kept.clear();
        for item in items {
            if self.abandoned {
                break;
            }
            // A container nothing else holds, with the memo entry (if any) that holds it.
            let free = item
                .node_id()
                .and_then(|id| Some((id, arena.free_node(id)?)))
                .filter(|&(_, memo_index)| match memo_index {
                    Some(index) => memo.can_forget(index, item),
                    None => true,
                });
            self.lists.clear();
            let offer = self.absorber.offer(
                View { arena },
                list,
                held + self.kept.len(),
                item,
                free.is_some(),
                &mut self.lists,
            );
            match (offer, free) {
                (Offer::Keep, _) => {
                    self.kept.try_reserve(1)?;
                    self.kept.push(item);
                }
                (Offer::Take, Some((id, memo_index))) => self.take(arena, memo, id, memo_index),
                (Offer::Take | Offer::Abandon, _) => self.abandoned = true,
            }
        }
        arena.extend(list, self.kept.drain(..))
    }

    /// Lets go of the free container `id` the absorber took (held by the memo entry
    /// `memo_index`, if any), and of the lists it took over with it.
    fn take(&mut self, arena: &mut Arena, memo: &mut Memo, id: u32, memo_index: Option<u32>) {
        for &list in &self.lists {
            match arena.node(list) {
                Some((Kind::List, _)) if arena.refs.get(list as usize) == Some(&1) => {
                    arena.absorb(list)
                }
                Some((Kind::Absorbed, _)) => {}
                _ => {
                    debug_assert!(false, "the absorber took over a list {list} it may not");
                    self.abandoned = true;
                }
            }
        }
        if let Some(index) = memo_index {
            memo.forget(index);
        }
        arena.recycle(id);
    }

    /// The items of `list`, a list the absorber took over, from the absorber.
    pub(super) fn restore(&mut self, list: u32) -> Option<Vec<Slot>> {
        self.absorber.restore(list)
    }

    /// The end of the read, before freezing: whether the absorber can place what it took.
    pub(super) fn finish(&mut self, arena: &Arena, root: Slot) -> bool {
        !self.abandoned && self.absorber.finish(View { arena }, root)
    }
}
