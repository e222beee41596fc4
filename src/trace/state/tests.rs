//! Unit tests of state rebuilding on hand-written snapshots: each action undone and redone,
//! what is tolerated and each contradiction. Property tests are in `proptests.rs`.

use super::*;
use crate::backend::StreamId;
use crate::pool::PoolKind;
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{Action, BlockState, ContextId, Snapshot, TraceEvent};

pub(super) const A: BlockState = BlockState::ActiveAllocated;
pub(super) const P: BlockState = BlockState::ActivePendingFree;
pub(super) const I: BlockState = BlockState::Inactive;

pub(super) fn event(action: Action, addr: u64, size: u64, requested: u64) -> TraceEvent {
    TraceEvent {
        action,
        device: 0,
        stream: StreamId::DEFAULT,
        addr,
        size,
        requested,
        time_us: 0,
        context: ContextId::NONE,
    }
}

pub(super) fn block(address: u64, size: u64, requested: u64, state: BlockState) -> Block {
    Block {
        address,
        size,
        requested,
        state,
        context: ContextId::NONE,
    }
}

pub(super) fn segment(address: u64, size: u64, blocks: Vec<Block>) -> Segment {
    Segment {
        device: 0,
        address,
        size,
        stream: StreamId::DEFAULT,
        pool: PoolKind::Large,
        expandable: false,
        context: ContextId::NONE,
        blocks,
    }
}

pub(super) fn snapshot(segments: Vec<Segment>, events: Vec<TraceEvent>) -> Snapshot {
    Snapshot {
        segments,
        events,
        ..Snapshot::default()
    }
}

/// (address, size, requested, state) of every block of every segment, and the segments.
type Shape = (Vec<(u64, u64)>, Vec<(u64, u64, u64, BlockState)>);

fn shape(state: &DeviceState) -> Shape {
    let segments = state.segments.iter().map(|s| (s.address, s.size)).collect();
    let blocks = state
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| (b.address, b.size, b.requested, b.state))
        .collect();
    (segments, blocks)
}

#[test]
fn each_block_and_segment_event_is_undone_from_the_end_state() {
    use Action::*;
    let trace = snapshot(
        Vec::new(),
        vec![
            event(SegmentAlloc, 0x1000, 0x1000, 0),
            event(Alloc, 0x1000, 0x200, 500),
            event(Alloc, 0x1200, 0x400, 1000),
            event(FreeRequested, 0x1000, 0x200, 500),
            event(FreeCompleted, 0x1000, 0x200, 500),
            event(FreeRequested, 0x1200, 0x400, 1000),
            event(FreeCompleted, 0x1200, 0x400, 1000),
            event(SegmentFree, 0x1000, 0x1000, 0),
        ],
    );
    let seg = vec![(0x1000, 0x1000)];
    let expected: [Shape; 9] = [
        (vec![], vec![]),
        (seg.clone(), vec![(0x1000, 0x1000, 0, I)]),
        (
            seg.clone(),
            vec![(0x1000, 0x200, 500, A), (0x1200, 0xe00, 0, I)],
        ),
        (
            seg.clone(),
            vec![
                (0x1000, 0x200, 500, A),
                (0x1200, 0x400, 1000, A),
                (0x1600, 0xa00, 0, I),
            ],
        ),
        (
            seg.clone(),
            vec![
                (0x1000, 0x200, 500, P),
                (0x1200, 0x400, 1000, A),
                (0x1600, 0xa00, 0, I),
            ],
        ),
        (
            seg.clone(),
            vec![
                (0x1000, 0x200, 0, I),
                (0x1200, 0x400, 1000, A),
                (0x1600, 0xa00, 0, I),
            ],
        ),
        (
            seg.clone(),
            vec![
                (0x1000, 0x200, 0, I),
                (0x1200, 0x400, 1000, P),
                (0x1600, 0xa00, 0, I),
            ],
        ),
        (seg.clone(), vec![(0x1000, 0x1000, 0, I)]),
        (vec![], vec![]),
    ];
    for (index, want) in expected.iter().enumerate() {
        let state = trace
            .state_at(0, index)
            .expect("a consistent trace rebuilds");
        assert_eq!(&shape(&state), want, "state after {index} events");
        assert!(state.unsegmented.is_empty());
    }
}

#[test]
fn allocations_made_before_the_trace_show_at_index_zero() {
    use Action::*;
    let end = vec![segment(
        0x1000,
        0x1000,
        vec![
            block(0x1000, 0x200, 0, I),
            block(0x1200, 0x200, 0x180, A),
            block(0x1400, 0xc00, 0, I),
        ],
    )];
    let trace = snapshot(
        end,
        vec![
            event(Alloc, 0x1200, 0x200, 0x180),
            event(FreeRequested, 0x1000, 0x200, 0x100),
            event(FreeCompleted, 0x1000, 0x200, 0x100),
        ],
    );
    let start = trace.state_at(0, 0).unwrap();
    assert_eq!(
        shape(&start),
        (
            vec![(0x1000, 0x1000)],
            vec![(0x1000, 0x200, 0x100, A), (0x1200, 0xe00, 0, I)]
        ),
        "the block freed in the trace was allocated before it, the one allocated was not"
    );
    assert_eq!(trace.state_at(0, 3).unwrap().segments, trace.segments);
}

#[test]
fn a_block_pending_at_the_end_is_allocated_before_its_free_requested() {
    use Action::*;
    let end = vec![segment(
        0x1000,
        0x800,
        vec![block(0x1000, 0x200, 0x200, P), block(0x1200, 0x600, 0, I)],
    )];
    let trace = snapshot(end, vec![event(FreeRequested, 0x1000, 0x200, 0x200)]);
    let start = trace.state_at(0, 0).unwrap();
    assert_eq!(start.segments[0].blocks[0].state, A);
    let mut walker = trace.state_walker(0).unwrap();
    assert_eq!(walker.totals().allocated_bytes, 0x200);
    assert_eq!(walker.step().map(|e| e.action), Some(FreeRequested));
    let totals = walker.totals();
    assert_eq!(
        (
            totals.allocated_bytes,
            totals.active_bytes,
            totals.requested_bytes
        ),
        (0, 0x200, 0x200),
        "a pending block is active but not allocated"
    );
    assert!(walker.step().is_none(), "no event past the end");
    assert_eq!(walker.position(), 1);
}

#[test]
fn blocks_an_end_state_lacks_are_added_as_rmm_logs_need() {
    use Action::*;
    // An RMM log: no segments, no end state.
    let trace = snapshot(
        Vec::new(),
        vec![
            event(Alloc, 0x1000, 100, 100),
            event(Alloc, 0x2000, 300, 300),
            event(FreeRequested, 0x1000, 100, 100),
            event(FreeCompleted, 0x1000, 100, 100),
            event(FreeRequested, 0x3000, 50, 50),
        ],
    );
    let addresses = |index| -> Vec<(u64, BlockState)> {
        let state = trace.state_at(0, index).unwrap();
        assert!(state.segments.is_empty());
        state
            .unsegmented
            .iter()
            .map(|b| (b.address, b.state))
            .collect()
    };
    assert_eq!(
        addresses(0),
        [(0x3000, A)],
        "freed in the log, so allocated before it"
    );
    assert_eq!(addresses(1), [(0x1000, A), (0x3000, A)]);
    assert_eq!(addresses(2), [(0x1000, A), (0x2000, A), (0x3000, A)]);
    assert_eq!(addresses(4), [(0x2000, A), (0x3000, A)]);
    assert_eq!(
        addresses(5),
        [(0x2000, A), (0x3000, P)],
        "still live at the end though the end state is empty"
    );
}

#[test]
fn expandable_segments_grow_and_shrink_with_map_and_unmap() {
    use Action::*;
    let end = vec![segment(
        0x0,
        0x4000,
        vec![block(0x0, 0x100, 0x100, A), block(0x100, 0x3f00, 0, I)],
    )];
    let trace = snapshot(
        end,
        vec![
            event(SegmentMap, 0x0, 0x2000, 0),
            event(Alloc, 0x0, 0x100, 0x100),
            event(SegmentMap, 0x2000, 0x4000, 0),
            event(SegmentUnmap, 0x4000, 0x2000, 0),
        ],
    );
    let segments = |index| shape(&trace.state_at(0, index).unwrap()).0;
    assert_eq!(segments(0), []);
    assert_eq!(segments(1), [(0x0, 0x2000)]);
    assert_eq!(segments(2), [(0x0, 0x2000)]);
    assert_eq!(
        segments(3),
        [(0x0, 0x6000)],
        "the mapped range joins its neighbour"
    );
    assert_eq!(segments(4), [(0x0, 0x4000)]);
    let rebuilt = trace.state_at(0, 3).unwrap();
    assert!(
        rebuilt.segments.iter().all(|s| s.expandable),
        "a range rebuilt from map and unmap events is an expandable segment's"
    );

    // Unmapping the middle splits a segment; undoing it joins the pieces again.
    let split = snapshot(
        vec![
            segment(0x0, 0x1000, vec![block(0x0, 0x1000, 0, I)]),
            segment(0x2000, 0x1000, vec![block(0x2000, 0x1000, 0, I)]),
        ],
        vec![event(SegmentUnmap, 0x1000, 0x1000, 0)],
    );
    assert_eq!(shape(&split.state_at(0, 0).unwrap()).0, [(0x0, 0x3000)]);
    assert_eq!(split.state_at(0, 1).unwrap().segments, split.segments);
}

#[test]
fn contradictions_name_the_event_and_the_conflict() {
    use Action::*;
    let end = vec![segment(
        0x1000,
        0x1000,
        vec![block(0x1000, 0x200, 0x200, A), block(0x1200, 0xe00, 0, I)],
    )];
    let live_after_free = snapshot(
        end.clone(),
        vec![event(FreeCompleted, 0x1000, 0x200, 0x200)],
    );
    let error = live_after_free.state_at(0, 0).unwrap_err();
    assert_eq!(
        error,
        StateError::Contradiction {
            device: 0,
            index: 0,
            action: FreeCompleted,
            addr: 0x1000,
            conflict: Conflict::LiveAfterFree { state: A },
        }
    );
    assert_eq!(
        error.to_string(),
        "event 0 of device 0 (free_completed at 0x1000) contradicts the later events or the end \
         state: a block at this address is still active_allocated right after the free, with \
         no alloc; the trace was edited, merged from two runs or lost events in between, so \
         rebuild from a trace recorded in one piece"
    );

    let cases = [
        (
            vec![event(FreeCompleted, 0x1100, 0x200, 0x200)],
            Conflict::OverlapsBlock { block: 0x1000 },
        ),
        (
            vec![event(SegmentAlloc, 0x1000, 0x1000, 0)],
            Conflict::LiveBlockOutsideSegment { block: 0x1000 },
        ),
        (
            vec![event(FreeCompleted, 0x1f00, 0x200, 0x200)],
            Conflict::CrossesSegment { segment: 0x1000 },
        ),
        (
            vec![event(SegmentFree, 0x1800, 0x1000, 0)],
            Conflict::OverlapsSegment { segment: 0x1000 },
        ),
        (vec![event(FreeCompleted, 0x3000, 0, 0)], Conflict::Empty),
        (
            vec![event(FreeCompleted, u64::MAX, 2, 2)],
            Conflict::PastAddressSpace { size: 2 },
        ),
        (
            vec![event(SegmentMap, 0x1800, 0x1000, 0)],
            Conflict::PartlyInSegment { segment: 0x1000 },
        ),
    ];
    for (events, conflict) in cases {
        let trace = snapshot(end.clone(), events.clone());
        match trace.state_at(0, 0) {
            Err(StateError::Contradiction {
                conflict: got,
                index: 0,
                ..
            }) => {
                assert_eq!(got, conflict, "for {events:?}")
            }
            other => panic!("{events:?} should contradict with {conflict:?}, got {other:?}"),
        }
    }

    let pending_after_alloc = snapshot(
        vec![segment(0x1000, 0x200, vec![block(0x1000, 0x200, 0x200, P)])],
        vec![event(Alloc, 0x1000, 0x200, 0x200)],
    );
    assert!(matches!(
        pending_after_alloc.state_at(0, 0),
        Err(StateError::Contradiction {
            conflict: Conflict::PendingAfterAlloc,
            ..
        })
    ));

    // Two allocs of one address with no free, the end state lacking both.
    let double = snapshot(
        Vec::new(),
        vec![event(Alloc, 0x1000, 8, 8), event(Alloc, 0x1000, 8, 8)],
    );
    assert!(matches!(
        double.state_at(0, 0),
        Err(StateError::Contradiction {
            conflict: Conflict::OverlapsBlock { block: 0x1000 },
            ..
        })
    ));
}

#[test]
fn an_inconsistent_end_state_and_an_index_past_the_end_are_errors() {
    let overlapping = snapshot(
        vec![
            segment(0x1000, 0x1000, vec![block(0x1000, 0x1000, 0, I)]),
            segment(0x1800, 0x1000, vec![block(0x1800, 0x1000, 0, I)]),
        ],
        Vec::new(),
    );
    assert_eq!(
        overlapping.state_at(0, 0),
        Err(StateError::EndState {
            device: 0,
            address: 0x1800,
            conflict: Conflict::OverlapsSegment { segment: 0x1000 },
        })
    );
    let trace = snapshot(Vec::new(), vec![event(Action::Snapshot, 0, 0, 0)]);
    let error = trace.state_at(0, 2).unwrap_err();
    assert_eq!(
        error.to_string(),
        "device 0 has 1 recorded events, so its states are numbered 0 to 1; 2 is past the end"
    );
    assert_eq!(
        trace.state_at(7, 0),
        Ok(DeviceState {
            device: 7,
            ..DeviceState::default()
        })
    );
}

#[test]
fn a_block_keeps_its_allocation_context_until_its_free_completes() {
    use Action::*;
    let with = |mut e: TraceEvent, context| {
        e.context = ContextId(context);
        e
    };
    let trace = snapshot(
        Vec::new(),
        vec![
            (FreeRequested, 0x1000, 8, 8, 3),
            (FreeCompleted, 0x1000, 8, 8, 3),
            (Alloc, 0x2000, 8, 8, 1),
            (FreeRequested, 0x2000, 8, 8, 2),
            (FreeCompleted, 0x2000, 8, 8, 2),
        ]
        .into_iter()
        .map(|(action, addr, size, requested, context)| {
            with(event(action, addr, size, requested), context)
        })
        .collect(),
    );
    let contexts = |index| -> Vec<(u64, u32)> {
        let state = trace.state_at(0, index).unwrap();
        state
            .unsegmented
            .iter()
            .map(|b| (b.address, b.context.0))
            .collect()
    };
    assert_eq!(
        contexts(0),
        [(0x1000, 3)],
        "allocated before the trace: only the free's context is known"
    );
    assert_eq!(contexts(3), [(0x2000, 1)], "the alloc's context");
    assert_eq!(
        contexts(4),
        [(0x2000, 1)],
        "still the alloc's context while pending"
    );
}

#[test]
fn a_long_one_device_trace_walks_the_same_with_its_copy_made_beside() {
    // Past the length from which `new` copies the events on a second thread: blocks allocated
    // and freed in a ring of 64 addresses, one segment holding them, alive at the end.
    let segment_size = 64 * 0x200;
    let mut trace = Snapshot {
        segments: vec![Segment {
            device: 0,
            address: 0,
            size: segment_size,
            stream: StreamId::DEFAULT,
            pool: PoolKind::Small,
            expandable: false,
            context: ContextId::NONE,
            blocks: vec![Block {
                address: 0,
                size: segment_size,
                requested: 0,
                state: BlockState::Inactive,
                context: ContextId::NONE,
            }],
        }],
        ..Snapshot::default()
    };
    let event = |action, addr| TraceEvent {
        action,
        device: 0,
        stream: StreamId::DEFAULT,
        addr,
        size: 0x200,
        requested: 0x200,
        time_us: 0,
        context: ContextId::NONE,
    };
    let mut i = 0u64;
    while trace.events.len() <= super::walker::COPY_BESIDE_FROM {
        let addr = (i % 64) * 0x200;
        trace.events.push(event(Action::Alloc, addr));
        trace.events.push(event(Action::FreeRequested, addr));
        trace.events.push(event(Action::FreeCompleted, addr));
        i += 1;
    }
    let mut beside = trace.state_walker(0).expect("the trace walks");
    let mut taken =
        StateWalker::from_events(0, trace.segments.iter(), trace.events.clone()).expect("walks");
    assert_eq!(beside.len(), trace.events.len());
    assert!(beside.totals_ahead().eq(taken.totals_ahead()));
    for index in [0, 1, 2, 3, 1000, beside.len() / 2 + 1, beside.len()] {
        beside.seek(index).unwrap();
        taken.seek(index).unwrap();
        assert_eq!(beside.state(), taken.state(), "at {index}");
    }
}
