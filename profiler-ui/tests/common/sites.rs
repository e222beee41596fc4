//! What the site tests share: a command's JSON, the sites of a report as rows, and the check
//! that a stack tree's nodes add up.

use super::{memtrace, stderr};
use serde_json::Value;

/// The site of blocks alive before recording began without a stack.
pub const BEFORE: &str = "<allocated before _record_memory_history was enabled>";

/// Runs `memtrace ARGS`, which must succeed, and parses its JSON.
pub fn json(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// `(label, bytes, blocks)` of every site of a `top --json` or leak list.
pub fn rows(sites: &Value) -> Vec<(String, u64, u64)> {
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

/// A row as [`rows`] gives it.
pub fn row(label: &str, bytes: u64, blocks: u64) -> (String, u64, u64) {
    (label.to_string(), bytes, blocks)
}

/// Checks that every node's bytes and blocks are its children's sums.
pub fn assert_sums(node: &Value) {
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
