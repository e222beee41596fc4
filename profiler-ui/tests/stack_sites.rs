//! Sites in either view on a trace made here with one stack per case, and the stack tree of
//! live memory (`top --tree`, the viewer's `/api/tree`) placing each block under its frames.

mod common;

use common::server::{self, get_json};
use common::sites::{assert_sums, json, row, rows, BEFORE};
use common::{memtrace, scratch, stderr, stdout};
use serde_json::Value;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

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
