//! `memtrace top FILE [--at EVENT | --peak] [--sort bytes|blocks|site] [--limit N]`: live
//! allocated memory by site at one point of the trace (the end by default).

use crate::analysis::sites::{sites_in, sort_sites, Site, SiteOrder};
use crate::analysis::timeline::{pick_device, walker, Point};
use crate::format::{count, format_size};
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
    /// The state index shown (after this many of the device's events).
    pub index: usize,
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
    /// `--json`.
    pub json: bool,
}

/// Runs `memtrace top`.
pub fn run(file: &Path, options: TopOptions, out: &mut Output) -> anyhow::Result<()> {
    let trace = load_trace(file).context("cannot read the trace")?;
    let snapshot = &trace.snapshot;
    let device = pick_device(snapshot, options.device)?;
    let index = options.point.resolve(snapshot, device)?;
    let mut walker = walker(snapshot, device)?;
    walker.seek(index)?;
    let state = walker.state();
    let mut sites = sites_in(snapshot, &state);
    let allocated_bytes = sites.iter().map(|s| s.bytes).sum();
    sort_sites(&mut sites, options.order);
    sites.truncate(options.limit);
    let report = TopReport {
        device,
        index,
        allocated_bytes,
        sites,
    };
    if options.json {
        return out.json(&report);
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "device {} after event {}: {} allocated",
        report.device,
        count(report.index as u64),
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
            site.site
        );
    }
    out.write(&text)?;
    out.flush()?;
    Ok(())
}
