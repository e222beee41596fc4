//! `memtrace explain` (and the split `summary` prints): at an out-of-memory event the device's
//! reserved memory split by cause so the parts add up exactly, on a generated trace whose every
//! part and category is known and on every fixture (each out-of-memory event, else the
//! reserved peak); the request's stack without the allocator's frames unless `--full-stack`;
//! the GPU's total with `--device-memory`; one-line errors for a moment the trace lacks.

mod common;

use common::{
    external_snapshot_names, fixture, memtrace, project_snapshot_names, run_json, run_ok, stderr,
};
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// One allocation of every category in a 20 MiB segment on stream 0 (parameters 4 MiB,
/// activations 3,145,000 bytes in a 3 MiB block, gradients 2 MiB, optimizer state 2 MiB, other
/// 1.5 MiB), then a 2 MiB hole, a 2 MiB block freed but not completed, and 3.5 MiB never used;
/// a 20 MiB segment cached whole on stream 7; a small-pool segment holding a 512-byte
/// activation. Then 5 MiB fails on stream 0 with 1 MiB free on the device.
fn categories_trace() -> String {
    let frames = [
        (
            "__init__",
            "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py",
        ),
        ("forward", "model.py"),
        ("torch::autograd::generated::MmBackward0::apply", "??"),
        (
            "_init_group",
            "/venv/lib/python3.12/site-packages/torch/optim/adam.py",
        ),
        ("load_batch", "data.py"),
        ("train", "train.py"),
    ];
    let mut lines = vec![r#"{"blockpool_trace":1}"#.to_string()];
    for (i, (name, file)) in frames.iter().enumerate() {
        let id = i + 1;
        lines.push(format!(
            r#"{{"frame":{id},"name":"{name}","file":"{file}","line":{}}}"#,
            10 * id
        ));
    }
    for context in 1..=5 {
        lines.push(format!(
            r#"{{"context":{context},"tags":[],"frames":[{context},6]}}"#
        ));
    }
    let mut time = 0;
    let mut event = |lines: &mut Vec<String>, fields: String| {
        time += 1;
        lines.push(format!(r#"{{{fields},"device":0,"time_us":{time}}}"#));
    };
    let (a, b, c) = (0x10_0000_0000u64, 0x20_0000_0000u64, 0x30_0000_0000u64);
    event(
        &mut lines,
        format!(r#""event":"segment_alloc","addr":{a},"size":{}"#, 20 * MIB),
    );
    let mut address = a;
    let blocks = [
        (1, 4 * MIB, 4 * MIB),
        (2, 3 * MIB, 3_145_000),
        (3, 2 * MIB, 2 * MIB),
        (4, 2 * MIB, 2 * MIB),
        (5, 3 * MIB / 2, 3 * MIB / 2),
        (5, 2 * MIB, 2 * MIB),
        (5, 2 * MIB, 2 * MIB),
    ];
    let mut addresses = Vec::new();
    for (context, size, requested) in blocks {
        event(
            &mut lines,
            format!(
                r#""event":"alloc","addr":{address},"size":{size},"requested":{requested},"context":{context}"#
            ),
        );
        addresses.push(address);
        address += size;
    }
    let free = |action: &str, address: u64, stream: u64, size: u64| {
        format!(
            r#""event":"{action}","addr":{address},"size":{size},"requested":{size},"stream":{stream},"context":5"#
        )
    };
    event(&mut lines, free("free_requested", addresses[5], 0, 2 * MIB));
    event(&mut lines, free("free_completed", addresses[5], 0, 2 * MIB));
    event(&mut lines, free("free_requested", addresses[6], 0, 2 * MIB));
    let size = 20 * MIB;
    event(
        &mut lines,
        format!(r#""event":"segment_alloc","addr":{b},"size":{size},"stream":7"#),
    );
    event(
        &mut lines,
        format!(
            r#""event":"alloc","addr":{b},"size":{size},"requested":{size},"stream":7,"context":5"#
        ),
    );
    event(&mut lines, free("free_requested", b, 7, size));
    event(&mut lines, free("free_completed", b, 7, size));
    event(
        &mut lines,
        format!(r#""event":"segment_alloc","addr":{c},"size":{}"#, 2 * MIB),
    );
    event(
        &mut lines,
        format!(r#""event":"alloc","addr":{c},"size":512,"requested":512,"context":2"#),
    );
    event(
        &mut lines,
        format!(
            r#""event":"oom","addr":{},"size":{},"context":2"#,
            MIB,
            5 * MIB
        ),
    );
    lines.join("\n") + "\n"
}

fn scratch(name: &str, contents: &str) -> String {
    let path = common::scratch(name);
    std::fs::write(&path, contents).expect("scratch file");
    path.to_string_lossy().into_owned()
}

/// `(key, bytes, blocks)` of each part.
fn parts(explanation: &Value) -> Vec<(String, u64, u64)> {
    explanation["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| {
            (
                p["key"].as_str().expect("key").to_string(),
                p["bytes"].as_u64().expect("bytes"),
                p["blocks"].as_u64().expect("blocks"),
            )
        })
        .collect()
}

#[test]
fn every_part_and_category_of_a_known_trace() {
    let path = scratch("categories.jsonl", &categories_trace());
    let report = run_json(&["explain", &path]);
    assert_eq!(report["moment"], "out_of_memory");
    assert_eq!(report["event"], 17);
    assert_eq!(report["out_of_memory_number"], 1);
    let request = &report["request"];
    assert_eq!(request["bytes"], 5 * MIB);
    assert_eq!(request["rounded_bytes"], 5 * MIB);
    assert_eq!(request["pool"], "large");
    assert_eq!(request["device_free_bytes"], MIB);
    assert_eq!(request["site"], "model.py:20:forward");
    let e = &report["explanation"];
    assert_eq!(e["reserved_bytes"], 42 * MIB);
    let live = 4 * MIB + 3_145_000 + 2 * MIB + 2 * MIB + 3 * MIB / 2 + 512;
    let expected = [
        ("live", live, 6),
        ("rounding", 3 * MIB - 3_145_000, 1),
        ("pending_free", 2 * MIB, 1),
        ("other_streams", 20 * MIB, 1),
        ("other_pools", 2 * MIB - 512, 1),
        ("too_small", 2 * MIB + 7 * MIB / 2, 2),
    ];
    let expected: Vec<(String, u64, u64)> = expected
        .iter()
        .map(|&(k, b, n)| (k.to_string(), b, n))
        .collect();
    assert_eq!(parts(e), expected);
    assert_eq!(expected.iter().map(|p| p.1).sum::<u64>(), 42 * MIB);
    assert_eq!(e["largest_usable_free_block"], 7 * MIB / 2);
    assert_eq!(e["largest_free_block"], 20 * MIB);
    let categories: Vec<(String, u64)> = e["categories"]
        .as_array()
        .expect("categories")
        .iter()
        .map(|c| {
            let name = c["category"].as_str().expect("category").to_string();
            (name, c["requested_bytes"].as_u64().expect("bytes"))
        })
        .collect();
    let want = [
        ("parameters", 4 * MIB),
        ("activations", 3_145_000 + 512),
        ("gradients", 2 * MIB),
        ("optimizer_state", 2 * MIB),
        ("other", 3 * MIB / 2),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|&(c, b)| (c.to_string(), b)).collect();
    assert_eq!(categories, want);
    // Allocated block sizes: 3 + 4 + 2 + 2 + 1.5 MiB and 512 bytes of 42 MiB.
    let allocated = 25 * MIB / 2 + 512;
    assert_eq!(
        e["fragmentation"],
        (42 * MIB - allocated) as f64 / (42 * MIB) as f64
    );
    assert!(e["why"]
        .as_str()
        .expect("why")
        .starts_with("5.00 MiB requested with 1024.00 KiB free on the device: 20.00 MiB of the 42.00 MiB reserved were in free blocks cached for other streams"));

    let text = run_ok(&["explain", &path]);
    for line in [
        "device 0: out of memory at event 17 (0.000018 s), 1 of 1 on the device: 5.00 MiB \
         requested (5.00 MiB rounded) on stream 0, large pool, at model.py:20:forward\n",
        "reserved: 42.00 MiB\n",
        "     2.00 MiB    4.8 %  freed, waiting on the streams that used them (record_stream)\n",
        "     5.50 MiB   13.1 %  free, too small for the request (the largest 3.50 MiB)\n",
        "     4.00 MiB        1 block  parameters\n",
        "     3.00 MiB       2 blocks  activations\n",
        "     2.00 MiB        1 block  train.py:60:train (MmBackward0)\n",
        "stack of the request (innermost first):\n  model.py:20:forward\n  train.py:60:train\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn the_peak_the_gpu_total_and_moments_the_trace_lacks() {
    let path = scratch("categories-moments.jsonl", &categories_trace());
    let peak = run_json(&["explain", &path, "--peak"]);
    assert_eq!(peak["moment"], "reserved_peak");
    assert_eq!(peak["request"], Value::Null);
    // The reserved peak (42 MiB) is reached by the small segment; its allocation fills it most.
    assert_eq!(peak["event"], 16);
    let e = &peak["explanation"];
    let keys: Vec<String> = parts(e).into_iter().map(|p| p.0).collect();
    assert_eq!(keys, ["live", "rounding", "pending_free", "free"]);
    let sum: u64 = parts(e).iter().map(|p| p.1).sum();
    assert_eq!(sum, 42 * MIB);

    let given = run_json(&["explain", &path, "--device-memory", "48M"]);
    let device = &given["explanation"]["device"];
    assert_eq!(device["total_bytes"], 48 * MIB);
    assert_eq!(device["free_bytes"], MIB);
    assert_eq!(
        device["outside_bytes"],
        5 * MIB,
        "48 - 42 reserved - 1 free"
    );
    let text = run_ok(&["explain", &path, "--device-memory", "48M"]);
    assert!(
        text.contains(
            "the GPU: 48.00 MiB = 42.00 MiB reserved by this allocator + 1024.00 KiB free + \
             5.00 MiB outside it"
        ),
        "{text}"
    );

    for (args, message) in [
        (
            vec!["--oom", "2"],
            "--oom 2: device 0 has 1 out-of-memory event (--oom 1 to 1)",
        ),
        (vec!["--oom", "0"], "not a whole number of 1 or more"),
        (vec!["--oom", "1", "--peak"], "cannot be used with"),
        (vec!["--device", "4"], "device 4 has no segments or events"),
    ] {
        let mut all = vec!["explain", path.as_str()];
        all.extend(args.iter().copied());
        let output = memtrace(&all);
        assert_eq!(output.status.code(), Some(2), "{all:?}");
        let err = stderr(&output);
        assert!(
            err.starts_with("memtrace: ") && err.contains(message),
            "{err}"
        );
    }
    // The alias a user may guess.
    assert_eq!(run_ok(&["oom", &path]), run_ok(&["explain", &path]));
}

#[test]
fn a_log_without_segments_is_explained_at_its_allocated_peak() {
    // RMM's log records allocations and frees, no segments: nothing is reserved, and the
    // moment worth explaining is when the most was allocated (1 MiB, its first allocation).
    let path = allocator_tests::fixtures::rmm_log_path("doc_examples.csv");
    let report = run_json(&["explain", path.to_str().unwrap()]);
    assert_eq!(report["moment"], "allocated_peak");
    let e = &report["explanation"];
    assert_eq!(e["reserved_bytes"], 0);
    assert_eq!(e["unsegmented_requested_bytes"], MIB);
    assert_eq!(
        e["why"],
        "the trace records no segments, so nothing is reserved: the live allocations are in \
         blocks of no recorded segment"
    );
    let text = run_ok(&["explain", path.to_str().unwrap()]);
    assert!(
        text.contains("at the allocated peak (the trace records no segments)"),
        "{text}"
    );
}

#[test]
fn the_stack_leaves_the_allocator_out_unless_asked() {
    let path = fixture("made_oom_private_pool.pickle");
    let report = run_json(&["explain", &path]);
    assert_eq!(report["request"]["frames_left_out"], 1);
    assert_eq!(
        report["request"]["stack"][0],
        "/usr/lib/python3/site-packages/torch/nn/modules/linear.py:125:linear"
    );
    let full = run_json(&["explain", &path, "--full-stack"]);
    assert_eq!(full["request"]["frames_left_out"], 0);
    assert_eq!(full["request"]["stack"].as_array().map(Vec::len), Some(4));
}

/// On each snapshot, at each out-of-memory event of its device (else its reserved peak): the
/// parts add up to reserved exactly, reserved is what `summary` reports there, and the
/// categories add up to the live part with the memory outside segments.
fn check_parts_add_up(names: &[String]) {
    for name in names {
        let path = fixture(name);
        let summary = run_json(&["summary", &path]);
        if summary["devices"].as_array().is_some_and(Vec::is_empty) {
            let output = memtrace(&["explain", &path]);
            assert_eq!(output.status.code(), Some(2), "{name}");
            assert_eq!(
                stderr(&output),
                "memtrace: the trace has no devices: no segments and no events\n"
            );
            continue;
        }
        let first = run_json(&["explain", &path]);
        let device = summary["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .find(|d| d["device"] == first["device"]);
        let ooms = first["out_of_memory_events"].as_u64().expect("count");
        let reports: Vec<Value> = if ooms == 0 {
            vec![first]
        } else {
            (1..=ooms)
                .map(|k| run_json(&["explain", &path, "--oom", &k.to_string()]))
                .collect()
        };
        for (k, report) in reports.iter().enumerate() {
            let e = &report["explanation"];
            let reserved = e["reserved_bytes"].as_u64().expect("reserved");
            let parts = parts(e);
            assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), reserved, "{name}");
            let live = parts.iter().find(|p| p.0 == "live").map_or(0, |p| p.1);
            let categories: u64 = e["categories"]
                .as_array()
                .expect("categories")
                .iter()
                .map(|c| c["requested_bytes"].as_u64().expect("bytes"))
                .sum();
            let outside = e["unsegmented_requested_bytes"].as_u64().expect("bytes");
            assert_eq!(categories, live + outside, "{name}");
            let device = device.expect("explain opens a device summary lists");
            if ooms == 0 {
                assert_eq!(
                    device["peak_reserved"]["bytes"].as_u64(),
                    Some(reserved),
                    "{name}"
                );
            } else {
                let oom = &device["out_of_memory"][k];
                assert_eq!(oom["reserved_bytes"].as_u64(), Some(reserved), "{name}");
                assert_eq!(oom["memory"], *e, "{name}: summary splits it the same way");
            }
        }
    }
}

#[test]
fn the_parts_add_up_on_the_project_fixtures() {
    check_parts_add_up(&project_snapshot_names());
}

#[test]
#[ignore = "external suite: set BLOCKPOOL_FIXTURES to the folder holding pytorch-snapshots/"]
fn external_the_parts_add_up() {
    check_parts_add_up(&external_snapshot_names());
}
