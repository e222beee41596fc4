//! Lifetimes of a device's allocations and reserved ranges, from its events and the state
//! before the first of them.
//!
//! The allocations' lifetimes are made in two parts so that the longer one runs while the
//! device's states are rebuilt: [`event_lifetimes`] needs the events alone, and
//! [`allocation_lifetimes`] adds the blocks alive before the first event once the rebuilt
//! start state is known. A block alive at the start ends at the first event at its address
//! that ends a lifetime or begins one (a free, or an alloc that shows the free was lost), so
//! the events' part notes the first such event at each address.

use super::model::Allocation;
use blockpool::trace::{Action, DeviceState, TraceEvent};
use std::collections::{BTreeMap, HashMap};

/// What the events alone tell of the allocations' lifetimes.
pub struct EventLifetimes {
    /// The allocations the events make, in order, their `end` past the last state while
    /// they live to the end.
    allocations: Vec<Allocation>,
    /// The state of the first event at each address that ends a lifetime or begins one.
    first_touch: HashMap<u64, usize>,
    /// The time of each state: its last event's (the first event's for state 0), never
    /// decreasing.
    state_time_us: Vec<u64>,
}

/// The lifetimes the events `events` (one device's, in order) make, and the time of each
/// state.
pub fn event_lifetimes(events: &[TraceEvent]) -> EventLifetimes {
    let alive_at_end = events.len().saturating_add(1);
    // A block stays active until its memory is back in the cache (`free_completed`); traces
    // without those events end blocks at `free_requested`.
    let free_action = if events.iter().any(|e| e.action == Action::FreeCompleted) {
        Action::FreeCompleted
    } else {
        Action::FreeRequested
    };
    let mut allocations: Vec<Allocation> = Vec::new();
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut first_touch: HashMap<u64, usize> = HashMap::new();
    let mut state_time_us = Vec::with_capacity(alive_at_end);
    let mut time = events.first().map_or(0, |e| e.time_us);
    state_time_us.push(time);
    for (index, event) in events.iter().enumerate() {
        time = time.max(event.time_us);
        state_time_us.push(time);
        let state = index + 1;
        if event.action == Action::Alloc {
            first_touch.entry(event.addr).or_insert(state);
            if let Some(previous) = open.insert(event.addr, allocations.len()) {
                // A second alloc at a live address: the trace lost the free in between.
                allocations[previous].end = state;
            }
            allocations.push(Allocation {
                addr: event.addr,
                size: event.size,
                requested: event.requested,
                stream: event.stream.raw(),
                context: event.context,
                start: state,
                end: alive_at_end,
            });
        } else if event.action == free_action {
            first_touch.entry(event.addr).or_insert(state);
            if let Some(id) = open.remove(&event.addr) {
                allocations[id].end = state;
            }
        }
    }
    EventLifetimes {
        allocations,
        first_touch,
        state_time_us,
    }
}

/// Every allocation of a device whose state before its first event is `initial`: the blocks
/// alive then, lowest address first, then those the events make ([`event_lifetimes`]), an
/// allocation's id its index; and the time of each state.
pub fn allocation_lifetimes(
    initial: &DeviceState,
    from_events: EventLifetimes,
) -> (Vec<Allocation>, Vec<u64>) {
    let EventLifetimes {
        allocations: made,
        first_touch,
        state_time_us,
    } = from_events;
    let alive_at_end = state_time_us.len();
    let in_segments = initial.segments.iter().flat_map(|segment| {
        let active = segment.blocks.iter().filter(|b| b.state.is_active());
        active.map(move |block| (block, segment.stream.raw()))
    });
    let unsegmented = initial.unsegmented.iter().map(|block| (block, 0));
    let mut allocations: Vec<Allocation> = in_segments
        .chain(unsegmented)
        .map(|(block, stream)| Allocation {
            addr: block.address,
            size: block.size,
            requested: block.requested,
            stream,
            context: block.context,
            start: 0,
            end: first_touch
                .get(&block.address)
                .copied()
                .unwrap_or(alive_at_end),
        })
        .collect();
    allocations.extend(made);
    (allocations, state_time_us)
}

/// The reserved address ranges of a device over time: the segments of `initial` from state 0,
/// then each `segment_alloc` or `segment_map` opens a range at its event's state and each
/// `segment_free` or `segment_unmap` closes the range holding its address. Releasing part of a
/// range (an unmap of some pages of a mapped run) closes it and opens what is left as new
/// ranges, so at every state the open ranges tile exactly the reserved bytes the events say.
/// A release of an address no range holds (a truncated trace) is skipped.
pub fn segment_spans(initial: &DeviceState, events: &[TraceEvent]) -> Vec<Allocation> {
    let mut spans = Vec::new();
    let alive_at_end = events.len().saturating_add(1);
    // Open ranges by start address: span index.
    let mut open: BTreeMap<u64, usize> = BTreeMap::new();
    let span = |addr, size, stream, context, start| Allocation {
        addr,
        size,
        requested: 0,
        stream,
        context,
        start,
        end: alive_at_end,
    };
    for segment in &initial.segments {
        open.insert(segment.address, spans.len());
        spans.push(span(
            segment.address,
            segment.size,
            segment.stream.raw(),
            segment.context,
            0,
        ));
    }
    for (index, event) in events.iter().enumerate() {
        let state = index + 1;
        match event.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                if let Some(previous) = open.insert(event.addr, spans.len()) {
                    // A second reservation at an open address: the release was lost.
                    spans[previous].end = state;
                }
                spans.push(span(
                    event.addr,
                    event.size,
                    event.stream.raw(),
                    event.context,
                    state,
                ));
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let holder = open
                    .range(..=event.addr)
                    .next_back()
                    .map(|(&start, &id)| (start, id))
                    .filter(|&(start, id)| event.addr - start < spans[id].size);
                let Some((start, id)) = holder else { continue };
                open.remove(&start);
                spans[id].end = state;
                let range_end = start.saturating_add(spans[id].size);
                let released_end = event.addr.saturating_add(event.size.max(1)).min(range_end);
                let (stream, context) = (spans[id].stream, spans[id].context);
                if event.addr > start {
                    open.insert(start, spans.len());
                    spans.push(span(start, event.addr - start, stream, context, state));
                }
                if released_end < range_end && event.action == Action::SegmentUnmap {
                    open.insert(released_end, spans.len());
                    spans.push(span(
                        released_end,
                        range_end - released_end,
                        stream,
                        context,
                        state,
                    ));
                }
            }
            _ => {}
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockpool::trace::snapshot::{Block, Segment};
    use blockpool::trace::{BlockState, ContextId};
    use blockpool::StreamId;

    fn event(action: Action, addr: u64, size: u64) -> TraceEvent {
        TraceEvent {
            action,
            device: 0,
            stream: StreamId::DEFAULT,
            addr,
            size,
            requested: 0,
            time_us: 0,
            context: ContextId::NONE,
        }
    }

    fn spans(events: &[TraceEvent]) -> Vec<(u64, u64, usize, usize)> {
        let initial = DeviceState {
            device: 0,
            segments: Vec::new(),
            unsegmented: Vec::new(),
        };
        segment_spans(&initial, events)
            .iter()
            .map(|s| (s.addr, s.size, s.start, s.end))
            .collect()
    }

    #[test]
    fn unmapping_part_of_a_mapped_range_leaves_the_rest_reserved() {
        let events = [
            event(Action::SegmentMap, 0x0, 0x6000),
            event(Action::SegmentUnmap, 0x2000, 0x2000),
            event(Action::SegmentUnmap, 0x0, 0x2000),
            event(Action::SegmentUnmap, 0x4000, 0x2000),
        ];
        assert_eq!(
            spans(&events),
            [
                (0x0, 0x6000, 1, 2),
                (0x0, 0x2000, 2, 3),
                (0x4000, 0x2000, 2, 4),
            ],
            "the middle page goes at 2, leaving both ends; each end goes on its own"
        );
    }

    #[test]
    fn segments_live_from_their_alloc_to_their_free_and_unknown_frees_are_skipped() {
        let events = [
            event(Action::SegmentAlloc, 0x1000, 0x1000),
            event(Action::Alloc, 0x1000, 0x100),
            event(Action::SegmentFree, 0x9000, 0x1000),
            event(Action::SegmentAlloc, 0x4000, 0x2000),
            event(Action::SegmentFree, 0x1000, 0x1000),
        ];
        assert_eq!(
            spans(&events),
            [(0x1000, 0x1000, 1, 5), (0x4000, 0x2000, 4, 6)],
            "0x9000 is no segment's; 0x4000 is reserved at the end (events + 1)"
        );
    }

    /// The allocations as the model made them in one pass, the blocks alive at the start
    /// open from the beginning: the oracle for the two parts.
    fn in_one_pass(initial: &DeviceState, events: &[TraceEvent]) -> Vec<Allocation> {
        let alive_at_end = events.len() + 1;
        let mut allocations = Vec::new();
        let mut open: HashMap<u64, usize> = HashMap::new();
        let blocks = initial.segments.iter().flat_map(|s| {
            s.blocks
                .iter()
                .filter(|b| b.state.is_active())
                .map(move |b| (b, s.stream.raw()))
        });
        for (block, stream) in blocks.chain(initial.unsegmented.iter().map(|b| (b, 0))) {
            open.insert(block.address, allocations.len());
            allocations.push(Allocation {
                addr: block.address,
                size: block.size,
                requested: block.requested,
                stream,
                context: block.context,
                start: 0,
                end: alive_at_end,
            });
        }
        let free_action = if events.iter().any(|e| e.action == Action::FreeCompleted) {
            Action::FreeCompleted
        } else {
            Action::FreeRequested
        };
        for (index, e) in events.iter().enumerate() {
            let state = index + 1;
            if e.action == Action::Alloc {
                if let Some(previous) = open.insert(e.addr, allocations.len()) {
                    allocations[previous].end = state;
                }
                allocations.push(Allocation {
                    addr: e.addr,
                    size: e.size,
                    requested: e.requested,
                    stream: e.stream.raw(),
                    context: e.context,
                    start: state,
                    end: alive_at_end,
                });
            } else if e.action == free_action {
                if let Some(id) = open.remove(&e.addr) {
                    allocations[id].end = state;
                }
            }
        }
        allocations
    }

    #[test]
    fn the_two_parts_make_the_allocations_one_pass_makes() {
        // Random events at a few addresses (lost frees, frees of blocks from before the trace,
        // frees of nothing), with and without free_completed, and random blocks alive at the
        // start, in a segment and outside any.
        let mut next = crate::serve::testing::random(0x9e37_79b9_7f4a_7c15);
        for _ in 0..500 {
            let block = |address: u64| Block {
                address,
                size: 0x100,
                requested: 0x80,
                state: BlockState::ActiveAllocated,
                context: ContextId(7),
            };
            let addresses: Vec<u64> = (0..8u64)
                .filter(|_| next(3) == 0)
                .map(|a| a * 0x100)
                .collect();
            let (inside, outside) = addresses.split_at(addresses.len() / 2);
            let initial = DeviceState {
                device: 0,
                segments: vec![Segment {
                    device: 0,
                    address: 0,
                    size: 0x800,
                    stream: StreamId::from_raw(3),
                    pool: blockpool::introspect::PoolKind::Small,
                    expandable: false,
                    context: ContextId::NONE,
                    blocks: inside.iter().map(|&a| block(a)).collect(),
                }],
                unsegmented: outside.iter().map(|&a| block(a)).collect(),
            };
            let completes = next(2) == 0;
            let events: Vec<TraceEvent> = (0..next(40))
                .map(|_| {
                    let action = match next(4) {
                        0 | 1 => Action::Alloc,
                        2 => Action::FreeRequested,
                        _ if completes => Action::FreeCompleted,
                        _ => Action::SegmentAlloc,
                    };
                    let mut e = event(action, next(10) as u64 * 0x100, 0x100);
                    e.time_us = next(100) as u64;
                    e
                })
                .collect();
            let (allocations, times) = allocation_lifetimes(&initial, event_lifetimes(&events));
            assert_eq!(
                allocations,
                in_one_pass(&initial, &events),
                "{initial:?} {events:?}"
            );
            assert_eq!(times.len(), events.len() + 1);
            assert!(
                times.windows(2).all(|w| w[0] <= w[1]),
                "times never go back"
            );
        }
    }
}
