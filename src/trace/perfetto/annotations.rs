//! Annotation intervals: the `annotate` events of a device turned back into one interval per
//! tag, the form a timeline shows them in.

use crate::trace::snapshot::Snapshot;
use std::sync::Arc;

/// The time one annotation tag was on the tag stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationInterval {
    /// The tag, as passed to [`annotate`](crate::annotate).
    pub tag: Arc<str>,
    /// Position on the stack: 0 for the outermost tag.
    pub depth: usize,
    /// When the tag was pushed, in microseconds since the trace's time origin.
    pub start_us: u64,
    /// When it was popped, in microseconds since the trace's time origin; the device's last
    /// event for a tag still on the stack when the trace ends.
    pub end_us: u64,
}

/// The annotation intervals of `device`, ordered by start, outer before inner at equal starts.
///
/// Each `annotate` event records the tag stack after a change (a push or a pop), so walking
/// them in order and comparing each stack with the one before gives every push and pop: tags
/// past the common prefix of the two stacks end at the event, and the new stack's tags past it
/// start there. Intervals therefore always nest.
///
/// What the events cannot say is settled as follows:
/// - Tags already on the stack before the device's first `annotate` event (pushed before
///   recording started, or whose events the ring buffer dropped): every tag of that first
///   event's stack but its top starts at the device's first event; the top is taken to be the
///   push the event records.
/// - Tags still on the stack at the end end at the device's last event.
/// - Events carry no thread, so the annotations of several threads are read as one stack:
///   threads annotating at the same time close each other's intervals.
/// - An `annotate` event whose context the snapshot does not have is skipped.
///
/// ```
/// use blockpool::trace::perfetto::{annotation_intervals, AnnotationInterval};
/// use blockpool::trace::{Action, Context, Snapshot, TraceEvent};
/// use blockpool::StreamId;
///
/// let mut snapshot = Snapshot::default();
/// let mut annotate = |tags: &[&str], time_us| {
///     let context = snapshot.contexts.intern(Context {
///         tags: tags.iter().map(|&t| t.into()).collect(),
///         frames: Vec::new(),
///     });
///     snapshot.events.push(TraceEvent {
///         action: Action::Annotate, device: 0, stream: StreamId::DEFAULT,
///         addr: 0, size: 0, requested: 0, time_us, context,
///     });
/// };
/// annotate(&["step"], 10);
/// annotate(&["step", "forward"], 20);
/// annotate(&["step"], 35);
/// annotate(&[], 40);
/// let interval = |tag: &str, depth, start_us, end_us| AnnotationInterval {
///     tag: tag.into(), depth, start_us, end_us,
/// };
/// assert_eq!(
///     annotation_intervals(&snapshot, 0),
///     [interval("step", 0, 10, 40), interval("forward", 1, 20, 35)]
/// );
/// ```
pub fn annotation_intervals(snapshot: &Snapshot, device: u32) -> Vec<AnnotationInterval> {
    let mut events = snapshot.device_events(device).peekable();
    let Some(first_us) = events.peek().map(|e| e.time_us) else {
        return Vec::new();
    };
    let mut last_us = first_us;
    let mut open: Vec<(Arc<str>, u64)> = Vec::new();
    let mut intervals = Vec::new();
    let mut seen_annotation = false;
    for event in events {
        last_us = last_us.max(event.time_us);
        if event.action != crate::trace::Action::Annotate {
            continue;
        }
        let Some(context) = snapshot.contexts.get(event.context) else {
            continue;
        };
        let tags = &context.tags;
        let kept = open
            .iter()
            .zip(tags)
            .take_while(|((open_tag, _), tag)| open_tag == *tag)
            .count();
        close_from(&mut open, kept, event.time_us, &mut intervals);
        for (depth, tag) in tags.iter().enumerate().skip(kept) {
            let before_trace = !seen_annotation && depth + 1 < tags.len();
            let start_us = if before_trace {
                first_us
            } else {
                event.time_us
            };
            open.push((Arc::clone(tag), start_us));
        }
        seen_annotation = true;
    }
    close_from(&mut open, 0, last_us, &mut intervals);
    // Stable: among intervals with one start, outer ones (lower depth) come first.
    intervals.sort_by_key(|i: &AnnotationInterval| (i.start_us, i.depth));
    intervals
}

/// Ends the open tags at depth `keep` and deeper at `end_us`, innermost first.
fn close_from(
    open: &mut Vec<(Arc<str>, u64)>,
    keep: usize,
    end_us: u64,
    intervals: &mut Vec<AnnotationInterval>,
) {
    while open.len() > keep {
        let depth = open.len() - 1;
        let Some((tag, start_us)) = open.pop() else {
            break;
        };
        intervals.push(AnnotationInterval {
            tag,
            depth,
            start_us,
            // Times from a file may step back; an interval never ends before it starts.
            end_us: end_us.max(start_us),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StreamId;
    use crate::trace::{Action, Context, ContextId, TraceEvent};

    fn event(action: Action, device: u32, time_us: u64, context: ContextId) -> TraceEvent {
        TraceEvent {
            action,
            device,
            stream: StreamId::DEFAULT,
            addr: 0,
            size: 0,
            requested: 0,
            time_us,
            context,
        }
    }

    fn stack(snapshot: &mut Snapshot, tags: &[&str]) -> ContextId {
        snapshot.contexts.intern(Context {
            tags: tags.iter().map(|&t| Arc::from(t)).collect(),
            frames: Vec::new(),
        })
    }

    fn interval(tag: &str, depth: usize, start_us: u64, end_us: u64) -> AnnotationInterval {
        AnnotationInterval {
            tag: tag.into(),
            depth,
            start_us,
            end_us,
        }
    }

    #[test]
    fn tags_open_before_the_first_event_start_with_the_trace_and_open_ones_end_with_it() {
        let mut s = Snapshot::default();
        let ab = stack(&mut s, &["a", "b"]);
        let abc = stack(&mut s, &["a", "b", "c"]);
        let a = stack(&mut s, &["a"]);
        let ad = stack(&mut s, &["a", "d"]);
        s.events = vec![
            event(Action::Alloc, 0, 5, ContextId::NONE),
            event(Action::Annotate, 0, 10, ab),
            event(Action::Annotate, 1, 11, abc),
            event(Action::Annotate, 0, 20, abc),
            event(Action::Annotate, 0, 30, a),
            event(Action::Annotate, 0, 40, ad),
            event(Action::Alloc, 0, 50, ContextId::NONE),
        ];
        assert_eq!(
            annotation_intervals(&s, 0),
            [
                interval("a", 0, 5, 50),
                interval("b", 1, 10, 30),
                interval("c", 2, 20, 30),
                interval("d", 1, 40, 50),
            ],
            "`a` was pushed before the trace, `b` by the first event; `a` and `d` stay open"
        );
        assert_eq!(
            annotation_intervals(&s, 1),
            [
                interval("a", 0, 11, 11),
                interval("b", 1, 11, 11),
                interval("c", 2, 11, 11),
            ],
            "device 1 has one event: everything starts and ends there"
        );
        assert_eq!(annotation_intervals(&s, 2), [], "no events, no intervals");
    }

    #[test]
    fn a_repeated_tag_after_a_pop_is_a_new_interval_and_unknown_contexts_are_skipped() {
        let mut s = Snapshot::default();
        let x = stack(&mut s, &["x"]);
        let empty = stack(&mut s, &[]);
        s.events = vec![
            event(Action::Annotate, 0, 1, x),
            event(Action::Annotate, 0, 2, empty),
            event(Action::Annotate, 0, 3, ContextId(99)),
            event(Action::Annotate, 0, 4, x),
            event(Action::Annotate, 0, 6, empty),
        ];
        assert_eq!(
            annotation_intervals(&s, 0),
            [interval("x", 0, 1, 2), interval("x", 0, 4, 6)]
        );
    }
}
