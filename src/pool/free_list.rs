//! Free lists: cached blocks of one pool, per stream, ordered by (size, address), so that the
//! first entry at or after `(size, 0)` on a stream is the best fit there.
//!
//! The order is exact, but finding a place in it is made cheap with a two-level segregated
//! index (as in TLSF): sizes, counted in 512-byte units, fall into classes (exact below 32 KiB,
//! then 64 classes per power of two), each class holds its blocks sorted by (size, address),
//! and a bitmap over the classes finds the next non-empty one in a few instructions. Classes
//! partition the sizes in order, so the best fit is the first entry at or after the request in
//! its own class or, failing that, the first entry of the next non-empty class: exactly the
//! first entry of PyTorch's `std::set` at or after `(stream, size, 0)`.

use super::block::BlockId;
use crate::backend::StreamId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The two pools of PyTorch's allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

/// A cached block as the free list knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FreeKey {
    pub stream: StreamId,
    pub size: usize,
    pub addr: u64,
    pub id: BlockId,
}

#[inline]
fn pack(size: usize, addr: u64) -> u128 {
    ((size as u128) << 64) | addr as u128
}

#[inline]
fn unpack(stream: StreamId, key: u128, id: BlockId) -> FreeKey {
    FreeKey {
        stream,
        size: (key >> 64) as usize,
        addr: key as u64,
        id,
    }
}

/// Subdivisions of each power of two, as a shift (64).
const SUBDIVISION_BITS: u32 = 6;
/// Classes in all: sizes up to 2^64 bytes, i.e. 2^55 units, need fewer than 64 * 64.
const CLASSES: usize = 64 * 64;

/// The class of a size: one class per 512-byte unit up to 64 units, then 64 classes per power
/// of two. Monotonic: a larger size never falls in a smaller class. Counted from `units - 1`
/// so that a power of two shares its class with the sizes just below it: a 2 MiB segment and
/// what is left of it after a small split stay in one class, and re-keying is cheap.
#[inline]
fn class_of(size: usize) -> usize {
    let units = ((size >> 9) as u64).saturating_sub(1);
    if units < (1 << SUBDIVISION_BITS) {
        return units as usize;
    }
    let log = 63 - units.leading_zeros();
    let sub = (units >> (log - SUBDIVISION_BITS)) & ((1 << SUBDIVISION_BITS) - 1);
    (((log - SUBDIVISION_BITS + 1) << SUBDIVISION_BITS) as u64 + sub) as usize
}

/// Blocks of one class, sorted by packed (size, address). Short classes are a sorted vector;
/// a class that grows long (many equal-size holes) becomes a B-tree.
#[derive(Debug)]
enum Class {
    Short(Vec<(u128, BlockId)>),
    Long(BTreeMap<u128, BlockId>),
}

const SHORT_CLASS_MAX: usize = 64;

impl Default for Class {
    fn default() -> Self {
        Class::Short(Vec::new())
    }
}

impl Class {
    fn insert(&mut self, key: u128, id: BlockId) -> bool {
        match self {
            Class::Short(v) => match v.binary_search_by_key(&key, |e| e.0) {
                Ok(_) => false,
                Err(at) => {
                    v.insert(at, (key, id));
                    if v.len() > SHORT_CLASS_MAX {
                        *self = Class::Long(v.drain(..).collect());
                    }
                    true
                }
            },
            Class::Long(m) => m.insert(key, id).is_none(),
        }
    }

    fn remove(&mut self, key: u128) -> bool {
        match self {
            Class::Short(v) => match v.binary_search_by_key(&key, |e| e.0) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            Class::Long(m) => {
                let removed = m.remove(&key).is_some();
                if m.is_empty() {
                    *self = Class::default();
                }
                removed
            }
        }
    }

    /// Replaces `old` by `new` (of the same class) in place, keeping the order.
    #[inline]
    fn replace(&mut self, old: u128, new: u128, id: BlockId) -> bool {
        match self {
            // The common case: a class holding just the block being re-keyed.
            Class::Short(v) if v.len() == 1 => {
                let hit = v[0].0 == old;
                if hit {
                    v[0] = (new, id);
                }
                hit
            }
            Class::Short(v) => {
                let Ok(mut at) = v.binary_search_by_key(&old, |e| e.0) else {
                    return false;
                };
                v[at] = (new, id);
                while at > 0 && v[at - 1].0 > new {
                    v.swap(at - 1, at);
                    at -= 1;
                }
                while at + 1 < v.len() && v[at + 1].0 < new {
                    v.swap(at, at + 1);
                    at += 1;
                }
                true
            }
            Class::Long(m) => m.remove(&old).is_some() && m.insert(new, id).is_none(),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Class::Short(v) => v.is_empty(),
            Class::Long(m) => m.is_empty(),
        }
    }

    fn get(&self, key: u128) -> Option<BlockId> {
        match self {
            Class::Short(v) => v.binary_search_by_key(&key, |e| e.0).ok().map(|at| v[at].1),
            Class::Long(m) => m.get(&key).copied(),
        }
    }

    /// First entry at or after `key`.
    #[inline]
    fn ceiling(&self, key: u128) -> Option<(u128, BlockId)> {
        match self {
            Class::Short(v) => v.get(v.partition_point(|e| e.0 < key)).copied(),
            Class::Long(m) => m.range(key..).next().map(|(&k, &id)| (k, id)),
        }
    }

    /// The smallest entry.
    #[inline]
    fn first(&self) -> Option<(u128, BlockId)> {
        match self {
            Class::Short(v) => v.first().copied(),
            Class::Long(m) => m.first_key_value().map(|(&k, &id)| (k, id)),
        }
    }

    /// Last entry before `key`.
    fn floor_below(&self, key: u128) -> Option<(u128, BlockId)> {
        match self {
            Class::Short(v) => {
                let at = v.partition_point(|e| e.0 < key);
                at.checked_sub(1).map(|i| v[i])
            }
            Class::Long(m) => m.range(..key).next_back().map(|(&k, &id)| (k, id)),
        }
    }

    fn entries(&self) -> Box<dyn Iterator<Item = (u128, BlockId)> + '_> {
        match self {
            Class::Short(v) => Box::new(v.iter().copied()),
            Class::Long(m) => Box::new(m.iter().map(|(&k, &id)| (k, id))),
        }
    }
}

/// The cached blocks of one stream in one pool.
#[derive(Debug)]
struct StreamList {
    stream: StreamId,
    /// Blocks cached for this stream.
    len: usize,
    /// The class of `classes[0]`.
    base: usize,
    /// The classes from `base` on, indexed by class less `base`; grown on demand either way,
    /// so a stream that caches blocks of a few nearby sizes holds a few classes, not one for
    /// every size below them (a 20 MiB block alone would otherwise take 673).
    classes: Vec<Class>,
    /// Bit c set when class c is non-empty.
    words: [u64; CLASSES / 64],
    /// Bit w set when `words[w]` is non-zero.
    summary: u64,
}

impl StreamList {
    fn new(stream: StreamId) -> Self {
        StreamList {
            stream,
            len: 0,
            base: 0,
            classes: Vec::new(),
            words: [0; CLASSES / 64],
            summary: 0,
        }
    }

    fn mark(&mut self, class: usize, non_empty: bool) {
        let (word, bit) = (class / 64, class % 64);
        if non_empty {
            self.words[word] |= 1 << bit;
            self.summary |= 1 << word;
        } else {
            self.words[word] &= !(1 << bit);
            if self.words[word] == 0 {
                self.summary &= !(1 << word);
            }
        }
    }

    /// Whether class `class` holds any block.
    #[inline]
    fn has(&self, class: usize) -> bool {
        self.words[class / 64] & (1 << (class % 64)) != 0
    }

    /// The lowest non-empty class after `class`.
    #[inline]
    fn next_class(&self, class: usize) -> Option<usize> {
        let (word, bit) = (class / 64, class % 64);
        let above = if bit == 63 {
            0
        } else {
            self.words[word] & (!0u64 << (bit + 1))
        };
        if above != 0 {
            return Some(word * 64 + above.trailing_zeros() as usize);
        }
        let words_above = if word == 63 {
            0
        } else {
            self.summary & (!0u64 << (word + 1))
        };
        if words_above == 0 {
            return None;
        }
        let w = words_above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    /// The highest non-empty class before `class`.
    fn previous_class(&self, class: usize) -> Option<usize> {
        let (word, bit) = (class / 64, class % 64);
        let below = self.words[word] & ((1u64 << bit) - 1);
        if below != 0 {
            return Some(word * 64 + 63 - below.leading_zeros() as usize);
        }
        let words_below = self.summary & ((1u64 << word) - 1);
        if words_below == 0 {
            return None;
        }
        let w = 63 - words_below.leading_zeros() as usize;
        Some(w * 64 + 63 - self.words[w].leading_zeros() as usize)
    }

    #[inline]
    fn class(&self, class: usize) -> Option<&Class> {
        // Below `base` the index wraps to past the end.
        self.classes.get(class.wrapping_sub(self.base))
    }

    #[inline]
    fn class_mut(&mut self, class: usize) -> Option<&mut Class> {
        self.classes.get_mut(class.wrapping_sub(self.base))
    }

    /// Class `class`, made (with the empty ones between it and the others) when it is not
    /// held yet.
    fn class_made(&mut self, class: usize) -> &mut Class {
        // A list holding nothing (a spare given to a new stream among them) starts over at
        // this class, whatever classes it held before.
        if self.len == 0 {
            self.classes.clear();
        }
        if self.classes.is_empty() {
            self.base = class;
        } else if class < self.base {
            let missing = self.base - class;
            self.classes
                .splice(0..0, std::iter::repeat_with(Class::default).take(missing));
            self.base = class;
        }
        let at = class - self.base;
        if self.classes.len() <= at {
            self.classes.resize_with(at + 1, Class::default);
        }
        &mut self.classes[at]
    }
}

/// How many emptied per-stream lists are kept for reuse; beyond them, lists with nothing cached
/// are dropped ([`FreeList::emptied`]), so the state of a stream is released with its cache.
const MAX_IDLE_STREAM_LISTS: usize = 8;

/// The cached blocks of one pool.
#[derive(Debug, Default)]
pub(crate) struct FreeList {
    /// Per stream, sorted by stream: found by binary search, in time logarithmic in the
    /// streams that have blocks cached, however many have existed. Boxed, so that making or
    /// dropping a stream's list moves only the small entries.
    streams: Vec<(StreamId, Box<StreamList>)>,
    /// Lists in `streams` with nothing cached, kept for reuse (more than
    /// [`MAX_IDLE_STREAM_LISTS`] only while they are fewer than half of all lists).
    idle: usize,
    /// Emptied lists taken out of `streams`, at most [`MAX_IDLE_STREAM_LISTS`], given to the
    /// next new stream: a list grows its size classes on demand, and a stream per call would
    /// otherwise build and drop them for every call. Boxed as in `streams`, so a spare moves
    /// there without a new allocation.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<StreamList>>,
    len: usize,
    /// Number of best-fit lookups so far; the clock of garbage collection ages.
    lookups: u64,
}

impl FreeList {
    /// Best-fit lookups counted so far: the clock that garbage collection ages blocks by.
    #[inline]
    pub(crate) fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Counts one best-fit lookup (while garbage collection is on).
    #[inline]
    pub(crate) fn count_lookup(&mut self) {
        self.lookups += 1;
    }

    /// Where `stream`'s list is, or would go.
    #[inline]
    fn find(&self, stream: StreamId) -> Result<usize, usize> {
        self.streams.binary_search_by_key(&stream, |entry| entry.0)
    }

    #[inline]
    fn stream(&self, stream: StreamId) -> Option<&StreamList> {
        self.find(stream).ok().map(|at| &*self.streams[at].1)
    }

    /// The list of `stream`, made when it has none; an idle one is no longer counted as idle
    /// (the caller caches a block in it).
    #[inline]
    fn stream_mut(&mut self, stream: StreamId) -> &mut StreamList {
        let at = match self.find(stream) {
            Ok(at) => {
                if self.streams[at].1.len == 0 {
                    self.idle -= 1;
                }
                at
            }
            Err(at) => {
                let list = match self.spare.pop() {
                    Some(mut list) => {
                        list.stream = stream;
                        list
                    }
                    None => Box::new(StreamList::new(stream)),
                };
                self.streams.insert(at, (stream, list));
                at
            }
        };
        &mut self.streams[at].1
    }

    /// Notes that a list has just emptied. Idle lists stay for reuse; once they are more than
    /// [`MAX_IDLE_STREAM_LISTS`] and at least half of all lists, all but that many leave
    /// `streams` in one pass (that many more are kept as spares for new streams, the rest
    /// dropped), so a stream with nothing cached leaves no state behind for long, and
    /// emptying many streams at once (`empty_cache` after a stream per call) costs time linear
    /// in them, not quadratic.
    fn emptied(&mut self) {
        self.idle += 1;
        if self.idle > MAX_IDLE_STREAM_LISTS && self.idle * 2 > self.streams.len() {
            let mut keep = MAX_IDLE_STREAM_LISTS;
            let capacity = self.streams.len();
            let lists = std::mem::replace(&mut self.streams, Vec::with_capacity(capacity));
            for (stream, list) in lists {
                if list.len > 0 || keep > 0 {
                    keep -= usize::from(list.len == 0);
                    self.streams.push((stream, list));
                } else if self.spare.len() < MAX_IDLE_STREAM_LISTS {
                    self.spare.push(list);
                }
            }
            self.idle = MAX_IDLE_STREAM_LISTS;
        }
    }

    pub fn insert(&mut self, key: FreeKey) {
        let class = class_of(key.size);
        let list = self.stream_mut(key.stream);
        let inserted = list
            .class_made(class)
            .insert(pack(key.size, key.addr), key.id);
        debug_assert!(inserted, "block cached twice");
        list.mark(class, true);
        list.len += usize::from(inserted);
        self.len += usize::from(inserted);
    }

    pub fn remove(&mut self, key: &FreeKey) -> bool {
        let class = class_of(key.size);
        let Ok(at) = self.find(key.stream) else {
            return false;
        };
        let list = &mut self.streams[at].1;
        let Some(entries) = list.class_mut(class) else {
            return false;
        };
        let removed = entries.remove(pack(key.size, key.addr));
        if entries.is_empty() {
            list.mark(class, false);
        }
        list.len -= usize::from(removed);
        self.len -= usize::from(removed);
        if removed && list.len == 0 {
            self.emptied();
        }
        removed
    }

    /// Replaces the cached block `old` by `new` (same stream), as when a cached block is split
    /// or merged: in place when both fall in one class. False when `old` is not cached.
    pub fn replace(&mut self, old: &FreeKey, new: FreeKey) -> bool {
        debug_assert_eq!(old.stream, new.stream);
        let class = class_of(old.size);
        if class != class_of(new.size) {
            let removed = self.remove(old);
            if removed {
                self.insert(new);
            }
            return removed;
        }
        let Ok(at) = self.find(old.stream) else {
            return false;
        };
        let list = &mut self.streams[at].1;
        let Some(entries) = list.class_mut(class) else {
            return false;
        };
        entries.replace(pack(old.size, old.addr), pack(new.size, new.addr), new.id)
    }

    /// The smallest cached block on `stream` of at least `size` bytes (lowest address first).
    #[inline]
    pub fn best_fit(&self, stream: StreamId, size: usize) -> Option<FreeKey> {
        self.first_at_or_after(stream, pack(size, 0))
    }

    /// The best fit for `size` bytes among the blocks cached for streams other than `stream`
    /// that `usable` accepts: the smallest, then the lowest address (then the lowest stream).
    /// Time grows with the streams that have blocks cached, and with the blocks `usable`
    /// refuses; only a request that missed its own stream's cache asks.
    pub fn best_fit_elsewhere(
        &self,
        stream: StreamId,
        size: usize,
        mut usable: impl FnMut(&FreeKey) -> bool,
    ) -> Option<FreeKey> {
        let mut best: Option<FreeKey> = None;
        for (other, list) in &self.streams {
            if *other == stream || list.len == 0 {
                continue;
            }
            let mut candidate = self.best_fit(*other, size);
            while let Some(key) = candidate {
                if best.is_some_and(|b| (b.size, b.addr) <= (key.size, key.addr)) {
                    break;
                }
                if usable(&key) {
                    best = Some(key);
                    break;
                }
                candidate = self.next_after(&key);
            }
        }
        best
    }

    /// The cached block right after `key` on its stream, in (size, address) order.
    pub fn next_after(&self, key: &FreeKey) -> Option<FreeKey> {
        self.first_at_or_after(key.stream, pack(key.size, key.addr).checked_add(1)?)
    }

    /// The first cached block on `stream` at or after the packed (size, address) `from`: in
    /// its own class, or else the first of the next non-empty class.
    #[inline]
    fn first_at_or_after(&self, stream: StreamId, from: u128) -> Option<FreeKey> {
        let list = self.stream(stream)?;
        let class = class_of((from >> 64) as usize);
        if list.has(class) {
            if let Some((key, id)) = list.class(class).and_then(|c| c.ceiling(from)) {
                return Some(unpack(stream, key, id));
            }
        }
        let next = list.next_class(class)?;
        let (key, id) = list.class(next)?.first()?;
        Some(unpack(stream, key, id))
    }

    /// The largest cached block on `stream` smaller than `size` bytes.
    pub fn largest_below(&self, stream: StreamId, size: usize) -> Option<FreeKey> {
        self.last_before(stream, pack(size, 0))
    }

    /// The cached block right before `key` on its stream, in (size, address) order.
    pub fn before(&self, key: &FreeKey) -> Option<FreeKey> {
        self.last_before(key.stream, pack(key.size, key.addr))
    }

    /// The last cached block on `stream` before the packed (size, address) `to`: in its own
    /// class, or else the last of the previous non-empty class.
    fn last_before(&self, stream: StreamId, to: u128) -> Option<FreeKey> {
        let list = self.stream(stream)?;
        let class = class_of((to >> 64) as usize);
        if let Some((key, id)) = list.class(class).and_then(|c| c.floor_below(to)) {
            return Some(unpack(stream, key, id));
        }
        let previous = list.previous_class(class)?;
        let (key, id) = list.class(previous)?.floor_below(u128::MAX)?;
        Some(unpack(stream, key, id))
    }

    /// Every cached block in (stream, size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.streams.iter().flat_map(|(_, list)| {
            list.classes
                .iter()
                .flat_map(|class| class.entries())
                .map(move |(key, id)| unpack(list.stream, key, id))
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn contains(&self, key: &FreeKey) -> bool {
        self.stream(key.stream)
            .and_then(|list| list.class(class_of(key.size)))
            .and_then(|class| class.get(pack(key.size, key.addr)))
            .is_some_and(|id| id == key.id)
    }
}

#[cfg(test)]
mod tests;
