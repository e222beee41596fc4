//! The stack tree of live memory: every allocated block at one state placed under its call
//! stack, outermost frame first, each node holding the bytes and blocks of everything below
//! it (the flame graph `python -m torch.cuda._memory_viz memory` draws, as a tree).
//!
//! A block's path is its annotation tags, outermost first, then its frames: in the user view
//! the user's own Python frames, the innermost written as its site with the autograd node
//! beside it (a stack without user frames is one node, its site); in the all-frames view every
//! frame memory_viz shows. A block without a recorded stack is one node,
//! [`BEFORE_RECORDING`] or [`NO_STACK`](super::sites::NO_STACK).
//! A node's bytes are always the sum of its children's: blocks whose path ends at a node that
//! has children are its `<allocated in this frame>` child, and children folded by the limits
//! are one `<N smaller>` child.

use super::frames::{self, FrameView};
use super::sites::{allocated_by_context, SiteNames, BEFORE_RECORDING};
use blockpool::trace::{ContextId, StateWalker};
use serde::Serialize;
use std::collections::HashMap;

/// The name of the child holding blocks whose path ends at a node that has children.
pub const HERE: &str = "<allocated in this frame>";

/// One node of a stack tree ([`stack_tree`]): the root, or a frame, tag or site below it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TreeNode {
    /// A frame (`file:line:function` for Python, the function for native code), a tag, a
    /// site, or one of the `<...>` names of the module docs.
    pub name: String,
    /// Bytes of the allocated blocks below (block sizes, not requested sizes).
    pub bytes: u64,
    /// Allocated blocks below.
    pub blocks: u64,
    /// The nodes one frame further in, most bytes first (ties by name, a folded `<N smaller>`
    /// last); their bytes add up to this node's.
    pub children: Vec<TreeNode>,
}

/// Most levels below the root a tree keeps, whatever [`TreeLimits::depth`] asks: building,
/// cutting and dropping a tree recurse once per level, and one recorded stack can be millions
/// of frames deep.
pub const MAX_DEPTH: usize = 256;

/// How much of the tree to keep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeLimits {
    /// Levels below the root (at most [`MAX_DEPTH`]); deeper frames are counted in the node
    /// at this depth.
    pub depth: usize,
    /// Smallest share of all allocated bytes, from 0 to 1, a node keeps its own row with;
    /// smaller siblings are one `<N smaller>` node (a lone small one keeps its row, without
    /// children).
    pub min_share: f64,
}

impl Default for TreeLimits {
    fn default() -> TreeLimits {
        TreeLimits {
            depth: 12,
            min_share: 0.01,
        }
    }
}

/// While building: children by name, and the blocks whose path ends here.
#[derive(Default)]
struct Trie {
    bytes: u64,
    blocks: u64,
    here_bytes: u64,
    here_blocks: u64,
    children: HashMap<String, Trie>,
}

impl Trie {
    fn add(&mut self, path: &[String], bytes: u64, blocks: u64) {
        let mut node = self;
        node.bytes = node.bytes.saturating_add(bytes);
        node.blocks = node.blocks.saturating_add(blocks);
        for part in path {
            node = node.children.entry(part.clone()).or_default();
            node.bytes = node.bytes.saturating_add(bytes);
            node.blocks = node.blocks.saturating_add(blocks);
        }
        node.here_bytes = node.here_bytes.saturating_add(bytes);
        node.here_blocks = node.here_blocks.saturating_add(blocks);
    }

    fn into_node(self, name: String) -> TreeNode {
        let mut children: Vec<TreeNode> = self
            .children
            .into_iter()
            .map(|(name, trie)| trie.into_node(name))
            .collect();
        if !children.is_empty() && self.here_blocks > 0 {
            children.push(TreeNode {
                name: HERE.to_string(),
                bytes: self.here_bytes,
                blocks: self.here_blocks,
                children: Vec::new(),
            });
        }
        sort(&mut children);
        TreeNode {
            name,
            bytes: self.bytes,
            blocks: self.blocks,
            children,
        }
    }
}

fn sort(nodes: &mut [TreeNode]) {
    nodes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
}

/// The path of a block of `context` under the root.
fn path(names: &SiteNames, context: ContextId) -> Vec<String> {
    let site = names.get(context);
    let Some(recorded) = names.snapshot().contexts.get(context) else {
        return vec![site.label()];
    };
    let mut path: Vec<String> = recorded.tags.iter().map(|t| t.to_string()).collect();
    let outermost_first = recorded
        .frames
        .iter()
        .rev()
        .filter(|f| !frames::is_hidden(f));
    match names.view() {
        FrameView::All => path.extend(outermost_first.map(frames::label)),
        FrameView::User => {
            let user: Vec<String> = outermost_first
                .filter(|f| frames::is_python(f) && !frames::is_library(f))
                .map(frames::label)
                .collect();
            if user.is_empty() && path.is_empty() {
                path.push(site.site.clone());
            }
            path.extend(user);
        }
    }
    if path.is_empty() {
        path.push(site.site.clone());
    }
    if let (Some(node), Some(last)) = (&site.autograd_node, path.last_mut()) {
        // The all-frames path holds the node's own frame.
        if names.view() == FrameView::User && !last.contains(node.as_str()) {
            *last = format!("{last} ({node})");
        }
    }
    path
}

/// The stack tree of the allocated blocks at the walker's position, named by `names`, cut to
/// `limits` (its depth at most [`MAX_DEPTH`]). The root, `all allocated blocks`, holds every
/// allocated byte.
pub fn stack_tree(names: &SiteNames, walker: &StateWalker, limits: TreeLimits) -> TreeNode {
    let limits = TreeLimits {
        depth: limits.depth.min(MAX_DEPTH),
        ..limits
    };
    let mut trie = Trie::default();
    let mut contexts: Vec<_> = allocated_by_context(names, walker).into_iter().collect();
    contexts.sort_unstable_by_key(|&((context, before), _)| (context, before));
    for ((context, before), tally) in contexts {
        let mut path = if before {
            vec![BEFORE_RECORDING.to_string()]
        } else {
            path(names, context)
        };
        // What lies past the depth is cut below anyway; never building it keeps the trie as
        // shallow as the answer.
        path.truncate(limits.depth);
        trie.add(&path, tally.bytes, tally.blocks);
    }
    let mut root = trie.into_node("all allocated blocks".to_string());
    let total = root.bytes;
    cut(&mut root, limits, total, 0);
    root
}

/// Applies `limits` below `node` (at `depth`), keeping every node's bytes the sum of its
/// children's.
fn cut(node: &mut TreeNode, limits: TreeLimits, total: u64, depth: usize) {
    if depth >= limits.depth {
        node.children.clear();
        return;
    }
    let floor = limits.min_share.clamp(0.0, 1.0) * total as f64;
    let (kept, small): (Vec<TreeNode>, Vec<TreeNode>) = std::mem::take(&mut node.children)
        .into_iter()
        .partition(|c| c.bytes as f64 >= floor);
    node.children = kept;
    sort(&mut node.children);
    // The folded rest comes last, whatever its size.
    match small.len() {
        0 => {}
        // One small node keeps its name (a `<1 smaller>` would say less), but nothing below
        // it has the share to be shown.
        1 => node.children.extend(small.into_iter().map(|mut only| {
            only.children.clear();
            only
        })),
        n => node.children.push(TreeNode {
            name: format!("<{n} smaller>"),
            bytes: small
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(c.bytes)),
            blocks: small
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(c.blocks)),
            children: Vec::new(),
        }),
    }
    for child in &mut node.children {
        cut(child, limits, total, depth + 1);
    }
}

/// Every node of `tree`, depth first, with its depth (the root is 0).
pub fn walk(tree: &TreeNode) -> Vec<(usize, &TreeNode)> {
    let mut out = Vec::new();
    let mut stack = vec![(0, tree)];
    while let Some((depth, node)) = stack.pop() {
        out.push((depth, node));
        for child in node.children.iter().rev() {
            stack.push((depth + 1, child));
        }
    }
    out
}
