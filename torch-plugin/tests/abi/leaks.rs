//! Leak scopes, step detectors and the leak report, as JSON.

use std::ffi::CString;

use blockpool_torch::*;
use serde_json::{json, Value};

use crate::support::*;

fn push(tag: &str) {
    let tag = CString::new(tag).expect("no NUL in the tag");
    // SAFETY: `tag` is a live NUL-terminated string.
    let pushed = unsafe { blockpool_annotate_push(tag.as_ptr()) };
    assert_eq!(pushed, BLOCKPOOL_OK);
}

fn pop() {
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_OK);
}

fn begin(name: &str) -> u64 {
    let name = CString::new(name).expect("no NUL in the name");
    // SAFETY: `name` is a live NUL-terminated string.
    unsafe { blockpool_leak_scope_begin(name.as_ptr()) }
}

fn finish(id: u64) -> String {
    // SAFETY: `read` passes a NULL buffer with 0 or a live buffer with its exact length.
    read(|buf, len| unsafe { blockpool_leak_scope_finish(id, buf, len) })
}

fn observe(id: u64, step: u64) -> Value {
    // SAFETY: as in `finish`.
    json(&read(|buf, len| unsafe {
        blockpool_step_detector_observe(id, step, 0, buf, len)
    }))
}

/// The site label of allocations made through C under `tags`: the tags, then the one line of
/// the plugin that allocates.
fn site_under(tags: &str, report_site: &str) -> String {
    let location = report_site
        .split_once(" @ ")
        .map_or(report_site, |(_, location)| location);
    assert!(
        location.starts_with("torch-plugin/src/memory.rs:"),
        "{report_site}"
    );
    format!("{tags} @ {location}")
}

#[test]
fn a_leak_scope_reports_what_it_left_alive_by_site_with_its_peak() {
    let _session = session();
    let scope = begin("step 1");
    assert!(scope > 0, "{}", last_error());
    push("kept");
    let kept = malloc(3 << 20, 0, 0);
    pop();
    push("temp");
    let temp = malloc(5 << 20, 0, 0);
    free(temp, 0);
    pop();
    let report = finish(scope);
    let value = json(&report);
    let site = &value["leaks"]["sites"][0];
    let label = site["site"].as_str().expect("a site label").to_owned();
    assert_eq!(label, site_under("kept", &label));
    assert!(site["oldest_id"].as_u64().is_some(), "{site}");
    let expected = json!({
        "name": "step 1",
        "peak_bytes": [8 << 20, 0],
        "clean": false,
        "leaks": {
            "sites": [{
                "device": 0,
                "site": label,
                "count": 1,
                "bytes": 3 << 20,
                "requested_bytes": 3 << 20,
                "streams": [0],
                "oldest_id": site["oldest_id"],
                "names": [],
                "raw": 1,
            }],
            "bytes": 3 << 20,
            "count": 1,
            "summary": "3145728 bytes in 1 allocation at 1 site",
        },
    });
    assert_eq!(value, expected);
    assert_eq!(finish(scope), report, "later calls give the same report");
    free(kept, 0);
    assert_eq!(finish(scope), report, "even after the leak is freed");
    assert_eq!(blockpool_leak_scope_free(scope), BLOCKPOOL_OK);
    // SAFETY: a NULL buffer with 0 is only asked for the length.
    let gone = unsafe { blockpool_leak_scope_finish(scope, std::ptr::null_mut(), 0) };
    assert_eq!(gone, BLOCKPOOL_ERR_UNKNOWN_HANDLE as isize);
    assert_eq!(
        blockpool_leak_scope_free(scope),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(
        last_error(),
        format!("no leak scope has id {scope} (ids come from blockpool_leak_scope_begin and end at blockpool_leak_scope_free)")
    );
}

#[test]
fn a_clean_scope_says_so_and_bad_arguments_are_refused() {
    let _session = session();
    let scope = begin("clean");
    let p = malloc(4096, 1, 0);
    free(p, 1);
    let value = json(&finish(scope));
    assert_eq!(value["clean"], json!(true));
    assert_eq!(value["peak_bytes"], json!([0, 4096]));
    assert_eq!(
        value["leaks"]["summary"],
        json!("0 bytes in 0 allocations at 0 sites")
    );
    // SAFETY: NULL is refused before it is read.
    assert_eq!(unsafe { blockpool_leak_scope_begin(std::ptr::null()) }, 0);
    assert_eq!(last_error(), "name is NULL");
    let detector = blockpool_step_detector_new(0);
    // SAFETY: a NULL buffer with 0 is only asked for the length.
    let wrong_kind = unsafe { blockpool_leak_scope_finish(detector, std::ptr::null_mut(), 0) };
    assert_eq!(
        wrong_kind, BLOCKPOOL_ERR_UNKNOWN_HANDLE as isize,
        "a detector is not a scope"
    );
    assert_eq!(
        blockpool_leak_scope_free(detector),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(
        blockpool_step_detector_free(scope),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(blockpool_step_detector_free(detector), BLOCKPOOL_OK);
    assert_eq!(blockpool_leak_scope_free(scope), BLOCKPOOL_OK);
    // An open scope freed unfinished is simply closed.
    let open = begin("never finished");
    assert_eq!(blockpool_leak_scope_free(open), BLOCKPOOL_OK);
}

#[test]
fn the_step_detector_flags_a_buffer_kept_every_step_with_its_exact_growth() {
    let _session = session();
    let detector = blockpool_step_detector_new(0);
    assert!(detector > 0, "{}", last_error());
    push("weights");
    let weights = malloc(64 << 20, 0, 0);
    pop();
    let mut history = Vec::new();
    let mut findings = Vec::new();
    for step in 0..5 {
        push("activations");
        let activations = [malloc(8 << 20, 0, 0), malloc(8 << 20, 0, 0)];
        pop();
        push("history");
        history.push(malloc(1 << 20, 0, 0)); // the leak: one 1 MiB buffer kept per step
        pop();
        for p in activations {
            free(p, 0);
        }
        findings.push(observe(detector, step));
    }
    for (step, found) in findings.iter().enumerate().take(3) {
        assert_eq!(
            found["growing"],
            json!([]),
            "step {step}: too early to tell"
        );
    }
    let last = &findings[4];
    let history_site = last["growing"][0]["site"]
        .as_str()
        .expect("a growing site")
        .to_owned();
    let weights_site = last["persistent"][0]["site"]
        .as_str()
        .expect("a persistent site")
        .to_owned();
    assert_eq!(history_site, site_under("history", &history_site));
    assert_eq!(weights_site, site_under("weights", &history_site));
    assert_eq!(
        findings[3]["growing"][0]["steps"],
        json!(3),
        "flagged after 3 growing steps"
    );
    let expected = json!({
        "steps_observed": 5,
        "first_step": "0",
        "last_step": "4",
        "settings": {"min_growth_steps": 3, "warmup_steps": 1},
        "growing": [{
            "site": history_site,
            "bytes": 5 << 20,
            "count": 5,
            "steps": 4,
            "since_step": "0",
            "growth_bytes": 4 << 20,
            "growth_count": 4,
            "bytes_per_step": 1 << 20,
            "count_per_step": 1,
        }],
        "persistent": [{
            "site": weights_site,
            "bytes": 64 << 20,
            "count": 1,
            "since_step": "0",
            "steps": 4, // observations 1 to 4 since the baseline
        }],
    });
    assert_eq!(last, &expected);
    // Wrong ids and devices.
    // SAFETY: a NULL buffer with 0 is only asked for the length.
    let bad_device =
        unsafe { blockpool_step_detector_observe(detector, 5, 9, std::ptr::null_mut(), 0) };
    assert_eq!(bad_device, BLOCKPOOL_ERR_NO_SUCH_DEVICE as isize);
    assert_eq!(blockpool_step_detector_free(detector), BLOCKPOOL_OK);
    // SAFETY: as above.
    let gone = unsafe { blockpool_step_detector_observe(detector, 5, 0, std::ptr::null_mut(), 0) };
    assert_eq!(gone, BLOCKPOOL_ERR_UNKNOWN_HANDLE as isize);
    assert_eq!(blockpool_step_detector_new(1 << 40), 0);
    assert_eq!(
        last_error(),
        "growth_steps 1099511627776 is too large (at most 4294967295)"
    );
    for p in history.into_iter().chain([weights]) {
        free(p, 0);
    }
}

#[test]
fn the_leak_report_lists_every_live_allocation_by_site() {
    let _session = session();
    // SAFETY: as in `finish`.
    let empty = read(|buf, len| unsafe { blockpool_leak_report_json(buf, len) });
    assert_eq!(
        json(&empty),
        json!({"sites": [], "bytes": 0, "count": 0, "summary": "0 bytes in 0 allocations at 0 sites"})
    );
    let a = malloc(4096, 0, 7);
    let b = malloc(4096, 1, 0);
    // SAFETY: as above.
    let report = json(&read(|buf, len| unsafe {
        blockpool_leak_report_json(buf, len)
    }));
    let sites = report["sites"].as_array().expect("sites");
    assert_eq!(sites.len(), 2, "{report}");
    let label = sites[0]["site"].as_str().expect("a label");
    assert!(
        label.starts_with("torch-plugin/src/memory.rs:") && !label.contains(" @ "),
        "no tags: {label}"
    );
    assert_eq!(
        sites
            .iter()
            .map(|s| (s["device"].clone(), s["streams"].clone(), s["raw"].clone()))
            .collect::<Vec<_>>(),
        [
            (json!(0), json!([7]), json!(1)),
            (json!(1), json!([0]), json!(1))
        ]
    );
    assert_eq!(
        report["summary"],
        json!("8192 bytes in 2 allocations at 2 sites")
    );
    free(a, 0);
    free(b, 1);
}
