//! Sites named by the user's own code, the autograd node beside them (and the forward line that
//! created it), blocks from before recording, and the stack tree of live memory (`top
//! --tree`), on the licensed PyTorch fixtures; a reused address's step. The trace made here
//! with one stack per case is `stack_sites.rs`'s.

mod common;

use common::sites::{assert_sums, json, row, rows, BEFORE};
use common::{fixture, memtrace, scratch, stdout};
use serde_json::Value;

const MIB: u64 = 1 << 20;
const TRAINING: &str = "notHanmin_assignment2-systems_memory_snapshot.pickle";

const CS336: &str = "/root/assignment2-systems/cs336_systems";

/// The site of the training step's `BmmBackward0` allocations: ten lines of the model call bmm
/// (through einsum and matmul too), line 204 in the most stacks.
fn bmm_backward() -> String {
    format!("{CS336}/adapters.py:204:forward +9 other bmm lines (BmmBackward0)")
}

/// The site of its `IndexBackward0` allocation.
fn index_backward() -> String {
    format!("{CS336}/adapters.py:397:forward +2 other index lines (IndexBackward0)")
}

#[test]
fn the_training_step_is_named_by_its_backward_nodes_not_the_allocator() {
    let top = json(&["top", &fixture(TRAINING), "--json", "--limit", "100"]);
    // Before: `CUDACachingAllocator.cpp:0:c10::...::DeviceCachingAllocator::malloc(...)`,
    // 3,999,020,032 bytes in 328 blocks, led the list, and the 328 blocks from before
    // recording were `<unknown>`. The allocator's 328 blocks are the backward pass's.
    assert_eq!(
        rows(&top["sites"]),
        [
            row(BEFORE, 3_990_901_760, 328),
            row(&format!("{CS336}/adapters.py:887:step"), 3_989_844_992, 327),
            row(&format!("{CS336}/adapters.py:888:step"), 3_989_844_992, 327),
            // The backward pass's stacks hold no Python frame: a node is named by the forward
            // lines that called its operator (bmm from ten lines, in most stacks from 204), and
            // bmm's workspace joins its node's site.
            row(&bmm_backward(), 3_947_446_272, 254),
            row(&index_backward(), 51_200_000, 1),
            row(&format!("{CS336}/adapters.py:36:forward"), 40_960_000, 1),
            row(&format!("{CS336}/adapters.py:204:forward"), 8_519_680, 1),
            row("at::_sum_to<c10::SymInt>", 373_760, 73),
            row(
                &format!("{CS336}/benchmarking_script.py:101:run_benchmark_with_nvtx"),
                512,
                1
            ),
        ]
    );
    let sum: u64 = rows(&top["sites"]).iter().map(|r| r.1).sum();
    assert_eq!(
        sum,
        top["allocated_bytes"].as_u64().unwrap(),
        "every byte has one site"
    );
    let bmm = &top["sites"][3];
    assert_eq!(
        bmm["site"],
        format!("{CS336}/adapters.py:204:forward +9 other bmm lines")
    );
    assert_eq!(
        bmm["autograd_node"], "BmmBackward0",
        "the node has its own field"
    );
    assert_eq!(top["sites"][0]["autograd_node"], Value::Null);

    // --all-frames names sites as memory_viz's frames read: the allocator is back, with its
    // node beside it, and torch's einsum wrapper merges two of the model's lines.
    let all = json(&["top", &fixture(TRAINING), "--json", "--all-frames"]);
    let malloc = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc";
    let torch = "/root/assignment2-systems/.venv/lib/python3.12/site-packages/torch";
    assert_eq!(
        rows(&all["sites"])[3..7],
        [
            row(&format!("{malloc} (BmmBackward0)"), 3_947_446_272, 254),
            row(&format!("{malloc} (IndexBackward0)"), 51_200_000, 1),
            row(&format!("{torch}/functional.py:407:einsum"), 49_479_680, 2),
            row(malloc, 373_760, 73),
        ]
    );
}

#[test]
fn leaks_of_the_training_step_are_its_gradients_under_bmm_backward() {
    let reports = json(&["leaks", &fixture(TRAINING), "--json"]);
    let report = &reports[0];
    // Before: `CUDACachingAllocator.cpp:0:...::malloc(...)`, 3.72 GiB in 327 blocks, growing.
    assert_eq!(
        rows(&report["alive_at_end"]),
        [
            row(&bmm_backward(), 3_938_926_592, 253),
            row(&index_backward(), 51_200_000, 1),
            row("at::_sum_to<c10::SymInt>", 373_760, 73),
        ],
        "the gradients; what was there before the first step and stayed is persistent"
    );
    // Before: `Optimizer.zero_grad` and `Optimizer.step` were two steps, and the gradients
    // (0 -> 3.67 GiB between their ends) were growing.
    assert_eq!(report["step_rule"]["kind"], "outermost");
    assert_eq!(report["growing"], serde_json::json!([]));
    assert_eq!(
        rows(&report["persistent"])[..3],
        [
            row(BEFORE, 3_990_901_760, 328),
            row(&format!("{CS336}/adapters.py:887:step"), 3_989_844_992, 327),
            row(&format!("{CS336}/adapters.py:888:step"), 3_989_844_992, 327),
        ],
        "the weights and AdamW's two moments"
    );
    let text = stdout(&memtrace(&["leaks", &fixture(TRAINING)]));
    assert!(
        text.contains(
            "    3.67 GiB     253 blocks  /root/assignment2-systems/cs336_systems/adapters.py:204:\
             forward +9 other bmm lines (BmmBackward0)\n"
        ),
        "{text}"
    );
    assert!(!text.contains("CUDACachingAllocator"), "{text}");
}

#[test]
fn torch_wrappers_give_way_to_the_model_lines_that_called_them() {
    let at_peak = |extra: &[&str]| {
        let mut args = vec!["top", TRAINING, "--peak", "--json", "--limit", "1000"];
        let path = fixture(TRAINING);
        args[1] = &path;
        args.extend_from_slice(extra);
        let report = json(&args);
        (
            report["allocated_bytes"].as_u64().unwrap(),
            rows(&report["sites"]),
        )
    };
    let (total, user) = at_peak(&[]);
    let (total_all, all) = at_peak(&["--all-frames"]);
    assert_eq!(total, 23_165_567_488);
    assert_eq!(total, total_all);
    let find = |list: &[(String, u64, u64)], label: &str| {
        list.iter().find(|r| r.0 == label).map(|r| (r.1, r.2))
    };
    let einsum = "/root/assignment2-systems/.venv/lib/python3.12/site-packages/torch/functional.py:407:einsum";
    assert_eq!(
        find(&all, einsum),
        Some((2_125_660_160, 182)),
        "one merged site"
    );
    assert_eq!(find(&user, einsum), None);
    for line in [113, 114] {
        let site = format!("{CS336}/adapters.py:{line}:forward");
        assert_eq!(find(&user, &site), Some((754_974_720, 36)), "{site}");
        assert_eq!(find(&all, &site), None, "{site} is inside einsum there");
    }
    assert!(
        user.iter().all(|r| !r.0.contains("site-packages")),
        "no library frame names a site at the peak: {user:?}"
    );
    let sum = |list: &[(String, u64, u64)]| list.iter().map(|r| r.1).sum::<u64>();
    assert_eq!(sum(&user), total);
    assert_eq!(sum(&all), total);
}

#[test]
fn blocks_alive_before_recording_say_so() {
    let top = json(&[
        "top",
        &fixture("bcrafton_assignment2-systems_memory_snapshot.pickle"),
        "--json",
    ]);
    // Before: `<unknown>`, the same bytes and blocks.
    assert_eq!(rows(&top["sites"])[0], row(BEFORE, 1_545_204_736, 225));
    let leaks = json(&[
        "leaks",
        &fixture("bcrafton_assignment2-systems_memory_snapshot.pickle"),
        "--json",
    ]);
    assert_eq!(
        leaks[0]["alive_from_before_bytes"], 1_545_204_736_u64,
        "the same blocks leaks counts as allocated before the trace"
    );
}

#[test]
fn the_stack_tree_of_the_training_step_adds_up_to_what_is_allocated() {
    let report = json(&[
        "top",
        &fixture(TRAINING),
        "--tree",
        "--json",
        "--min-share",
        "0",
        "--depth",
        "64",
    ]);
    let tree = &report["tree"];
    assert_eq!(report["allocated_bytes"], 16_019_091_968_u64);
    assert_eq!(tree["bytes"], 16_019_091_968_u64);
    assert_eq!(tree["blocks"], 1_313);
    assert_eq!(tree["name"], "all allocated blocks");
    assert_sums(tree);
    let top: Vec<(String, u64, u64)> = tree["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["bytes"].as_u64().unwrap(),
                c["blocks"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        top,
        [
            row(
                &format!("{CS336}/benchmarking_script.py:169:<module>"),
                8_029_170_176,
                657
            ),
            row(BEFORE, 3_990_901_760, 328),
            row(&bmm_backward(), 3_947_446_272, 254),
            row(&index_backward(), 51_200_000, 1),
            row("at::_sum_to<c10::SymInt>", 373_760, 73),
        ]
    );
    // The all-frames tree holds the same bytes, under memory_viz's frames.
    let all = json(&[
        "top",
        &fixture(TRAINING),
        "--tree",
        "--json",
        "--all-frames",
        "--min-share",
        "0",
        "--depth",
        "64",
    ]);
    assert_eq!(all["tree"]["bytes"], 16_019_091_968_u64);
    assert_sums(&all["tree"]);

    // The default limits fold what is under 1 % and still add up.
    let text = stdout(&memtrace(&["top", &fixture(TRAINING), "--tree"]));
    assert!(
        text.contains("   14.92 GiB   100.0%    1,313  all allocated blocks\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "    3.72 GiB    24.9%      328    <allocated before _record_memory_history was enabled>\n"
        ),
        "{text}"
    );
    // bmm's workspace joined its node's site: two smaller nodes where there were three.
    assert!(
        text.contains(
            "    3.68 GiB    24.6%      254    /root/assignment2-systems/cs336_systems/adapters.py:\
             204:forward +9 other bmm lines (BmmBackward0)\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("   49.18 MiB     0.3%       74    <2 smaller>\n"),
        "{text}"
    );
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_einsum_of_a_forward_pass_is_the_four_model_lines_that_called_it() {
    let path = fixture("kkaitlyn111_cs336_memory_ctx128_forward.pickle");
    let sites = |extra: &[&str]| {
        let mut args = vec!["top", path.as_str(), "--json", "--limit", "1000"];
        args.extend_from_slice(extra);
        rows(&json(&args)["sites"])
    };
    let einsum = "/scratch/c-kaitwang/uv-envs/cs336-a2-systems/lib/python3.13/site-packages/torch/functional.py:407:einsum";
    let all = sites(&["--all-frames"]);
    // Before, and with --all-frames: one site, second only to the blocks from before.
    assert_eq!(all[1], row(einsum, 2_240_806_912, 227));
    let user = sites(&[]);
    let model = "/home/c-kaitwang/assignment1/cs336_basics/transformer.py";
    let find = |label: String| user.iter().find(|r| r.0 == label).cloned();
    let lines = [
        ("22:forward", 1_396_703_232, 66),
        ("57:forward", 340_787_200, 65),
        ("147:scaled_dot_product_attention", 335_544_320, 64),
        ("154:scaled_dot_product_attention", 167_772_160, 32),
    ];
    for (line, bytes, blocks) in lines {
        let label = format!("{model}:{line}");
        assert_eq!(find(label.clone()), Some(row(&label, bytes, blocks)));
    }
    let (bytes, blocks) = lines.iter().fold((0, 0), |(b, k), &(_, bytes, blocks)| {
        (b + bytes, k + blocks)
    });
    assert_eq!(
        (bytes, blocks),
        (2_240_806_912, 227),
        "the four lines are einsum's blocks"
    );
    assert!(
        user.iter().all(|r| !r.0.contains("site-packages")),
        "{user:?}"
    );
}

/// A 2 MiB segment whose first 1 MiB block, without a stack, predates recording: `step0` frees
/// it, `step1` allocates the same address again, still without a stack.
const REUSED: &str = r#"{"blockpool_trace":1}
{"context":1,"tags":["step0"],"frames":[]}
{"context":2,"tags":["step1"],"frames":[]}
{"event":"annotate","device":0,"addr":0,"size":0,"time_us":1,"context":1}
{"event":"free_requested","device":0,"addr":268435456,"size":1048576,"time_us":2}
{"event":"free_completed","device":0,"addr":268435456,"size":1048576,"time_us":3}
{"event":"annotate","device":0,"addr":0,"size":0,"time_us":4,"context":2}
{"event":"alloc","device":0,"addr":268435456,"size":1048576,"requested":1048576,"time_us":5}
{"event":"annotate","device":0,"addr":0,"size":0,"time_us":6}
{"segment":268435456,"device":0,"size":2097152,"pool":"large","blocks":[[268435456,1048576,1048576,"active_allocated",0],[269484032,1048576,0,"inactive",0]]}
"#;

#[test]
fn a_reused_address_is_recorded_from_the_step_that_allocated_it() {
    let path = scratch("site-reused.jsonl");
    std::fs::write(&path, REUSED).expect("writes the trace");
    let path = path.to_string_lossy().into_owned();
    let start = json(&["top", &path, "--json", "--at", "start"]);
    assert_eq!(rows(&start["sites"]), [row(BEFORE, MIB, 1)]);
    let end = json(&["top", &path, "--json"]);
    assert_eq!(rows(&end["sites"]), [row("<no stack recorded>", MIB, 1)]);
    // The leak report names each step's end in turn: the block of step1 is the trace's own.
    let leaks = json(&["leaks", &path, "--json"]);
    assert_eq!(leaks[0]["steps"], serde_json::json!(["step0", "step1"]));
    assert_eq!(
        rows(&leaks[0]["alive_at_end"]),
        [row("<no stack recorded>", MIB, 1)]
    );
    assert_eq!(
        leaks[0]["measured_at"],
        serde_json::json!(["before step0", "step0", "step1"])
    );
    assert_eq!(
        leaks[0]["growing"],
        serde_json::json!([]),
        "two steps are fewer than the 3 growing steps that flag a site"
    );
    let leaks = json(&["leaks", &path, "--json", "--growth-steps", "1"]);
    let growth = &leaks[0]["growing"][0];
    assert_eq!(growth["label"], "<no stack recorded>");
    assert_eq!(
        growth["bytes_by_step"],
        serde_json::json!([0, 0, MIB]),
        "the block alive before recording is another site"
    );
    assert_eq!(
        (growth["steps"].as_u64(), growth["since"].as_str()),
        (Some(1), Some("step0"))
    );
}
