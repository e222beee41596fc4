//! Sites named by the user's own code, the autograd node beside them, blocks from before
//! recording, and the stack tree of live memory (`top --tree`), on the licensed PyTorch
//! fixtures and on a trace made here with one stack per case.

mod common;

use common::server::{self, get_json};
use common::{fixture, memtrace, scratch, stderr, stdout};
use serde_json::Value;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const BEFORE: &str = "<allocated before _record_memory_history was enabled>";
const TRAINING: &str = "notHanmin_assignment2-systems_memory_snapshot.pickle";

fn json(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// `(label, bytes, blocks)` of every site of a `top --json` or leak list.
fn rows(sites: &Value) -> Vec<(String, u64, u64)> {
    sites
        .as_array()
        .expect("a list of sites")
        .iter()
        .map(|s| {
            (
                s["label"].as_str().expect("label").to_string(),
                s["bytes"].as_u64().expect("bytes"),
                s["blocks"].as_u64().expect("blocks"),
            )
        })
        .collect()
}

fn row(label: &str, bytes: u64, blocks: u64) -> (String, u64, u64) {
    (label.to_string(), bytes, blocks)
}

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

/// Checks that every node's bytes and blocks are its children's sums.
fn assert_sums(node: &Value) {
    let children = node["children"].as_array().expect("children");
    if children.is_empty() {
        return;
    }
    let bytes: u64 = children.iter().map(|c| c["bytes"].as_u64().unwrap()).sum();
    let blocks: u64 = children.iter().map(|c| c["blocks"].as_u64().unwrap()).sum();
    assert_eq!(
        (bytes, blocks),
        (
            node["bytes"].as_u64().unwrap(),
            node["blocks"].as_u64().unwrap()
        ),
        "children of {} add up to it",
        node["name"]
    );
    children.iter().for_each(assert_sums);
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

/// One segment of 8 MiB on device 0, its first 512 KiB allocated before recording began
/// (no stack), then one allocation per stack shape:
///
/// | block | size | stack (innermost first, after the capture and the allocator) |
/// |---|---|---|
/// | a | 1 MiB | torch's einsum, the user's `model.py:42:forward`, `train.py:7:main` |
/// | b | 2 MiB | torch's relu, the standard library's threading |
/// | c | 3 MiB | tensor factory, dispatcher, `BmmBackward0::apply`, the engine |
/// | d | 512 KiB | `getNewWorkspace` under `BmmBackward0::apply` |
/// | e | 256 KiB | none recorded |
/// | g | 128 KiB | `BmmBackward0::apply` under the user's `model.py:42:forward` |
const STACKS: &str = r#"{"blockpool_trace":1}
{"frame":1,"name":"torch::unwind::unwind()","file":"??","line":0}
{"frame":2,"name":"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)","file":"CUDACachingAllocator.cpp","line":0}
{"frame":3,"name":"einsum","file":"/venv/lib/python3.12/site-packages/torch/functional.py","line":373}
{"frame":4,"name":"forward","file":"/home/me/model.py","line":42}
{"frame":5,"name":"main","file":"/home/me/train.py","line":7}
{"frame":6,"name":"relu","file":"/venv/lib/python3.12/site-packages/torch/nn/functional.py","line":9}
{"frame":7,"name":"run","file":"/usr/lib/python3.12/threading.py","line":1010}
{"frame":8,"name":"at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)","file":"??","line":0}
{"frame":9,"name":"at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)","file":"??","line":0}
{"frame":10,"name":"torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)","file":"??","line":0}
{"frame":11,"name":"torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)","file":"??","line":0}
{"frame":12,"name":"at::cuda::getNewWorkspace()","file":"","line":0}
{"context":1,"tags":[],"frames":[1,2,3,4,5]}
{"context":2,"tags":[],"frames":[1,2,6,7]}
{"context":3,"tags":[],"frames":[1,2,8,9,10,11]}
{"context":4,"tags":[],"frames":[1,2,12,10,11]}
{"context":5,"tags":[],"frames":[1,2,10,4]}
{"event":"alloc","device":0,"addr":268959744,"size":1048576,"requested":1048576,"time_us":1,"context":1}
{"event":"alloc","device":0,"addr":270008320,"size":2097152,"requested":2097152,"time_us":2,"context":2}
{"event":"alloc","device":0,"addr":272105472,"size":3145728,"requested":3145728,"time_us":3,"context":3}
{"event":"alloc","device":0,"addr":275251200,"size":524288,"requested":524288,"time_us":4,"context":4}
{"event":"alloc","device":0,"addr":275775488,"size":262144,"requested":262144,"time_us":5}
{"event":"alloc","device":0,"addr":276037632,"size":131072,"requested":131072,"time_us":6,"context":5}
{"segment":268435456,"device":0,"size":8388608,"pool":"large","blocks":[[268435456,524288,524288,"active_allocated",0],[268959744,1048576,1048576,"active_allocated",1],[270008320,2097152,2097152,"active_allocated",2],[272105472,3145728,3145728,"active_allocated",3],[275251200,524288,524288,"active_allocated",4],[275775488,262144,262144,"active_allocated",0],[276037632,131072,131072,"active_allocated",5],[276168704,655360,0,"inactive",0]]}
"#;

fn stacks_trace() -> String {
    let path = scratch("site-stacks.jsonl");
    std::fs::write(&path, STACKS).expect("writes the trace");
    path.to_string_lossy().into_owned()
}

#[test]
fn each_stack_shape_gets_its_site_in_either_view() {
    let path = stacks_trace();
    let user = json(&["top", &path, "--json"]);
    assert_eq!(user["allocated_bytes"], 7_733_248);
    assert_eq!(
        rows(&user["sites"]),
        [
            row(
                "torch::autograd::generated::BmmBackward0::apply",
                3 * MIB,
                1
            ),
            row(
                "/venv/lib/python3.12/site-packages/torch/nn/functional.py:9:relu",
                2 * MIB,
                1
            ),
            row("/home/me/model.py:42:forward", MIB, 1),
            row(BEFORE, 512 * KIB, 1),
            row("at::cuda::getNewWorkspace (BmmBackward0)", 512 * KIB, 1),
            row("<no stack recorded>", 256 * KIB, 1),
            row("/home/me/model.py:42:forward (BmmBackward0)", 128 * KIB, 1),
        ]
    );
    let all = json(&["top", &path, "--json", "--all-frames"]);
    let malloc = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc";
    assert_eq!(
        rows(&all["sites"]),
        [
            row(&format!("{malloc} (BmmBackward0)"), 3 * MIB + 512 * KIB, 2),
            row(
                "/venv/lib/python3.12/site-packages/torch/nn/functional.py:9:relu",
                2 * MIB,
                1
            ),
            row(
                "/venv/lib/python3.12/site-packages/torch/functional.py:373:einsum",
                MIB,
                1
            ),
            row(BEFORE, 512 * KIB, 1),
            row("<no stack recorded>", 256 * KIB, 1),
            row("/home/me/model.py:42:forward (BmmBackward0)", 128 * KIB, 1),
        ]
    );
    // Before the first event every live block predates recording.
    let start = json(&["top", &path, "--json", "--at", "start"]);
    assert_eq!(rows(&start["sites"]), [row(BEFORE, 512 * KIB, 1)]);
    // The segment map names its blocks the same way.
    let segments = json(&["segments", &path, "--json"]);
    let sites: Vec<&str> = segments[0]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["site"].as_str())
        .collect();
    assert_eq!(sites[0], BEFORE);
    assert_eq!(sites[1], "/home/me/model.py:42:forward");
    assert_eq!(sites[5], "<no stack recorded>");
    // The text and --help say what a site is.
    let help = stdout(&memtrace(&["top", "--help"]));
    assert!(
        help.contains("A site is where a block was allocated"),
        "{help}"
    );
    assert!(help.contains("--all-frames"), "{help}");
}

#[test]
fn the_stack_tree_places_each_block_under_its_frames() {
    let path = stacks_trace();
    let report = json(&["top", &path, "--tree", "--json", "--min-share", "0"]);
    let tree = &report["tree"];
    assert_sums(tree);
    let mut lines = Vec::new();
    fn flatten(node: &Value, depth: usize, lines: &mut Vec<(usize, String, u64)>) {
        lines.push((
            depth,
            node["name"].as_str().unwrap().to_string(),
            node["bytes"].as_u64().unwrap(),
        ));
        for child in node["children"].as_array().unwrap() {
            flatten(child, depth + 1, lines);
        }
    }
    flatten(tree, 0, &mut lines);
    let line = |depth: usize, name: &str, bytes: u64| (depth, name.to_string(), bytes);
    assert_eq!(
        lines,
        [
            line(0, "all allocated blocks", 7_733_248),
            line(
                1,
                "torch::autograd::generated::BmmBackward0::apply",
                3 * MIB
            ),
            line(
                1,
                "/venv/lib/python3.12/site-packages/torch/nn/functional.py:9:relu",
                2 * MIB
            ),
            line(1, "/home/me/train.py:7:main", MIB),
            line(2, "/home/me/model.py:42:forward", MIB),
            line(1, BEFORE, 512 * KIB),
            line(1, "at::cuda::getNewWorkspace (BmmBackward0)", 512 * KIB),
            line(1, "<no stack recorded>", 256 * KIB),
            line(1, "/home/me/model.py:42:forward (BmmBackward0)", 128 * KIB),
        ]
    );
    // All frames: memory_viz's flame graph paths, outermost first, the capture hidden.
    let all = json(&[
        "top",
        &path,
        "--tree",
        "--json",
        "--all-frames",
        "--min-share",
        "0",
    ]);
    assert_sums(&all["tree"]);
    let engine = &all["tree"]["children"][0];
    assert_eq!(engine["name"], "torch::autograd::Engine::thread_main");
    assert_eq!(engine["bytes"], 3 * MIB + 512 * KIB);
    let node = &engine["children"][0];
    assert_eq!(
        node["name"],
        "torch::autograd::generated::BmmBackward0::apply"
    );
    let names: Vec<&str> = node["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["at::_ops::bmm::call", "at::cuda::getNewWorkspace"]);
    // Limits: one level, shares under 10 % (773,324 bytes) folded into one node.
    let cut = json(&[
        "top",
        &path,
        "--tree",
        "--json",
        "--depth",
        "1",
        "--min-share",
        "10",
    ]);
    assert_sums(&cut["tree"]);
    let children = cut["tree"]["children"].as_array().unwrap();
    assert_eq!(children.len(), 4, "{children:?}");
    assert_eq!(children[3]["name"], "<4 smaller>");
    assert_eq!(
        children[3]["bytes"],
        512 * KIB + 512 * KIB + 256 * KIB + 128 * KIB
    );
    assert_eq!(children[2]["children"], Value::Array(Vec::new()), "depth 1");
    // A bad share is a usage error.
    let refused = memtrace(&["top", &path, "--tree", "--min-share", "150"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused).contains("not a percentage from 0 to 100"),
        "{}",
        stderr(&refused)
    );
}

fn serve(file: &str) -> server::Server {
    server::serve(&[file])
}

/// GETs `target` over HTTP/1.0: the status and the body.
fn get(port: u16, target: &str) -> (u16, Vec<u8>) {
    let reply = server::get(port, target);
    (reply.status, reply.body)
}

#[test]
fn the_viewer_serves_the_tree_and_names_sites_in_either_view() {
    let path = stacks_trace();
    let server = serve(&path);
    let port = server.port;
    // The tree at the end, as `top --tree` makes it.
    let tree = get_json(port, "/api/tree?device=0&index=6&min_share=0");
    assert_eq!(tree["index"], 6);
    // Six events applied: the state after event 5, named as `--at 5` names it.
    assert_eq!(tree["after_event"], 5);
    assert_eq!(tree["label"], "after event 5");
    assert_eq!(tree["is_peak"], true);
    assert_eq!(tree["allocated_bytes"], 7_733_248);
    assert_eq!(tree["blocks"], 7);
    assert_eq!(tree["all_frames"], false);
    assert_sums(&tree["tree"]);
    assert_eq!(
        tree["tree"]["children"][0]["name"],
        "torch::autograd::generated::BmmBackward0::apply"
    );
    let start = get_json(port, "/api/tree?device=0&index=0");
    assert_eq!(start["after_event"], Value::Null);
    assert_eq!(start["label"], "before event 0");
    assert_eq!(start["allocated_bytes"], 512 * KIB);
    assert_eq!(start["tree"]["children"][0]["name"], BEFORE);
    let all = get_json(port, "/api/tree?device=0&all_frames=1&min_share=0");
    assert_eq!(all["all_frames"], true);
    assert_eq!(
        all["tree"]["children"][0]["name"],
        "torch::autograd::Engine::thread_main"
    );
    for bad in [
        "/api/tree?device=0&min_share=101",
        "/api/tree?device=0&all_frames=maybe",
        "/api/tree?device=0&index=99",
    ] {
        let (status, body) = get(port, bad);
        assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
    }
    // The tables: user view by default, every frame on request.
    let breakdown = get_json(port, "/api/breakdown?device=0");
    assert_eq!(
        breakdown["sites"][0]["site"],
        "torch::autograd::generated::BmmBackward0::apply"
    );
    assert_eq!(breakdown["sites"][0]["autograd_node"], "BmmBackward0");
    let breakdown_all = get_json(port, "/api/breakdown?device=0&all_frames=1");
    assert_eq!(
        breakdown_all["sites"][0]["label"],
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc (BmmBackward0)"
    );
    let leaks = get_json(port, "/api/leaks?device=0");
    assert_eq!(
        leaks["alive_at_end"][0]["label"],
        "torch::autograd::generated::BmmBackward0::apply"
    );
    let leaks_all = get_json(port, "/api/leaks?device=0&all_frames=1");
    assert_eq!(
        leaks_all["alive_at_end"][0]["site"],
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
    );
    // The block alive before recording is named so in the timeline and its context pane.
    let timeline = get_json(port, "/api/timeline?device=0&width=100");
    let first = timeline["bands"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["start"] == 0)
        .expect("the block from before recording is a band");
    assert_eq!(first["site"], BEFORE);
    let id = first["id"].as_u64().unwrap();
    let allocation = get_json(port, &format!("/api/allocation?device=0&id={id}"));
    assert_eq!(allocation["context"]["site"], BEFORE);
    // The page loads the tree panel.
    let (status, script) = get(port, "/tree.js");
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&script).contains("/api/tree?"));
    let (_, page) = get(port, "/");
    assert!(String::from_utf8_lossy(&page).contains(r#"<script src="/tree.js"></script>"#));
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
