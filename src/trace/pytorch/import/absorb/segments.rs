//! Segments taken as `APPENDS` puts them into the snapshot's `segments` list, and their
//! blocks as `APPENDS` puts them into the segment's `blocks` list (which the pickle fills
//! before the segment dict that holds it is complete): each becomes its typed model, with no
//! tree of `Arc`s between.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::super::super::fields::{bool_at, Path};
use super::super::super::model::{Block, BlockState, Segment, SegmentType};
use super::{u64_of, value_under, Key, Reading, Unreadable};
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
        mut read: Reading<'_, '_>,
        dict: Container<'_>,
        list: u32,
    ) -> Result<(), Unreadable> {
        let fields = read.fields(dict);
        let size = fields.u64(Key::Size)?;
        let state = match &**fields.str(Key::State)? {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => return Err(Unreadable),
        };
        if !fields.has(Key::Frames) && fields.has(Key::History) {
            return Err(Unreadable); // a legacy block's frames are its history's
        }
        let stack = read.stack(&fields)?;
        let block = Block {
            address: fields.u64(Key::Address)?,
            size,
            requested_size: fields.opt_u64(Key::RequestedSize)?.unwrap_or(size),
            state,
            frames: read.stacks.frames(stack).clone(),
        };
        let context = fields.extras()?.context;
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
        mut read: Reading<'_, '_>,
        dict: Container<'_>,
        list: u32,
    ) -> Result<(), Unreadable> {
        if self.list.is_some_and(|taking| taking != list) {
            return Err(Unreadable); // segments in two lists: the plain read says which counts
        }
        let view = read.view;
        let fields = read.fields(dict);
        // Its blocks list, held by it alone: taken over, with the blocks taken from it.
        let blocks = view
            .container(fields.get(Key::Blocks).ok_or(Unreadable)?)
            .filter(|l| l.kind == Kind::List && l.holders == 1 && l.items.is_empty())
            .ok_or(Unreadable)?;
        let pending = self.pending.remove(&blocks.id).unwrap_or_default();
        read.lists.push(blocks.id);
        let segment_type = match &**fields.str(Key::SegmentType)? {
            "small" => SegmentType::Small,
            "large" => SegmentType::Large,
            _ => return Err(Unreadable),
        };
        let is_expandable = match fields.get(Key::IsExpandable) {
            Some(flag) => {
                let flag = view.scalar(flag).ok_or(Unreadable)?;
                bool_at(&flag, &Path::ROOT).map_err(|_| Unreadable)?
            }
            None => false,
        };
        let segment_pool_id = match fields.get(Key::SegmentPoolId) {
            Some(id) => pool_id(view, id)?,
            None => (0, 0),
        };
        let stack = read.stack(&fields)?;
        let segment = Segment {
            device: u32::try_from(fields.u64(Key::Device)?).map_err(|_| Unreadable)?,
            address: fields.u64(Key::Address)?,
            total_size: fields.u64(Key::TotalSize)?,
            stream: fields.u64(Key::Stream)?,
            segment_type,
            allocated_size: fields.u64(Key::AllocatedSize)?,
            active_size: fields.u64(Key::ActiveSize)?,
            requested_size: fields.u64(Key::RequestedSize)?,
            is_expandable,
            segment_pool_id,
            frames: read.stacks.frames(stack).clone(),
            blocks: pending.blocks,
        };
        let index = self.taken.segments.len();
        let contexts = &mut self.taken.contexts;
        let own = fields.extras()?.context.map(|c| (index, None, c));
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
            Kind::Dict => value_under(view, root, "segments")
                .and_then(|slot| view.container(slot))
                .is_some_and(|l| l.id == list && l.holders == 1),
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
