//! Allocation sites: where a block was allocated, named by its annotation tags or by the
//! innermost frame of the user's own code in its call stack, with the autograd node it ran
//! under; and the live memory of each site at one point of a trace.
//!
//! A site is, in order: the context's annotation tags joined by `/`; else its innermost
//! Python frame outside torch, installed packages and the standard library; else its
//! innermost Python frame; else its innermost native frame outside the allocator, the
//! dispatcher and library code; else its innermost frame memory_viz shows. Frames memory_viz
//! hides never name a site. With [`FrameView::All`] library and plumbing frames are not
//! skipped: the innermost Python frame, else the innermost shown frame. A block with no
//! recorded stack is [`BEFORE_RECORDING`] when it was alive before the trace's first event and
//! has no `alloc` event since, else [`NO_STACK`]. In the user's view an allocation of the
//! backward pass, whose stack holds no Python frame, is named by the forward line that created
//! its autograd node ([`super::forward`]), with the node beside it.

use super::forward::ForwardLines;
use super::frames::{self, FrameView};
use blockpool::trace::{Action, BlockState, Context, ContextId, Snapshot, StateWalker};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// The site of live blocks that have no recorded stack and were allocated before the trace's
/// first event, as memory_viz explains a block without frames.
pub const BEFORE_RECORDING: &str = "<allocated before _record_memory_history was enabled>";

/// The site of blocks allocated during the trace whose `alloc` carries no tags and no stack
/// (history recorded without stacks, or a thread with no Python frames and no C++ capture).
pub const NO_STACK: &str = "<no stack recorded>";

/// A site's name: where, and the autograd node when the stack ran under one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteName {
    /// The site (see the module docs).
    pub site: String,
    /// The innermost autograd node of the stack (`BmmBackward0`), when it has one.
    pub autograd_node: Option<String>,
}

impl SiteName {
    fn plain(site: &str) -> SiteName {
        SiteName {
            site: site.to_string(),
            autograd_node: None,
        }
    }

    /// The site with its autograd node beside it, as text shows it:
    /// `model.py:42:forward (BmmBackward0)`; the node is not repeated when the site names it.
    pub fn label(&self) -> String {
        match &self.autograd_node {
            Some(node) if !self.site.contains(node.as_str()) => {
                format!("{} ({node})", self.site)
            }
            _ => self.site.clone(),
        }
    }
}

/// The site of `context` in `view`; [`NO_STACK`] for a missing or empty context.
pub fn site_of(context: Option<&Context>, view: FrameView) -> SiteName {
    let Some(context) = context else {
        return SiteName::plain(NO_STACK);
    };
    let autograd_node = context
        .frames
        .iter()
        .find_map(frames::autograd_node)
        .map(str::to_string);
    let site = if !context.tags.is_empty() {
        Some(context.tags.join("/"))
    } else {
        site_frame(&context.frames, view).map(frames::label)
    };
    match site {
        Some(site) => SiteName {
            site,
            autograd_node,
        },
        None => SiteName::plain(NO_STACK),
    }
}

/// The frame that names a stack (innermost first) in `view`.
fn site_frame(
    stack: &[blockpool::trace::Frame],
    view: FrameView,
) -> Option<&blockpool::trace::Frame> {
    let shown = || stack.iter().filter(|f| !frames::is_hidden(f));
    let python = || shown().filter(|f| frames::is_python(f));
    let native = || shown().filter(|f| !frames::is_python(f));
    match view {
        FrameView::User => python()
            .find(|f| !frames::is_library(f))
            .or_else(|| python().next())
            .or_else(|| native().find(|f| !frames::is_plumbing(f) && !frames::is_library(f)))
            .or_else(|| native().find(|f| !frames::is_plumbing(f)))
            .or_else(|| shown().next()),
        FrameView::All => python().next().or_else(|| shown().next()),
    }
    .or(stack.first())
}

/// The site of `context` as text shows it ([`SiteName::label`]), in the user view.
pub fn site_name(snapshot: &Snapshot, context: ContextId) -> String {
    site_of(snapshot.contexts.get(context), FrameView::User).label()
}

/// Every context's site in one view, named once.
pub struct SiteNames<'s> {
    snapshot: &'s Snapshot,
    view: FrameView,
    /// Index `n` names `ContextId(n)`; 0 is "no context".
    names: Vec<SiteName>,
    /// The addresses allocated during the trace up to the last state named, carried from one
    /// state to the next so that naming every step of a trace walks its events once.
    recorded: RefCell<Recorded>,
}

impl<'s> SiteNames<'s> {
    /// Names every context of `snapshot` in `view`.
    pub fn new(snapshot: &'s Snapshot, view: FrameView) -> SiteNames<'s> {
        let mut names = vec![SiteName::plain(NO_STACK)];
        // In the user's view a backward allocation, whose stack has no Python frame, is named
        // by the forward line that created its autograd node ([`super::forward`]).
        let forward = (view == FrameView::User).then(|| ForwardLines::of(snapshot));
        names.extend(snapshot.contexts.iter().map(|(_, c)| {
            let mut name = site_of(Some(c), view);
            let backward_only = c.tags.is_empty() && !c.frames.iter().any(frames::is_python);
            if let (Some(forward), Some(node), true) =
                (&forward, &name.autograd_node, backward_only)
            {
                if let Some(line) = forward.site_of_node(node) {
                    name.site = line;
                }
            }
            name
        }));
        SiteNames {
            snapshot,
            view,
            names,
            recorded: RefCell::new(Recorded::default()),
        }
    }

    /// The snapshot the names are of.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snapshot
    }

    /// The view the names are in.
    pub fn view(&self) -> FrameView {
        self.view
    }

    /// The site of `context` ([`NO_STACK`] for an unknown id).
    pub fn get(&self, context: ContextId) -> &SiteName {
        self.names.get(context.0 as usize).unwrap_or(&self.names[0])
    }

    /// Whether `context` records neither tags nor frames.
    pub fn is_empty(&self, context: ContextId) -> bool {
        self.snapshot
            .contexts
            .get(context)
            .is_none_or(|c| c.tags.is_empty() && c.frames.is_empty())
    }

    /// The addresses allocated during the trace before the walker's position (see
    /// [`Recorded`]), caught up from the last call.
    pub fn recorded(&self, walker: &StateWalker) -> std::cell::Ref<'_, Recorded> {
        self.recorded.borrow_mut().catch_up(walker);
        self.recorded.borrow()
    }

    /// The site of a live block with `context` at `address`: [`BEFORE_RECORDING`] for a block
    /// with no recorded stack that no `alloc` event in `recorded` gave out.
    pub fn of_block(&self, context: ContextId, address: u64, recorded: &Recorded) -> SiteName {
        self.of_allocation(context, !recorded.contains(address))
    }

    /// The site of an allocation with `context`: [`BEFORE_RECORDING`] for one made before the
    /// trace's first event (`before_first`) with no recorded stack.
    pub fn of_allocation(&self, context: ContextId, before_first: bool) -> SiteName {
        if before_first && self.is_empty(context) {
            return SiteName::plain(BEFORE_RECORDING);
        }
        self.get(context).clone()
    }
}

/// The addresses the `alloc` events before the walker's position gave out: a live block at
/// any other address was allocated before recording began.
#[derive(Debug, Default)]
pub struct Recorded {
    addresses: HashSet<u64>,
    /// How many events `addresses` covers.
    applied: usize,
}

impl Recorded {
    /// The addresses allocated by the events `walker` has applied.
    pub fn before(walker: &StateWalker) -> Recorded {
        let mut recorded = Recorded::default();
        recorded.catch_up(walker);
        recorded
    }

    /// Covers the events `walker` has applied: only the new ones when it moved forward (the
    /// leak report's steps), all of them when it moved back.
    pub fn catch_up(&mut self, walker: &StateWalker) {
        let position = walker.position().min(walker.len());
        if position < self.applied {
            *self = Recorded::default();
        }
        let new = &walker.events()[self.applied..position];
        self.addresses.extend(
            new.iter()
                .filter(|e| e.action == Action::Alloc)
                .map(|e| e.addr),
        );
        self.applied = position;
    }

    /// Whether an `alloc` event gave out `address`.
    pub fn contains(&self, address: u64) -> bool {
        self.addresses.contains(&address)
    }
}

/// Live allocated memory of one site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Site {
    /// The site (see the module docs).
    pub site: String,
    /// The autograd node the allocations ran under (`BmmBackward0`), or `null`.
    pub autograd_node: Option<String>,
    /// The site with its autograd node beside it, as text prints it.
    pub label: String,
    /// Bytes in allocated blocks (block sizes, rounded up by the allocator).
    pub bytes: u64,
    /// Bytes their callers asked for.
    pub requested_bytes: u64,
    /// Allocated blocks.
    pub blocks: u64,
}

impl Site {
    /// An empty site named `name`.
    pub fn new(name: SiteName) -> Site {
        Site {
            label: name.label(),
            site: name.site,
            autograd_node: name.autograd_node,
            bytes: 0,
            requested_bytes: 0,
            blocks: 0,
        }
    }
}

/// How to order [`Site`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SiteOrder {
    /// Most bytes first.
    Bytes,
    /// Most blocks first.
    Blocks,
    /// By name.
    Site,
}

/// What the allocated blocks of one context add up to ([`allocated_by_context`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockTally {
    /// Block sizes, in bytes.
    pub bytes: u64,
    /// Requested sizes, in bytes.
    pub requested: u64,
    /// Blocks.
    pub blocks: u64,
}

/// The allocated blocks at the walker's position added up per context and whether they were
/// alive before recording began (a context without frames at an address the trace never
/// allocated), the key every site and tree node is named from.
pub fn allocated_by_context(
    names: &SiteNames,
    walker: &StateWalker,
) -> HashMap<(ContextId, bool), BlockTally> {
    let state = walker.state();
    let recorded = names.recorded(walker);
    let mut by_context: HashMap<(ContextId, bool), BlockTally> = HashMap::new();
    let blocks = state.segments.iter().flat_map(|s| &s.blocks);
    for block in blocks.chain(&state.unsegmented) {
        if block.state == BlockState::ActiveAllocated {
            let before = names.is_empty(block.context) && !recorded.contains(block.address);
            let tally = by_context.entry((block.context, before)).or_default();
            tally.bytes = tally.bytes.saturating_add(block.size);
            tally.requested = tally.requested.saturating_add(block.requested);
            tally.blocks = tally.blocks.saturating_add(1);
        }
    }
    by_context
}

/// The allocated memory of every site at the walker's position, most bytes first (ties by
/// name), sites named by `names`.
pub fn sites_named_by(names: &SiteNames, walker: &StateWalker) -> Vec<Site> {
    // Blocks of one context at addresses allocated during the trace share a name; add them up
    // per context first, then per name.
    let mut by_name: HashMap<SiteName, Site> = HashMap::new();
    for ((context, before), tally) in allocated_by_context(names, walker) {
        let BlockTally {
            bytes,
            requested,
            blocks,
        } = tally;
        let name = if before {
            SiteName::plain(BEFORE_RECORDING)
        } else {
            names.get(context).clone()
        };
        let site = by_name
            .entry(name.clone())
            .or_insert_with(|| Site::new(name));
        site.bytes = site.bytes.saturating_add(bytes);
        site.requested_bytes = site.requested_bytes.saturating_add(requested);
        site.blocks = site.blocks.saturating_add(blocks);
    }
    let mut sites: Vec<Site> = by_name.into_values().collect();
    sort_sites(&mut sites, SiteOrder::Bytes);
    sites
}

/// Sorts `sites` by `order`, ties by name.
pub fn sort_sites(sites: &mut [Site], order: SiteOrder) {
    let name = |a: &Site, b: &Site| a.label.cmp(&b.label);
    match order {
        SiteOrder::Bytes => sites.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| name(a, b))),
        SiteOrder::Blocks => sites.sort_by(|a, b| b.blocks.cmp(&a.blocks).then_with(|| name(a, b))),
        SiteOrder::Site => sites.sort_by(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::frames::frame;
    use blockpool::trace::Frame;
    use std::sync::Arc;

    fn stack(frames: Vec<Frame>) -> Context {
        Context {
            tags: Vec::new(),
            frames,
        }
    }

    const MALLOC: &str = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)";
    const TORCH: &str = "/venv/lib/python3.12/site-packages/torch/functional.py";

    fn name(context: &Context, view: FrameView) -> String {
        site_of(Some(context), view).label()
    }

    #[test]
    fn the_innermost_user_frame_names_the_site_past_torch_wrappers() {
        let context = stack(vec![
            frame("torch::unwind::unwind()", "??", 0),
            frame(MALLOC, "CUDACachingAllocator.cpp", 0),
            frame("einsum", TORCH, 373),
            frame("forward", "/home/me/model.py", 42),
            frame("train", "/home/me/train.py", 7),
        ]);
        assert_eq!(
            name(&context, FrameView::User),
            "/home/me/model.py:42:forward"
        );
        assert_eq!(
            name(&context, FrameView::All),
            format!("{TORCH}:373:einsum")
        );
    }

    #[test]
    fn library_only_stacks_fall_back_to_python_then_native_frames() {
        let python = stack(vec![
            frame(MALLOC, "CUDACachingAllocator.cpp", 0),
            frame(
                "relu",
                "/venv/lib/python3.12/site-packages/torch/nn/functional.py",
                9,
            ),
            frame("run", "/usr/lib/python3.12/threading.py", 1),
        ]);
        assert_eq!(
            name(&python, FrameView::User),
            "/venv/lib/python3.12/site-packages/torch/nn/functional.py:9:relu",
            "no user frame: the innermost Python frame"
        );
        let native = stack(vec![
            frame("torch::unwind::unwind()", "??", 0),
            frame(MALLOC, "CUDACachingAllocator.cpp", 0),
            frame(
                "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)",
                "??",
                0,
            ),
            frame("at::cuda::getNewWorkspace()", "", 0),
            frame("clone", "??", 0),
        ]);
        assert_eq!(name(&native, FrameView::User), "at::cuda::getNewWorkspace");
        assert_eq!(
            name(&native, FrameView::All),
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            "every shown frame: the allocator itself"
        );
        let plumbing_only = stack(vec![
            frame("torch::unwind::unwind()", "??", 0),
            frame(MALLOC, "CUDACachingAllocator.cpp", 0),
        ]);
        assert_eq!(
            name(&plumbing_only, FrameView::User),
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            "nothing but the allocator: its frame rather than nothing"
        );
    }

    #[test]
    fn the_autograd_node_stays_beside_the_site() {
        let backward = stack(vec![
            frame(MALLOC, "CUDACachingAllocator.cpp", 0),
            frame("at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)", "??", 0),
            frame(
                "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
                "??",
                0,
            ),
            frame("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "??", 0),
        ]);
        let site = site_of(Some(&backward), FrameView::User);
        assert_eq!(site.site, "torch::autograd::generated::BmmBackward0::apply");
        assert_eq!(site.autograd_node.as_deref(), Some("BmmBackward0"));
        assert_eq!(
            site.label(),
            "torch::autograd::generated::BmmBackward0::apply"
        );
        let mut with_python = backward.clone();
        with_python.frames.push(frame("forward", "model.py", 42));
        assert_eq!(
            name(&with_python, FrameView::User),
            "model.py:42:forward (BmmBackward0)"
        );
    }

    #[test]
    fn tags_name_the_site_and_empty_contexts_have_no_stack() {
        let tagged = Context {
            tags: vec![Arc::from("step1"), Arc::from("attn")],
            frames: vec![frame("forward", "model.py", 42)],
        };
        assert_eq!(name(&tagged, FrameView::User), "step1/attn");
        assert_eq!(site_of(None, FrameView::User).label(), NO_STACK);
        assert_eq!(
            site_of(Some(&Context::default()), FrameView::All).label(),
            NO_STACK
        );
    }
}
