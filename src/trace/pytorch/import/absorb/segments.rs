//! Segments taken as `APPENDS` puts them into the snapshot's `segments` list, and their
//! blocks as `APPENDS` puts them into the segment's `blocks` list (which the pickle fills
//! before the segment dict that holds it is complete): each becomes its typed model, with no
//! tree of `Arc`s between.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::super::super::fields::{bool_at, Path};
use super::super::super::model::{Block, BlockState, Segment, SegmentType};
use super::{str_of, u64_of, Found, Key, Reading, Unreadable};
use crate::trace::pickle::{Container, Kind, Slot, View};
use crate::trace::AddressHasher;

/// The segments taken, with blockpool's `context` key where a segment or block has one.
#[derive(Debug, Default)]
pub(in super::super) struct TakenSegments {
    /// In the order of the file's list.
    pub segments: Vec<Segment>,
    /// `(segment, block, context)`, `block` `None` for the segment's own; in file order.
    pub contexts: Vec<(usize, Option<usize>, u64)>,
}

/// Blocks taken from a list no segment has claimed yet.
#[derive(Default)]
struct Pending {
    blocks: Vec<Block>,
    /// `(block, context)`.
    contexts: Vec<(usize, u64)>,
}

/// The segments' part of the absorber.
#[derive(Default)]
pub(super) struct SegmentTaker {
    /// Blocks taken, by the container index of the list they were taken from.
    pending: HashMap<u32, Pending, BuildHasherDefault<AddressHasher>>,
    /// The list segments were taken from.
    list: Option<u32>,
    taken: TakenSegments,
}

impl SegmentTaker {
    /// Takes the block `dict` on its way into the list `list`, as `Converter::block` and
    /// `extras_of` would read it. Only a block with its `address` is taken (legacy files
    /// without one are read the plain way).
    pub(super) fn take_block(
        &mut self,
        read: Reading<'_, '_>,
        dict: Container<'_>,
        list: u32,
    ) -> Result<(), Unreadable> {
        let view = read.view;
        let found = read.names.fields(view, dict);
        let get = |key: Key| found[key as usize];
        let int = |key: Key| u64_of(view, get(key).ok_or(Unreadable)?);
        let size = int(Key::Size)?;
        let state = match &**str_of(view, get(Key::State).ok_or(Unreadable)?)?.1 {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => return Err(Unreadable),
        };
        let stack = match (get(Key::Frames), get(Key::History)) {
            (Some(frames), _) => read.stacks.stack(view, frames, read.lists)?,
            (None, Some(_)) => return Err(Unreadable),
            (None, None) => 0,
        };
        let block = Block {
            address: int(Key::Address)?,
            size,
            requested_size: get(Key::RequestedSize)
                .map(|v| u64_of(view, v))
                .transpose()?
                .unwrap_or(size),
            state,
            frames: read.stacks.frames(stack).clone(),
        };
        let context = context(view, &found)?;
        let pending = self.pending.entry(list).or_default();
        if let Some(context) = context {
            pending.contexts.try_reserve(1).map_err(|_| Unreadable)?;
            pending.contexts.push((pending.blocks.len(), context));
        }
        pending.blocks.try_reserve(1).map_err(|_| Unreadable)?;
        pending.blocks.push(block);
        Ok(())
    }

    /// Takes the segment `dict` on its way into the list `list`, with the blocks taken from
    /// its `blocks` list, as `Converter::segment` and `extras_of` would read it.
    pub(super) fn take_segment(
        &mut self,
        read: Reading<'_, '_>,
        dict: Container<'_>,
        list: u32,
    ) -> Result<(), Unreadable> {
        let view = read.view;
        if self.list.is_some_and(|taking| taking != list) {
            return Err(Unreadable); // segments in two lists: the plain read says which counts
        }
        let found = read.names.fields(view, dict);
        let get = |key: Key| found[key as usize];
        let int = |key: Key| u64_of(view, get(key).ok_or(Unreadable)?);
        // Its blocks list, held by it alone: taken over, with the blocks taken from it.
        let blocks = view
            .container(get(Key::Blocks).ok_or(Unreadable)?)
            .filter(|l| l.kind == Kind::List && l.holders == 1 && l.items.is_empty())
            .ok_or(Unreadable)?;
        let pending = self.pending.remove(&blocks.id).unwrap_or_default();
        read.lists.push(blocks.id);
        let segment_type = match &**str_of(view, get(Key::SegmentType).ok_or(Unreadable)?)?.1 {
            "small" => SegmentType::Small,
            "large" => SegmentType::Large,
            _ => return Err(Unreadable),
        };
        let is_expandable = match get(Key::IsExpandable) {
            Some(flag) => {
                let flag = view.scalar(flag).ok_or(Unreadable)?;
                bool_at(&flag, &Path::ROOT).map_err(|_| Unreadable)?
            }
            None => false,
        };
        let segment_pool_id = match get(Key::SegmentPoolId) {
            Some(id) => pool_id(view, id)?,
            None => (0, 0),
        };
        let stack = match get(Key::Frames) {
            Some(frames) => read.stacks.stack(view, frames, read.lists)?,
            None => 0,
        };
        let segment = Segment {
            device: u32::try_from(int(Key::Device)?).map_err(|_| Unreadable)?,
            address: int(Key::Address)?,
            total_size: int(Key::TotalSize)?,
            stream: int(Key::Stream)?,
            segment_type,
            allocated_size: int(Key::AllocatedSize)?,
            active_size: int(Key::ActiveSize)?,
            requested_size: int(Key::RequestedSize)?,
            is_expandable,
            segment_pool_id,
            frames: read.stacks.frames(stack).clone(),
            blocks: pending.blocks,
        };
        let index = self.taken.segments.len();
        let contexts = &mut self.taken.contexts;
        let own = context(view, &found)?.map(|c| (index, None, c));
        let of_blocks = pending.contexts.iter().map(|&(b, c)| (index, Some(b), c));
        let count = usize::from(own.is_some()) + pending.contexts.len();
        contexts.try_reserve(count).map_err(|_| Unreadable)?;
        contexts.extend(own.into_iter().chain(of_blocks));
        self.taken.segments.try_reserve(1).map_err(|_| Unreadable)?;
        self.taken.segments.push(segment);
        self.list = Some(list);
        Ok(())
    }

    /// The segments, once the read is over: `None` when none were taken. Whether they can be
    /// placed: every block was claimed by a segment, and the list they were taken from is
    /// the snapshot's `segments` (or the whole snapshot, a bare list of segments), held there
    /// alone.
    pub(super) fn finish(&mut self, view: View<'_>, root: Slot) -> Result<(), Unreadable> {
        if !self.pending.is_empty() {
            return Err(Unreadable);
        }
        let Some(list) = self.list else {
            return Ok(());
        };
        let root = view.container(root).ok_or(Unreadable)?;
        let placed = match root.kind {
            Kind::List | Kind::Tuple => root.id == list,
            Kind::Dict => root.items.chunks_exact(2).any(|pair| {
                view.str(pair[0])
                    .is_some_and(|(_, key)| &**key == "segments")
                    && view
                        .container(pair[1])
                        .is_some_and(|l| l.id == list && l.holders == 1)
            }),
            _ => false,
        };
        if placed {
            Ok(())
        } else {
            Err(Unreadable)
        }
    }

    /// What was taken: `None` when no segment was.
    pub(super) fn into_taken(self) -> Option<TakenSegments> {
        self.list.map(|_| self.taken)
    }
}

/// blockpool's `context` of a segment or block, after checking its other keys read as the
/// import reads them (`extras_of`).
fn context(view: View<'_>, found: &Found) -> Result<Option<u64>, Unreadable> {
    let get = |key: Key| found[key as usize];
    for key in [Key::BlockSize, Key::Requested] {
        get(key).map(|v| u64_of(view, v)).transpose()?;
    }
    if let Some(text) = get(Key::UserMetadata) {
        str_of(view, text)?;
    }
    get(Key::Context).map(|v| u64_of(view, v)).transpose()
}

/// A `segment_pool_id`: a tuple (or list) of two ints.
fn pool_id(view: View<'_>, slot: Slot) -> Result<(u64, u64), Unreadable> {
    let pair = view.container(slot).ok_or(Unreadable)?;
    match (pair.kind, pair.items) {
        (Kind::Tuple | Kind::List, &[first, second]) => {
            Ok((u64_of(view, first)?, u64_of(view, second)?))
        }
        _ => Err(Unreadable),
    }
}
