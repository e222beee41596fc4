//! Walking a device's trace back from its end state, as PyTorch's viewer (`MemoryViz.js`,
//! `simulate_memory`) does: each event is undone in turn, newest first, and what it changed is
//! kept as a [`Change`] that can be replayed either way.
//!
//! Undoing, with `addr` and `size` from the event:
//!
//! | event | undone |
//! |---|---|
//! | `alloc` | the allocated block at `addr` is removed (its gap becomes inactive) |
//! | `free_requested` | the pending block at `addr` is allocated again |
//! | `free_completed` | a pending block of `size` is restored at `addr` |
//! | `segment_alloc` | the segment at `addr` is removed |
//! | `segment_free` | a segment of `size` is restored at `addr`, wholly inactive |
//! | `segment_map` | `[addr, addr + size)` is cut out of the segment holding it |
//! | `segment_unmap` | `[addr, addr + size)` is mapped again, joining neighbours on its stream |
//! | `oom`, `snapshot`, `annotate` | nothing |
//!
//! What the end state lacks is tolerated, as the viewer tolerates it: a block or segment the
//! events say is live at the end but the end state does not show (RMM logs have no end
//! state; a snapshot may be taken apart from its trace). Such an *omission* is added to the
//! end state and the walk is done once more, so every state shows it from its `alloc` on.
//! Allocations and segments made before the trace began need nothing: they are in the end
//! state or restored by undoing their frees, so they show at index 0. Everything else that
//! disagrees is a [`Conflict`].

use super::change::Change;
use super::error::{Conflict, StateError};
use super::memory::{range_end, LiveBlock, LiveSegment, Memory};
use crate::trace::snapshot::Segment;
use crate::trace::{Action, BlockState, ContextId, TraceEvent};
use std::collections::HashMap;

/// Something the events say is live at the end that the end state does not show.
#[derive(Clone, Copy, Debug)]
enum Item {
    Block(u64, LiveBlock),
    Segment(u64, LiveSegment),
}

/// The omissions one pass finds, each with the index of the event that revealed it.
#[derive(Default)]
struct Omissions {
    /// Index of the event being undone.
    index: usize,
    items: Vec<(usize, Item)>,
}

impl Omissions {
    fn add(&mut self, item: Item) {
        self.items.push((self.index, item));
    }
}

/// The rebuilt trace of one device: its state before the first event and after the last,
/// and what each event changed, oldest first.
pub(super) struct Rebuilt {
    pub start: Memory,
    pub end: Memory,
    pub changes: Vec<Change>,
}

/// Walks the events of `device` back from its end segments.
pub(super) fn rebuild<'a>(
    device: u32,
    end_segments: impl Iterator<Item = &'a Segment>,
    events: &[TraceEvent],
) -> Result<Rebuilt, StateError> {
    let mut end = end_state(device, end_segments)?;
    // Two passes at most: the first finds what the end state omits, the second walks with it
    // added. The second pass treats any omission left as the first did (nothing to undo), so
    // it cannot fail for that reason or loop.
    let mut walked = walk_back(device, &end, events)?;
    if !walked.omissions.is_empty() {
        add_omissions(device, &mut end, events, walked.omissions)?;
        walked = walk_back(device, &end, events)?;
    }
    Ok(Rebuilt {
        start: walked.start,
        end,
        changes: walked.changes,
    })
}

/// One walk back: the start, the changes (oldest first), and what the end state omits.
struct Walked {
    start: Memory,
    changes: Vec<Change>,
    omissions: Vec<(usize, Item)>,
}

/// Undoes every event from `end`, newest first.
fn walk_back(device: u32, end: &Memory, events: &[TraceEvent]) -> Result<Walked, StateError> {
    let mut memory = end.clone();
    let mut omissions = Omissions::default();
    let mut changes: Vec<Change> = Vec::with_capacity(events.len());
    // The changes of each block's frees not yet matched with its alloc, by address. A block
    // restored by undoing its free has the free event's context, which is the free call's when
    // recording gathered one; the alloc, once reached, gives the block its allocation context
    // for its whole life.
    let mut frees: HashMap<u64, Frees> = HashMap::new();
    for (index, event) in events.iter().enumerate().rev() {
        omissions.index = index;
        let mut change = undo(&mut memory, event, &mut omissions).map_err(|conflict| {
            StateError::Contradiction {
                device,
                index,
                action: event.action,
                addr: event.addr,
                conflict,
            }
        })?;
        match event.action {
            Action::FreeRequested | Action::FreeCompleted => {
                frees.entry(event.addr).or_default().push(changes.len());
            }
            Action::Alloc => {
                let lifetime = frees.remove(&event.addr).unwrap_or_default();
                if event.context != ContextId::NONE {
                    change.set_block_context(event.context);
                    for i in lifetime.positions() {
                        if let Some(free) = changes.get_mut(i) {
                            free.set_block_context(event.context);
                        }
                    }
                }
            }
            _ => {}
        }
        changes.push(change);
    }
    changes.reverse();
    Ok(Walked {
        start: memory,
        changes,
        omissions: omissions.items,
    })
}

/// Where one block's frees, met walking back before its alloc, are in the changes: two in a
/// trace as PyTorch writes it (`free_requested`, `free_completed`), kept without an allocation;
/// any more (a malformed trace) in a list.
#[derive(Default)]
struct Frees {
    first: [usize; 2],
    len: usize,
    more: Vec<usize>,
}

impl Frees {
    fn push(&mut self, position: usize) {
        match self.first.get_mut(self.len) {
            Some(slot) => *slot = position,
            None => self.more.push(position),
        }
        self.len += 1;
    }

    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.first[..self.len.min(2)]
            .iter()
            .chain(&self.more)
            .copied()
    }
}

/// The end state of `device` from its segments: segments and active blocks, checked.
fn end_state<'a>(
    device: u32,
    segments: impl Iterator<Item = &'a Segment>,
) -> Result<Memory, StateError> {
    let mut memory = Memory::default();
    let fail = |address, conflict| StateError::EndState {
        device,
        address,
        conflict,
    };
    let mut active = Vec::new();
    for segment in segments {
        memory
            .check_segment_place(segment.address, segment.size, false)
            .map_err(|c| fail(segment.address, c))?;
        let live = LiveSegment {
            size: segment.size,
            stream: segment.stream,
            pool: segment.pool,
            expandable: segment.expandable,
            context: segment.context,
        };
        memory.insert_segment(segment.address, live);
        active.extend(segment.blocks.iter().filter(|b| b.state.is_active()));
    }
    for block in active {
        memory
            .check_block_place(block.address, block.size)
            .map_err(|c| fail(block.address, c))?;
        if memory.segment_at(block.address).is_none() {
            return Err(fail(
                block.address,
                Conflict::LiveBlockOutsideSegment {
                    block: block.address,
                },
            ));
        }
        let live = LiveBlock {
            size: block.size,
            requested: block.requested,
            state: block.state,
            context: block.context,
        };
        memory.insert_block(block.address, live);
    }
    Ok(memory)
}

/// Adds omissions to the end state, segments first so that omitted blocks land in them. A
/// conflict is reported at the event that revealed the omission.
fn add_omissions(
    device: u32,
    end: &mut Memory,
    events: &[TraceEvent],
    mut items: Vec<(usize, Item)>,
) -> Result<(), StateError> {
    items.sort_by_key(|(_, item)| matches!(item, Item::Block(..)));
    for (index, item) in items {
        let (addr, placed) = match item {
            Item::Segment(addr, segment) => {
                let placed = end.check_segment_place(addr, segment.size, true);
                if placed.is_ok() {
                    end.insert_segment(addr, segment);
                }
                (addr, placed)
            }
            Item::Block(addr, block) => {
                let placed = end.check_block_place(addr, block.size);
                if placed.is_ok() {
                    end.insert_block(addr, block);
                }
                (addr, placed)
            }
        };
        if let Err(conflict) = placed {
            let action = events.get(index).map_or(Action::Alloc, |e| e.action);
            return Err(StateError::Contradiction {
                device,
                index,
                action,
                addr,
                conflict,
            });
        }
    }
    Ok(())
}

/// Undoes `event` on `memory` (the state right after it), returning what it changed.
fn undo(
    memory: &mut Memory,
    event: &TraceEvent,
    omissions: &mut Omissions,
) -> Result<Change, Conflict> {
    let addr = event.addr;
    let from_event = |state| LiveBlock {
        size: event.size,
        requested: event.requested,
        state,
        context: event.context,
    };
    match event.action {
        Action::Alloc => match memory.take_allocated(addr)? {
            Some(block) => Ok(Change::block(
                addr,
                &block,
                None,
                Some(BlockState::ActiveAllocated),
            )),
            None => {
                memory.check_block_place(addr, event.size)?;
                omissions.add(Item::Block(addr, from_event(BlockState::ActiveAllocated)));
                Ok(Change::None)
            }
        },
        Action::FreeRequested => match memory.unfree(addr)? {
            Some(block) => Ok(Change::block(
                addr,
                &block,
                Some(BlockState::ActiveAllocated),
                Some(BlockState::ActivePendingFree),
            )),
            None => {
                // The end state lacks a block still pending at the end. Walk on as if it were
                // there; the second pass has it.
                memory.check_block_place(addr, event.size)?;
                omissions.add(Item::Block(addr, from_event(BlockState::ActivePendingFree)));
                let allocated = from_event(BlockState::ActiveAllocated);
                memory.insert_block(addr, allocated);
                Ok(Change::block(
                    addr,
                    &allocated,
                    Some(BlockState::ActiveAllocated),
                    None,
                ))
            }
        },
        Action::FreeCompleted => {
            memory.check_freed_block_place(addr, event.size)?;
            let pending = from_event(BlockState::ActivePendingFree);
            memory.insert_block(addr, pending);
            Ok(Change::block(
                addr,
                &pending,
                Some(BlockState::ActivePendingFree),
                None,
            ))
        }
        Action::SegmentAlloc => match memory.segments.get(&addr).copied() {
            Some(segment) => {
                let end = addr.saturating_add(segment.size);
                if let Some(block) = memory.block_overlapping(addr, end) {
                    return Err(Conflict::LiveBlockOutsideSegment { block });
                }
                memory.remove_segment(addr);
                Ok(Change::segments(Vec::new(), vec![(addr, segment)]))
            }
            None => {
                let end = range_end(addr, event.size)?;
                if let Some(segment) = memory.segment_overlapping(addr, end) {
                    return Err(Conflict::OverlapsSegment { segment });
                }
                let segment = LiveSegment::from_event(event.size, event.stream, event.context);
                omissions.add(Item::Segment(addr, segment));
                Ok(Change::None)
            }
        },
        Action::SegmentFree => {
            memory.check_segment_place(addr, event.size, false)?;
            let segment = LiveSegment::from_event(event.size, event.stream, event.context);
            memory.insert_segment(addr, segment);
            Ok(Change::segments(vec![(addr, segment)], Vec::new()))
        }
        Action::SegmentMap => undo_map(memory, event, omissions),
        Action::SegmentUnmap => undo_unmap(memory, event),
        Action::Oom | Action::Snapshot | Action::Annotate => Ok(Change::None),
    }
}

/// Undoes a `segment_map`: cuts its range out of the segment holding it.
fn undo_map(
    memory: &mut Memory,
    event: &TraceEvent,
    omissions: &mut Omissions,
) -> Result<Change, Conflict> {
    let addr = event.addr;
    let end = range_end(addr, event.size)?;
    let Some((start, segment)) = memory.segment_at(addr) else {
        if let Some(segment) = memory.segment_overlapping(addr, end) {
            return Err(Conflict::PartlyInSegment { segment });
        }
        let segment = LiveSegment::from_mapping(event.size, event.stream, event.context);
        omissions.add(Item::Segment(addr, segment));
        return Ok(Change::None);
    };
    let segment_end = start.saturating_add(segment.size);
    if end > segment_end {
        return Err(Conflict::PartlyInSegment { segment: start });
    }
    if let Some(block) = memory.block_overlapping(addr, end) {
        return Err(Conflict::LiveBlockOutsideSegment { block });
    }
    let mut pieces = Vec::with_capacity(2);
    if addr > start {
        pieces.push((
            start,
            LiveSegment {
                size: addr - start,
                expandable: true,
                ..segment
            },
        ));
    }
    if segment_end > end {
        pieces.push((
            end,
            LiveSegment {
                size: segment_end - end,
                expandable: true,
                ..segment
            },
        ));
    }
    let change = Change::segments(pieces, vec![(start, segment)]);
    change.apply(memory, false);
    Ok(change)
}

/// Undoes a `segment_unmap`: maps its range back, joined with the segments it touches on
/// the same stream (as the viewer's `map_segment` joins them).
fn undo_unmap(memory: &mut Memory, event: &TraceEvent) -> Result<Change, Conflict> {
    let addr = event.addr;
    memory.check_segment_place(addr, event.size, false)?;
    let end = addr.saturating_add(event.size);
    let mut merged = (
        addr,
        LiveSegment::from_mapping(event.size, event.stream, event.context),
    );
    let mut after = Vec::with_capacity(2);
    let previous = memory.segments.range(..addr).next_back();
    if let Some((&start, &segment)) = previous {
        if start.saturating_add(segment.size) == addr && segment.stream == event.stream {
            after.push((start, segment));
            merged = (
                start,
                LiveSegment {
                    size: segment.size.saturating_add(event.size),
                    expandable: true,
                    ..segment
                },
            );
        }
    }
    if let Some(&segment) = memory.segments.get(&end) {
        if segment.stream == event.stream {
            after.push((end, segment));
            let base = if after.len() == 1 { segment } else { merged.1 };
            merged.1 = LiveSegment {
                size: merged.1.size.saturating_add(segment.size),
                expandable: true,
                ..base
            };
        }
    }
    let change = Change::segments(vec![merged], after);
    change.apply(memory, false);
    Ok(change)
}
