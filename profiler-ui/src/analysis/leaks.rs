//! Leaks of a trace file: the sites whose live memory grows step after step, the persistent
//! memory (weights, optimizer state) apart from it, and what was allocated during the trace and
//! is still alive at its end.
//!
//! Growth and persistence are blockpool's own step detector ([`blockpool::leak`]), the code a
//! training loop runs on live handles, fed here with what a trace says was live. A step is an
//! annotation range the user names (see [`steps`](super::steps)); memory is measured before the
//! first step begins (the baseline: weights loaded before the loop are there) and at the end of
//! each step. Inside a step a site is named without the step's own tag (`step3/forward/attn` is
//! `forward/attn`), so the same code is one site in every step. A trace with no annotations is
//! measured at its start and its end, which tells persistent memory apart but nothing grows (a
//! snapshot without events only at its end, which tells neither).

use super::frames::FrameView;
use super::sites::{
    allocated_by_context, sort_sites, Site, SiteName, SiteNames, SiteOrder, BEFORE_RECORDING,
};
use super::steps::{find_steps, StepSiteNames, StepsUsed, DEFAULT_STEP_PREFIX};
use super::timeline::walker;
use blockpool::leak::{analyze_steps, GrowthSettings, SiteSeries, SiteTotal};
use blockpool::trace::{Action, BlockState, Snapshot, StateWalker};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// How to look for leaks: site names, what a step is, and how many growing steps flag a site.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeakOptions {
    /// Whose frames name sites.
    pub view: FrameView,
    /// The prefix of the annotation that marks a step (`ProfilerStep#`).
    pub step_prefix: String,
    /// K: consecutive growing steps that flag a site.
    pub min_growth_steps: u32,
    /// Steps after the first measurement by which memory must have reached its size to be
    /// persistent.
    pub warmup_steps: u32,
}

impl Default for LeakOptions {
    fn default() -> LeakOptions {
        LeakOptions {
            view: FrameView::User,
            step_prefix: DEFAULT_STEP_PREFIX.to_string(),
            min_growth_steps: GrowthSettings::DEFAULT_MIN_GROWTH_STEPS,
            warmup_steps: GrowthSettings::DEFAULT_WARMUP_STEPS,
        }
    }
}

impl LeakOptions {
    /// The step detector's rules these options ask for.
    pub fn growth_settings(&self) -> GrowthSettings {
        GrowthSettings {
            min_growth_steps: self.min_growth_steps,
            warmup_steps: self.warmup_steps,
        }
    }
}

/// What [`find_leaks`] found on one device.
#[derive(Debug, Serialize)]
pub struct LeakReport {
    /// Device index.
    pub device: u32,
    /// The steps, in order: their annotation tags.
    pub steps: Vec<String>,
    /// What a step is in this trace and which rule found the steps.
    pub step_rule: StepsUsed,
    /// The points memory was measured at, in order: `before STEP` (the first step's start),
    /// then each step's end by its tag; `start of the trace` and `end of the trace` when there
    /// are no steps (only the end when there are no events either). The `*_by_step` series
    /// follow this order.
    pub measured_at: Vec<String>,
    /// The detector's rules: `min_growth_steps` (K) and `warmup_steps`.
    pub settings: GrowthSettings,
    /// Sites whose live bytes or blocks grew at each of the last K measurements or more, most
    /// growth per step first.
    pub growing: Vec<Growth>,
    /// Sites with the same live bytes and blocks at every measurement since one of the first
    /// `warmup_steps + 1`: memory allocated early and kept. Most bytes first.
    pub persistent: Vec<Persistent>,
    /// Sites of the blocks allocated during the trace and still allocated at its end, the
    /// persistent sites left out, most bytes first.
    pub alive_at_end: Vec<Site>,
    /// Bytes still allocated at the end that were allocated before the trace began (long-lived
    /// state such as weights, or allocations whose event the ring buffer dropped).
    pub alive_from_before_bytes: u64,
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
    /// Consecutive growing steps up to the last measurement.
    pub steps: u64,
    /// The measurement the growth started from.
    pub since: String,
    /// Live bytes at the last measurement.
    pub bytes: u64,
    /// Live blocks at the last measurement.
    pub blocks: u64,
    /// Bytes gained since `since`.
    pub growth_bytes: u64,
    /// Blocks gained since `since`.
    pub growth_blocks: u64,
    /// `growth_bytes / steps`, rounded down.
    pub growth_bytes_per_step: u64,
    /// `growth_blocks / steps`, rounded down.
    pub growth_blocks_per_step: u64,
    /// Live bytes at each measurement ([`LeakReport::measured_at`]).
    pub bytes_by_step: Vec<u64>,
    /// Live blocks at each measurement.
    pub blocks_by_step: Vec<u64>,
}

/// A site whose memory was allocated early and kept unchanged.
#[derive(Debug, Serialize)]
pub struct Persistent {
    /// The site.
    pub site: String,
    /// The autograd node, or `null`.
    pub autograd_node: Option<String>,
    /// The site with its autograd node beside it.
    pub label: String,
    /// Live bytes.
    pub bytes: u64,
    /// Live blocks.
    pub blocks: u64,
    /// The measurement since which it has not changed.
    pub since: String,
}

/// The name of the measurement before the first step, or of the trace's start and end.
fn measurement_names(steps: &StepsUsed) -> Vec<(String, usize)> {
    match steps.steps.first() {
        Some(first) => std::iter::once((format!("before {}", first.tag), first.start))
            .chain(steps.steps.iter().map(|s| (s.tag.clone(), s.end)))
            .collect(),
        None => Vec::new(),
    }
}

/// Finds the leaks of `device` as `options` say.
pub fn find_leaks(
    snapshot: &Snapshot,
    device: u32,
    options: &LeakOptions,
) -> anyhow::Result<LeakReport> {
    find_leaks_from(snapshot, device, options, walker(snapshot, device)?)
}

/// As [`find_leaks`], walking `walker` (the device's, at any position) instead of rebuilding
/// the device's states.
pub fn find_leaks_from(
    snapshot: &Snapshot,
    device: u32,
    options: &LeakOptions,
    mut walker: StateWalker,
) -> anyhow::Result<LeakReport> {
    let names = SiteNames::new(snapshot, options.view);
    let step_rule = find_steps(snapshot, device, &options.step_prefix);
    let in_step = StepSiteNames::new(&names, &step_rule, options.view);
    let mut points = measurement_names(&step_rule);
    if points.is_empty() {
        points = vec![("end of the trace".to_string(), walker.len())];
        // Without events the start is the end: one measurement, which judges nothing.
        if !walker.is_empty() {
            points.insert(0, ("start of the trace".to_string(), 0));
        }
    }
    // Each label's name, for the JSON's site and autograd node.
    let mut labels: HashMap<String, SiteName> = HashMap::new();
    let mut measurements = Vec::with_capacity(points.len());
    for (name, index) in &points {
        walker.seek(*index)?;
        let mut by_label: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for ((context, before), tally) in allocated_by_context(&names, &walker) {
            let site = if before {
                SiteName {
                    site: BEFORE_RECORDING.to_string(),
                    autograd_node: None,
                }
            } else {
                in_step.get(context).clone()
            };
            let label = site.label();
            let entry = by_label.entry(label.clone()).or_default();
            entry.0 = entry.0.saturating_add(tally.bytes);
            entry.1 = entry.1.saturating_add(tally.blocks);
            labels.entry(label).or_insert(site);
        }
        let totals = by_label
            .into_iter()
            .map(|(site, (bytes, count))| SiteTotal { site, bytes, count })
            .collect();
        measurements.push((name.clone(), totals));
    }
    let settings = options.growth_settings();
    let analysis = analyze_steps(measurements, settings)?;
    let name_of = |label: &str| labels.get(label).cloned().unwrap_or_default();
    let growing = analysis
        .findings
        .growing
        .iter()
        .zip(&analysis.growing)
        .map(|(g, series)| {
            let SiteSeries { bytes, counts, .. } = series.clone();
            let name = name_of(&g.site);
            Growth {
                site: name.site,
                autograd_node: name.autograd_node,
                label: g.site.clone(),
                steps: g.steps,
                since: g.since_step.clone(),
                bytes: g.bytes,
                blocks: g.count,
                growth_bytes: g.growth_bytes,
                growth_blocks: g.growth_count,
                growth_bytes_per_step: g.bytes_per_step,
                growth_blocks_per_step: g.count_per_step,
                bytes_by_step: bytes,
                blocks_by_step: counts,
            }
        })
        .collect();
    let persistent: Vec<Persistent> = analysis
        .findings
        .persistent
        .iter()
        .map(|p| {
            let name = name_of(&p.site);
            Persistent {
                site: name.site,
                autograd_node: name.autograd_node,
                label: p.site.clone(),
                bytes: p.bytes,
                blocks: p.count,
                since: p.since_step.clone(),
            }
        })
        .collect();
    let kept: HashSet<&str> = persistent.iter().map(|p| p.label.as_str()).collect();
    let (alive_at_end, alive_from_before_bytes) =
        alive_at_end(snapshot, device, &mut walker, &in_step, &kept)?;
    Ok(LeakReport {
        device,
        steps: step_rule.steps.iter().map(|s| s.tag.clone()).collect(),
        measured_at: analysis.steps,
        settings,
        growing,
        persistent,
        alive_at_end,
        alive_from_before_bytes,
        step_rule,
    })
}

/// The sites of the blocks allocated during the trace and alive at its end, named as inside a
/// step and without the sites in `kept`, most bytes first; and the bytes alive at the end that
/// were allocated before the trace began.
fn alive_at_end(
    snapshot: &Snapshot,
    device: u32,
    walker: &mut blockpool::trace::StateWalker,
    names: &StepSiteNames,
    kept: &HashSet<&str>,
) -> anyhow::Result<(Vec<Site>, u64)> {
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
    walker.seek(walker.len())?;
    let end = walker.state();
    let mut by_site: BTreeMap<&SiteName, Site> = BTreeMap::new();
    let mut from_before = 0u64;
    let blocks = end.segments.iter().flat_map(|s| &s.blocks);
    for block in blocks.chain(&end.unsegmented) {
        if block.state != BlockState::ActiveAllocated {
            continue;
        }
        if !allocated_here.contains(&block.address) {
            from_before = from_before.saturating_add(block.size);
            continue;
        }
        let name = names.get(block.context);
        let site = by_site
            .entry(name)
            .or_insert_with(|| Site::new(name.clone()));
        site.bytes = site.bytes.saturating_add(block.size);
        site.requested_bytes = site.requested_bytes.saturating_add(block.requested);
        site.blocks = site.blocks.saturating_add(1);
    }
    let mut sites: Vec<_> = by_site
        .into_values()
        .filter(|s| !kept.contains(s.label.as_str()))
        .collect();
    sort_sites(&mut sites, SiteOrder::Bytes);
    Ok((sites, from_before))
}
