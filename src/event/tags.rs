//! Annotation tag stacks, interned once per process as a tree: a stack is its parent stack
//! plus one tag, so pushing a tag interns one (parent, tag) pair, whatever the depth, and a
//! stack is kept once however many contexts and events refer to it.
//!
//! Each thread keeps its tags with the id of the stack up to each of them, so reading the
//! current stack's id is a thread-local read and popping needs no lookup.
//!
//! Bounded, so annotations cannot make a process grow without limit:
//! - a tag longer than [`MAX_TAG_BYTES`] is cut (at a character boundary) and ends with `…`;
//! - tags pushed deeper than [`MAX_TAG_DEPTH`] stay on the thread's stack (their guards work
//!   as usual) but not in contexts, which keep the outermost [`MAX_TAG_DEPTH`];
//! - past [`MAX_TAG_STACKS`] distinct stacks, a new one is recorded as its parent, and
//!   counted in [`dropped_tag_stacks`].

use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The longest tag kept, in bytes: longer ones are cut and end with `…`.
pub const MAX_TAG_BYTES: usize = 4096;

/// The most tags of a stack that contexts keep (the outermost ones).
pub const MAX_TAG_DEPTH: usize = 256;

/// The most distinct tag stacks a process keeps; past it a new stack is recorded as its
/// parent and counted in [`dropped_tag_stacks`].
pub const MAX_TAG_STACKS: usize = 1 << 20;

/// A tag stack of the process: 0 is the empty stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct TagStackId(u32);

impl TagStackId {
    /// The empty stack.
    pub(crate) const EMPTY: TagStackId = TagStackId(0);
}

/// One interned stack: its parent and its innermost tag.
struct Node {
    parent: TagStackId,
    tag: Arc<str>,
}

/// The process's tag stacks: stack `n` is `nodes[n - 1]`.
#[derive(Default)]
struct Table {
    nodes: Vec<Node>,
    ids: HashMap<(TagStackId, Arc<str>), TagStackId>,
}

fn table() -> &'static Mutex<Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many tag stacks were recorded as their parent because [`MAX_TAG_STACKS`] were
/// interned already, in this process.
pub fn dropped_tag_stacks() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The stack `parent` plus `tag`, interned.
fn child(parent: TagStackId, tag: &Arc<str>) -> TagStackId {
    let mut table = table().lock();
    if let Some(&id) = table.ids.get(&(parent, Arc::clone(tag))) {
        return id;
    }
    let id = match u32::try_from(table.nodes.len() + 1) {
        Ok(id) if table.nodes.len() < MAX_TAG_STACKS => TagStackId(id),
        _ => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return parent;
        }
    };
    table.nodes.push(Node {
        parent,
        tag: Arc::clone(tag),
    });
    table.ids.insert((parent, Arc::clone(tag)), id);
    id
}

/// The tags of stack `id`, outermost first.
pub(crate) fn tags_of(id: TagStackId) -> Vec<Arc<str>> {
    let table = table().lock();
    let mut tags = Vec::new();
    let mut at = id;
    while let Some(node) = (at.0 as usize)
        .checked_sub(1)
        .and_then(|i| table.nodes.get(i))
    {
        tags.push(Arc::clone(&node.tag));
        at = node.parent;
    }
    tags.reverse();
    tags
}

/// `tag`, cut to [`MAX_TAG_BYTES`] at a character boundary with `…` at the end when longer.
pub(crate) fn bounded(tag: &str) -> Arc<str> {
    if tag.len() <= MAX_TAG_BYTES {
        return Arc::from(tag);
    }
    const ELLIPSIS: &str = "…";
    let mut end = MAX_TAG_BYTES - ELLIPSIS.len();
    while !tag.is_char_boundary(end) {
        end -= 1;
    }
    Arc::from(format!("{}{ELLIPSIS}", &tag[..end]))
}

thread_local! {
    /// This thread's tags, outermost first, each with the stack up to and including it.
    static STACK: RefCell<Vec<(Arc<str>, TagStackId)>> = const { RefCell::new(Vec::new()) };
}

/// The id of the calling thread's tag stack: a thread-local read.
pub(crate) fn current() -> TagStackId {
    STACK.with_borrow(|stack| stack.last().map_or(TagStackId::EMPTY, |(_, id)| *id))
}

/// Pushes `tag` on the calling thread's stack; the depth before the push.
pub(crate) fn push(tag: &str) -> usize {
    let tag = bounded(tag);
    STACK.with_borrow_mut(|stack| {
        let depth = stack.len();
        let parent = stack.last().map_or(TagStackId::EMPTY, |(_, id)| *id);
        let id = if depth < MAX_TAG_DEPTH {
            child(parent, &tag)
        } else {
            parent
        };
        stack.push((tag, id));
        depth
    })
}

/// Pops the calling thread's stack back to `depth` tags; whether anything was popped. Safe to
/// call while the thread is being torn down.
pub(crate) fn truncate(depth: usize) -> bool {
    STACK
        .try_with(|stack| {
            let mut stack = stack.borrow_mut();
            let changed = stack.len() > depth;
            stack.truncate(depth);
            changed
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_its_parent_plus_one_tag_interned_once() {
        let base = push("tags-test-outer");
        let outer = current();
        push("tags-test-inner");
        let inner = current();
        assert_ne!(outer, inner);
        assert_eq!(
            tags_of(inner),
            [Arc::from("tags-test-outer"), Arc::from("tags-test-inner")]
        );
        truncate(base + 1);
        assert_eq!(current(), outer, "popping returns to the parent's id");
        push("tags-test-inner");
        assert_eq!(current(), inner, "the same stack again is the same id");
        truncate(base);
        assert_eq!(current(), TagStackId::EMPTY);
    }

    #[test]
    fn long_tags_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_TAG_BYTES);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_TAG_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert!(cut.trim_end_matches('…').chars().all(|c| c == 'é'));
        assert_eq!(&*bounded("short"), "short");
    }

    #[test]
    fn tags_past_the_depth_limit_stay_on_the_stack_but_not_in_contexts() {
        assert_eq!(
            STACK.with_borrow(Vec::len),
            0,
            "each test has a thread of its own"
        );
        for i in 0..MAX_TAG_DEPTH + 10 {
            push(&format!("deep-{i}"));
        }
        let tags = tags_of(current());
        assert_eq!(tags.len(), MAX_TAG_DEPTH);
        assert_eq!(
            &*tags[MAX_TAG_DEPTH - 1],
            format!("deep-{}", MAX_TAG_DEPTH - 1)
        );
        assert_eq!(STACK.with_borrow(Vec::len), MAX_TAG_DEPTH + 10);
        assert!(truncate(0));
        assert_eq!(current(), TagStackId::EMPTY);
    }
}
