//! Leaks: allocations made during a trace and still alive at its end, grouped by site, and the
//! sites whose live memory grows from one annotated step to the next.
//!
//! Steps are the outermost annotation tags (`annotate("step3")` around a training step): each
//! time the outermost tag changes, the step that ends is measured. A site grows when its live
//! bytes never fall from one step's end to the next and end higher than they started, over at
//! least two steps. Inside a step a site is named without the step's own tag
//! (`step3/forward/attn` is `forward/attn`), so the same code is one site in every step.

use super::frames::FrameView;
use super::sites::{sites_named_by, Site, SiteName, SiteNames};
use super::timeline::{steps, walker};
use blockpool::trace::{Action, BlockState, Snapshot};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// What [`find_leaks`] found on one device.
#[derive(Debug, Serialize)]
pub struct LeakReport {
    /// Device index.
    pub device: u32,
    /// Sites of the blocks allocated during the trace and still allocated at its end, most
    /// bytes first.
    pub alive_at_end: Vec<Site>,
    /// Bytes still allocated at the end that were allocated before the trace began (long-lived
    /// state such as weights, or allocations whose event the ring buffer dropped).
    pub alive_from_before_bytes: u64,
    /// The steps, in order, as measured (outermost annotation tags).
    pub steps: Vec<String>,
    /// Sites whose live bytes grow across the steps, most growth first.
    pub growing: Vec<Growth>,
}

/// A site whose live memory grows across steps.
#[derive(Debug, Serialize)]
pub struct Growth {
    /// The site.
    pub site: String,
    /// The autograd node the site's allocations ran under, or `null`.
    pub autograd_node: Option<String>,
    /// The site with its autograd node beside it, as text prints it.
    pub label: String,
    /// Its live allocated bytes at the end of each step, in [`LeakReport::steps`] order.
    pub bytes_per_step: Vec<u64>,
    /// Last minus first.
    pub growth_bytes: u64,
}

/// Finds the leaks of `device`, sites named by the user's own code.
pub fn find_leaks(snapshot: &Snapshot, device: u32) -> anyhow::Result<LeakReport> {
    find_leaks_in(snapshot, device, FrameView::User)
}

/// Finds the leaks of `device`, sites named in `view`.
pub fn find_leaks_in(
    snapshot: &Snapshot,
    device: u32,
    view: FrameView,
) -> anyhow::Result<LeakReport> {
    let names = SiteNames::new(snapshot, view);
    // Addresses allocated during the trace and not yet freed.
    let mut allocated_here: HashSet<u64> = HashSet::new();
    for event in snapshot.device_events(device) {
        match event.action {
            Action::Alloc => {
                allocated_here.insert(event.addr);
            }
            Action::FreeCompleted => {
                allocated_here.remove(&event.addr);
            }
            _ => {}
        }
    }
    let mut walker = walker(snapshot, device)?;
    let steps = steps(snapshot, device);
    let mut per_step = Vec::with_capacity(steps.len());
    for step in &steps {
        walker.seek(step.end)?;
        per_step.push(sites_named_by(&names, &walker, true));
    }
    walker.seek(walker.len())?;
    let end = walker.state();
    let mut alive = Vec::new();
    let mut alive_from_before_bytes = 0u64;
    let blocks = end.segments.iter().flat_map(|s| &s.blocks);
    for block in blocks.chain(&end.unsegmented) {
        if block.state != BlockState::ActiveAllocated {
            continue;
        }
        if allocated_here.contains(&block.address) {
            alive.push(block.clone());
        } else {
            alive_from_before_bytes = alive_from_before_bytes.saturating_add(block.size);
        }
    }
    let alive_at_end = group(&names, &alive);
    Ok(LeakReport {
        device,
        alive_at_end,
        alive_from_before_bytes,
        growing: growing(&per_step),
        steps: steps.into_iter().map(|s| s.tag).collect(),
    })
}

/// Blocks grouped by site, most bytes first.
fn group(names: &SiteNames, blocks: &[blockpool::trace::snapshot::Block]) -> Vec<Site> {
    let mut by_site: BTreeMap<&SiteName, Site> = BTreeMap::new();
    for block in blocks {
        let name = names.get(block.context);
        let site = by_site
            .entry(name)
            .or_insert_with(|| Site::new(name.clone()));
        site.bytes = site.bytes.saturating_add(block.size);
        site.requested_bytes = site.requested_bytes.saturating_add(block.requested);
        site.blocks = site.blocks.saturating_add(1);
    }
    let mut sites: Vec<Site> = by_site.into_values().collect();
    super::sites::sort_sites(&mut sites, super::sites::SiteOrder::Bytes);
    sites
}

/// The sites whose bytes never fall across `per_step` and end higher, over two steps or more.
fn growing(per_step: &[Vec<Site>]) -> Vec<Growth> {
    if per_step.len() < 2 {
        return Vec::new();
    }
    let names: BTreeMap<&str, &Site> = per_step
        .iter()
        .flatten()
        .map(|s| (s.label.as_str(), s))
        .collect();
    let mut growth: Vec<Growth> = names
        .iter()
        .filter_map(|(&name, site)| {
            let bytes: Vec<u64> = per_step
                .iter()
                .map(|sites| {
                    sites
                        .iter()
                        .find(|s| s.label == name)
                        .map_or(0, |s| s.bytes)
                })
                .collect();
            let never_falls = bytes.windows(2).all(|w| w[1] >= w[0]);
            let (first, last) = (bytes[0], bytes[bytes.len() - 1]);
            (never_falls && last > first).then(|| Growth {
                site: site.site.clone(),
                autograd_node: site.autograd_node.clone(),
                label: name.to_string(),
                growth_bytes: last - first,
                bytes_per_step: bytes,
            })
        })
        .collect();
    growth.sort_by(|a, b| {
        b.growth_bytes
            .cmp(&a.growth_bytes)
            .then_with(|| a.label.cmp(&b.label))
    });
    growth
}
