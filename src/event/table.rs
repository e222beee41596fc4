//! The contexts of one allocator: (tag stack, call stack) pairs interned once and referenced
//! from its events, blocks and live allocations by [`ContextId`].
//!
//! Each allocator has its own table, so what one allocator records (a million distinct call
//! stacks with backtraces on) is freed with it and never grows another's. A table keeps at
//! most its [`max_contexts`](ContextTable::max_contexts) contexts
//! ([`DEFAULT_MAX_CONTEXTS`] unless made with another bound); past that, a new context is
//! recorded without its call stack (the tags alone, when that context is in the table) or as
//! none, and counted in [`dropped`](ContextTable::dropped).
//!
//! Gathering the context of a call without a call stack is a thread-local read while the
//! thread's tag stack is unchanged and the thread last asked the same table.

use super::context::{Context, Frame};
use super::entry::ContextId;
use super::stacks::{self, Symbols};
use super::tags::{self, TagStackId};
use parking_lot::Mutex;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The most contexts a table keeps unless made with another bound: 65,536.
pub const DEFAULT_MAX_CONTEXTS: usize = 1 << 16;

/// Id of the empty context (no tags, no frames), interned first in every table.
const EMPTY: ContextId = ContextId(1);

/// A context's call stack: captured (return addresses, symbolized when read) or given as
/// frames (empty: none).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Stack {
    Captured(Arc<[usize]>),
    Given(Arc<[Frame]>),
}

impl Stack {
    fn none() -> Stack {
        Stack::Given(Arc::from(Vec::new()))
    }
}

/// One context: its tag stack and its call stack.
type Key = (TagStackId, Stack);

#[derive(Default)]
struct Entries {
    /// Context `n` is `keys[n - 1]`.
    keys: Vec<Key>,
    ids: HashMap<Key, ContextId>,
}

/// An allocator's interned contexts (module docs).
pub struct ContextTable {
    entries: Mutex<Entries>,
    /// Captured stacks' addresses, symbolized once each, when a context is read.
    symbols: Mutex<Symbols>,
    max_contexts: usize,
    dropped: AtomicU64,
    /// Tells tables apart in the threads' caches; never reused.
    serial: u64,
}

thread_local! {
    /// The table, tag stack and context this thread gathered last without a call stack.
    static LAST: Cell<(u64, TagStackId, ContextId)> =
        const { Cell::new((0, TagStackId::EMPTY, ContextId::NONE)) };
}

impl Default for ContextTable {
    fn default() -> Self {
        ContextTable::with_max_contexts(DEFAULT_MAX_CONTEXTS)
    }
}

impl std::fmt::Debug for ContextTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextTable")
            .field("len", &self.len())
            .field("max_contexts", &self.max_contexts)
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl ContextTable {
    /// A table that keeps at most `max_contexts` contexts (at least 1: the empty one).
    pub fn with_max_contexts(max_contexts: usize) -> ContextTable {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        let empty: Key = (TagStackId::EMPTY, Stack::none());
        ContextTable {
            entries: Mutex::new(Entries {
                keys: vec![empty.clone()],
                ids: HashMap::from([(empty, EMPTY)]),
            }),
            symbols: Mutex::new(Symbols::default()),
            max_contexts: max_contexts.max(1),
            dropped: AtomicU64::new(0),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The most contexts this table keeps.
    pub fn max_contexts(&self) -> usize {
        self.max_contexts
    }

    /// Contexts in the table, the empty one included.
    pub fn len(&self) -> usize {
        self.entries.lock().keys.len()
    }

    /// Whether the table holds only the empty context.
    pub fn is_empty(&self) -> bool {
        self.len() == 1
    }

    /// How many contexts were recorded without their call stack, or as none, because the
    /// table was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The context of the calling thread's tag stack with `frames` as its call stack
    /// (innermost first; empty for none), interned.
    ///
    /// ```
    /// use blockpool::event::{ContextTable, Frame};
    ///
    /// let table = ContextTable::with_max_contexts(3);
    /// let frame = |line| vec![Frame { name: "f".into(), filename: "a.rs".into(), line }];
    /// let first = table.intern(frame(1));
    /// assert_eq!(table.intern(frame(1)), first, "interned once");
    /// assert_eq!(table.get(first).unwrap().frames[0].line, 1);
    /// let second = table.intern(frame(2));
    /// // Full (the empty context, and two): a third is recorded without its call stack.
    /// let third = table.intern(frame(3));
    /// assert!(table.get(third).unwrap().frames.is_empty());
    /// assert_eq!((table.len(), table.dropped()), (3, 1));
    /// # let _ = second;
    /// ```
    pub fn intern(&self, frames: Vec<Frame>) -> ContextId {
        self.intern_key((tags::current(), Stack::Given(Arc::from(frames))))
    }

    fn intern_key(&self, key: Key) -> ContextId {
        let mut entries = self.entries.lock();
        if let Some(&id) = entries.ids.get(&key) {
            return id;
        }
        if entries.keys.len() < self.max_contexts {
            if let Ok(id) = u32::try_from(entries.keys.len() + 1) {
                let id = ContextId(id);
                entries.keys.push(key.clone());
                entries.ids.insert(key, id);
                return id;
            }
        }
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let tags_only: Key = (key.0, Stack::none());
        entries
            .ids
            .get(&tags_only)
            .copied()
            .unwrap_or(ContextId::NONE)
    }

    /// The context of a call on this thread: its tag stack, with the call stack when
    /// `frames`. Without frames this is a thread-local read while the thread's tag stack is
    /// unchanged and it last asked this table.
    pub(crate) fn current(&self, frames: bool) -> ContextId {
        let stack = tags::current();
        if frames {
            return self.intern_key((stack, Stack::Captured(Arc::from(stacks::capture()))));
        }
        let (serial, last_stack, last_id) = LAST.get();
        if serial == self.serial && last_stack == stack {
            return last_id;
        }
        let id = if stack == TagStackId::EMPTY {
            EMPTY
        } else {
            self.intern_key((stack, Stack::none()))
        };
        LAST.set((self.serial, stack, id));
        id
    }

    /// The context interned as `id`, if any; a captured call stack is symbolized here (each
    /// address once per table).
    pub fn get(&self, id: ContextId) -> Option<Context> {
        let index = (id.0 as usize).checked_sub(1)?;
        let (tag_stack, stack) = self.entries.lock().keys.get(index)?.clone();
        let frames = match stack {
            Stack::Captured(addresses) => self.symbols.lock().frames(&addresses),
            Stack::Given(frames) => frames.to_vec(),
        };
        Some(Context {
            tags: tags::tags_of(tag_stack),
            frames,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::annotate;

    #[test]
    fn the_same_tag_stack_interns_to_the_same_id_in_each_table() {
        let table = ContextTable::default();
        let other = ContextTable::default();
        let outer = annotate("table-test-outer");
        let a = table.current(false);
        assert_eq!(table.current(false), a, "an unchanged stack reuses its id");
        let in_other = other.current(false);
        let inner = annotate("table-test-inner");
        let c = table.current(false);
        assert_ne!(a, c, "a deeper stack is another context");
        drop(inner);
        assert_eq!(
            table.current(false),
            a,
            "popping returns to the outer stack's id"
        );
        assert_eq!(other.current(false), in_other, "each table has its own ids");
        drop(outer);
        assert_eq!(table.current(false), EMPTY, "no tags is the empty context");
        let context = table.get(c).expect("an interned id resolves");
        assert_eq!(
            context.tags,
            [Arc::from("table-test-outer"), Arc::from("table-test-inner")]
        );
        assert_eq!(table.get(ContextId::NONE), None);
        assert_eq!(table.get(ContextId(999)), None);
    }

    #[test]
    fn a_full_table_keeps_the_tags_and_counts_what_it_dropped() {
        let table = ContextTable::with_max_contexts(2);
        let _tag = annotate("table-test-full");
        let tags_only = table.current(false);
        assert_eq!(table.len(), 2);
        let frame = vec![Frame {
            name: "f".into(),
            filename: "a.rs".into(),
            line: 3,
        }];
        assert_eq!(table.intern(frame), tags_only, "dropped to the tags alone");
        assert_eq!(table.dropped(), 1);
        drop(_tag);
        let _other = annotate("table-test-full-other");
        assert_eq!(
            table.current(false),
            ContextId::NONE,
            "nothing left to fall back to"
        );
        assert_eq!((table.len(), table.dropped()), (2, 2));
    }

    #[test]
    fn captured_frames_start_outside_blockpool() {
        let table = ContextTable::default();
        let context = table.get(table.current(true)).expect("interned");
        assert!(
            context
                .frames
                .first()
                .is_some_and(|f| !f.name.starts_with("blockpool::")),
            "the capture machinery and blockpool's own frames are dropped: {:?}",
            context.frames
        );
    }
}
