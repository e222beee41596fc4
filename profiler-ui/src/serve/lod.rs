//! Level of detail: a window of a device's states cut into pixel columns, and the timeline
//! bands and memory curves drawn in those columns, so a response stays a few thousand numbers
//! however many events the window holds.
//!
//! Each column stands for the states it covers by one representative state, the one where the
//! plotted memory is highest, so peaks survive any zoom. Bands: `limit` allocations in the
//! window are stacked individually (oldest at the bottom, as PyTorch's viewer stacks them),
//! each drawn as runs of columns at a constant height; every other allocation the filter
//! keeps is summed into one band on top ([`summarized`] says what one column of it holds).
//! The ones shown are those alive in some column's state (the others would draw nothing)
//! that stand out most where they live: the largest share of the memory alive in their
//! columns, so every stretch of the window shows its own largest allocations, not only the
//! stretch where the window's largest live. The same stacking draws the reserved segments
//! ([`segment_timeline`]). The work per request is one pass over the allocations, the
//! window's blocks of states ([`Series`]; every state when a filter makes the request sum its
//! own), plus the columns each shown band is alive in.

use super::filter::Filter;
use super::joined;
use super::model::{Allocation, DeviceModel, TraceModel};
pub use alive::alive_bytes;
use alive::kept_and_alive;
pub use alive::Sums;
pub use curves::curves;
use curves::RangeMax;
use serde::Serialize;
use series::peak_in;
pub use series::Series;
use stacking::{count_runs, stack, ColumnFinder};
use std::collections::BinaryHeap;

/// Most columns a request may ask for.
pub const MAX_WIDTH: u64 = 4000;
/// Allocations drawn on their own when a request does not say (PyTorch's memory_viz draws
/// 15,000 by default too).
pub const DEFAULT_BANDS: u64 = 15_000;
/// Most allocations a request may ask to see individually.
pub const MAX_BANDS: u64 = 100_000;
/// Most runs one timeline response carries; past it fewer bands are shown individually.
pub const MAX_RUNS: usize = 100_000;

/// What the x axis counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Axis {
    /// State indices (events applied).
    Event,
    /// Microseconds since the trace's time origin.
    Time,
}

/// A window of the x axis cut into columns: `[from, to)` in the axis' unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    /// What `from` and `to` count.
    pub axis: Axis,
    /// First value shown.
    pub from: u64,
    /// End of the window (exclusive).
    pub to: u64,
    /// Columns (pixels).
    pub width: usize,
}

/// The states column `c` covers: `[lo, hi)`, never empty.
pub fn columns(device: &DeviceModel, window: &Window) -> Vec<(usize, usize)> {
    let states = device.state_time_us.len().max(1);
    let width = window.width.max(1);
    let cut = |from: u64, to: u64, c: usize| -> u64 {
        let span = u128::from(to - from);
        from + (span * c as u128 / width as u128) as u64
    };
    match window.axis {
        Axis::Event => {
            let from = window.from.min(states as u64 - 1);
            let to = window.to.clamp(from + 1, states as u64);
            (0..width)
                .map(|c| {
                    let lo = cut(from, to, c) as usize;
                    let hi = cut(from, to, c + 1) as usize;
                    (lo, hi.max(lo + 1))
                })
                .collect()
        }
        Axis::Time => {
            let times = &device.state_time_us;
            let from = window.from;
            let to = window.to.max(from.saturating_add(1));
            let first_at = |t: u64| times.partition_point(|&s| s < t);
            (0..width)
                .map(|c| {
                    let lo = first_at(cut(from, to, c));
                    let hi = first_at(cut(from, to, c + 1));
                    if hi > lo {
                        (lo, hi)
                    } else {
                        // No event in the column: the state in effect there.
                        let s = lo.saturating_sub(1).min(states - 1);
                        (s, s + 1)
                    }
                })
                .collect()
        }
    }
}

/// One allocation drawn on its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Band {
    /// The allocation's id (for `/api/allocation`).
    pub id: usize,
    /// Block size in bytes: the band's height.
    pub size: u64,
    /// Stream handle.
    pub stream: u64,
    /// Its site.
    pub site: String,
    /// First state it is alive in.
    pub start: usize,
    /// First state it is no longer alive in (`events + 1`: alive at the end).
    pub end: usize,
    /// `[first column, end column (exclusive), bytes below it]`, left to right.
    pub runs: Vec<[u64; 3]>,
}

/// The active memory timeline of a window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    /// The window, as clamped.
    pub window: Window,
    /// The state each column shows.
    pub states: Vec<usize>,
    /// Bytes the filter keeps alive in each column's state.
    pub total: Vec<u64>,
    /// Of those, the bytes in the summarized band.
    pub other: Vec<u64>,
    /// The allocations drawn on their own, bottom of the stack first.
    pub bands: Vec<Band>,
    /// Allocations alive somewhere in the window that the filter keeps.
    pub matched: usize,
    /// The most bands this answer could draw on their own: the limit asked for, or fewer when
    /// that many would have made more than [`MAX_RUNS`] runs.
    pub limit: usize,
}

/// The timeline of `device` in `window`, with at most `limit` bands drawn on their own.
pub fn timeline(
    model: &TraceModel,
    device: &DeviceModel,
    window: Window,
    filter: &Filter,
    limit: usize,
) -> Timeline {
    let layout = Layout::of_allocations(model, device, window, filter);
    layout.timeline(model, &device.allocations, limit).0
}

/// The active cached segment timeline of `device` in `window`: every reserved range (see
/// [`segment_spans`](super::lifetimes::segment_spans)) as a band, oldest at the bottom, at most
/// `limit` of them on their own; `total` is the reserved bytes of each column's state.
pub fn segment_timeline(
    model: &TraceModel,
    device: &DeviceModel,
    window: Window,
    limit: usize,
) -> Timeline {
    let alive = Some(&device.segment_bytes);
    let layout = Layout::new(device, &device.segments, window, |_| true, alive);
    layout.timeline(model, &device.segments, limit).0
}

/// What the summarized band of one column holds: the allocations the filter keeps that are
/// alive in the column's state but not drawn on their own, by site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summarized {
    /// The column asked about.
    pub column: usize,
    /// The state the column shows.
    pub state: usize,
    /// Allocations in the summarized band there.
    pub allocations: usize,
    /// Their bytes (block sizes), the band's height.
    pub bytes: u64,
    /// The sites with the most of those bytes, most first, at most [`SUMMARIZED_SITES`].
    pub sites: Vec<SummarizedSite>,
    /// Sites left out of `sites`.
    pub more_sites: usize,
}

/// One site's share of a summarized band.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SummarizedSite {
    /// The site.
    pub site: String,
    /// Its bytes in the band.
    pub bytes: u64,
    /// Its allocations in the band.
    pub allocations: usize,
}

/// Most sites a [`Summarized`] lists.
pub const SUMMARIZED_SITES: usize = 8;

/// What column `column` of the timeline that [`timeline`] draws for the same arguments sums
/// into its summarized band; `None` for a column past the window's width.
pub fn summarized(
    model: &TraceModel,
    device: &DeviceModel,
    window: Window,
    filter: &Filter,
    limit: usize,
    column: usize,
) -> Option<Summarized> {
    let layout = Layout::of_allocations(model, device, window, filter);
    let state = *layout.states.get(column)?;
    let (_, shown) = layout.timeline(model, &device.allocations, limit);
    let mut by_site: std::collections::HashMap<&str, (u64, usize)> = Default::default();
    let (mut allocations, mut bytes) = (0, 0u64);
    for &id in &layout.candidates {
        let a = &device.allocations[id];
        if a.start <= state && state < a.end && shown.binary_search(&id).is_err() {
            allocations += 1;
            bytes = bytes.wrapping_add(a.size);
            let entry = by_site.entry(model.allocation_site(a)).or_default();
            entry.0 = entry.0.wrapping_add(a.size);
            entry.1 += 1;
        }
    }
    let mut sites: Vec<SummarizedSite> = by_site
        .into_iter()
        .map(|(site, (bytes, allocations))| SummarizedSite {
            site: site.to_owned(),
            bytes,
            allocations,
        })
        .collect();
    sites.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    let more_sites = sites.len().saturating_sub(SUMMARIZED_SITES);
    sites.truncate(SUMMARIZED_SITES);
    Some(Summarized {
        column,
        state,
        allocations,
        bytes,
        sites,
        more_sites,
    })
}

/// A window's columns, the lifetimes alive in it that are kept, and the state and kept bytes
/// each column shows.
struct Layout {
    window: Window,
    first: usize,
    last: usize,
    /// Ids of the kept lifetimes alive somewhere in the window, ascending.
    candidates: Vec<usize>,
    states: Vec<usize>,
    total: Vec<u64>,
}

impl Layout {
    /// The layout of `window` over the device's allocations that `filter` keeps.
    fn of_allocations(
        model: &TraceModel,
        device: &DeviceModel,
        window: Window,
        filter: &Filter,
    ) -> Layout {
        let mask = filter.context_mask(model);
        let alive = (*filter == Filter::default()).then_some(&device.allocation_bytes);
        let keeps = |a: &Allocation| filter.keeps(a, mask.as_deref());
        Layout::new(device, &device.allocations, window, keeps, alive)
    }

    /// The layout of `window` over the lifetimes `spans` that `keeps` keeps; `alive`, when
    /// it keeps them all, gives the bytes alive at every state, made once
    /// ([`alive_bytes`]), instead of a pass over the window's lifetimes and states.
    fn new(
        device: &DeviceModel,
        spans: &[Allocation],
        window: Window,
        keeps: impl Fn(&Allocation) -> bool + Sync,
        alive: Option<&Series>,
    ) -> Layout {
        let cols = columns(device, &window);
        let (first, last) = match (cols.first(), cols.last()) {
            (Some(f), Some(l)) => (f.0, l.1),
            _ => (0, 1),
        };
        // The window's lifetimes kept, and each column's peak state and its bytes: from the
        // device's series or, filtered, from the kept lifetimes summed; in two halves for a
        // window of many lifetimes or states.
        let split = last - first >= HALVES_FROM;
        let (candidates, (states, total)) = match alive {
            Some(alive) => {
                let candidates = in_halves(spans, |offset, part| {
                    let kept = part.iter().enumerate();
                    kept.filter(|(_, a)| a.start < last && a.end > first && keeps(a))
                        .map(|(i, _)| offset + i)
                        .collect()
                });
                let peaks = column_peaks(
                    split,
                    &cols,
                    |lo, hi| alive.peak(lo, hi),
                    |s| alive.get(s).copied(),
                );
                (candidates, peaks)
            }
            None => {
                // Summed into the device's buffers when no other request holds them.
                let mut held = device.sums.try_lock().ok();
                let mut own = Sums::default();
                let sums = held.as_deref_mut().unwrap_or(&mut own);
                let candidates = kept_and_alive(spans, first, last, &keeps, sums);
                let summed = &sums[0][..];
                let peaks = column_peaks(
                    split,
                    &cols,
                    |lo, hi| first + peak_in(summed, lo - first, hi - first),
                    |s| summed.get(s - first).copied(),
                );
                (candidates, peaks)
            }
        };
        Layout {
            window,
            first,
            last,
            candidates,
            states,
            total,
        }
    }

    /// The timeline with at most `limit` bands on their own (fewer when they would make more
    /// than [`MAX_RUNS`] runs), and the ids of those shown, ascending.
    ///
    /// When the ranked bands would make too many runs, the most of the best-ranked that fit
    /// are found by a binary search over counts of runs ([`count_runs`], without stacking),
    /// and only those are stacked.
    fn timeline(
        &self,
        model: &TraceModel,
        spans: &[Allocation],
        limit: usize,
    ) -> (Timeline, Vec<usize>) {
        let ranked = self.ranked(spans, limit);
        let mut cap = limit;
        if count_runs(spans, &ranked, &self.states) > MAX_RUNS {
            // runs(0) = 0 fits; `fits` stays a count that fits, `over` one that does not.
            let (mut fits, mut over) = (0, ranked.len());
            while over - fits > 1 {
                let mid = fits + (over - fits) / 2;
                if count_runs(spans, &ranked[..mid], &self.states) <= MAX_RUNS {
                    fits = mid;
                } else {
                    over = mid;
                }
            }
            cap = fits;
        }
        let stacked = stack(spans, &ranked[..cap.min(ranked.len())], &self.states);
        debug_assert!(stacked.runs <= MAX_RUNS, "the runs were counted to fit");
        // What the bands cover of each column, by a difference array over their runs.
        let mut covered = vec![0u64; self.total.len() + 1];
        for (id, runs) in &stacked.bands {
            let size = spans[*id].size;
            // Runs lie within the columns, so both ends index `covered`.
            for run in runs {
                let (c0, c1) = (run[0] as usize, run[1] as usize);
                covered[c0] = covered[c0].wrapping_add(size);
                covered[c1] = covered[c1].wrapping_sub(size);
            }
        }
        let mut running = 0u64;
        let other = self
            .total
            .iter()
            .zip(&covered)
            .map(|(total, d)| {
                running = running.wrapping_add(*d);
                total.saturating_sub(running)
            })
            .collect();
        let bands = stacked
            .bands
            .into_iter()
            .map(|(id, runs)| {
                let a = &spans[id];
                Band {
                    id,
                    size: a.size,
                    stream: a.stream,
                    site: model.allocation_site(a).to_string(),
                    start: a.start,
                    end: a.end,
                    runs,
                }
            })
            .collect();
        let timeline = Timeline {
            window: clamped(self.window, self.first, self.last),
            states: self.states.clone(),
            total: self.total.clone(),
            other,
            bands,
            matched: self.candidates.len(),
            limit: cap,
        };
        (timeline, stacked.shown)
    }

    /// The candidates that draw something (alive in some column's state), at most `limit` of
    /// them, those that stand out most where they live first: the largest share of the most
    /// memory alive in their columns (compared without division), then the largest. Each half
    /// of the candidates keeps its best `limit` in a heap as it goes, so millions of
    /// candidates cost a comparison each, not a list of them all to select from (unless the
    /// limit is near their count).
    fn ranked(&self, spans: &[Allocation], limit: usize) -> Vec<usize> {
        let peaks = RangeMax::new(&self.total);
        let columns = ColumnFinder::new(&self.states);
        let best_of = |_, ids: &[usize]| {
            let visible = ids.iter().filter_map(|&id| {
                let a = &spans[id];
                let (c0, c1) = columns.of(a);
                (c0 < c1).then(|| Ranked {
                    id,
                    size: a.size,
                    most: peaks.max(c0, c1).max(a.size).max(1),
                })
            });
            // A limit near the candidates' count keeps them all, to be selected from after.
            match limit.saturating_mul(64) < ids.len() {
                true => best(visible, limit),
                false => visible.collect(),
            }
        };
        let mut visible = in_halves(&self.candidates, best_of);
        if limit < visible.len() {
            visible.select_nth_unstable(limit);
            visible.truncate(limit);
        }
        visible.sort_unstable();
        visible.into_iter().map(|r| r.id).collect()
    }
}

/// The best `limit` of `items` (the least, as [`Ranked`] orders them), in no order: a heap of
/// the best so far, whose worst each item is compared with.
fn best(items: impl Iterator<Item = Ranked>, limit: usize) -> Vec<Ranked> {
    let mut best: BinaryHeap<Ranked> = BinaryHeap::with_capacity(limit);
    for item in items {
        if best.len() < limit {
            best.push(item);
        } else if let Some(mut worst) = best.peek_mut() {
            if item < *worst {
                *worst = item;
            }
        }
    }
    best.into_vec()
}

/// A candidate as [`Layout::ranked`] orders them, the best first: by the largest share of the
/// most memory alive in its columns (`size / most`, compared without division), then the
/// largest, then the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ranked {
    id: usize,
    size: u64,
    most: u64,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let left = u128::from(other.size) * u128::from(self.most);
        let right = u128::from(self.size) * u128::from(other.most);
        left.cmp(&right)
            .then(other.size.cmp(&self.size))
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Each column's peak state (`peak` of its states) and the bytes there (`at` a state, 0 when
/// it has none), the columns in two halves at once when `split`.
fn column_peaks(
    split: bool,
    cols: &[(usize, usize)],
    peak: impl Fn(usize, usize) -> usize + Sync,
    at: impl Fn(usize) -> Option<u64>,
) -> (Vec<usize>, Vec<u64>) {
    let states: Vec<usize> = in_halves_if(split, cols, |_, part| {
        part.iter().map(|&(lo, hi)| peak(lo, hi)).collect()
    });
    let total = states.iter().map(|&s| at(s).unwrap_or(0)).collect();
    (states, total)
}

/// Lists at least this long are worked on in two halves at once.
const HALVES_FROM: usize = 1 << 16;

/// `work` over `items` in order (given each part and where it starts), split in two halves
/// worked on at once when they are long (the machine's second core: a window of a large trace
/// has millions of lifetimes); the results are concatenated, first half first.
fn in_halves<I: Sync, T: Send>(items: &[I], work: impl Fn(usize, &[I]) -> Vec<T> + Sync) -> Vec<T> {
    in_halves_if(items.len() >= HALVES_FROM, items, work)
}

/// [`in_halves`], split when `split` says (and there are two items at least).
fn in_halves_if<I: Sync, T: Send>(
    split: bool,
    items: &[I],
    work: impl Fn(usize, &[I]) -> Vec<T> + Sync,
) -> Vec<T> {
    if !split || items.len() < 2 {
        return work(0, items);
    }
    let middle = items.len() / 2;
    let (left, right) = items.split_at(middle);
    std::thread::scope(|scope| {
        let right = scope.spawn(|| work(middle, right));
        let mut done = work(0, left);
        done.extend(joined(right));
        done
    })
}

/// The window as the columns cover it.
fn clamped(window: Window, first: usize, last: usize) -> Window {
    let width = window.width.max(1);
    match window.axis {
        Axis::Event => Window {
            from: first as u64,
            to: last as u64,
            width,
            ..window
        },
        Axis::Time => Window {
            to: window.to.max(window.from.saturating_add(1)),
            width,
            ..window
        },
    }
}

mod alive;
mod curves;
mod series;
mod stacking;
#[cfg(test)]
mod tests;
