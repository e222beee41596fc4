//! The stack tree of live memory at one state, as `/api/tree` answers it: what
//! `memtrace top --tree` prints, for the page's tree panel (`assets/tree.js`).

use super::error::RequestError;
use super::model::{DeviceModel, TraceModel};
use super::query::Target;
use super::tables::lock;
use crate::analysis::frames::FrameView;
use crate::analysis::sites::SiteNames;
use crate::analysis::tree::{stack_tree, TreeLimits, TreeNode};
use serde::Serialize;

/// Most levels a tree answer holds.
pub const MAX_DEPTH: u64 = 64;

/// The stack tree at one state.
#[derive(Debug, Serialize)]
pub struct TreeView {
    /// The state index: after this many of the device's events, inserted annotations
    /// included (what `/api/tree?index=` takes, as every state route does; not an event
    /// number).
    pub index: usize,
    /// The state by event number: after this event (PyTorch's index in `device_traces`, as
    /// `memtrace --at` takes it); `None` before event 0.
    pub after_event: Option<usize>,
    /// `after event 7` or `before event 0`, as the page prints it.
    pub label: String,
    /// Whether it is the allocated peak.
    pub is_peak: bool,
    /// Bytes in allocated blocks there (block sizes, not requested sizes): the root's bytes.
    pub allocated_bytes: u64,
    /// Allocated blocks there.
    pub blocks: u64,
    /// Whether the paths hold every frame memory_viz shows, or only the user's own.
    pub all_frames: bool,
    /// Levels kept below the root.
    pub depth: usize,
    /// Smallest share of `allocated_bytes`, from 0 to 1, a node keeps its own row with.
    pub min_share: f64,
    /// The root; each node's bytes are the sum of its children's.
    pub tree: TreeNode,
}

/// Whether the request asks for every frame (`all_frames=1` or `true`).
pub fn view(target: &Target) -> Result<FrameView, RequestError> {
    Ok(FrameView::from_flag(target.flag("all_frames")?))
}

/// The limits of a request: `depth` (levels, default 12, at most [`MAX_DEPTH`]) and
/// `min_share` (percent, default 0.5).
pub fn limits(target: &Target) -> Result<TreeLimits, RequestError> {
    let depth = target.clamped("depth", 12, 1, MAX_DEPTH)? as usize;
    let min_share = match target.text("min_share") {
        None => 0.5,
        Some(text) => match text.trim().parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => p,
            _ => {
                return Err(RequestError::BadParameter {
                    name: "min_share",
                    reason: format!("{text:?} is not a percentage from 0 to 100"),
                })
            }
        },
    };
    Ok(TreeLimits {
        depth,
        min_share: min_share / 100.0,
    })
}

/// The stack tree of `device` at `index` (the peak when `None`).
pub fn tree_view(
    model: &TraceModel,
    device: &DeviceModel,
    index: Option<usize>,
    view: FrameView,
    limits: TreeLimits,
) -> Result<TreeView, RequestError> {
    let index = index.unwrap_or(device.peak_index);
    let names = SiteNames::new(&model.snapshot, view);
    let tree = {
        let mut walker = lock(device);
        walker.seek(index)?;
        stack_tree(&names, &walker, limits)
    };
    Ok(TreeView {
        index,
        after_event: device.numbers.state(index),
        label: device.numbers.state_label(index),
        is_peak: index == device.peak_index,
        allocated_bytes: tree.bytes,
        blocks: tree.blocks,
        all_frames: view == FrameView::All,
        depth: limits.depth,
        min_share: limits.min_share,
        tree,
    })
}
