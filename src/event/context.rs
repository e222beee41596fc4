//! Contexts of allocator calls: the thread's annotation tags, optionally with call-stack
//! frames; each allocator interns them in its own [`ContextTable`](super::ContextTable).
//!
//! [`annotate`] pushes a tag on a thread-local stack (interned once per process: `tags.rs`)
//! and pops it when its guard drops; both changes are announced to the recording allocators,
//! which record an `annotate` event whose context is the stack after the change (as PyTorch
//! records the start and the end of a `record_function` range), so a trace shows when each
//! tag was on the stack.

use super::tags;
use parking_lot::Mutex;
use std::marker::PhantomData;
use std::sync::{Arc, Weak};

/// One frame of a captured call stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled (`crate::module::function`). Shared: trace readers hand out
    /// one string per distinct name, however many frames repeat it.
    pub name: Arc<str>,
    /// Source file, or empty when the binary has no debug info for the frame. Shared as
    /// `name` is.
    pub filename: Arc<str>,
    /// Line in `filename`, or 0 when unknown.
    pub line: u32,
}

impl Frame {
    /// The line as a person reads it: the number, or `?` when unknown (0).
    ///
    /// ```
    /// use blockpool::event::Frame;
    ///
    /// let frame = |line| Frame { name: "f".into(), filename: "a.py".into(), line };
    /// assert_eq!(frame(12).line_text().to_string(), "12");
    /// assert_eq!(frame(0).line_text().to_string(), "?");
    /// ```
    pub fn line_text(&self) -> LineText {
        LineText(self.line)
    }
}

/// A frame's line for display ([`Frame::line_text`]): the number, or `?` when unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineText(u32);

impl std::fmt::Display for LineText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => f.write_str("?"),
            line => write!(f, "{line}"),
        }
    }
}

/// What was going on when an event was recorded: the annotation tags, outermost first, and the
/// call stack when [`Backtraces::Rust`](super::Backtraces::Rust) is on, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Context {
    /// Tags of the active [`annotate`] guards on the calling thread, outermost first.
    pub tags: Vec<Arc<str>>,
    /// Call stack of the allocator call, innermost first, without the frames of the capture
    /// itself; empty unless call stacks are captured.
    pub frames: Vec<Frame>,
}

/// Pushes `tag` on this thread's annotation stack until the returned guard drops. Events
/// recorded meanwhile carry the tag in their context.
///
/// A push costs what interning its one tag costs, whatever the depth. Contexts keep tags of
/// up to [`MAX_TAG_BYTES`](super::MAX_TAG_BYTES) (longer ones are cut and end with `…`) and the
/// outermost [`MAX_TAG_DEPTH`](super::MAX_TAG_DEPTH) tags of a stack; deeper tags stay on the
/// stack, so their guards work as usual.
///
/// Every change of the stack is recorded: pushing the tag and dropping the guard each give
/// every device of every allocator that is recording an `annotate` event whose context is
/// the stack after the change, so the event of the pop that empties the stack has the empty
/// context. [`perfetto::annotation_intervals`](crate::trace::perfetto::annotation_intervals) turns
/// these events back into one interval per tag.
///
/// ```
/// use blockpool::{annotate, AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
/// use blockpool::trace::Action;
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// alloc.record_memory_history(HistorySettings::default())?;
/// let a = {
///     let _layer = annotate("layer3");
///     let _attn = annotate("attn");
///     alloc.allocate(0, 4096, StreamId::DEFAULT)?
/// };
/// let history = alloc.history(0)?;
/// let event = history.iter().find(|e| e.action == Action::Alloc).unwrap();
/// let context = alloc.context(event.context).unwrap();
/// assert_eq!(context.tags, ["layer3".into(), "attn".into()]);
///
/// // Two pushes and two pops: the stack after each change.
/// let stacks: Vec<Vec<String>> = history
///     .iter()
///     .filter(|e| e.action == Action::Annotate)
///     .map(|e| alloc.context(e.context).unwrap().tags.iter().map(|t| t.to_string()).collect())
///     .collect();
/// assert_eq!(stacks, [vec!["layer3"], vec!["layer3", "attn"], vec!["layer3"], vec![]]);
/// # drop(a);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn annotate(tag: &str) -> AnnotationGuard {
    let depth = tags::push(tag);
    notify_sinks();
    AnnotationGuard {
        depth,
        _not_send: PhantomData,
    }
}

/// Keeps an [`annotate`] tag on this thread's stack; dropping it removes the tag (and any
/// pushed after it that are still there, should guards drop out of order) and records the
/// change as [`annotate`] records a push. A guard whose tag is already gone (an outer guard
/// dropped first) changes nothing and records nothing.
#[must_use = "the tag is removed when the guard drops"]
#[derive(Debug)]
pub struct AnnotationGuard {
    depth: usize,
    /// The stack is thread-local: the guard must drop on the thread that made it.
    _not_send: PhantomData<*const ()>,
}

impl Drop for AnnotationGuard {
    fn drop(&mut self) {
        // A guard kept in another thread-local may drop after the stack is gone: nothing
        // changes then.
        if tags::truncate(self.depth) {
            notify_sinks();
        }
    }
}

/// Something that records annotation events: an allocator while it records history.
pub(crate) trait AnnotationSink: Send + Sync {
    /// Records an `annotate` event on every device, with the calling thread's context.
    fn record_annotation(&self);
}

fn sinks() -> &'static Mutex<Vec<Weak<dyn AnnotationSink>>> {
    static SINKS: Mutex<Vec<Weak<dyn AnnotationSink>>> = Mutex::new(Vec::new());
    &SINKS
}

/// Has every recording allocator record the calling thread's new tag stack.
fn notify_sinks() {
    for sink in live_sinks() {
        sink.record_annotation();
    }
}

/// The recording allocators still alive, pruning the others.
fn live_sinks() -> Vec<Arc<dyn AnnotationSink>> {
    let mut sinks = sinks().lock();
    if sinks.is_empty() {
        return Vec::new();
    }
    sinks.retain(|s| s.strong_count() > 0);
    sinks.iter().filter_map(Weak::upgrade).collect()
}

/// Adds `sink` to those that get annotation events (once, however often it is registered).
pub(crate) fn register(sink: Weak<dyn AnnotationSink>) {
    let mut sinks = sinks().lock();
    sinks.retain(|s| s.strong_count() > 0);
    if !sinks.iter().any(|s| Weak::ptr_eq(s, &sink)) {
        sinks.push(sink);
    }
}

/// Stops sending annotation events to `sink`.
pub(crate) fn unregister(sink: &Weak<dyn AnnotationSink>) {
    sinks()
        .lock()
        .retain(|s| s.strong_count() > 0 && !Weak::ptr_eq(s, sink));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the tag stack of every notification made on one thread (tests run in
    /// parallel, and every sink hears every thread).
    struct ThreadSink {
        thread: std::thread::ThreadId,
        stacks: Mutex<Vec<Vec<String>>>,
    }

    impl AnnotationSink for ThreadSink {
        fn record_annotation(&self) {
            if std::thread::current().id() != self.thread {
                return;
            }
            let tags = tags::tags_of(tags::current());
            let tags = tags.iter().map(|t| t.to_string()).collect();
            self.stacks.lock().push(tags);
        }
    }

    #[test]
    fn every_push_and_pop_notifies_with_the_new_stack() {
        let sink = Arc::new(ThreadSink {
            thread: std::thread::current().id(),
            stacks: Mutex::new(Vec::new()),
        });
        let weak: Weak<ThreadSink> = Arc::downgrade(&sink);
        let weak: Weak<dyn AnnotationSink> = weak;
        register(Weak::clone(&weak));
        let outer = annotate("notify-outer");
        let inner = annotate("notify-inner");
        let innermost = annotate("notify-innermost");
        drop(innermost);
        // Out of order: dropping `outer` pops both; `inner` then finds its tag gone.
        drop(outer);
        drop(inner);
        let again = annotate("notify-again");
        drop(again);
        unregister(&weak);
        drop(annotate("notify-after-unregister"));
        assert_eq!(
            *sink.stacks.lock(),
            [
                vec!["notify-outer"],
                vec!["notify-outer", "notify-inner"],
                vec!["notify-outer", "notify-inner", "notify-innermost"],
                vec!["notify-outer", "notify-inner"],
                vec![],
                vec!["notify-again"],
                vec![],
            ],
            "one notification per change of the stack, carrying the stack after it; a guard \
             whose tag is already gone and an unregistered sink get none"
        );
    }
}
