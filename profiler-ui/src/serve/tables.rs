//! The views that are not curves: the allocator's segments and blocks at one state, one
//! allocation with its context, and the live memory by site at one state.

use super::error::RequestError;
use super::model::{DeviceModel, TraceModel};
use crate::analysis::frames::{is_plumbing, FrameView};
use crate::analysis::sites::{sites_named_by, Site, SiteNames};
use blockpool::trace::snapshot::pool_name;
use blockpool::trace::{ContextId, DeviceState, MemoryTotals};
use serde::Serialize;
use std::sync::MutexGuard;

/// Most blocks one state response lists; past it the segments after are left out.
pub const MAX_BLOCKS: usize = 20_000;

/// A segment as the page draws it.
#[derive(Debug, Serialize)]
pub struct SegmentView {
    /// Device address, in hex (addresses may pass 2^53, which JavaScript numbers cannot hold).
    pub address: String,
    /// Size in bytes.
    pub size: u64,
    /// Stream handle.
    pub stream: u64,
    /// `small` or `large`.
    pub pool: &'static str,
    /// Whether the segment is mapped memory of an expandable segment.
    pub expandable: bool,
    /// `[offset in the segment, size, requested, state, context id]` per block, lowest address
    /// first; state is 0 allocated, 1 pending free, 2 inactive.
    pub blocks: Vec<[u64; 5]>,
}

/// The allocator's memory at one state.
#[derive(Debug, Serialize)]
pub struct StateView {
    /// The state index: after this many of the device's events, inserted annotations
    /// included (what `/api/state?index=` takes; not an event number).
    pub index: usize,
    /// The state by event number, as the page names it: after this event (PyTorch's index in
    /// `device_traces`, as `memtrace --at` takes it); `None` before event 0.
    pub after_event: Option<usize>,
    /// `after event 7` or `before event 0`.
    pub label: String,
    /// The event that led to it (none at index 0).
    pub event: Option<EventView>,
    /// Bytes allocated, active, requested and reserved, and block and segment counts.
    pub allocated_bytes: u64,
    /// Bytes in active blocks.
    pub active_bytes: u64,
    /// Bytes the callers of active blocks asked for.
    pub requested_bytes: u64,
    /// Bytes in segments.
    pub reserved_bytes: u64,
    /// Segments, lowest address first.
    pub segments: Vec<SegmentView>,
    /// Active blocks in no known segment, as one pseudo-segment's blocks (offsets from the
    /// lowest of them).
    pub unsegmented: Vec<[u64; 5]>,
    /// Whether segments were left out past [`MAX_BLOCKS`] blocks.
    pub truncated: bool,
    /// Segments in the state, those left out included (`segments` holds the first ones).
    pub segments_total: usize,
}

/// One event, as the page names it.
#[derive(Debug, Serialize)]
pub struct EventView {
    /// `alloc`, `free_completed`, ...
    pub action: &'static str,
    /// Address in hex.
    pub addr: String,
    /// Size in bytes.
    pub size: u64,
    /// Microseconds since the origin.
    pub time_us: u64,
    /// Site of its context.
    pub site: String,
}

/// The walker of `device`, locked.
pub fn lock(device: &DeviceModel) -> MutexGuard<'_, blockpool::trace::StateWalker> {
    // A panic while holding the walker cannot leave it half-moved (`seek` moves step by
    // step, each complete), so a poisoned lock is still usable.
    device
        .walker
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn block_row(offset: u64, block: &blockpool::trace::snapshot::Block) -> [u64; 5] {
    let state = match block.state {
        blockpool::trace::BlockState::ActiveAllocated => 0,
        blockpool::trace::BlockState::ActivePendingFree => 1,
        blockpool::trace::BlockState::Inactive => 2,
    };
    [
        offset,
        block.size,
        block.requested,
        state,
        u64::from(block.context.0),
    ]
}

/// The state of `device` at `index` (the peak when `None`).
pub fn state_view(
    model: &TraceModel,
    device: &DeviceModel,
    index: Option<usize>,
) -> Result<StateView, RequestError> {
    let index = index.unwrap_or(device.peak_index);
    let (state, totals, event): (DeviceState, MemoryTotals, _) = {
        let mut walker = lock(device);
        walker.seek(index)?;
        let event = index
            .checked_sub(1)
            .and_then(|i| walker.events().get(i))
            .copied();
        (walker.state(), walker.totals(), event)
    };
    let mut blocks_left = MAX_BLOCKS;
    let mut truncated = false;
    let mut segments = Vec::new();
    for segment in &state.segments {
        if segment.blocks.len() > blocks_left {
            truncated = true;
            break;
        }
        blocks_left -= segment.blocks.len();
        segments.push(SegmentView {
            address: format!("{:#x}", segment.address),
            size: segment.size,
            stream: segment.stream.raw(),
            pool: pool_name(segment.pool),
            expandable: segment.expandable,
            blocks: segment
                .blocks
                .iter()
                .map(|b| block_row(b.address.wrapping_sub(segment.address), b))
                .collect(),
        });
    }
    let base = state.unsegmented.first().map_or(0, |b| b.address);
    let unsegmented = state
        .unsegmented
        .iter()
        .take(blocks_left)
        .map(|b| block_row(b.address.wrapping_sub(base), b))
        .collect();
    truncated |= state.unsegmented.len() > blocks_left;
    Ok(StateView {
        index,
        after_event: device.numbers.state(index),
        label: device.numbers.state_label(index),
        event: event.map(|e| EventView {
            action: e.action.as_str(),
            addr: format!("{:#x}", e.addr),
            size: e.size,
            time_us: e.time_us,
            site: model.context_text(e.context).site.clone(),
        }),
        allocated_bytes: totals.allocated_bytes,
        active_bytes: totals.active_bytes,
        requested_bytes: totals.requested_bytes,
        reserved_bytes: totals.reserved_bytes,
        segments,
        unsegmented,
        truncated,
        segments_total: state.segments.len(),
    })
}

/// A context: tags and frames.
#[derive(Debug, Serialize)]
pub struct ContextView {
    /// Its id in the trace (0: none recorded).
    pub id: u32,
    /// The site name.
    pub site: String,
    /// Annotation tags, outermost first.
    pub tags: Vec<String>,
    /// Frames, innermost first: `[function, file, line]` (line 0: unknown).
    pub frames: Vec<(String, String, u32)>,
    /// For each frame, whether reports leave it out by default: memory_viz's hidden frames and
    /// the allocator's and dispatcher's plumbing ([`crate::analysis::frames::shown_frames`]).
    pub plumbing: Vec<bool>,
}

/// The context `id` of `model`'s trace.
pub fn context_view(model: &TraceModel, id: ContextId) -> ContextView {
    let context = model.snapshot.contexts.get(id);
    ContextView {
        id: id.0,
        site: model.context_text(id).site.clone(),
        tags: context.map_or_else(Vec::new, |c| c.tags.iter().map(|t| t.to_string()).collect()),
        frames: context.map_or_else(Vec::new, |c| {
            c.frames
                .iter()
                .map(|f| (f.name.to_string(), f.filename.to_string(), f.line))
                .collect()
        }),
        plumbing: context.map_or_else(Vec::new, |c| c.frames.iter().map(is_plumbing).collect()),
    }
}

/// One allocation and its context.
#[derive(Debug, Serialize)]
pub struct AllocationView {
    /// Its id.
    pub id: usize,
    /// Address in hex.
    pub addr: String,
    /// Block size in bytes.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Stream handle.
    pub stream: u64,
    /// First state it is alive in (0: allocated before the trace began).
    pub start: usize,
    /// First state it is no longer alive in; `null` when alive at the end.
    pub end: Option<usize>,
    /// When it became alive, microseconds since the origin.
    pub start_us: u64,
    /// When it was freed; `null` when alive at the end.
    pub end_us: Option<u64>,
    /// The context of its allocation.
    pub context: ContextView,
}

/// Allocation `id` of `device`.
pub fn allocation_view(
    model: &TraceModel,
    device: &DeviceModel,
    id: usize,
) -> Result<AllocationView, RequestError> {
    let a = device
        .allocations
        .get(id)
        .ok_or(RequestError::NoAllocation(id))?;
    let time = |s: usize| device.state_time_us.get(s).copied().unwrap_or(0);
    let end = (a.end <= device.events).then_some(a.end);
    Ok(AllocationView {
        id,
        addr: format!("{:#x}", a.addr),
        size: a.size,
        requested: a.requested,
        stream: a.stream,
        start: a.start,
        end,
        start_us: time(a.start),
        end_us: end.map(time),
        context: ContextView {
            site: model.allocation_site(a).to_string(),
            ..context_view(model, a.context)
        },
    })
}

/// Live memory by site at one state.
#[derive(Debug, Serialize)]
pub struct Breakdown {
    /// The state index.
    pub index: usize,
    /// Whether it is the allocated peak.
    pub is_peak: bool,
    /// Allocated bytes there.
    pub allocated_bytes: u64,
    /// Sites, most bytes first.
    pub sites: Vec<Site>,
}

/// The breakdown by site at `index` (the peak when `None`), at most `limit` sites, named in
/// `view`.
pub fn breakdown(
    model: &TraceModel,
    device: &DeviceModel,
    index: Option<usize>,
    limit: usize,
    view: FrameView,
) -> Result<Breakdown, RequestError> {
    let index = index.unwrap_or(device.peak_index);
    let names = SiteNames::new(&model.snapshot, view);
    let mut sites = {
        let mut walker = lock(device);
        walker.seek(index)?;
        sites_named_by(&names, &walker)
    };
    sites.truncate(limit);
    Ok(Breakdown {
        index,
        is_peak: index == device.peak_index,
        allocated_bytes: device.curves.allocated.get(index).copied().unwrap_or(0),
        sites,
    })
}
