//! The routes: a fixed table of paths, each answered from memory. Any other path is a 404, so
//! no request can reach a file, whatever dots or encodings it holds.
//!
//! | route | answer |
//! |---|---|
//! | `/`, `/index.html`, `/app.js`, `/tree.js`, `/chart.js`, `/panels.js`, `/streams.js`, `/context.js`, `/style.css` | the page (the `assets` module); `/` is `compare.html` when several files are served |
//! | `/compare.html`, `/compare.js`, `/compare.css` | the page of several files side by side |
//! | `/api/compare` | [`Comparison`](super::compare::Comparison): each file's peaks and sites, the imbalance, the sites of two files |
//! | `/api/meta` | file, format, devices (events, time span, peak, streams, annotations), the summary |
//! | `/api/timeline?device&axis&from&to&width&limit` + filter | [`Timeline`](super::lod::Timeline) (limit: 15,000 by default) |
//! | `/api/summarized?device&axis&from&to&width&limit&column` + filter | [`Summarized`](super::lod::Summarized): the grey band of one column of that timeline |
//! | `/api/segments?device&axis&from&to&width&limit` | [`Timeline`](super::lod::Timeline) of reserved segments |
//! | `/api/events?device&offset&limit&action&q` | [`EventPage`](super::history::EventPage): the state history |
//! | `/api/ooms?device` | [`OomMarker`](super::history::OomMarker)s, in trace order |
//! | `/api/explain?device&oom&peak&all_frames` | [`MomentReport`](crate::analysis::explain::moment::MomentReport): the `oom`-th out-of-memory event (1 is the first; by default the first, else the reserved peak) or with `peak=1` the reserved peak, split as `memtrace explain` splits it |
//! | `/api/curves?device&axis&from&to&width` | `CurvesWindow` ([`curves`](super::lod::curves)) |
//! | `/api/state?device&index` | [`StateView`](super::tables::StateView) (index: the peak by default) |
//! | `/api/allocation?device&id` | [`AllocationView`](super::tables::AllocationView) |
//! | `/api/context?id` | [`ContextView`](super::tables::ContextView) |
//! | `/api/leaks?device&all_frames&step&growth_steps&warmup_steps` | the leak report (`memtrace leaks --json`'s, one device): steps are the `step` prefix's annotation ranges (default `ProfilerStep#`; empty: the outermost ranges), `growth_steps` is K (default 3), `warmup_steps` the warm-up of persistence (default 1) |
//! | `/api/streams?device` | [`StreamsView`](super::streams::StreamsView): memory by stream, as `memtrace streams --json` reports it |
//! | `/api/breakdown?device&index&limit&all_frames` | [`Breakdown`](super::tables::Breakdown) |
//! | `/api/tree?device&index&all_frames&depth&min_share` | [`TreeView`](super::tree::TreeView) |
//!
//! `all_frames=1` names sites by every frame memory_viz shows instead of the user's own code.
//!
//! Filter parameters: `q`, `tag`, `stack`, `stream`, `min_size`, `max_size` ([`Filter`]). Every
//! route but `/api/compare` also takes `file`, the index of a file when several are served (0
//! by default).

use super::assets;
use super::error::RequestError;
use super::filter::Filter;
use super::history::{self, EventFilter};
use super::lod::{self, Axis, Window, DEFAULT_BANDS, MAX_BANDS, MAX_WIDTH};
use super::model::{DeviceModel, TraceModel};
use super::query::Target;
use super::set::TraceSet;
use super::tables;
use super::tree;
use crate::analysis::explain::moment::{explain_moment, Options};
use crate::analysis::leaks::LeakOptions;
use blockpool::trace::ContextId;
use serde::Serialize;

/// Most annotation intervals `/api/meta` lists per device.
const MAX_ANNOTATIONS: usize = 5_000;

/// What a route answers.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    fn json<T: Serialize>(value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(body) => Reply {
                status: 200,
                content_type: "application/json",
                body,
            },
            // Our views serialize to JSON without fail (no maps with non-string keys); should
            // one not, the client gets a 500, never a crash.
            Err(e) => Reply::error(500, &e.to_string()),
        }
    }

    /// A JSON `{"error": message}` with `status`.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: serde_json::json!({ "error": message })
                .to_string()
                .into_bytes(),
        }
    }

    /// The 404 for every path that is not a route.
    pub fn not_found() -> Reply {
        Reply::error(404, "no such page")
    }
}

/// Answers a GET of `target` (path and query, as sent).
pub fn answer(set: &TraceSet, target: &str) -> Reply {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let page = match path {
        "/" if set.is_comparison() => Some(assets::COMPARE),
        _ => assets::asset(path),
    };
    if let Some(asset) = page {
        return Reply {
            status: 200,
            content_type: asset.content_type,
            body: asset.body.to_vec(),
        };
    }
    if !path.starts_with("/api/") {
        return Reply::not_found();
    }
    let result = Target::parse(target).and_then(|t| match t.path.as_str() {
        "/api/compare" => Ok(Some(Reply::json(&set.comparison))),
        _ => api(file(set, &t)?, &t),
    });
    match result {
        Ok(Some(reply)) => reply,
        Ok(None) => Reply::not_found(),
        Err(e) => Reply::error(e.status(), &e.to_string()),
    }
}

/// The trace the `file` parameter names (the first by default).
fn file<'s>(set: &'s TraceSet, target: &Target) -> Result<&'s TraceModel, RequestError> {
    let index = target.number("file")?.unwrap_or(0);
    usize::try_from(index)
        .ok()
        .and_then(|i| set.trace(i))
        .ok_or(RequestError::NoFile {
            file: index,
            last: set.traces.len().saturating_sub(1),
        })
}

fn device<'m>(model: &'m TraceModel, target: &Target) -> Result<&'m DeviceModel, RequestError> {
    let asked = target.device()?;
    model
        .device(asked)
        .ok_or(RequestError::NoDevice(asked.unwrap_or(0)))
}

fn window(device: &DeviceModel, target: &Target) -> Result<Window, RequestError> {
    let axis = match target.text("axis") {
        None | Some("event") => Axis::Event,
        Some("time") => Axis::Time,
        Some(other) => {
            return Err(RequestError::BadParameter {
                name: "axis",
                reason: format!("{other:?} is neither `event` nor `time`"),
            })
        }
    };
    let (first, last) = match axis {
        Axis::Event => (0, device.events as u64 + 1),
        Axis::Time => {
            let first = device.state_time_us.first().copied().unwrap_or(0);
            let last = device.state_time_us.last().copied().unwrap_or(0);
            (first, last.saturating_add(1))
        }
    };
    let from = target.number("from")?.unwrap_or(first);
    let to = target.number("to")?.unwrap_or(last);
    if to <= from {
        return Err(RequestError::BadParameter {
            name: "to",
            reason: format!("the window must end after it starts ({to} <= {from})"),
        });
    }
    Ok(Window {
        axis,
        from,
        to,
        width: target.clamped("width", 1000, 1, MAX_WIDTH)? as usize,
    })
}

fn index(target: &Target) -> Result<Option<usize>, RequestError> {
    target.number("index")?.map_or(Ok(None), |i| {
        usize::try_from(i)
            .map(Some)
            .map_err(|_| RequestError::BadParameter {
                name: "index",
                reason: "too large".into(),
            })
    })
}

/// Per device, what the page needs before anything else.
#[derive(Serialize)]
struct DeviceMeta<'m> {
    device: u32,
    events: usize,
    first_us: u64,
    last_us: u64,
    peak_index: usize,
    peak_allocated: u64,
    allocations: usize,
    /// Whether the events carry times; without them the page offers only the event axis.
    has_times: bool,
    /// Positions of the events the import inserted (external annotations), ascending: they
    /// have no number, and the events after them are numbered as the file numbers them.
    inserted_events: &'m [usize],
    streams: &'m [u64],
    annotations: Vec<AnnotationView<'m>>,
}

#[derive(Serialize)]
struct AnnotationView<'m> {
    tag: &'m str,
    depth: usize,
    start_us: u64,
    end_us: u64,
    /// First state at or after the start.
    start: usize,
    /// First state at or after the end.
    end: usize,
}

fn meta(model: &TraceModel) -> Reply {
    let devices: Vec<DeviceMeta> = model
        .devices
        .iter()
        .map(|d| {
            let at = |t: u64| d.state_time_us.partition_point(|&s| s < t);
            DeviceMeta {
                device: d.device,
                events: d.events,
                first_us: d.state_time_us.first().copied().unwrap_or(0),
                last_us: d.state_time_us.last().copied().unwrap_or(0),
                peak_index: d.peak_index,
                peak_allocated: d.curves.allocated.get(d.peak_index).copied().unwrap_or(0),
                allocations: d.allocations.len(),
                has_times: d.has_times,
                inserted_events: d.numbers.inserted(),
                streams: &d.streams,
                annotations: d
                    .annotations
                    .iter()
                    .take(MAX_ANNOTATIONS)
                    .map(|a| AnnotationView {
                        tag: &a.tag,
                        depth: a.depth,
                        start_us: a.start_us,
                        end_us: a.end_us,
                        start: at(a.start_us),
                        end: at(a.end_us),
                    })
                    .collect(),
            }
        })
        .collect();
    Reply::json(&serde_json::json!({
        "file": model.file,
        "format": model.format,
        "devices": devices,
        "default_device": model.default_device,
        "summary": model.summary,
    }))
}

/// The API routes; `Ok(None)` for a path that is not one.
fn api(model: &TraceModel, target: &Target) -> Result<Option<Reply>, RequestError> {
    let reply = match target.path.as_str() {
        "/api/meta" => meta(model),
        "/api/timeline" => {
            let device = device(model, target)?;
            let window = window(device, target)?;
            let filter = Filter::from_target(target)?;
            let limit = target.clamped("limit", DEFAULT_BANDS, 0, MAX_BANDS)? as usize;
            Reply::json(&lod::timeline(model, device, window, &filter, limit))
        }
        "/api/summarized" => {
            let device = device(model, target)?;
            let window = window(device, target)?;
            let filter = Filter::from_target(target)?;
            let limit = target.clamped("limit", DEFAULT_BANDS, 0, MAX_BANDS)? as usize;
            let column = target.number("column")?.ok_or(RequestError::BadParameter {
                name: "column",
                reason: "missing".into(),
            })?;
            let column = usize::try_from(column).unwrap_or(usize::MAX);
            let summarized = lod::summarized(model, device, window, &filter, limit, column)
                .ok_or_else(|| RequestError::BadParameter {
                    name: "column",
                    reason: format!("{column} is past the window's {} columns", window.width),
                })?;
            Reply::json(&summarized)
        }
        "/api/segments" => {
            let device = device(model, target)?;
            let window = window(device, target)?;
            let limit = target.clamped("limit", DEFAULT_BANDS, 0, MAX_BANDS)? as usize;
            Reply::json(&lod::segment_timeline(model, device, window, limit))
        }
        "/api/events" => {
            let device = device(model, target)?;
            let filter = EventFilter::from_target(target)?;
            let offset =
                usize::try_from(target.number("offset")?.unwrap_or(0)).unwrap_or(usize::MAX);
            let limit = target.clamped("limit", 200, 1, history::MAX_PAGE as u64)? as usize;
            Reply::json(&history::event_page(model, device, &filter, offset, limit))
        }
        "/api/ooms" => Reply::json(&history::ooms(model, device(model, target)?)),
        "/api/explain" => explain(model, target)?,
        "/api/curves" => {
            let device = device(model, target)?;
            Reply::json(&lod::curves(device, window(device, target)?))
        }
        "/api/state" => {
            let device = device(model, target)?;
            Reply::json(&tables::state_view(model, device, index(target)?)?)
        }
        "/api/allocation" => {
            let device = device(model, target)?;
            let id = target.number("id")?.ok_or(RequestError::BadParameter {
                name: "id",
                reason: "missing".into(),
            })?;
            let id = usize::try_from(id).unwrap_or(usize::MAX);
            Reply::json(&tables::allocation_view(model, device, id)?)
        }
        "/api/context" => {
            let id = target.number("id")?.unwrap_or(0);
            let id = u32::try_from(id).unwrap_or(u32::MAX);
            Reply::json(&tables::context_view(model, ContextId(id)))
        }
        "/api/leaks" => {
            let device = device(model, target)?;
            match model.leaks(device, &leak_options(target)?) {
                Ok(report) => Reply::json(&*report),
                Err(e) => Reply::error(500, &format!("{e:#}")),
            }
        }
        "/api/streams" => {
            let device = device(model, target)?;
            Reply::json(&*super::streams::streams_view(model, device))
        }
        "/api/breakdown" => {
            let device = device(model, target)?;
            let limit = target.clamped("limit", 100, 1, 10_000)? as usize;
            let view = tree::view(target)?;
            Reply::json(&tables::breakdown(
                model,
                device,
                index(target)?,
                limit,
                view,
            )?)
        }
        "/api/tree" => {
            let device = device(model, target)?;
            let (view, limits) = (tree::view(target)?, tree::limits(target)?);
            Reply::json(&tree::tree_view(
                model,
                device,
                index(target)?,
                view,
                limits,
            )?)
        }
        _ => return Ok(None),
    };
    Ok(Some(reply))
}

/// `/api/explain`: the device's `oom`-th out-of-memory event (1 is the first; by default the
/// first, else the reserved peak), or with `peak=1` its reserved peak, split as `memtrace
/// explain` splits it; `all_frames=1` names sites by every frame.
fn explain(model: &TraceModel, target: &Target) -> Result<Reply, RequestError> {
    let device = device(model, target)?;
    let oom = target.number("oom")?;
    let options = Options {
        oom: oom.map(|k| usize::try_from(k).unwrap_or(usize::MAX)),
        peak: target.flag("peak")?,
        view: tree::view(target)?,
        ..Options::default()
    };
    if oom == Some(0) || (options.peak && oom.is_some()) {
        return Err(RequestError::BadParameter {
            name: "oom",
            reason: "give 1 for the first out-of-memory event, and not with peak=1".into(),
        });
    }
    let mut walker = tables::lock(device);
    match explain_moment(
        &model.snapshot,
        &device.numbers,
        device.device,
        &mut walker,
        &options,
    ) {
        Ok(report) => Ok(Reply::json(&report)),
        Err(e) => Err(RequestError::BadParameter {
            name: "oom",
            reason: format!("{e:#}"),
        }),
    }
}

/// The longest `step` prefix `/api/leaks` takes.
const MAX_STEP_PREFIX: usize = 200;

/// `/api/leaks`' options: `all_frames`, `step` (present and empty: the outermost ranges),
/// `growth_steps` (at least 1) and `warmup_steps`.
fn leak_options(target: &Target) -> Result<LeakOptions, RequestError> {
    let mut options = LeakOptions {
        view: tree::view(target)?,
        ..LeakOptions::default()
    };
    if let Some(step) = target.params.get("step") {
        if step.chars().count() > MAX_STEP_PREFIX {
            return Err(RequestError::BadParameter {
                name: "step",
                reason: format!("longer than {MAX_STEP_PREFIX} characters"),
            });
        }
        options.step_prefix = step.clone();
    }
    if let Some(k) = target.number("growth_steps")? {
        options.min_growth_steps = u32::try_from(k).ok().filter(|&k| k >= 1).ok_or_else(|| {
            RequestError::BadParameter {
                name: "growth_steps",
                reason: format!("{k} is not from 1 to {}", u32::MAX),
            }
        })?;
    }
    if let Some(n) = target.number("warmup_steps")? {
        options.warmup_steps = u32::try_from(n).map_err(|_| RequestError::BadParameter {
            name: "warmup_steps",
            reason: format!("{n} is not from 0 to {}", u32::MAX),
        })?;
    }
    Ok(options)
}
