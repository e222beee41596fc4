//! The devices' events and the inserted annotations, each a list in time order, merged into
//! the one list of a [`Snapshot`](crate::trace::Snapshot).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::trace::TraceEvent;

/// One list of imported events: a device's trace entries, or the annotations the import
/// inserted.
pub(super) struct Stream {
    pub events: Vec<TraceEvent>,
    /// `compile_context` of the events that have one, by index in `events`, ascending.
    pub compile_contexts: Vec<(usize, Arc<str>)>,
    /// Whether the import inserted these events (they are no entries of `device_traces`).
    pub inserted: bool,
}

/// The events of an import in one list, with the `compile_context` of those that have one
/// and the indices of those the import inserted, by index in `events`.
pub(super) struct Merged {
    pub events: Vec<TraceEvent>,
    pub compile_contexts: Vec<(usize, Arc<str>)>,
    pub inserted: Vec<usize>,
}

/// Merges lists that are each in order into one ordered by time; ties go to the earlier list,
/// and each list keeps its own order even where its times go back (at each step the earliest
/// of the lists' next events is taken). The largest list becomes the result in place, the
/// others' events moved into it, so a file's events are never in memory twice.
pub(super) fn merge_by_time(streams: Vec<Stream>) -> Merged {
    let mut filled: Vec<(usize, Stream)> = streams
        .into_iter()
        .enumerate()
        .filter(|(_, s)| !s.events.is_empty())
        .collect();
    let Some(largest) = (0..filled.len()).max_by_key(|&i| (filled[i].1.events.len(), Reverse(i)))
    else {
        return Merged {
            events: Vec::new(),
            compile_contexts: Vec::new(),
            inserted: Vec::new(),
        };
    };
    let (index, stream) = filled.remove(largest);
    merge_in_place(index, stream, merge_small(filled))
}

/// An event of the lists merged beside the largest, with its list's index, its
/// `compile_context` and whether the import inserted it.
struct Item {
    event: TraceEvent,
    list: usize,
    compile_context: Option<Arc<str>>,
    inserted: bool,
}

/// Merges `(index, list)` pairs as [`merge_by_time`] does, into a list of [`Item`]s.
fn merge_small(lists: Vec<(usize, Stream)>) -> Vec<Item> {
    struct Cursor {
        list: usize,
        events: std::iter::Peekable<std::vec::IntoIter<TraceEvent>>,
        compile: std::iter::Peekable<std::vec::IntoIter<(usize, Arc<str>)>>,
        taken: usize,
        inserted: bool,
    }
    let total = lists.iter().map(|(_, s)| s.events.len()).sum();
    let mut cursors: Vec<Cursor> = lists
        .into_iter()
        .map(|(list, s)| Cursor {
            list,
            events: s.events.into_iter().peekable(),
            compile: s.compile_contexts.into_iter().peekable(),
            taken: 0,
            inserted: s.inserted,
        })
        .collect();
    let mut heads: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    for (c, cursor) in cursors.iter_mut().enumerate() {
        if let Some(first) = cursor.events.peek() {
            heads.push(Reverse((first.time_us, cursor.list, c)));
        }
    }
    let mut merged = Vec::with_capacity(total);
    while let Some(Reverse((_, _, c))) = heads.pop() {
        let Some(cursor) = cursors.get_mut(c) else {
            continue;
        };
        let Some(event) = cursor.events.next() else {
            continue;
        };
        let taken = cursor.taken;
        let compile_context = cursor
            .compile
            .next_if(|(at, _)| *at == taken)
            .map(|(_, text)| text);
        cursor.taken += 1;
        merged.push(Item {
            event,
            list: cursor.list,
            compile_context,
            inserted: cursor.inserted,
        });
        if let Some(next) = cursor.events.peek() {
            heads.push(Reverse((next.time_us, cursor.list, c)));
        }
    }
    merged
}

/// Merges `rest` (merged already) into `stream`, the list `index`, in place: where each of
/// `rest` goes is found in one pass forward, then the stream's events are moved up from the
/// back, each once.
fn merge_in_place(index: usize, mut stream: Stream, rest: Vec<Item>) -> Merged {
    let n = stream.events.len();
    // How many of the stream's events come before each of `rest`: the stream's next event
    // goes first while it is earlier, or as early from an earlier list.
    let mut before = Vec::with_capacity(rest.len());
    let mut i = 0;
    for item in &rest {
        while i < n && (stream.events[i].time_us, index) < (item.event.time_us, item.list) {
            i += 1;
        }
        before.push(i);
    }
    stream.events.extend(rest.iter().map(|item| item.event));
    let mut end = n;
    for (j, item) in rest.iter().enumerate().rev() {
        let b = before[j];
        stream.events.copy_within(b..end, b + j + 1);
        stream.events[b + j] = item.event;
        end = b;
    }
    // The stream's event `k` moved up by the number of `rest` placed before it.
    let shift = |k: usize| before.partition_point(|&b| b <= k);
    let mut compile_contexts = Vec::with_capacity(stream.compile_contexts.len());
    let mut own = stream.compile_contexts.into_iter().peekable();
    for (j, item) in rest.iter().enumerate() {
        let at = before[j] + j;
        while let Some((k, text)) = own.next_if(|(k, _)| k + shift(*k) < at) {
            compile_contexts.push((k + shift(k), text));
        }
        if let Some(text) = &item.compile_context {
            compile_contexts.push((at, Arc::clone(text)));
        }
    }
    compile_contexts.extend(own.map(|(k, text)| (k + shift(k), text)));
    let inserted = if stream.inserted {
        let mut placed = rest
            .iter()
            .enumerate()
            .map(|(j, item)| (before[j] + j, item));
        let mut next = placed.next();
        let mut inserted = Vec::with_capacity(stream.events.len());
        for at in 0..stream.events.len() {
            match next {
                Some((p, item)) if p == at => {
                    if item.inserted {
                        inserted.push(at);
                    }
                    next = placed.next();
                }
                _ => inserted.push(at),
            }
        }
        inserted
    } else {
        rest.iter()
            .enumerate()
            .filter(|(_, item)| item.inserted)
            .map(|(j, _)| before[j] + j)
            .collect()
    };
    Merged {
        events: stream.events,
        compile_contexts,
        inserted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StreamId;
    use crate::trace::{Action, ContextId};
    use proptest::prelude::*;

    /// Merges as the definition says, one event at a time: the earliest next event, ties to
    /// the earlier list.
    fn reference(streams: &[(Vec<u64>, Vec<bool>, bool)]) -> Vec<(usize, usize)> {
        let mut next = vec![0; streams.len()];
        let mut order = Vec::new();
        loop {
            let pick = (0..streams.len())
                .filter(|&s| next[s] < streams[s].0.len())
                .min_by_key(|&s| (streams[s].0[next[s]], s));
            let Some(s) = pick else { return order };
            order.push((s, next[s]));
            next[s] += 1;
        }
    }

    fn event(time_us: u64, addr: u64) -> TraceEvent {
        TraceEvent {
            action: Action::Alloc,
            device: 0,
            stream: StreamId::DEFAULT,
            addr,
            size: 512,
            requested: 512,
            time_us,
            context: ContextId::NONE,
        }
    }

    proptest! {
        #[test]
        fn merging_in_place_follows_the_definition(
            streams in prop::collection::vec(
                (prop::collection::vec((0u64..6, any::<bool>()), 0..12), any::<bool>()),
                0..5,
            )
        ) {
            let lists: Vec<(Vec<u64>, Vec<bool>, bool)> = streams
                .iter()
                .map(|(events, inserted)| {
                    (events.iter().map(|e| e.0).collect(), events.iter().map(|e| e.1).collect(), *inserted)
                })
                .collect();
            // Each event's address names its list and place.
            let input: Vec<Stream> = lists
                .iter()
                .enumerate()
                .map(|(s, (times, compiled, inserted))| Stream {
                    events: times.iter().enumerate().map(|(i, &t)| event(t, (s * 100 + i) as u64)).collect(),
                    compile_contexts: compiled
                        .iter()
                        .enumerate()
                        .filter(|(_, &c)| c)
                        .map(|(i, _)| (i, Arc::from(format!("{s}.{i}"))))
                        .collect(),
                    inserted: *inserted,
                })
                .collect();
            let merged = merge_by_time(input);
            let order = reference(&lists);
            let addrs: Vec<u64> = merged.events.iter().map(|e| e.addr).collect();
            let expected: Vec<u64> = order.iter().map(|&(s, i)| (s * 100 + i) as u64).collect();
            prop_assert_eq!(addrs, expected);
            let compile: Vec<(usize, String)> = order
                .iter()
                .enumerate()
                .filter(|(_, &(s, i))| lists[s].1[i])
                .map(|(at, &(s, i))| (at, format!("{s}.{i}")))
                .collect();
            let got: Vec<(usize, String)> = merged
                .compile_contexts
                .iter()
                .map(|(at, text)| (*at, text.to_string()))
                .collect();
            prop_assert_eq!(got, compile);
            let inserted: Vec<usize> = order
                .iter()
                .enumerate()
                .filter(|(_, &(s, _))| lists[s].2)
                .map(|(at, _)| at)
                .collect();
            prop_assert_eq!(merged.inserted, inserted);
        }
    }
}
