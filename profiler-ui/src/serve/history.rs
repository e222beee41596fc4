//! The allocator state history (every event of a device, filtered and paged, as memory_viz's
//! "Allocator State History" lists them) and the out-of-memory events the timeline marks.
//!
//! Each row has two numbers: `index`, the state the event leads to (the `n`-th event of a
//! device, counting from 1, leads to state `n`, the index `/api/state?index=n` shows and the
//! timeline's event axis counts), and `event`, the event's number the page shows (its index in
//! the file's list, PyTorch's `device_traces`, 0-based; `None` for an annotation the import
//! inserted), see [`blockpool::trace::EventNumbers`].

use super::error::RequestError;
use super::model::{DeviceModel, TraceModel};
use blockpool::trace::{Action, TraceEvent};
use serde::Serialize;

/// Most events one page of the history holds.
pub const MAX_PAGE: usize = 2_000;

/// One event as the history lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventRow {
    /// The state it leads to (its number, counting from 1).
    pub index: usize,
    /// Its event number (the file's index, PyTorch's in `device_traces`); `None` for an
    /// annotation the import inserted.
    pub event: Option<usize>,
    /// `event 7`, or `annotation after event 7` for an inserted one.
    pub label: String,
    /// `alloc`, `free_requested`, `free_completed`, `segment_alloc`, ..., `oom`.
    pub action: &'static str,
    /// Address in hex; for an `oom`, the device's free bytes, as PyTorch records them (the
    /// same number is in `device_free` of [`OomMarker`]).
    pub addr: String,
    /// Size in bytes (for an `oom`: the request that failed).
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Stream handle.
    pub stream: u64,
    /// Microseconds since the origin (0 throughout in a file without times).
    pub time_us: u64,
    /// The site of its context.
    pub site: String,
    /// Its context id (for `/api/context`, which has the stack).
    pub context: u32,
}

/// One page of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventPage {
    /// Events of the device.
    pub events: usize,
    /// Events the filter keeps.
    pub matched: usize,
    /// Rows of the kept events skipped before this page.
    pub offset: usize,
    /// The page, in trace order.
    pub rows: Vec<EventRow>,
}

/// Which events the history keeps: `action` (names, comma-separated, any of them) and `q` (a
/// substring of the site, the tags or the stack, case-insensitive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// The actions kept; empty keeps all.
    pub actions: Vec<Action>,
    /// Lowercased text to find.
    pub text: Option<String>,
}

impl EventFilter {
    /// Reads `action` and `q`; an unknown action name is a bad parameter that lists the known.
    pub fn from_target(target: &super::query::Target) -> Result<EventFilter, RequestError> {
        let mut actions = Vec::new();
        for name in target.text("action").unwrap_or("").split(',') {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            let action = Action::ALL
                .into_iter()
                .find(|a| a.as_str() == name)
                .ok_or_else(|| RequestError::BadParameter {
                    name: "action",
                    reason: format!(
                        "{name:?} is not one of {}",
                        Action::ALL.map(Action::as_str).join(", ")
                    ),
                })?;
            actions.push(action);
        }
        let text = target
            .text("q")
            .map(|t| t.trim().to_lowercase())
            .filter(|t| !t.is_empty());
        Ok(EventFilter { actions, text })
    }
}

fn row(model: &TraceModel, device: &DeviceModel, index: usize, e: &TraceEvent) -> EventRow {
    EventRow {
        index,
        event: device.numbers.number(index - 1),
        label: device.numbers.label(index - 1),
        action: e.action.as_str(),
        addr: format!("{:#x}", e.addr),
        size: e.size,
        requested: e.requested,
        stream: e.stream.raw(),
        time_us: e.time_us,
        site: model.context_text(e.context).site.clone(),
        context: e.context.0,
    }
}

/// The `limit` events of `device` that `filter` keeps, after skipping `offset` of them.
pub fn event_page(
    model: &TraceModel,
    device: &DeviceModel,
    filter: &EventFilter,
    offset: usize,
    limit: usize,
) -> EventPage {
    // Per context id, whether its texts hold the search (computed once, not per event).
    let mask: Option<Vec<bool>> = filter.text.as_deref().map(|needle| {
        model
            .contexts
            .iter()
            .map(|c| {
                c.tags.contains(needle)
                    || c.stack.contains(needle)
                    || c.site.to_lowercase().contains(needle)
            })
            .collect()
    });
    let walker = super::tables::lock(device);
    let events = walker.events();
    let kept = |e: &TraceEvent| {
        (filter.actions.is_empty() || filter.actions.contains(&e.action))
            && mask
                .as_deref()
                .is_none_or(|m| m.get(e.context.0 as usize).copied().unwrap_or(false))
    };
    let mut matched = 0;
    let mut rows = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if !kept(e) {
            continue;
        }
        if matched >= offset && rows.len() < limit {
            rows.push(row(model, device, i + 1, e));
        }
        matched += 1;
    }
    EventPage {
        events: events.len(),
        matched,
        offset,
        rows,
    }
}

/// An out-of-memory event, as the timeline marks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomMarker {
    /// The state it leads to (an `oom` changes no memory: the state before it too).
    pub index: usize,
    /// Its event number (the file's index, PyTorch's in `device_traces`); `None` for an
    /// annotation the import inserted.
    pub event: Option<usize>,
    /// `event 7`, or `annotation after event 7` for an inserted one.
    pub label: String,
    /// Microseconds since the origin.
    pub time_us: u64,
    /// The request that failed, in bytes.
    pub size: u64,
    /// Its stream.
    pub stream: u64,
    /// Bytes the device said were free when it failed (PyTorch's `device_free`).
    pub device_free: u64,
    /// Bytes allocated at that point.
    pub allocated_bytes: u64,
    /// Bytes reserved at that point.
    pub reserved_bytes: u64,
    /// The site of the failing request.
    pub site: String,
    /// Its context id (for the stack, `/api/context`).
    pub context: u32,
}

/// Every `oom` event of `device`, in trace order.
pub fn ooms(model: &TraceModel, device: &DeviceModel) -> Vec<OomMarker> {
    let walker = super::tables::lock(device);
    walker
        .events()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == Action::Oom)
        .map(|(i, e)| {
            let at = |values: &[u64]| values.get(i + 1).copied().unwrap_or(0);
            OomMarker {
                index: i + 1,
                event: device.numbers.number(i),
                label: device.numbers.label(i),
                time_us: e.time_us,
                size: e.size,
                stream: e.stream.raw(),
                device_free: e.addr,
                allocated_bytes: at(&device.curves.allocated),
                reserved_bytes: at(&device.curves.reserved),
                site: model.context_text(e.context).site.clone(),
                context: e.context.0,
            }
        })
        .collect()
}
