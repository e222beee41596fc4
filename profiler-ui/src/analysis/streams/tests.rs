//! The streams report on traces built event by event, with every figure worked out by hand;
//! the pass itself on events the walker would refuse (it must stay sane, not panic).

use super::*;
use blockpool::introspect::PoolKind;
use blockpool::trace::snapshot::{Block, Segment};
use blockpool::trace::ContextId;
use blockpool::StreamId;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 40 * MIB;
const BASE: u64 = 0x7f00_0000_0000;

/// The report of device 0.
fn report_of(snapshot: &Snapshot) -> anyhow::Result<StreamsReport> {
    streams_report_taking(&mut snapshot.clone(), 0)
}

/// Events, each at the next microsecond.
#[derive(Default)]
struct Trace {
    events: Vec<TraceEvent>,
}

impl Trace {
    fn event(&mut self, action: Action, stream: u64, addr: u64, size: u64) -> &mut Trace {
        let time_us = self.events.len() as u64 + 1;
        self.events.push(TraceEvent {
            action,
            device: 0,
            stream: StreamId::from_raw(stream),
            addr,
            size,
            requested: size,
            time_us,
            context: ContextId::NONE,
        });
        self
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            events: self.events.clone(),
            ..Snapshot::default()
        }
    }
}

/// A new stream for each of 5 calls (streams 1 to 5), each with its own 40 MiB segment,
/// allocating 40 MiB and freeing it; the third call's block is used by the fourth call's
/// stream, so its free completes only after the fourth call allocated.
///
/// | events | what |
/// |---|---|
/// | 0-3 | stream 1: segment, alloc, free requested, completed |
/// | 4-7 | stream 2: the same |
/// | 8-10 | stream 3: segment, alloc, free requested |
/// | 11-15 | stream 4: segment, alloc, stream 3's free completed, its own free |
/// | 16-19 | stream 5: segment, alloc, free |
fn stream_per_call() -> Snapshot {
    let mut trace = Trace::default();
    let mut deferred = None;
    for stream in 1..=5u64 {
        let addr = BASE + (stream - 1) * SIZE;
        trace.event(Action::SegmentAlloc, stream, addr, SIZE).event(
            Action::Alloc,
            stream,
            addr,
            SIZE,
        );
        if let Some(at) = deferred.take() {
            trace.event(Action::FreeCompleted, 3, at, SIZE);
        }
        trace.event(Action::FreeRequested, stream, addr, SIZE);
        if stream == 3 {
            deferred = Some(addr);
        } else {
            trace.event(Action::FreeCompleted, stream, addr, SIZE);
        }
    }
    trace.snapshot()
}

fn moment(state: usize, reserved: u64, allocated: u64, waiting: u64, stranded: u64) -> Moment {
    Moment {
        state,
        at: format!("after event {}", state - 1),
        reserved_bytes: reserved,
        allocated_bytes: allocated,
        waiting_bytes: waiting,
        cached_bytes: reserved - allocated - waiting,
        stranded_bytes: stranded,
    }
}

#[test]
fn a_stream_done_allocating_strands_its_cache_while_others_still_allocate() {
    let report = report_of(&stream_per_call()).expect("the trace rebuilds");
    assert!(report.completions);
    let last_allocs = [1, 5, 9, 12, 17];
    let expected: Vec<StreamUsage> = (1..=5u64)
        .zip(last_allocs)
        .map(|(stream, last)| StreamUsage {
            stream,
            allocations: 1,
            allocated_bytes: SIZE,
            last_allocation_state: Some(last + 1),
            last_allocation: Some(format!("event {last}")),
            peak_reserved_bytes: SIZE,
            peak_cached_bytes: SIZE,
            end_reserved_bytes: SIZE,
            end_cached_bytes: SIZE,
            // Stream 5 allocates last: nobody is left to want its cache.
            stranded_bytes: if stream == 5 { 0 } else { SIZE },
            frees_waited: u64::from(stream == 3),
            bytes_waited: if stream == 3 { SIZE } else { 0 },
            // A free completed by the very next event never waits.
            peak_waiting_bytes: if stream == 3 { SIZE } else { 0 },
        })
        .collect();
    assert_eq!(report.streams, expected);
    // The fifth segment: 200 MiB reserved, 160 of it cached on streams 1 to 4, all done.
    assert_eq!(report.reserved_peak, moment(17, 5 * SIZE, 0, 0, 4 * SIZE));
    // Streams 1 to 4 are done once stream 4 has freed its block (event 14).
    assert_eq!(
        report.stranded,
        Stranded {
            peak_bytes: 4 * SIZE,
            peak: Some(moment(15, 4 * SIZE, 0, 0, 4 * SIZE)),
            streams: 4,
            left_at_end_bytes: 4 * SIZE,
        }
    );
    // Stream 3's free, requested at event 10, completed at event 13; at its start streams 1
    // and 2 are done and stranding 80 MiB.
    assert_eq!(
        report.waiting,
        Waiting {
            frees: 1,
            bytes: SIZE,
            peak_bytes: SIZE,
            peak: Some(moment(11, 3 * SIZE, 0, SIZE, 2 * SIZE)),
            longest_events: 3,
            longest_us: 3,
        }
    );
}

#[test]
fn the_chart_has_a_column_per_state_of_a_short_trace_and_a_line_per_stream() {
    let report = report_of(&stream_per_call()).expect("the trace rebuilds");
    let chart = &report.chart;
    assert_eq!(chart.column_ends, (0..=20).collect::<Vec<usize>>());
    // All streams' cache: each call's segment cached once its block is free.
    let cached = [
        0, 40, 0, 40, 40, 80, 40, 80, 80, 120, 80, 80, 120, 80, 120, 160, 160, 200, 160, 200, 200,
    ];
    assert_eq!(chart.cached, cached.map(|m| m * MIB).to_vec());
    // Nothing is stranded once the device's last allocation (event 17) is made.
    let stranded = [
        0, 0, 0, 40, 40, 40, 40, 80, 80, 80, 80, 80, 80, 80, 120, 160, 160, 160, 0, 0, 0,
    ];
    assert_eq!(chart.stranded, stranded.map(|m| m * MIB).to_vec());
    let mut waiting = vec![0; 21];
    waiting[11..14].fill(SIZE);
    assert_eq!(chart.waiting, waiting);
    // Every stream cached 40 MiB at its peak: all five are charted, lowest handle first.
    let charted: Vec<u64> = chart.streams.iter().map(|s| s.stream).collect();
    assert_eq!(charted, [1, 2, 3, 4, 5]);
    // Stream 3 caches its segment until it allocates, and again from its free's completion.
    let mut three = vec![0; 21];
    three[9] = SIZE;
    three[14..].fill(SIZE);
    assert_eq!(chart.streams[2].cached, three);
}

#[test]
fn a_long_trace_keeps_the_peak_of_every_state_a_column_covers() {
    // 3,000 blocks allocated and freed one after the other on stream 1 in one segment, and
    // one short-lived 1 MiB block on stream 2 in the middle: 6,004 events.
    let mut trace = Trace::default();
    trace.event(Action::SegmentAlloc, 1, BASE, 8 * MIB);
    for i in 0..3000u64 {
        let size = if i == 1500 { 8 * MIB } else { MIB };
        trace
            .event(Action::Alloc, 1, BASE, size)
            .event(Action::FreeRequested, 1, BASE, size)
            .event(Action::FreeCompleted, 1, BASE, size);
        if i == 1000 {
            trace
                .event(Action::SegmentAlloc, 2, BASE + 64 * MIB, 2 * MIB)
                .event(Action::SegmentFree, 2, BASE + 64 * MIB, 2 * MIB);
        }
    }
    let snapshot = trace.snapshot();
    let states = snapshot.events.len() + 1;
    let report = report_of(&snapshot).expect("the trace rebuilds");
    let chart = &report.chart;
    assert_eq!(chart.column_ends.len(), CHART_COLUMNS);
    assert_eq!(chart.column_ends.last(), Some(&(states - 1)));
    assert!(chart.column_ends.windows(2).all(|w| w[0] < w[1]));
    // Stream 2's segment lives for one state; its column still shows it.
    let peak = chart.cached.iter().max().copied();
    assert_eq!(peak, Some(10 * MIB));
    assert_eq!(report.streams[1].peak_cached_bytes, 2 * MIB);
    // Its line: 2 MiB in one column, nothing elsewhere (carried from its end there, 0).
    let two = &chart
        .streams
        .iter()
        .find(|s| s.stream == 2)
        .expect("charted")
        .cached;
    assert_eq!(two.iter().filter(|&&b| b > 0).count(), 1);
    assert_eq!(two.iter().max(), Some(&(2 * MIB)));
    // Stream 1's line is the segment less what is allocated: 8 MiB cached but in the
    // column of the 8 MiB block, where it still peaks at 8 MiB (the states around it).
    let one = &chart
        .streams
        .iter()
        .find(|s| s.stream == 1)
        .expect("charted")
        .cached;
    assert!(one[1..].iter().all(|&b| b == 8 * MIB), "{one:?}");
    // Stream 2 never allocates: its segment is stranded while stream 1 goes on.
    assert_eq!(report.stranded.peak_bytes, 2 * MIB);
    assert_eq!(report.streams[1].stranded_bytes, 2 * MIB);
    assert_eq!(report.streams[1].last_allocation, None);
}

#[test]
fn without_completions_a_requested_free_frees_at_once() {
    let mut trace = Trace::default();
    trace
        .event(Action::SegmentAlloc, 0, BASE, SIZE)
        .event(Action::Alloc, 0, BASE, MIB)
        .event(Action::Alloc, 7, BASE + MIB, MIB)
        .event(Action::FreeRequested, 0, BASE, MIB)
        .event(Action::Alloc, 0, BASE + 2 * MIB, MIB);
    let report = report_of(&trace.snapshot()).expect("the trace rebuilds");
    assert!(!report.completions);
    assert_eq!(report.waiting, Waiting::default());
    // Stream 7's block lies in stream 0's segment: stream 0 caches the segment less its own
    // blocks, and stream 7 has allocated bytes but no segment.
    let zero = &report.streams[0];
    assert_eq!(zero.end_reserved_bytes, SIZE);
    assert_eq!(zero.end_cached_bytes, SIZE - MIB);
    assert_eq!(zero.peak_cached_bytes, SIZE);
    let seven = &report.streams[1];
    assert_eq!(
        (seven.stream, seven.allocations, seven.end_reserved_bytes),
        (7, 1, 0)
    );
    // Stream 7 is done after event 2, stream 0 allocates once more: stream 7 caches nothing.
    assert_eq!(report.stranded.peak_bytes, 0);
    assert_eq!(report.reserved_peak, moment(1, SIZE, 0, 0, 0));
}

#[test]
fn memory_alive_before_the_trace_belongs_to_its_segments_stream() {
    // At the end: stream 9's segment, whose 4 MiB block (allocated before the trace) the
    // trace frees; stream 1's segment with a block allocated during it.
    let block = |address, size, state| Block {
        address,
        size,
        requested: if state == BlockState::Inactive {
            0
        } else {
            size
        },
        state,
        context: ContextId::NONE,
    };
    let segment = |address, stream, blocks| Segment {
        device: 0,
        address,
        size: 8 * MIB,
        stream: StreamId::from_raw(stream),
        pool: PoolKind::Large,
        expandable: false,
        context: ContextId::NONE,
        blocks,
    };
    let nine = BASE + 64 * MIB;
    let mut trace = Trace::default();
    trace
        .event(Action::FreeRequested, 9, nine, 4 * MIB)
        .event(Action::FreeCompleted, 9, nine, 4 * MIB)
        .event(Action::SegmentAlloc, 1, BASE, 8 * MIB)
        .event(Action::Alloc, 1, BASE, 2 * MIB);
    let mut snapshot = trace.snapshot();
    snapshot.segments = vec![
        segment(
            BASE,
            1,
            vec![
                block(BASE, 2 * MIB, BlockState::ActiveAllocated),
                block(BASE + 2 * MIB, 6 * MIB, BlockState::Inactive),
            ],
        ),
        segment(nine, 9, vec![block(nine, 8 * MIB, BlockState::Inactive)]),
    ];
    let report = report_of(&snapshot).expect("the trace rebuilds");
    let nine = &report.streams[1];
    assert_eq!(nine.stream, 9);
    assert_eq!(nine.allocations, 0);
    assert_eq!(nine.peak_cached_bytes, 8 * MIB);
    // Stream 9 allocates nothing in the trace: its cache is stranded from its start, until
    // stream 1's last allocation.
    assert_eq!(nine.stranded_bytes, 8 * MIB);
    assert_eq!(report.stranded.left_at_end_bytes, 8 * MIB);
    // Its block's free is completed by the next event: freed at once.
    assert_eq!(
        report.stranded.peak,
        Some(moment(1, 8 * MIB, 0, 0, 8 * MIB))
    );
    // Before the trace: 4 MiB allocated on stream 9, 4 cached there.
    assert_eq!(report.chart.cached[0], 4 * MIB);
    assert_eq!(report.streams[0].end_cached_bytes, 6 * MIB);
}

#[test]
fn events_the_walker_would_refuse_leave_the_pass_sane() {
    // The pass on its own: frees of blocks it never saw, segments freed twice, more unmapped
    // than mapped, a completion without a request. Figures saturate at zero; nothing panics.
    let mut trace = Trace::default();
    trace
        .event(Action::FreeCompleted, 3, BASE, MIB)
        .event(Action::SegmentFree, 3, BASE, SIZE)
        .event(Action::SegmentUnmap, 4, BASE, SIZE)
        .event(Action::SegmentMap, 4, BASE, MIB)
        .event(Action::Alloc, 4, BASE, 2 * MIB)
        .event(Action::FreeRequested, 4, BASE, 2 * MIB)
        .event(Action::FreeRequested, 4, BASE, 2 * MIB)
        .event(Action::FreeCompleted, 4, BASE, 2 * MIB)
        .event(Action::FreeCompleted, 4, BASE, 2 * MIB)
        .event(Action::SegmentFree, 4, BASE + SIZE, u64::MAX);
    let events = trace.events.clone();
    let numbers = EventNumbers::new(events.len(), Vec::new());
    let mut pass = Pass::new(&DeviceState::default(), &events, numbers);
    for (position, event) in events.iter().enumerate() {
        pass.apply(&Step {
            state: position + 1,
            event: *event,
            next: events.get(position + 1).copied(),
            block: None,
            reserved: 0,
        });
    }
    let report = pass.finish(0);
    let four = report
        .streams
        .iter()
        .find(|s| s.stream == 4)
        .expect("stream 4");
    assert_eq!(four.allocations, 1);
    assert_eq!(four.end_reserved_bytes, 0);
    assert_eq!(four.end_cached_bytes, 0);
    // The second request is completed by the next event: the block went at once.
    assert_eq!(report.waiting.frees, 0);
    assert_eq!(four.peak_waiting_bytes, 2 * MIB);
    assert_eq!(report.stranded.peak_bytes, 0);
}

#[test]
fn a_chart_line_carries_a_streams_value_through_columns_without_a_change() {
    // Column 1: up to 5, ending at 3; column 4: up to 2, ending at 0.
    assert_eq!(line(&[(1, 5, 3), (4, 2, 0)], 6), [0, 5, 3, 3, 2, 0]);
    assert_eq!(line(&[], 3), [0, 0, 0]);
}
