//! Answers a PyTorch user can trust (issue 12): the out-of-memory event explained with the
//! failing request's size, stream, site and stack; replay what-ifs that say what they did
//! (the capacity and where it came from, a setting the start state leaves nothing to change,
//! the recorded out-of-memory request honoured, `--exact` on expandable segments); one
//! definition of fragmentation; peaks that say what kind of size they add up. Exact values
//! on `made_oom_private_pool.pickle` (`fixtures/made/make.py` says what it holds) and on the
//! licensed real snapshots.

mod common;

use common::{fixture, run_json, run_ok};
use serde_json::Value;

const OOM: &str = "made_oom_private_pool.pickle";
const NOT_HANMIN: &str = "notHanmin_assignment2-systems_memory_snapshot.pickle";

/// The `oom` entry's stack as the fixture writes it, innermost first.
const OOM_STACK: [&str; 4] = [
    "CUDACachingAllocator.cpp:?:c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
    "/usr/lib/python3/site-packages/torch/nn/modules/linear.py:125:linear",
    "/home/user/model.py:77:forward",
    "/home/user/train.py:12:<module>",
];

#[test]
fn summary_json_explains_the_failing_request_with_stream_stack_and_site() {
    let path = fixture(OOM);
    let report = run_json(&["summary", &path]);
    let ooms = report["devices"][0]["out_of_memory"]
        .as_array()
        .expect("out_of_memory is a list");
    assert_eq!(ooms.len(), 1, "one oom entry in the file: {ooms:?}");
    let oom = &ooms[0];
    assert_eq!(oom["requested_bytes"], 30 << 20, "the failing request");
    assert_eq!(oom["stream"], 7, "the request's stream");
    assert_eq!(
        oom["device_free_bytes"],
        10 << 20,
        "device_free as recorded"
    );
    assert_eq!(
        oom["reserved_bytes"],
        22 << 20,
        "20 MiB + 2 MiB segments then"
    );
    assert_eq!(oom["device_memory_bytes"], 32 << 20, "free + reserved");
    assert_eq!(oom["allocated_bytes"], (6 << 20) + 1024);
    let stack: Vec<&str> = oom["stack"]
        .as_array()
        .expect("stack is a list")
        .iter()
        .map(|f| f.as_str().expect("a frame is a string"))
        .collect();
    assert_eq!(
        stack, OOM_STACK,
        "the failing request's stack, innermost first"
    );
    // The site is named by analysis::sites (whose rules another change refines): it is one
    // of the request's own frames, never the allocator's.
    let site = oom["site"].as_str().expect("site is a string");
    assert!(
        stack[1..].contains(&site),
        "site {site:?} is a Python frame of the request"
    );
}

#[test]
fn summary_text_shows_the_failing_request_its_device_and_stack() {
    let text = run_ok(&["summary", &fixture(OOM)]);
    assert!(
        text.contains("30.00 MiB requested on stream 7 at "),
        "request, stream and site on the event's line:\n{text}"
    );
    assert!(
        text.contains(
            "    the device: 10.00 MiB free + 22.00 MiB reserved by this allocator = 32.00 MiB \
             this process could use"
        ),
        "{text}"
    );
    // The allocator's frame is left out unless asked for, so the user's code comes first.
    let stack = format!(
        "    stack of the request (innermost first; 1 frame of the stack capture and the \
         allocator left out: --full-stack prints it):\n{}",
        OOM_STACK[1..]
            .iter()
            .map(|f| format!("      {f}\n"))
            .collect::<String>()
    );
    assert!(text.contains(&stack), "the stack, innermost first:\n{text}");
    let full = run_ok(&["summary", &fixture(OOM), "--full-stack"]);
    let stack = format!(
        "    stack of the request (innermost first):\n{}",
        OOM_STACK.map(|f| format!("      {f}\n")).concat()
    );
    assert!(full.contains(&stack), "every frame:\n{full}");
}

#[test]
fn replay_defaults_to_the_recorded_device_and_replays_the_failed_request() {
    let path = fixture(OOM);
    let report = run_json(&["replay", &path]);
    assert_eq!(
        report["capacity_bytes"],
        32 << 20,
        "device_free 10 MiB + 22 MiB reserved at the oom event"
    );
    assert_eq!(report["capacity_source"], "trace");
    assert_eq!(report["recorded"]["device_memory_bytes"], 32 << 20);
    let ours = &report["blockpool"];
    assert_eq!(ours["recorded_oom_requests"], 1, "the oom entry's request");
    assert_eq!(
        ours["recorded_oom_failed"], 1,
        "30 MiB does not fit beside 22 MiB reserved on 32 MiB"
    );
    assert_eq!(ours["failed_allocations"], 0);
    assert_eq!(ours["peak_reserved_bytes"], 22 << 20);

    let text = run_ok(&["replay", &path]);
    assert!(
        text.contains(
            "capacity:  32.00 MiB (the recorded device: device_free + reserved at its \
             out-of-memory event)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("note:      the recording ran out of memory once; "),
        "{text}"
    );
    assert!(
        text.contains("\nout-of-memory                      1\n"),
        "{text}"
    );
}

#[test]
fn replay_says_which_capacity_it_used_when_the_trace_does_not_tell() {
    let report = run_json(&["replay", &fixture(NOT_HANMIN)]);
    assert_eq!(report["capacity_bytes"], 1_u64 << 40);
    assert_eq!(report["capacity_source"], "default");
    assert_eq!(report["recorded"]["device_memory_bytes"], Value::Null);
    let given = run_json(&["replay", &fixture(OOM), "--capacity", "78.5M"]);
    assert_eq!(given["capacity_bytes"], 82_313_216_u64);
    assert_eq!(given["capacity_source"], "--capacity");
    assert_eq!(given["blockpool"]["recorded_oom_failed"], 0);
}

#[test]
fn find_capacity_honours_the_request_the_recording_failed() {
    let report = run_json(&["replay", &fixture(OOM), "--find-capacity"]);
    // 20 MiB and 2 MiB segments, and a 32 MiB one for the 30 MiB request (rounded up to a
    // quarter of the power of two by roundup_power2_divisions [256:4]): without the failed
    // request the search answered 22 MiB.
    assert_eq!(
        report["capacity_search"]["min_capacity_bytes"],
        54 << 20,
        "{report}"
    );
}

#[test]
fn expandable_segments_on_adopted_segments_says_it_had_nothing_to_change() {
    let path = fixture(NOT_HANMIN);
    let report = run_json(&["replay", &path, "--config", "expandable_segments:True"]);
    assert_eq!(report["blockpool"]["start"]["adopted_segments"], 999);
    assert_eq!(report["blockpool"]["device_allocs"], 0);
    assert_eq!(
        report["blockpool"]["peak_reserved_bytes"], report["recorded"]["peak_reserved_bytes"],
        "the recording's peak, as the note explains"
    );
    let notes = report["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert_eq!(notes[1], ASSUMED_CAPACITY, "{notes:?}");
    assert_eq!(
        notes[0],
        "expandable_segments: the 999 segments adopted from the start state (22.21 GiB) keep \
         their recorded sizes, and the replay created no segment of its own, so the setting had \
         nothing to change; rerun with --fresh to start from the live blocks alone, where it \
         shapes every segment"
    );
    let fresh = run_json(&[
        "replay",
        &path,
        "--config",
        "expandable_segments:True",
        "--fresh",
    ]);
    assert_eq!(
        fresh["notes"],
        serde_json::json!([ASSUMED_CAPACITY]),
        "--fresh adopts nothing: {fresh}"
    );
    let plain = run_json(&["replay", &path]);
    assert_eq!(plain["notes"].as_array().map(Vec::len), Some(0), "{plain}");
}

#[test]
fn exact_on_expandable_segments_says_why_addresses_cannot_match() {
    let report = run_json(&[
        "replay",
        &fixture("made_expandable_two_devices.pickle"),
        "--exact",
        "--config",
        "expandable_segments:False",
    ]);
    let notes = report["notes"].as_array().expect("notes");
    assert_eq!(
        notes,
        &[
            Value::from(
                "--exact: the trace was recorded with expandable segments (0 segment_map events, \
             expandable segments at the start): PyTorch maps pages into one reserved address \
             range per stream and pool, which the simulated device does not reproduce, so \
             allocations there cannot get their recorded addresses; only segments of \
             segment_alloc events are placed as recorded"
            ),
            Value::from(ASSUMED_CAPACITY)
        ]
    );
}

/// The note of a `--config` replay at the assumed capacity that never ran short.
const ASSUMED_CAPACITY: &str = "the capacity of 1024.00 GiB is assumed (the trace records no \
     out-of-memory event, so it does not tell the device's memory) and the replay never ran \
     short of it, so what the config does under memory pressure (freeing cached blocks, \
     retrying) never happened; give --capacity, e.g. the GPU's memory, to see it";

#[test]
fn a_garbage_collection_threshold_without_a_memory_fraction_says_it_changed_nothing() {
    let path = fixture(NOT_HANMIN);
    let gc = run_json(&[
        "replay",
        &path,
        "--config",
        "garbage_collection_threshold:0.8",
    ]);
    // The header counts the events PyTorch numbers, not the 4 annotations added on import.
    assert_eq!(gc["events"], 19_468);
    assert_eq!(gc["numbered_events"], 19_464);
    assert_eq!(
        gc["notes"],
        serde_json::json!([
            "garbage_collection_threshold:0.8: as in PyTorch, it acts only under a memory \
             fraction (it frees cached blocks once reserved memory passes that share of the \
             fraction's limit), and the config sets none, so it changed nothing; add \
             per_process_memory_fraction:F to --config",
            ASSUMED_CAPACITY
        ])
    );
    // With a fraction and a capacity the device could have, the threshold can act, and
    // neither note is printed.
    let acting = run_json(&[
        "replay",
        &path,
        "--config",
        "garbage_collection_threshold:0.8,per_process_memory_fraction:0.5",
        "--capacity",
        "80G",
    ]);
    assert_eq!(acting["notes"], serde_json::json!([]), "{acting}");
    assert_eq!(acting["capacity_source"], "--capacity");
}

#[test]
fn summary_and_replay_print_one_fragmentation_with_its_definition() {
    let path = fixture(NOT_HANMIN);
    let summary = run_json(&["summary", &path]);
    let replay = run_json(&["replay", &path]);
    let device = &summary["devices"][0];
    // Reserved is flat at 23,842,521,088 from the start state on (every segment was made
    // before recording began), so the reserved peak is taken where it is fullest: at the
    // allocated peak, 23,165,567,488 allocated after event 5,701 (the peak test below). At the
    // start state it would be 33.29 %, which says nothing about the workload.
    let expected = (23_842_521_088_u64 - 23_165_567_488) as f64 / 23_842_521_088_f64;
    assert_eq!(device["fragmentation_at_reserved_peak"], expected);
    assert_eq!(device["fragmentation_after_event"], 5_701);
    assert_eq!(replay["recorded"]["fragmentation_at_peak"], expected);
    // blockpool's blocks there hold 2 MiB more than the requests the trace shows rounded (the
    // least they took): a remainder too small to split stays in its block.
    let replayed = (23_842_521_088_u64 - 23_165_567_488 - (2 << 20)) as f64 / 23_842_521_088_f64;
    assert_eq!(replay["blockpool"]["fragmentation_at_peak"], replayed);
    let text = run_ok(&["summary", &path]);
    assert!(
        text.contains(
            "  fragmentation: 2.84 % ((reserved - allocated) / reserved at the reserved peak, \
             where allocated is highest, as replay reports it)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "  free memory at the allocated peak: 645.59 MiB in blocks, largest 50.00 MiB; \
             92.3 % scattered (1 - largest free block / free bytes: 0 % when it is one block)\n"
        ),
        "{text}"
    );
    let text = run_ok(&["replay", &path]);
    assert!(text.contains("fragmentation at peak         2.83 %        2.84 %\n"));
    assert!(
        text.contains(
            "  fragmentation:      (reserved - allocated) / reserved at the reserved peak, where \
             allocated is highest (as summary reports it)\n"
        ),
        "{text}"
    );
}

#[test]
fn peaks_add_up_one_kind_of_size_each_and_say_which() {
    let path = fixture(NOT_HANMIN);
    let device = &run_json(&["summary", &path])["devices"][0];
    // Block sizes throughout: a block the trace alone shows at its request rounded up to 512
    // bytes (CPython walk of the file: 23,165,567,488); before, 508 bytes of unrounded requests
    // were mixed in (23,165,566,980).
    assert_eq!(device["peak_allocated"]["bytes"], 23_165_567_488_u64);
    assert_eq!(
        device["peak_allocated"]["after_event"], 5_701,
        "the peak holds once device_traces[0][5701] has happened"
    );
    // Requests throughout, as CPython sums them.
    assert_eq!(device["peak_requested"]["bytes"], 22_827_925_508_u64);
    let text = run_ok(&["summary", &path]);
    for line in [
        "  peak allocated  21.57 GiB after event 5,701 (0.050261 s) (block sizes)\n",
        "  peak requested  21.26 GiB after event 5,701 (0.050261 s) (request sizes)\n",
        "             (PyTorch's trace records requests, not block sizes: a block it alone shows \
         counts at its request rounded as the allocator rounds it, the least it took)\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

/// Converts `from` to `to` with `memtrace convert`.
fn convert(from: &str, to: &std::path::Path) {
    run_ok(&["convert", from, to.to_str().expect("utf-8 path")]);
}

#[test]
fn private_pools_settings_and_compile_context_survive_convert_both_ways() {
    use blockpool::trace::pickle::Value as Py;
    use blockpool::trace::pytorch::load_pytorch_snapshot;
    let source = fixture(OOM);
    let direct = common::scratch("answers-direct.pickle");
    convert(&source, &direct);
    let jsonl = common::scratch("answers-via.jsonl");
    convert(&source, &jsonl);
    let via_jsonl = common::scratch("answers-via-jsonl.pickle");
    convert(jsonl.to_str().unwrap(), &via_jsonl);
    let original = load_pytorch_snapshot(&std::fs::read(&source).unwrap()).expect("reads");
    for out in [&direct, &via_jsonl] {
        let converted = load_pytorch_snapshot(&std::fs::read(out).unwrap()).expect("reads back");
        let pools: Vec<(u64, (u64, u64))> = converted
            .segments
            .iter()
            .map(|s| (s.address, s.segment_pool_id))
            .collect();
        assert_eq!(
            pools,
            [(0x7F20_0000_0000, (0, 0)), (0x7F20_4000_0000, (1, 5))],
            "{}: segment_pool_id written back, not (0, 0)",
            out.display()
        );
        assert_eq!(
            converted.allocator_settings,
            original.allocator_settings,
            "{}: allocator_settings whole",
            out.display()
        );
        // The external annotations come back as `user_defined` entries, without one.
        let contexts: Vec<Option<&str>> = converted.device_traces[0]
            .iter()
            .filter(|e| e.action != blockpool::trace::Action::Annotate)
            .map(|e| e.compile_context.as_deref())
            .collect();
        assert_eq!(contexts, [Some("N/A"); 8], "{}", out.display());
    }
    let Some(Py::Dict(settings)) = &original.allocator_settings else {
        panic!("the fixture has settings")
    };
    let keys: Vec<String> = settings
        .iter()
        .map(|(k, _)| match k {
            Py::Str(k) => k.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        keys,
        [
            "PYTORCH_CUDA_ALLOC_CONF",
            "max_split_size",
            "garbage_collection_threshold",
            "expandable_segments",
            "pinned_num_register_threads",
            "release_lock_on_cudamalloc",
            "pinned_use_cuda_host_register",
            "roundup_power2_divisions",
        ]
    );
}

#[test]
fn info_and_segments_show_private_pools_and_the_settings_whole() {
    let path = fixture(OOM);
    let info = run_json(&["info", &path]);
    assert_eq!(
        info["devices"][0]["private_pools"],
        serde_json::json!([{"pool_id": [1, 5], "segments": 1, "reserved_bytes": 2 << 20}])
    );
    let settings = info["allocator_settings"].as_array().expect("settings");
    assert_eq!(settings.len(), 8);
    assert_eq!(
        settings[1],
        serde_json::json!(["max_split_size", "67108864"])
    );
    assert_eq!(
        settings[2],
        serde_json::json!(["garbage_collection_threshold", "0.6"])
    );
    let text = run_ok(&["info", &path]);
    for line in [
        "settings:  (allocator_settings, as the file records them)\n",
        "  max_split_size                 67108864\n",
        "  garbage_collection_threshold   0.6\n",
        "  roundup_power2_divisions       {'1': 4, '2': 4, '4': 4, '8': 4, '16': 4, '32': 4, \
         '64': 4, '128': 4, '256': 4, '512': 8, '1024': 0, '2048': 0, '4096': 0, '8192': 0, \
         '16384': 0, '32768': 0}\n",
        "  private pool (1, 5): 1 segment, 2.00 MiB reserved\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let segments = run_json(&["segments", &path]);
    let pools: Vec<&Value> = segments
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| &s["private_pool"])
        .collect();
    assert_eq!(pools, [&Value::Null, &serde_json::json!([1, 5])]);
    assert!(run_ok(&["segments", &path]).contains(" (private pool (1, 5))\n"));
}
