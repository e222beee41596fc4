//! Where a device's memory was at one moment, split so that the parts add up: at an
//! out-of-memory event (the state it met, and the failing request), or at the reserved peak.
//!
//! Reserved memory (every segment's bytes) is split into:
//! - live allocations, as requested (by category, [`super::category`], and by site);
//! - rounding: allocated block sizes over their requests;
//! - blocks freed but waiting on the streams that used them (`record_stream`);
//! - free (cached) blocks, by why they could not serve the request: on another stream, in
//!   another pool (the small pool serves requests of at most 1 MiB, the large pool the rest; a
//!   private pool serves only its CUDA graph or `MemPool`), oversize blocks that
//!   `max_split_size_mb` keeps whole, too small for it, or large enough (the state the trace
//!   shows can lag the allocator's: an expandable segment's unmapped tail, say); at the reserved
//!   peak, with no request to judge them by, one part.
//!
//! Beside reserved, the device: its free memory as the out-of-memory event records it, and
//! given the GPU's total (`--device-memory`), the memory outside this allocator (the CUDA
//! context, cuBLAS and NCCL workspaces, other processes): total - reserved - free.

pub mod moment;

use super::category::{categorize, Category};
use super::fragmentation::{unallocated_share, FORMULA};
use super::sites::{Site, SiteNames};
use blockpool::introspect::sizing::{round_size, LARGE_BUFFER, SMALL_SIZE};
use blockpool::introspect::PoolKind;
use blockpool::trace::{BlockState, Snapshot, StateWalker};
use blockpool::AllocatorConfig;
use blockpool::StreamId;
use serde::Serialize;
use std::collections::HashMap;

/// Sites listed by name; the rest are added up in one line.
pub const TOP_SITES: usize = 10;

/// The failing request of an out-of-memory event.
#[derive(Clone, Debug, Serialize)]
pub struct Request {
    /// Bytes asked for.
    pub bytes: u64,
    /// As the allocator rounds it (the block it needed).
    pub rounded_bytes: u64,
    /// The stream it was made on.
    pub stream: u64,
    /// `small` (at most 1 MiB) or `large`: the pool that serves it.
    pub pool: &'static str,
    /// The device's free bytes, as the event records them.
    pub device_free_bytes: u64,
}

/// One part of reserved memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Part {
    /// `live`, `rounding`, `pending_free`, `other_streams`, `other_pools`, `oversize`,
    /// `too_small`, `large_enough`, `free` (at the reserved peak) or `unaccounted`.
    pub key: &'static str,
    /// What it is, in words.
    pub name: &'static str,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub blocks: u64,
}

/// Live requested bytes of one category.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CategoryShare {
    /// The category.
    pub category: Category,
    /// Its name, as text prints it.
    pub name: &'static str,
    /// Requested bytes of its allocated blocks.
    pub requested_bytes: u64,
    /// Allocated blocks.
    pub blocks: u64,
}

/// The device beside the allocator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceMemory {
    /// Free bytes, as an out-of-memory event records them; `None` elsewhere.
    pub free_bytes: Option<u64>,
    /// The GPU's total memory, when given (`--device-memory`).
    pub total_bytes: Option<u64>,
    /// `total - reserved - free`: memory outside this allocator, when both are known.
    pub outside_bytes: Option<u64>,
}

/// Where the device's memory was.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// Bytes in segments: the sum of [`Self::parts`].
    pub reserved_bytes: u64,
    /// Reserved memory, split; the parts add up to it exactly.
    pub parts: Vec<Part>,
    /// Live allocations by category, most first; with [`Self::unsegmented_requested_bytes`]
    /// they add up to the `live` part plus it.
    pub categories: Vec<CategoryShare>,
    /// The sites with the most live requested bytes, most first, at most [`TOP_SITES`].
    pub sites: Vec<Site>,
    /// Requested bytes of the sites not listed.
    pub other_sites_requested_bytes: u64,
    /// Sites not listed.
    pub other_sites: u64,
    /// Requested bytes of live blocks in no recorded segment (RMM logs; a truncated trace):
    /// not part of reserved.
    pub unsegmented_requested_bytes: u64,
    /// The largest free block.
    pub largest_free_block: u64,
    /// With a request: the largest free block on its stream and in its pool.
    pub largest_usable_free_block: Option<u64>,
    /// `(reserved - allocated) / reserved` here ([`super::fragmentation`]).
    pub fragmentation: f64,
    /// How [`Self::fragmentation`] is defined.
    pub fragmentation_definition: &'static str,
    /// The device beside the allocator.
    pub device: DeviceMemory,
    /// Why the request failed (or what holds the memory, at a peak), in words.
    pub why: String,
}

impl Explanation {
    /// Bytes in free (cached) blocks: the parts that are free blocks, whatever kept them from
    /// the request.
    pub fn free_bytes(&self) -> u64 {
        self.parts
            .iter()
            .filter(|p| FREE_PARTS.contains(&p.key))
            .map(|p| p.bytes)
            .sum()
    }
}

/// The parts that are free blocks.
const FREE_PARTS: [&str; 6] = [
    "other_streams",
    "other_pools",
    "oversize",
    "too_small",
    "large_enough",
    "free",
];

/// What the explanation needs besides the state.
pub struct Context<'a> {
    /// The trace (contexts, private pools).
    pub snapshot: &'a Snapshot,
    /// Site names.
    pub names: &'a SiteNames<'a>,
    /// The settings the allocator ran under (rounding, `max_split_size_mb`).
    pub config: &'a AllocatorConfig,
    /// The GPU's total memory, when given.
    pub device_total: Option<u64>,
}

/// The request of an out-of-memory event of `size` bytes on `stream`, whose device had
/// `device_free` bytes free, rounded as `config` rounds it.
pub fn request_of(
    size: u64,
    stream: StreamId,
    device_free: u64,
    config: &AllocatorConfig,
) -> Request {
    let rounded = usize::try_from(size)
        .ok()
        .and_then(|s| round_size(s, config))
        .map_or(size, |r| r as u64);
    Request {
        bytes: size,
        rounded_bytes: rounded,
        stream: stream.raw(),
        pool: if size <= SMALL_SIZE as u64 {
            "small"
        } else {
            "large"
        },
        device_free_bytes: device_free,
    }
}

/// Explains the state `walker` is at, for `request` when it is an out-of-memory event's.
pub fn explain(ctx: &Context, walker: &StateWalker, request: Option<&Request>) -> Explanation {
    let state = walker.state();
    let device = state.device;
    let max_split = ctx.config.max_split_size() as u64;
    let mut parts: Vec<Part> = PARTS
        .iter()
        .filter(|(_, _, when)| match when {
            When::Always => true,
            When::WithRequest => request.is_some(),
            When::WithoutRequest => request.is_none(),
        })
        .map(|&(key, name, _)| Part {
            key,
            name,
            bytes: 0,
            blocks: 0,
        })
        .collect();
    let mut add = |key: &str, bytes: u64| {
        if let Some(part) = parts.iter_mut().find(|p| p.key == key) {
            part.bytes = part.bytes.saturating_add(bytes);
            part.blocks += 1;
        }
    };
    let (mut reserved, mut tiled, mut allocated) = (0u64, 0u64, 0u64);
    let (mut largest, mut largest_usable) = (0u64, 0u64);
    for segment in &state.segments {
        reserved = reserved.saturating_add(segment.size);
        let private = ctx.snapshot.pytorch.pool_of(device, segment.address) != (0, 0);
        for block in &segment.blocks {
            tiled = tiled.saturating_add(block.size);
            match block.state {
                BlockState::ActiveAllocated => {
                    allocated = allocated.saturating_add(block.size);
                    let requested = block.requested.min(block.size);
                    add("live", requested);
                    if block.size > requested {
                        add("rounding", block.size - requested);
                    }
                }
                BlockState::ActivePendingFree => add("pending_free", block.size),
                BlockState::Inactive => {
                    largest = largest.max(block.size);
                    let Some(request) = request else {
                        add("free", block.size);
                        continue;
                    };
                    let same_pool = pool_name(segment.pool) == request.pool && !private;
                    let cause = if segment.stream.raw() != request.stream {
                        "other_streams"
                    } else if !same_pool {
                        "other_pools"
                    } else {
                        largest_usable = largest_usable.max(block.size);
                        oversize_or_fit(block.size, request.rounded_bytes, max_split)
                    };
                    add(cause, block.size);
                }
            }
        }
    }
    if let Some(part) = parts.iter_mut().find(|p| p.key == "unaccounted") {
        // Blocks tile their segments; a file whose do not says so here instead of the parts
        // failing to add up.
        part.bytes = reserved.saturating_sub(tiled);
        part.blocks = 0;
    }
    parts.retain(|p| p.bytes > 0 || p.key == "live");
    let (categories, sites) = live_shares(ctx, walker);
    let unsegmented = state
        .unsegmented
        .iter()
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .map(|b| b.requested.min(b.size))
        .sum();
    let all_sites: u64 = sites.len() as u64;
    let total_requested: u64 = sites.iter().map(|s| s.requested_bytes).sum::<u64>();
    let mut sites = sites;
    sites.truncate(TOP_SITES);
    let listed_top: u64 = sites.iter().map(|s| s.requested_bytes).sum();
    let free_bytes = request.map(|r| r.device_free_bytes);
    let outside = match (ctx.device_total, free_bytes) {
        (Some(total), Some(free)) => total.checked_sub(reserved.saturating_add(free)),
        _ => None,
    };
    let why = why(&parts, request, largest_usable, reserved, free_bytes);
    Explanation {
        reserved_bytes: reserved,
        parts,
        categories,
        other_sites: all_sites.saturating_sub(sites.len() as u64),
        other_sites_requested_bytes: total_requested.saturating_sub(listed_top),
        sites,
        unsegmented_requested_bytes: unsegmented,
        largest_free_block: largest,
        largest_usable_free_block: request.map(|_| largest_usable),
        fragmentation: unallocated_share(reserved, allocated),
        fragmentation_definition: FORMULA,
        device: DeviceMemory {
            free_bytes,
            total_bytes: ctx.device_total,
            outside_bytes: outside,
        },
        why,
    }
}

/// When a part is listed.
#[derive(Clone, Copy)]
enum When {
    Always,
    /// At an out-of-memory event: the causes that judge a free block against its request.
    WithRequest,
    /// At a peak, with no request.
    WithoutRequest,
}

/// Every part, in the order reports list them, its words, and when it is listed.
const PARTS: [(&str, &str, When); 10] = [
    ("live", "live allocations, as requested", When::Always),
    (
        "rounding",
        "rounding: allocated blocks over their requests",
        When::Always,
    ),
    (
        "pending_free",
        "freed, waiting on the streams that used them (record_stream)",
        When::Always,
    ),
    (
        "other_streams",
        "free, cached for other streams",
        When::WithRequest,
    ),
    (
        "other_pools",
        "free, in the other pool (small: requests of at most 1 MiB) or a private pool",
        When::WithRequest,
    ),
    (
        "oversize",
        "free, oversize blocks max_split_size_mb keeps whole",
        When::WithRequest,
    ),
    (
        "too_small",
        "free, too small for the request",
        When::WithRequest,
    ),
    (
        "large_enough",
        "free and large enough (the trace's state lags the allocator's)",
        When::WithRequest,
    ),
    ("free", "free, cached", When::WithoutRequest),
    (
        "unaccounted",
        "in segments but in no block the trace shows",
        When::Always,
    ),
];

/// `small` or `large`.
fn pool_name(pool: PoolKind) -> &'static str {
    match pool {
        PoolKind::Small => "small",
        PoolKind::Large => "large",
    }
}

/// Why a free block of `size` on the request's stream and pool did not serve a request
/// rounded to `rounded`: PyTorch's rules for oversize blocks (`max_split`), else its size.
fn oversize_or_fit(size: u64, rounded: u64, max_split: u64) -> &'static str {
    if max_split != u64::MAX
        && ((rounded < max_split && size >= max_split)
            || (rounded >= max_split && size >= rounded.saturating_add(LARGE_BUFFER as u64)))
    {
        "oversize"
    } else if size < rounded {
        "too_small"
    } else {
        "large_enough"
    }
}

/// Live allocated memory by category and by site, most requested bytes first.
fn live_shares(ctx: &Context, walker: &StateWalker) -> (Vec<CategoryShare>, Vec<Site>) {
    let tallies = super::sites::allocated_by_context(ctx.names, walker);
    let mut by_category: HashMap<Category, (u64, u64)> = HashMap::new();
    let mut by_site: HashMap<String, Site> = HashMap::new();
    for ((context, before), tally) in tallies {
        let frames = ctx
            .snapshot
            .contexts
            .get(context)
            .map_or(&[][..], |c| &c.frames[..]);
        let entry = by_category.entry(categorize(frames)).or_default();
        entry.0 = entry.0.saturating_add(tally.requested);
        entry.1 = entry.1.saturating_add(tally.blocks);
        let name = ctx.names.of_allocation(context, before);
        let site = by_site
            .entry(name.label())
            .or_insert_with(|| Site::new(name));
        site.bytes = site.bytes.saturating_add(tally.bytes);
        site.requested_bytes = site.requested_bytes.saturating_add(tally.requested);
        site.blocks = site.blocks.saturating_add(tally.blocks);
    }
    let mut categories: Vec<CategoryShare> = Category::ALL
        .into_iter()
        .filter_map(|category| {
            let &(requested_bytes, blocks) = by_category.get(&category)?;
            Some(CategoryShare {
                category,
                name: category.name(),
                requested_bytes,
                blocks,
            })
        })
        .collect();
    categories.sort_by_key(|c| std::cmp::Reverse(c.requested_bytes));
    let mut sites: Vec<Site> = by_site.into_values().collect();
    sites.sort_by(|a, b| {
        b.requested_bytes
            .cmp(&a.requested_bytes)
            .then_with(|| a.label.cmp(&b.label))
    });
    (categories, sites)
}

/// The explanation in one sentence: the largest cause that could have served the request, or
/// that the live allocations alone fill the device.
fn why(
    parts: &[Part],
    request: Option<&Request>,
    largest_usable: u64,
    reserved: u64,
    device_free: Option<u64>,
) -> String {
    use crate::format::format_size as size;
    let bytes = |key: &str| parts.iter().find(|p| p.key == key).map_or(0, |p| p.bytes);
    let Some(request) = request else {
        let live = bytes("live");
        if reserved == 0 {
            return "the trace records no segments, so nothing is reserved: the live \
                    allocations are in blocks of no recorded segment"
                .to_string();
        }
        return format!(
            "live allocations hold {} of the {} reserved ({:.1} %)",
            size(live),
            size(reserved),
            percent(live, reserved)
        );
    };
    let need = request.rounded_bytes;
    let free = device_free.unwrap_or(0);
    let cached = [
        "other_streams",
        "other_pools",
        "oversize",
        "too_small",
        "pending_free",
    ]
    .into_iter()
    .map(bytes)
    .fold(0u64, u64::saturating_add);
    if cached.saturating_add(free) < need {
        return format!(
            "{} requested, and the device had {} free with {} more cached: live allocations \
             ({}) leave too little; the program needs more memory than the device has (a \
             smaller batch, activation checkpointing or freeing tensors earlier)",
            size(request.bytes),
            size(free),
            size(cached),
            size(bytes("live"))
        );
    }
    let (cause, key, remedy) = CAUSES
        .into_iter()
        .max_by_key(|(_, key, _)| bytes(key))
        .unwrap_or(CAUSES[0]);
    format!(
        "{} requested with {} free on the device: {} of the {} reserved were {cause} (the \
         largest free block on its stream and in its pool: {}); {remedy}",
        size(request.bytes),
        size(free),
        size(bytes(key)),
        size(reserved),
        size(largest_usable)
    )
}

/// The causes that keep cached memory from a request: the words, the part, and what to do.
const CAUSES: [(&str, &str, &str); 5] = [
    (
        "fragmented into free blocks too small for it",
        "too_small",
        "expandable_segments or max_split_size_mb can avoid it: `memtrace tune` replays them",
    ),
    (
        "in free blocks cached for other streams",
        "other_streams",
        "a block is reused only on the stream that freed it: allocate on fewer streams, \
         synchronize and empty_cache() before moving work to another, or with blockpool set \
         stream_reuse:ordered: `memtrace streams` shows each stream's cache and replays it",
    ),
    (
        "in blocks freed but waiting on other streams (record_stream)",
        "pending_free",
        "record_stream keeps a block until every stream that used it is done: free it after \
         synchronizing those streams instead, or with blockpool set stream_reuse:ordered, \
         which orders its reuse on the device",
    ),
    (
        "in oversize blocks max_split_size_mb keeps whole",
        "oversize",
        "a larger max_split_size_mb (or none) lets them serve smaller requests: `memtrace tune` \
         replays it",
    ),
    (
        "in free blocks of the other pool or a private pool",
        "other_pools",
        "the small pool's 2 MiB segments serve only requests of at most 1 MiB, and a private \
         pool only its CUDA graph or MemPool",
    ),
];

/// `part` of `whole` in percent; 0 of nothing.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}
