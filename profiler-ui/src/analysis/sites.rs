//! Allocation sites: where a block was allocated, named by its annotation tags or its call
//! stack, and the live memory of each site at one point of a trace.

use blockpool::trace::{BlockState, ContextId, DeviceState, Snapshot};
use serde::Serialize;
use std::collections::HashMap;

/// Frames PyTorch records from its own capture machinery, never the site of an allocation.
const MACHINERY: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

/// The site of `context`: its tags joined by `/`; else its innermost Python frame (PyTorch
/// records C++ frames of its own machinery first), else its innermost frame that is not
/// capture machinery; else `<unknown>`.
pub fn site_name(snapshot: &Snapshot, context: ContextId) -> String {
    let Some(context) = snapshot.contexts.get(context) else {
        return "<unknown>".into();
    };
    if !context.tags.is_empty() {
        return context.tags.join("/");
    }
    let frames = &context.frames;
    let chosen = frames
        .iter()
        .find(|f| f.filename.ends_with(".py"))
        .or_else(|| {
            frames
                .iter()
                .find(|f| !MACHINERY.iter().any(|m| f.name.contains(m)))
        })
        .or(frames.first());
    match chosen {
        Some(frame) => format!("{}:{}:{}", frame.filename, frame.line, frame.name),
        None => "<unknown>".into(),
    }
}

/// Live allocated memory of one site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Site {
    /// The site (see [`site_name`]).
    pub site: String,
    /// Bytes in allocated blocks.
    pub bytes: u64,
    /// Bytes their callers asked for.
    pub requested_bytes: u64,
    /// Allocated blocks.
    pub blocks: u64,
}

/// How to order [`Site`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SiteOrder {
    /// Most bytes first.
    Bytes,
    /// Most blocks first.
    Blocks,
    /// By name.
    Site,
}

/// The allocated memory of every site in `state`, most bytes first (ties by name).
pub fn sites_in(snapshot: &Snapshot, state: &DeviceState) -> Vec<Site> {
    sites_named_by(snapshot, state, site_name)
}

/// The site of `context` inside a step: the tags below the outermost one when there are
/// several (`step3/forward/attn` is `forward/attn`, so the same code in every step is one
/// site), else [`site_name`].
pub fn site_within_step(snapshot: &Snapshot, context: ContextId) -> String {
    match snapshot.contexts.get(context) {
        Some(c) if c.tags.len() > 1 => c.tags[1..].join("/"),
        _ => site_name(snapshot, context),
    }
}

/// As [`sites_in`], with sites named by `name`.
pub fn sites_named_by(
    snapshot: &Snapshot,
    state: &DeviceState,
    name: fn(&Snapshot, ContextId) -> String,
) -> Vec<Site> {
    let mut by_context: HashMap<ContextId, (u64, u64, u64)> = HashMap::new();
    let blocks = state.segments.iter().flat_map(|s| &s.blocks);
    for block in blocks.chain(&state.unsegmented) {
        if block.state == BlockState::ActiveAllocated {
            let entry = by_context.entry(block.context).or_default();
            entry.0 = entry.0.saturating_add(block.size);
            entry.1 = entry.1.saturating_add(block.requested);
            entry.2 = entry.2.saturating_add(1);
        }
    }
    // Contexts naming the same site (same tags, other frames) add up.
    let mut by_name: HashMap<String, (u64, u64, u64)> = HashMap::new();
    for (context, (bytes, requested, blocks)) in by_context {
        let entry = by_name.entry(name(snapshot, context)).or_default();
        entry.0 = entry.0.saturating_add(bytes);
        entry.1 = entry.1.saturating_add(requested);
        entry.2 = entry.2.saturating_add(blocks);
    }
    let mut sites: Vec<Site> = by_name
        .into_iter()
        .map(|(site, (bytes, requested_bytes, blocks))| Site {
            site,
            bytes,
            requested_bytes,
            blocks,
        })
        .collect();
    sort_sites(&mut sites, SiteOrder::Bytes);
    sites
}

/// Sorts `sites` by `order`, ties by name.
pub fn sort_sites(sites: &mut [Site], order: SiteOrder) {
    match order {
        SiteOrder::Bytes => {
            sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)))
        }
        SiteOrder::Blocks => {
            sites.sort_by(|a, b| b.blocks.cmp(&a.blocks).then_with(|| a.site.cmp(&b.site)))
        }
        SiteOrder::Site => sites.sort_by(|a, b| a.site.cmp(&b.site)),
    }
}
