//! [`Contexts`]: a snapshot's table of contexts (tag stacks and call stacks), each stored once
//! and named by a [`ContextId`] that stays valid when the snapshot is written and read back.

use crate::event::{Context, ContextId, Frame};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// The contexts of a snapshot, numbered from 1: `ContextId(n)` is the `n`th added. Adding a
/// context equal to one already present returns the existing id. Cloning is cheap: clones
/// share the table until one of them adds a context.
#[derive(Clone, Default)]
pub struct Contexts {
    table: Arc<ContextTable>,
}

#[derive(Clone, Default)]
struct ContextTable {
    list: Vec<Arc<Context>>,
    ids: HashMap<Arc<Context>, ContextId>,
}

impl Contexts {
    /// No contexts.
    pub fn new() -> Contexts {
        Contexts::default()
    }

    /// The id of `context`, adding it if it is new. Past `u32::MAX` contexts, new ones get
    /// [`ContextId::NONE`].
    pub fn intern(&mut self, context: Context) -> ContextId {
        if let Some(&id) = self.table.ids.get(&context) {
            return id;
        }
        let Ok(id) = u32::try_from(self.table.list.len() + 1) else {
            return ContextId::NONE;
        };
        let table = Arc::make_mut(&mut self.table);
        let context = Arc::new(context);
        table.list.push(Arc::clone(&context));
        table.ids.insert(context, ContextId(id));
        ContextId(id)
    }

    /// The context `id` names; `None` for [`ContextId::NONE`] and ids out of range.
    pub fn get(&self, id: ContextId) -> Option<&Context> {
        let index = (id.0 as usize).checked_sub(1)?;
        self.table.list.get(index).map(|c| &**c)
    }

    /// How many contexts there are.
    pub fn len(&self) -> usize {
        self.table.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.table.list.is_empty()
    }

    /// Every context with its id, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (ContextId, &Context)> + '_ {
        self.table
            .list
            .iter()
            .enumerate()
            .map(|(i, c)| (ContextId(i as u32 + 1), &**c))
    }

    /// Whether `id` is [`ContextId::NONE`] or names a context here.
    pub fn contains(&self, id: ContextId) -> bool {
        id == ContextId::NONE || (id.0 as usize) <= self.table.list.len()
    }

    /// The tags of `id`, outermost first, joined by `/` (empty for none).
    pub fn tag_path(&self, id: ContextId) -> String {
        self.get(id).map_or_else(String::new, |c| c.tags.join("/"))
    }
}

impl PartialEq for Contexts {
    fn eq(&self, other: &Contexts) -> bool {
        self.table.list == other.table.list
    }
}

impl fmt::Debug for Contexts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(id, c)| (id.0, c)))
            .finish()
    }
}

impl FromIterator<Context> for Contexts {
    fn from_iter<I: IntoIterator<Item = Context>>(iter: I) -> Contexts {
        let mut contexts = Contexts::new();
        for context in iter {
            contexts.intern(context);
        }
        contexts
    }
}

/// A context made of call-stack frames alone (as PyTorch records them).
pub fn frames_context(frames: Vec<Frame>) -> Context {
    Context {
        tags: Vec::new(),
        frames,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_intern_once_and_number_from_one() {
        let mut contexts = Contexts::new();
        let a = contexts.intern(Context {
            tags: vec!["a".into()],
            frames: Vec::new(),
        });
        let b = contexts.intern(Context::default());
        let again = contexts.intern(Context {
            tags: vec!["a".into()],
            frames: Vec::new(),
        });
        assert_eq!((a, b, again), (ContextId(1), ContextId(2), ContextId(1)));
        assert_eq!(contexts.len(), 2);
        assert_eq!(contexts.tag_path(a), "a");
        assert!(contexts.get(ContextId::NONE).is_none());
        assert!(contexts.get(ContextId(3)).is_none());
        assert!(contexts.contains(ContextId(2)) && !contexts.contains(ContextId(3)));
    }
}
