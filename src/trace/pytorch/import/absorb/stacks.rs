//! Frame lists taken with the dicts that hold them: each list becomes a stack interned by
//! the frames it names, so a list PyTorch writes once per entry or block costs an index.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::super::fields::{line_at, str_at, Path};
use super::super::super::model::Frame as PtFrame;
use super::Unreadable;
use crate::trace::pickle::{Container, Kind, Slot, View};
use crate::trace::AddressHasher;

/// The stacks read so far; see the module.
pub(super) struct Stacks {
    /// Frame lists by content; the first is the empty one.
    stacks: Vec<Arc<[PtFrame]>>,
    /// Frame lists seen, by container index: the stack, and the length it had (a list only
    /// grows, so an equal length at the end means the same items).
    lists: HashMap<u32, (u32, usize), BuildHasherDefault<AddressHasher>>,
    /// Stacks by their frames' indices, and each stack's frames' indices.
    ids: HashMap<Arc<[u32]>, u32>,
    frame_ids_of: Vec<Arc<[u32]>>,
    /// Frame dicts seen, by container index: index into `frames`.
    frame_ids: HashMap<u32, u32, BuildHasherDefault<AddressHasher>>,
    frames: Vec<(u32, PtFrame)>,
}

impl Default for Stacks {
    fn default() -> Self {
        let empty: Arc<[u32]> = Arc::from([]);
        let mut ids = HashMap::new();
        ids.insert(Arc::clone(&empty), 0);
        Stacks {
            stacks: vec![Arc::from([])],
            lists: HashMap::default(),
            ids,
            frame_ids_of: vec![empty],
            frame_ids: HashMap::default(),
            frames: Vec::new(),
        }
    }
}

impl Stacks {
    /// The frames of stack `stack` (the empty list for an index never given out).
    pub(super) fn frames(&self, stack: u32) -> &Arc<[PtFrame]> {
        self.stacks.get(stack as usize).unwrap_or(&self.stacks[0])
    }

    /// Every stack, by index; the first is the empty one.
    pub(super) fn into_stacks(self) -> Vec<Arc<[PtFrame]>> {
        self.stacks
    }

    /// The stack of the frame list `slot`; a list its holder alone holds is pushed to
    /// `lists`, to be taken over with it.
    pub(super) fn stack(
        &mut self,
        view: View<'_>,
        slot: Slot,
        lists: &mut Vec<u32>,
    ) -> Result<u32, Unreadable> {
        let list = view.container(slot).ok_or(Unreadable)?;
        if let Some(&(stack, _)) = self.lists.get(&list.id) {
            return Ok(stack);
        }
        if !matches!(list.kind, Kind::List | Kind::Tuple) {
            return Err(Unreadable);
        }
        let mut ids = Vec::with_capacity(list.items.len());
        for &frame in list.items {
            ids.push(self.frame(view, frame)?);
        }
        let stack = match self.ids.get(ids.as_slice()) {
            Some(&stack) => stack,
            None => {
                let stack = u32::try_from(self.stacks.len()).map_err(|_| Unreadable)?;
                let frames: Arc<[PtFrame]> = ids
                    .iter()
                    .map(|&id| self.frames[id as usize].1.clone())
                    .collect();
                self.stacks.push(frames);
                let ids: Arc<[u32]> = Arc::from(ids);
                self.frame_ids_of.push(Arc::clone(&ids));
                self.ids.insert(ids, stack);
                stack
            }
        };
        self.lists.insert(list.id, (stack, list.items.len()));
        // Held by its holder alone (the memo may hold it too): its items are not needed again.
        if list.kind == Kind::List && list.holders == 1 {
            lists.push(list.id);
        }
        Ok(stack)
    }

    /// The index of the frame dict `slot` in `frames`.
    fn frame(&mut self, view: View<'_>, slot: Slot) -> Result<u32, Unreadable> {
        let dict = view.container(slot).ok_or(Unreadable)?;
        if let Some(&id) = self.frame_ids.get(&dict.id) {
            return Ok(id);
        }
        let frame = read_frame(view, dict)?;
        let id = u32::try_from(self.frames.len()).map_err(|_| Unreadable)?;
        self.frames.push((dict.id, frame));
        self.frame_ids.insert(dict.id, id);
        Ok(id)
    }

    /// Whether every frame and frame list read is still what it was when read: a file may
    /// change a dict after an entry used it (`SETITEMS` on a memo reference), and the plain
    /// read sees the final one.
    pub(super) fn unchanged(&self, view: View<'_>) -> bool {
        let frames_same = self.frames.iter().all(|(id, frame)| {
            let dict = view.container_by_id(*id);
            dict.and_then(|dict| read_frame(view, dict).ok()).as_ref() == Some(frame)
        });
        frames_same
            && self.lists.iter().all(|(&id, &(_, len))| {
                view.container_by_id(id)
                    .is_some_and(|list| list.kind == Kind::Absorbed || list.items.len() == len)
            })
    }

    /// The frame dicts of `list`, a frame list taken over, for a result that reaches it.
    pub(super) fn restore(&self, list: u32) -> Option<Vec<Slot>> {
        let &(stack, _) = self.lists.get(&list)?;
        let frames = self.frame_ids_of.get(stack as usize)?;
        Some(
            frames
                .iter()
                .filter_map(|&frame| self.frames.get(frame as usize))
                .map(|&(id, _)| Slot::node(id))
                .collect(),
        )
    }
}

/// A frame dict, as `Converter::frames` reads one.
fn read_frame(view: View<'_>, dict: Container<'_>) -> Result<PtFrame, Unreadable> {
    if dict.kind != Kind::Dict {
        return Err(Unreadable);
    }
    let mut filename = None;
    let mut line = None;
    let mut name = None;
    for pair in dict.items.chunks_exact(2) {
        let Some((_, key)) = view.str(pair[0]) else {
            continue;
        };
        match &**key {
            "filename" => filename = Some(pair[1]),
            "line" => line = Some(pair[1]),
            "name" => name = Some(pair[1]),
            _ => {}
        }
    }
    let text = |slot: Option<Slot>| -> Result<Arc<str>, Unreadable> {
        let value = view.scalar(slot.ok_or(Unreadable)?).ok_or(Unreadable)?;
        str_at(&value, &Path::ROOT)
            .map(Arc::clone)
            .map_err(|_| Unreadable)
    };
    let line = view.scalar(line.ok_or(Unreadable)?).ok_or(Unreadable)?;
    let line = line_at(&line, &Path::ROOT).map_err(|_| Unreadable)?;
    Ok(PtFrame {
        filename: text(filename)?,
        line,
        name: text(name)?,
    })
}
