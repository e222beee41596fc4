//! Leak detection through the C interface: leak scopes (`blockpool_leak_scope_*`), step
//! detectors (`blockpool_step_detector_*`) and the report of everything live
//! (`blockpool_leak_report_json`), each report as JSON.
//!
//! Scopes and detectors live in one process-wide table under ids counted from 1 (0 is the
//! failure value), shared by both kinds, so an id of one kind given where the other is
//! expected is `BLOCKPOOL_ERR_UNKNOWN_HANDLE`, never the wrong object.
//!
//! JSON shapes (every number an integer):
//! - a leak report: `{"sites": [{"device", "site", "count", "bytes", "requested_bytes",
//!   "streams": [stream handle values], "oldest_id", "names": [...], "raw"}], "bytes",
//!   "count", "summary"}`, sites largest first. Nothing in it changes while the allocations
//!   do not (no ages), so a length asked for with `(NULL, 0)` is the length written next;
//! - a scope's report: `{"name", "peak_bytes": [per device], "clean", "leaks": <leak report>}`;
//! - a detector's findings: `blockpool::leak::StepFindings` as serde writes it
//!   (`steps_observed`, `first_step`, `last_step`, `settings`, `growing`, `persistent`), steps
//!   named by their number in decimal. Observing the step last observed again gives the same
//!   findings without a second observation, so `(NULL, 0)` then a buffer observes once.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use blockpool::global::DefaultBackend;
use blockpool::leak::{GrowthSettings, LeakReport, ScopeReport, StepDetector};
use blockpool::LeakScope;
use serde_json::{json, Value};

use crate::boundary::{id, status, text};
use crate::error::Error;
use crate::global::allocator;
use crate::memory::device_index;
use crate::text::read_text;

/// A leak scope, open or finished (its report kept for later calls).
enum Scope {
    Open(LeakScope<'static, DefaultBackend>),
    Finished(String),
}

/// A step detector and its last observation: the step and the findings written then.
struct Detector {
    detector: StepDetector,
    last: Option<(u64, String)>,
}

/// What an id names.
enum Handle {
    Scope(Scope),
    Detector(Detector),
}

static HANDLES: Mutex<BTreeMap<u64, Handle>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn handles() -> MutexGuard<'static, BTreeMap<u64, Handle>> {
    HANDLES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes handle `id` when it is of the kind `is_kind` accepts; `None` (nothing removed)
/// when there is no such handle.
fn remove(id: u64, is_kind: impl Fn(&Handle) -> bool) -> Option<()> {
    let mut handles = handles();
    handles.get(&id).filter(|h| is_kind(h))?;
    handles.remove(&id).map(drop)
}

fn insert(handle: Handle) -> u64 {
    // Relaxed: ids only need to be distinct; 2^64 of them do not run out.
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    handles().insert(id, handle);
    id
}

/// A leak report as JSON (module docs).
pub fn leak_report_to_json(report: &LeakReport) -> Value {
    let sites: Vec<Value> = report
        .sites
        .iter()
        .map(|site| {
            json!({
                "device": site.device,
                "site": site.site,
                "count": site.count,
                "bytes": site.bytes,
                "requested_bytes": site.requested_bytes,
                "streams": site.streams.iter().map(|s| s.raw()).collect::<Vec<u64>>(),
                "oldest_id": site.oldest_id,
                "names": site.names,
                "raw": site.raw,
            })
        })
        .collect();
    json!({
        "sites": sites,
        "bytes": report.bytes(),
        "count": report.allocations(),
        "summary": report.summary(),
    })
}

/// A scope's report as JSON (module docs).
pub fn scope_report_to_json(report: &ScopeReport) -> Value {
    json!({
        "name": report.name,
        "peak_bytes": report.peak_bytes,
        "clean": report.is_clean(),
        "leaks": leak_report_to_json(&report.leaks),
    })
}

/// Opens a leak scope named `name` over every device; returns its id, or 0 on failure.
///
/// # Safety
///
/// `name` must be NULL (refused) or a NUL-terminated string left unchanged during the call.
#[no_mangle]
pub unsafe extern "C" fn blockpool_leak_scope_begin(name: *const c_char) -> u64 {
    id("blockpool_leak_scope_begin", || {
        // SAFETY: the caller upholds read_text's contract on `name` (this function's # Safety).
        let name = unsafe { read_text(name, "name") }?;
        let scope = allocator()?.leak_scope(&name);
        Ok(insert(Handle::Scope(Scope::Open(scope))))
    })
}

/// Ends scope `id` on the first call and writes its report as JSON; later calls write the same
/// report, until `blockpool_leak_scope_free(id)`.
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn blockpool_leak_scope_finish(
    scope_id: u64,
    buf: *mut c_char,
    buf_len: usize,
) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_leak_scope_finish", buf, buf_len, || {
            let mut handles = handles();
            let Some(Handle::Scope(scope)) = handles.get_mut(&scope_id) else {
                return Err(Error::UnknownScope { id: scope_id });
            };
            if let Scope::Finished(json) = scope {
                return Ok(json.clone());
            }
            // Put a placeholder in while the open scope finishes.
            let Scope::Open(open) = std::mem::replace(scope, Scope::Finished(String::new())) else {
                return Err(Error::UnknownScope { id: scope_id });
            };
            let json = serde_json::to_string(&scope_report_to_json(&open.finish()))?;
            *scope = Scope::Finished(json.clone());
            Ok(json)
        })
    }
}

/// Forgets scope `id` (closing it unreported if still open).
#[no_mangle]
pub extern "C" fn blockpool_leak_scope_free(scope_id: u64) -> c_int {
    status("blockpool_leak_scope_free", || {
        remove(scope_id, |h| matches!(h, Handle::Scope(_)))
            .ok_or(Error::UnknownScope { id: scope_id })
    })
}

/// A new step detector: a site is growing when its live bytes or count rose in each of the
/// last `growth_steps` steps (0: the default, 3). Returns its id, or 0 on failure.
#[no_mangle]
pub extern "C" fn blockpool_step_detector_new(growth_steps: usize) -> u64 {
    id("blockpool_step_detector_new", || {
        let settings = match growth_steps {
            0 => GrowthSettings::default(),
            n => GrowthSettings::with_min_growth_steps(
                u32::try_from(n).map_err(|_| Error::InvalidGrowthSteps { growth_steps: n })?,
            ),
        };
        // K is at least 1 here, the detector's one condition.
        let detector =
            StepDetector::new(settings).map_err(|_| Error::InvalidGrowthSteps { growth_steps })?;
        Ok(insert(Handle::Detector(Detector {
            detector,
            last: None,
        })))
    })
}

/// Feeds detector `id` the live allocations of `device` at the end of step `step`, and writes
/// its findings so far as JSON. The same `step` as the last observed one gives the findings
/// written then, without observing again (so asking for the length first observes once).
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn blockpool_step_detector_observe(
    detector_id: u64,
    step: u64,
    device: c_int,
    buf: *mut c_char,
    buf_len: usize,
) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_step_detector_observe", buf, buf_len, || {
            let unknown = || Error::UnknownDetector { id: detector_id };
            match handles().get(&detector_id) {
                Some(Handle::Detector(Detector {
                    last: Some((last, findings)),
                    ..
                })) if *last == step => return Ok(findings.clone()),
                Some(Handle::Detector(_)) => {}
                _ => return Err(unknown()),
            }
            // Taken outside the table's lock: it waits for the device's.
            let live = allocator()?.live_snapshot(device_index(device)?)?;
            let mut handles = handles();
            let Some(Handle::Detector(state)) = handles.get_mut(&detector_id) else {
                return Err(unknown());
            };
            state.detector.observe(step.to_string(), live.site_totals());
            let findings = serde_json::to_string(&state.detector.findings())?;
            state.last = Some((step, findings.clone()));
            Ok(findings)
        })
    }
}

/// Forgets detector `id`.
#[no_mangle]
pub extern "C" fn blockpool_step_detector_free(detector_id: u64) -> c_int {
    status("blockpool_step_detector_free", || {
        remove(detector_id, |h| matches!(h, Handle::Detector(_)))
            .ok_or(Error::UnknownDetector { id: detector_id })
    })
}

/// Everything live now, on every device, grouped by site, as JSON (a leak report).
///
/// # Safety
///
/// When `buf_len > 0` and `buf` is not NULL, `buf` must be valid for writes of `buf_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn blockpool_leak_report_json(buf: *mut c_char, buf_len: usize) -> isize {
    // SAFETY: the caller upholds `text`'s contract on `buf` (this function's # Safety).
    unsafe {
        text("blockpool_leak_report_json", buf, buf_len, || {
            let report = allocator()?.leak_report();
            Ok(serde_json::to_string(&leak_report_to_json(&report))?)
        })
    }
}
