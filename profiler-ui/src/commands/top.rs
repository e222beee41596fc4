//! `memtrace top FILE [--at EVENT | --peak] [--sort bytes|blocks|site] [--limit N]
//! [--all-frames] [--tree [--depth N] [--min-share PERCENT]]`: live allocated memory by site at
//! one point of the trace (the end by default), or as the stack tree of that memory.

use crate::analysis::frames::FrameView;
use crate::analysis::sites::{sites_named_by, sort_sites, Site, SiteNames, SiteOrder};
use crate::analysis::timeline::{note_other_devices_out_of_memory, pick_device, walker, Point};
use crate::analysis::tree::{stack_tree, walk, TreeLimits, TreeNode};
use crate::format::{count, counted, format_size};
use crate::load::load_trace;
use crate::output::Output;
use anyhow::Context as _;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// What `top` prints.
#[derive(Debug, Serialize)]
pub struct TopReport {
    /// Device index.
    pub device: u32,
    /// The state shown: after this event, by its number (PyTorch's index in
    /// `device_traces`, as `--at` takes it); `None` before the first event.
    pub after_event: Option<usize>,
    /// Allocated bytes in all.
    pub allocated_bytes: u64,
    /// The sites, in the order asked for.
    pub sites: Vec<Site>,
}

/// The options of `top`.
pub struct TopOptions {
    /// `--device`.
    pub device: Option<u32>,
    /// `--at` / `--peak`.
    pub point: Point,
    /// `--sort`.
    pub order: SiteOrder,
    /// `--limit`.
    pub limit: usize,
    /// `--all-frames`: which frames name sites.
    pub view: FrameView,
    /// `--tree` with its `--depth` and `--min-share`.
    pub tree: Option<TreeLimits>,
    /// `--json`.
    pub json: bool,
}

/// Runs `memtrace top`.
pub fn run(file: &Path, options: TopOptions, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let device = pick_device(snapshot, options.device)?;
    note_other_devices_out_of_memory(snapshot, device);
    let index = options.point.resolve(snapshot, device)?;
    let numbers = snapshot.event_numbers(device);
    let after_event = numbers.state(index);
    let mut walker = walker(snapshot, device)?;
    walker.seek(index)?;
    let names = SiteNames::new(snapshot, options.view);
    if let Some(limits) = options.tree {
        let tree = stack_tree(&names, &walker, limits);
        let report = TreeReport {
            device,
            after_event,
            allocated_bytes: tree.bytes,
            blocks: tree.blocks,
            all_frames: options.view == FrameView::All,
            depth: limits.depth,
            min_share: limits.min_share,
            tree,
        };
        if options.json {
            return out.json(&report);
        }
        out.write(&render_tree(&report))?;
        out.flush()?;
        return Ok(());
    }
    let mut sites = sites_named_by(&names, &walker);
    let allocated_bytes = sites.iter().map(|s| s.bytes).sum();
    sort_sites(&mut sites, options.order);
    sites.truncate(options.limit);
    let report = TopReport {
        device,
        after_event,
        allocated_bytes,
        sites,
    };
    if options.json {
        return out.json(&report);
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "device {} {}: {} allocated",
        report.device,
        state_label(report.after_event),
        format_size(report.allocated_bytes)
    );
    let _ = writeln!(
        text,
        "{:>12}  {:>12}  {:>7}  site",
        "bytes", "requested", "blocks"
    );
    for site in &report.sites {
        let _ = writeln!(
            text,
            "{:>12}  {:>12}  {:>7}  {}",
            format_size(site.bytes),
            format_size(site.requested_bytes),
            count(site.blocks),
            site.label
        );
    }
    out.write(&text)?;
    out.flush()?;
    Ok(())
}

/// `after event 1,234`, or `before event 0` for the state before the first event.
pub fn state_label(after_event: Option<usize>) -> String {
    match after_event {
        Some(number) => format!("after event {}", count(number as u64)),
        None => "before event 0".to_string(),
    }
}

/// What `top --tree` prints.
#[derive(Debug, Serialize)]
pub struct TreeReport {
    /// Device index.
    pub device: u32,
    /// The state shown: after this event, by its number (PyTorch's index in
    /// `device_traces`, as `--at` takes it); `None` before the first event.
    pub after_event: Option<usize>,
    /// Bytes in allocated blocks (block sizes, not requested sizes): the root's bytes.
    pub allocated_bytes: u64,
    /// Allocated blocks.
    pub blocks: u64,
    /// Whether every frame memory_viz shows is in the paths (`--all-frames`), or only the
    /// user's own.
    pub all_frames: bool,
    /// Levels below the root kept (`--depth`).
    pub depth: usize,
    /// Smallest share of `allocated_bytes`, from 0 to 1, a node keeps its own row with
    /// (`--min-share` / 100); smaller siblings are one `<N smaller>` node.
    pub min_share: f64,
    /// The root, `all allocated blocks`; each node's bytes are the sum of its children's.
    pub tree: TreeNode,
}

/// The tree as indented text, one node a line.
fn render_tree(report: &TreeReport) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "device {} {}: {} allocated in {}, by call stack, outermost frame first ({}; block \
         sizes, not requested sizes; nodes under {:.1} % of it folded, {} at most)",
        report.device,
        state_label(report.after_event),
        format_size(report.allocated_bytes),
        counted(report.blocks, "block"),
        if report.all_frames {
            "every frame memory_viz shows"
        } else {
            "the user's own frames"
        },
        report.min_share * 100.0,
        counted(report.depth as u64, "level")
    );
    let _ = writeln!(
        text,
        "{:>12}  {:>7}  {:>7}  stack",
        "bytes", "share", "blocks"
    );
    for (depth, node) in walk(&report.tree) {
        let share = if report.allocated_bytes == 0 {
            0.0
        } else {
            node.bytes as f64 * 100.0 / report.allocated_bytes as f64
        };
        let _ = writeln!(
            text,
            "{:>12}  {:>6.1}%  {:>7}  {}{}",
            format_size(node.bytes),
            share,
            count(node.blocks),
            "  ".repeat(depth),
            node.name
        );
    }
    text
}
