//! Real allocation streams: a trace file's device replayed "fresh", as `memtrace replay
//! --fresh` does it: the blocks live at the trace's first event are allocated first, lowest
//! address first, then every `alloc` event allocates its requested size on its stream and every
//! free (`free_completed`, or `free_requested` in traces that record no completions) frees the
//! block at that address. An address allocated again without a free in between frees the old
//! block first (the trace lost that free); a free of an address not live is skipped.
//!
//! The same walk rebuilds what the trace's own allocator reserved at its peak, from its
//! segment state and `segment_alloc` / `segment_free` events.

use crate::ops::{OpsBuilder, Workload};
use anyhow::Context as _;
use blockpool::trace::file::load_trace;
use blockpool::trace::{Action, Snapshot};
use blockpool::StreamId;
use std::collections::HashMap;
use std::path::Path;

/// A fixture's stream and what its own allocator did.
#[derive(Debug)]
pub struct Fixture {
    /// The operation stream (fresh start).
    pub workload: Workload,
    /// The device replayed.
    pub device: u32,
    /// Whether the trace records `segment_alloc` events (the faithfulness target applies).
    pub has_segment_allocs: bool,
    /// The trace allocator's highest reserved bytes (start state included); `None` when the
    /// trace records no segments.
    pub recorded_peak_reserved_bytes: Option<u64>,
}

/// Loads `path` and builds its stream; `None` when it has neither live blocks nor allocations.
pub fn load(path: &Path) -> anyhow::Result<Option<Fixture>> {
    let trace = load_trace(path).with_context(|| format!("cannot read {}", path.display()))?;
    let snapshot = &trace.snapshot;
    let Some(device) = first_device(snapshot) else {
        return Ok(None);
    };
    let mut walker = snapshot
        .state_walker(device)
        .with_context(|| format!("cannot rebuild device {device} of {}", path.display()))?;
    let start = walker.state();
    let events = walker.events().to_vec();
    let has_segments = !start.segments.is_empty()
        || events
            .iter()
            .any(|e| matches!(e.action, Action::SegmentAlloc | Action::SegmentFree));
    let recorded_peak_reserved_bytes = has_segments.then(|| {
        let mut peak = walker.totals().reserved_bytes;
        while walker.step().is_some() {
            peak = peak.max(walker.totals().reserved_bytes);
        }
        peak
    });

    let mut streams = StreamMap::default();
    let mut b = OpsBuilder::new();
    let mut live: HashMap<u64, u32> = HashMap::new();
    let mut fresh: Vec<(u64, u64, StreamId)> = Vec::new();
    for segment in &start.segments {
        for block in segment.blocks.iter().filter(|b| b.state.is_active()) {
            fresh.push((
                block.address,
                request_of(block.requested, block.size),
                segment.stream,
            ));
        }
    }
    for block in &start.unsegmented {
        fresh.push((
            block.address,
            request_of(block.requested, block.size),
            StreamId::DEFAULT,
        ));
    }
    fresh.sort_by_key(|&(address, _, _)| address);
    for (address, size, stream) in fresh {
        let slot = b.alloc(to_usize(size), streams.index(stream));
        live.insert(address, slot);
    }
    let free_on = if events.iter().any(|e| e.action == Action::FreeCompleted) {
        Action::FreeCompleted
    } else {
        Action::FreeRequested
    };
    for event in &events {
        match event.action {
            Action::Alloc => {
                let size = request_of(event.requested, event.size);
                if size == 0 {
                    continue;
                }
                let slot = b.alloc(to_usize(size), streams.index(event.stream));
                if let Some(old) = live.insert(event.addr, slot) {
                    b.free(old);
                }
            }
            action if action == free_on => {
                if let Some(slot) = live.remove(&event.addr) {
                    b.free(slot);
                }
            }
            _ => {}
        }
    }
    let stem = path
        .file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned());
    let workload = b.finish(format!("fixture/{stem}"), "fixture");
    if workload.shape.allocations == 0 {
        return Ok(None);
    }
    Ok(Some(Fixture {
        workload,
        device,
        has_segment_allocs: events.iter().any(|e| e.action == Action::SegmentAlloc),
        recorded_peak_reserved_bytes,
    }))
}

/// The first device with events, else the first device (as `memtrace replay` picks it).
fn first_device(snapshot: &Snapshot) -> Option<u32> {
    let with_events = snapshot.events.iter().map(|e| e.device).min();
    with_events.or_else(|| snapshot.devices().first().copied())
}

/// A block's request, or its size when no request was recorded.
fn request_of(requested: u64, size: u64) -> u64 {
    if requested > 0 {
        requested
    } else {
        size
    }
}

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Trace streams numbered 0, 1, ... in order of first use.
#[derive(Debug, Default)]
struct StreamMap(HashMap<StreamId, u32>);

impl StreamMap {
    fn index(&mut self, stream: StreamId) -> u32 {
        let next = self.0.len() as u32;
        *self.0.entry(stream).or_insert(next)
    }
}
