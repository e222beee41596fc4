//! `memtrace segments FILE [--at EVENT | --peak] [--device N] [--all-frames] [--json]`: a text map of the
//! segments and their blocks at one point (the end by default): what is allocated, pending
//! free, free, and lost to rounding (allocated but not asked for).

use crate::analysis::frames::FrameView;
use crate::analysis::sites::{Recorded, SiteNames};
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device, walker, Point};
use crate::format::{counted, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use blockpool::trace::snapshot::{pool_name, Segment};
use blockpool::trace::BlockState;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Characters of a segment's bar.
const BAR_WIDTH: usize = 64;

/// A segment as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct SegmentMap {
    /// Device address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Stream.
    pub stream: u64,
    /// `small` or `large`.
    pub pool: &'static str,
    /// Whether this is mapped memory of an expandable segment.
    pub expandable: bool,
    /// The private memory pool the segment belongs to (PyTorch's `segment_pool_id`: a CUDA
    /// graph's pool or a `torch.cuda.MemPool`), as the file records it for its end-state
    /// segments; absent for the default pool.
    pub private_pool: Option<(u64, u64)>,
    /// Bytes in allocated blocks the callers asked for.
    pub requested_bytes: u64,
    /// Bytes in allocated blocks beyond what was asked for (rounding, unsplit remainders).
    pub rounding_bytes: u64,
    /// Bytes freed but waiting for streams.
    pub pending_free_bytes: u64,
    /// Free (cached) bytes.
    pub free_bytes: u64,
    /// The blocks, lowest address first.
    pub blocks: Vec<BlockMap>,
    /// The bar as text.
    pub bar: String,
}

/// A block of a [`SegmentMap`].
#[derive(Debug, Serialize)]
pub struct BlockMap {
    /// Device address.
    pub address: u64,
    /// Bytes.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// `active_allocated`, `active_pending_free` or `inactive`.
    pub state: &'static str,
    /// The allocation site, for active blocks.
    pub site: Option<String>,
}

/// Runs `memtrace segments`.
pub fn run(
    file: &Path,
    device: Option<u32>,
    point: Point,
    view: FrameView,
    json: bool,
    out: &mut Output,
) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let device = pick_device(snapshot, device)?;
    note_other_devices_out_of_memory(snapshot, device);
    let index = point.resolve(snapshot, device)?;
    let mut walker = walker(snapshot, device)?;
    walker.seek(index)?;
    let state = walker.state();
    let names = SiteNames::new(snapshot, view);
    let recorded = Recorded::before(&walker);
    let maps: Vec<SegmentMap> = state
        .segments
        .iter()
        .map(|s| map(&names, &recorded, s))
        .collect();
    if json {
        return out.json(&maps);
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "device {device} {}: {} ({}); legend: # requested, + rounding, p pending free, \
         . free",
        super::top::state_label(snapshot.event_numbers(device).state(index)),
        counted(maps.len() as u64, "segment"),
        format_size(maps.iter().map(|m| m.size).sum()),
    );
    for m in &maps {
        let _ = writeln!(
            text,
            "{:#014x} {:>10} {:<5} stream {:<3} [{}] requested {}, rounding {}, pending {}, free {}{}{}",
            m.address,
            format_size(m.size),
            m.pool,
            m.stream,
            m.bar,
            format_size(m.requested_bytes),
            format_size(m.rounding_bytes),
            format_size(m.pending_free_bytes),
            format_size(m.free_bytes),
            if m.expandable { " (expandable)" } else { "" },
            m.private_pool
                .map_or_else(String::new, |(a, b)| format!(" (private pool ({a}, {b}))")),
        );
    }
    if !state.unsegmented.is_empty() {
        let bytes: u64 = state.unsegmented.iter().map(|b| b.size).sum();
        let one = state.unsegmented.len() == 1;
        let _ = writeln!(
            text,
            "{} ({}) {} in no known segment (the trace records no segments for {})",
            counted(state.unsegmented.len() as u64, "active block"),
            format_size(bytes),
            if one { "lies" } else { "lie" },
            if one { "it" } else { "them" }
        );
    }
    out.write(&text)?;
    out.flush()?;
    Ok(())
}

/// What a byte of a segment holds, in bar priority order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    Requested,
    Rounding,
    Pending,
    Free,
}

impl Fill {
    fn glyph(self) -> char {
        match self {
            Fill::Requested => '#',
            Fill::Rounding => '+',
            Fill::Pending => 'p',
            Fill::Free => '.',
        }
    }
}

/// The map of one segment, its active blocks' sites named by `names` (`recorded`: the
/// addresses the trace's `alloc` events gave out so far).
pub fn map(names: &SiteNames, recorded: &Recorded, segment: &Segment) -> SegmentMap {
    let mut ranges: Vec<(u64, u64, Fill)> = Vec::new();
    let (mut requested, mut rounding, mut pending, mut free) = (0u64, 0u64, 0u64, 0u64);
    let mut blocks = Vec::with_capacity(segment.blocks.len());
    for block in &segment.blocks {
        let start = block.address.saturating_sub(segment.address);
        match block.state {
            BlockState::ActiveAllocated => {
                let asked = block.requested.min(block.size);
                requested = requested.saturating_add(asked);
                rounding = rounding.saturating_add(block.size - asked);
                ranges.push((start, start + asked, Fill::Requested));
                ranges.push((start + asked, start + block.size, Fill::Rounding));
            }
            BlockState::ActivePendingFree => {
                pending = pending.saturating_add(block.size);
                ranges.push((start, start + block.size, Fill::Pending));
            }
            BlockState::Inactive => {
                free = free.saturating_add(block.size);
                ranges.push((start, start + block.size, Fill::Free));
            }
        }
        blocks.push(BlockMap {
            address: block.address,
            size: block.size,
            requested: block.requested,
            state: block.state.as_str(),
            site: block.state.is_active().then(|| {
                names
                    .of_block(block.context, block.address, recorded)
                    .label()
            }),
        });
    }
    SegmentMap {
        address: segment.address,
        size: segment.size,
        stream: segment.stream.raw(),
        pool: pool_name(segment.pool),
        expandable: segment.expandable,
        private_pool: Some(
            names
                .snapshot()
                .pytorch
                .pool_of(segment.device, segment.address),
        )
        .filter(|&id| id != (0, 0)),
        requested_bytes: requested,
        rounding_bytes: rounding,
        pending_free_bytes: pending,
        free_bytes: free,
        blocks,
        bar: bar(segment.size, &ranges),
    }
}

/// A bar of [`BAR_WIDTH`] cells; each shows what fills most of its bytes.
fn bar(size: u64, ranges: &[(u64, u64, Fill)]) -> String {
    if size == 0 {
        return String::new();
    }
    (0..BAR_WIDTH as u64)
        .map(|cell| {
            let lo = (cell as u128 * size as u128 / BAR_WIDTH as u128) as u64;
            let hi = ((cell as u128 + 1) * size as u128 / BAR_WIDTH as u128) as u64;
            let mut best = (0u64, Fill::Free);
            for fill in [Fill::Requested, Fill::Rounding, Fill::Pending, Fill::Free] {
                let covered: u64 = ranges
                    .iter()
                    .filter(|r| r.2 == fill)
                    .map(|&(a, b, _)| b.min(hi).saturating_sub(a.max(lo)))
                    .sum();
                if covered > best.0 {
                    best = (covered, fill);
                }
            }
            best.1.glyph()
        })
        .collect()
}
