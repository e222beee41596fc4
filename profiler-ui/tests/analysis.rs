//! `memtrace leaks`, `top`, `segments`, `timeline` and `diff` on a trace made here with a
//! planted leak (a 1 MiB `cache` allocation kept from every step), with exact numbers.

use blockpool::{
    annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId,
};
mod common;

use common::{memtrace, scratch};
use serde_json::Value;
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;

/// Four steps; each allocates three 4 MiB activations in `forward`, keeps a 1 MiB `cache`
/// allocation for good, and frees the activations. Made once: annotations reach every
/// recording allocator of the process, so two traces made at once would mix.
fn planted_leak_trace() -> &'static str {
    static TRACE: OnceLock<String> = OnceLock::new();
    TRACE.get_or_init(|| {
        let path = scratch("planted-leak.jsonl");
        let alloc = CachingAllocator::new(SimBackend::new(1, 8 << 30), AllocatorConfig::default());
        alloc
            .record_memory_history(HistorySettings::default())
            .expect("records");
        let stream = StreamId::DEFAULT;
        let mut cache = Vec::new();
        for step in 0..4 {
            let _step = annotate(&format!("step{step}"));
            let activations: Vec<_> = {
                let _forward = annotate("forward");
                (0..3)
                    .map(|_| alloc.allocate(0, 4 << 20, stream).expect("fits"))
                    .collect()
            };
            {
                let _cache = annotate("cache");
                cache.push(alloc.allocate(0, 1 << 20, stream).expect("fits"));
            }
            drop(activations);
        }
        alloc.dump_snapshot(&path).expect("writes the trace");
        drop(cache);
        evenly_timed(&path);
        path.to_string_lossy().into_owned()
    })
}

/// Puts the trace's events 1 ms apart in file order: the recorded times are the machine's
/// (microseconds apart, bunched by whatever else it ran), and the chart's layout must not be.
fn evenly_timed(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).expect("the trace reads");
    let mut index = 0u64;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut record: Value = serde_json::from_str(line).expect("a JSON line");
            match record.get_mut("time_us") {
                Some(time) => {
                    index += 1;
                    *time = Value::from(index * 1000);
                    record.to_string()
                }
                None => line.to_owned(),
            }
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").expect("the trace writes");
}

fn json(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn leaks_lists_the_planted_leak_and_its_growth_across_steps() {
    let report = json(&["leaks", planted_leak_trace(), "--json"]);
    let device = &report[0];
    let alive: Vec<(&str, u64, u64)> = device["alive_at_end"]
        .as_array()
        .expect("alive")
        .iter()
        .map(|s| {
            (
                s["site"].as_str().unwrap(),
                s["bytes"].as_u64().unwrap(),
                s["blocks"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        alive,
        [("cache", 4 * MIB, 4)],
        "one site in every step: named without the step's tag"
    );
    assert_eq!(device["alive_from_before_bytes"], 0);
    assert_eq!(
        device["steps"],
        serde_json::json!(["step0", "step1", "step2", "step3"])
    );
    assert_eq!(
        device["measured_at"],
        serde_json::json!(["before step0", "step0", "step1", "step2", "step3"])
    );
    assert_eq!(device["step_rule"]["kind"], "outermost");
    let growing = device["growing"].as_array().expect("growing");
    assert_eq!(growing.len(), 1, "{growing:?}");
    let cache = &growing[0];
    assert_eq!(cache["site"], "cache");
    assert_eq!(
        cache["bytes_by_step"],
        serde_json::json!([0, MIB, 2 * MIB, 3 * MIB, 4 * MIB])
    );
    assert_eq!(cache["blocks_by_step"], serde_json::json!([0, 1, 2, 3, 4]));
    assert_eq!(
        (
            &cache["growth_bytes"],
            &cache["growth_bytes_per_step"],
            &cache["growth_blocks_per_step"],
            &cache["steps"],
            &cache["since"]
        ),
        (
            &serde_json::json!(4 * MIB),
            &serde_json::json!(MIB),
            &serde_json::json!(1),
            &serde_json::json!(4),
            &serde_json::json!("before step0")
        )
    );
    assert_eq!(device["persistent"], serde_json::json!([]));

    let text =
        String::from_utf8_lossy(&memtrace(&["leaks", planted_leak_trace()]).stdout).into_owned();
    assert_eq!(
        text,
        "device 0\n  \
         steps: no `ProfilerStep#*` annotation (--step names the step's annotation); the \
         outermost annotation ranges instead, 4 of them (step0 .. step3)\n  \
         measured: before step0, then at the end of each step\n  \
         growing (3 or more consecutive growing steps): 1 site\n    \
         +1024.00 KiB +1 block per step over 4 steps since before step0: cache  (0 bytes -> \
         1024.00 KiB -> 2.00 MiB -> 3.00 MiB -> 4.00 MiB)\n  \
         persistent (unchanged since one of the first 2 measurements): none\n  \
         alive at the end, allocated during the trace (persistent sites apart): 4.00 MiB in 4 \
         blocks\n      \
         4.00 MiB       4 blocks  cache\n  \
         alive at the end, allocated before the trace began: 0 bytes\n"
    );
    // Four growing steps are fewer than five.
    let strict = json(&[
        "leaks",
        planted_leak_trace(),
        "--json",
        "--growth-steps",
        "5",
    ]);
    assert_eq!(strict[0]["growing"], serde_json::json!([]));
}

#[test]
fn top_at_the_peak_shows_the_last_steps_activations() {
    let report = json(&["top", planted_leak_trace(), "--peak", "--json"]);
    // Step 3: three activations and four cache blocks.
    assert_eq!(report["allocated_bytes"], 16 * MIB);
    assert_eq!(report["sites"][0]["site"], "step3/forward");
    assert_eq!(report["sites"][0]["bytes"], 12 * MIB);
    assert_eq!(report["sites"][0]["blocks"], 3);
    assert_eq!(report["sites"].as_array().map(Vec::len), Some(5));
    let at_start = json(&["top", planted_leak_trace(), "--at", "start", "--json"]);
    assert_eq!(at_start["allocated_bytes"], 0);
    let by_name = json(&[
        "top",
        planted_leak_trace(),
        "--peak",
        "--sort",
        "site",
        "--json",
    ]);
    assert_eq!(by_name["sites"][0]["site"], "step0/cache");
}

#[test]
fn segments_maps_the_end_state() {
    let maps = json(&["segments", planted_leak_trace(), "--json"]);
    let maps = maps.as_array().expect("segments");
    let shape: Vec<(u64, &str, u64, u64)> = maps
        .iter()
        .map(|m| {
            (
                m["size"].as_u64().unwrap(),
                m["pool"].as_str().unwrap(),
                m["requested_bytes"].as_u64().unwrap(),
                m["free_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (20 * MIB, "large", 0, 20 * MIB),
            (2 * MIB, "small", 2 * MIB, 0),
            (2 * MIB, "small", 2 * MIB, 0),
        ]
    );
    assert_eq!(maps[0]["bar"], ".".repeat(64));
    assert_eq!(maps[1]["bar"], "#".repeat(64));
    let text =
        String::from_utf8_lossy(&memtrace(&["segments", planted_leak_trace()]).stdout).into_owned();
    assert!(text.contains(": 3 segments (24.00 MiB);"), "{text}");
}

#[test]
fn timeline_draws_the_curves_and_the_steps() {
    let svg = scratch("timeline.svg");
    let output = memtrace(&[
        "timeline",
        planted_leak_trace(),
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let chart = std::fs::read_to_string(&svg).expect("written");
    assert!(chart.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    for curve in ["reserved", "allocated", "requested"] {
        assert!(
            chart.contains(&format!("<polyline class=\"{curve}\"")),
            "{curve}"
        );
    }
    for step in 0..4 {
        assert!(chart.contains(&format!(">step{step}</text>")), "step{step}");
    }
    assert_eq!(chart.matches("class=\"step\"").count(), 4);
}

#[test]
fn diff_of_a_trace_with_itself_changes_nothing() {
    let trace = planted_leak_trace();
    let report = json(&["diff", trace, trace, "--json"]);
    assert_eq!(report["peak_a"], report["peak_b"]);
    let sites = report["sites"].as_array().expect("sites");
    assert!(sites
        .iter()
        .all(|s| s["peak_a"] == s["peak_b"] && s["end_a"] == s["end_b"]));
    let text = String::from_utf8_lossy(&memtrace(&["diff", trace, trace]).stdout).into_owned();
    assert!(
        text.ends_with(&format!("{} sites unchanged\n", sites.len())),
        "{text}"
    );
}

#[test]
fn analysis_commands_refuse_bad_points_and_devices_with_one_line() {
    let trace = planted_leak_trace();
    for args in [
        vec!["top", trace, "--at", "999999"],
        vec!["segments", trace, "--device", "3"],
        vec!["top", trace, "--at", "1", "--peak"],
        vec!["timeline", trace],
    ] {
        let output = memtrace(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("memtrace: "), "{err}");
    }
}
