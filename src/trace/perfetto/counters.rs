//! A device's memory over time: allocated, reserved and requested bytes after each event that
//! changes them, computed by walking the events forward from the bytes live when the trace
//! began.

use crate::event::{Action, TraceEvent};
use crate::trace::snapshot::Snapshot;

/// A device's memory at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemorySample {
    /// When, in microseconds since the trace's time origin.
    pub time_us: u64,
    /// Bytes in blocks handed out and not yet back in the cache: from `alloc` to
    /// `free_completed`, so a block freed while other streams still use it counts until they
    /// are done (PyTorch calls these active bytes).
    pub allocated_bytes: u64,
    /// Bytes in segments obtained from the device (`segment_alloc` to `segment_free`, and the
    /// mapped part of expandable segments).
    pub reserved_bytes: u64,
    /// Bytes the callers of those blocks asked for.
    pub requested_bytes: u64,
}

/// How an event changes (allocated, reserved, requested) bytes.
fn delta(event: &TraceEvent) -> [i128; 3] {
    let (size, requested) = (i128::from(event.size), i128::from(event.requested));
    match event.action {
        Action::Alloc => [size, 0, requested],
        Action::FreeCompleted => [-size, 0, -requested],
        Action::SegmentAlloc | Action::SegmentMap => [0, size, 0],
        Action::SegmentFree | Action::SegmentUnmap => [0, -size, 0],
        Action::FreeRequested | Action::Oom | Action::Snapshot | Action::Annotate => [0; 3],
    }
}

/// The memory of `device` at its first event, then after each event that changes it, oldest
/// first. With no events, the one sample is the end state at time 0.
///
/// A trace (a ring buffer's newest events, or a log started late) may begin with memory
/// already in use, so the first sample is not zero but the snapshot's end state (the sizes of
/// its segments and of their active blocks, and what those blocks' callers requested) minus
/// the trace's net change. When that would be negative, or would drive a counter below zero
/// later, the end state does not account for the trace (a snapshot without segments, such as
/// one read from an RMM log, says nothing about the end): the counter then starts at the least
/// value that keeps it at or above zero throughout. Counters past `u64::MAX` saturate.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
/// use blockpool::trace::perfetto::memory_timeline;
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// let before = alloc.allocate(0, 4096, StreamId::DEFAULT)?; // live before recording
/// alloc.record_memory_history(HistorySettings::default())?;
/// let during = alloc.allocate(0, 1000, StreamId::DEFAULT)?;
/// let timeline = memory_timeline(&alloc.snapshot(), 0);
/// let bytes: Vec<_> = timeline
///     .iter()
///     .map(|s| (s.allocated_bytes, s.reserved_bytes, s.requested_bytes))
///     .collect();
/// assert_eq!(bytes, [(4096, 2 << 20, 4096), (5120, 2 << 20, 5096)]);
/// # drop((before, during));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn memory_timeline(snapshot: &Snapshot, device: u32) -> Vec<MemorySample> {
    let mut end = [0i128; 3];
    for segment in snapshot.device_segments(device) {
        end[0] += i128::from(segment.active_bytes());
        end[1] += i128::from(segment.size);
        end[2] += i128::from(segment.requested_bytes());
    }
    let mut net = [0i128; 3];
    let mut lowest = [0i128; 3];
    for event in snapshot.device_events(device) {
        for ((net, lowest), change) in net.iter_mut().zip(&mut lowest).zip(delta(event)) {
            *net += change;
            *lowest = (*lowest).min(*net);
        }
    }
    let mut value: [i128; 3] = std::array::from_fn(|i| (end[i] - net[i]).max(-lowest[i]));
    let sample = |time_us, value: &[i128; 3]| {
        let bytes = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
        MemorySample {
            time_us,
            allocated_bytes: bytes(value[0]),
            reserved_bytes: bytes(value[1]),
            requested_bytes: bytes(value[2]),
        }
    };
    let mut events = snapshot.device_events(device).peekable();
    let start_us = events.peek().map_or(0, |e| e.time_us);
    let mut timeline = vec![sample(start_us, &value)];
    for event in events {
        let change = delta(event);
        if change == [0; 3] {
            continue;
        }
        for (value, change) in value.iter_mut().zip(change) {
            *value += change;
        }
        timeline.push(sample(event.time_us, &value));
    }
    timeline
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StreamId;
    use crate::pool::PoolKind;
    use crate::trace::snapshot::{Block, BlockState, Segment};
    use crate::trace::ContextId;

    fn event(action: Action, time_us: u64, size: u64, requested: u64) -> TraceEvent {
        TraceEvent {
            action,
            device: 0,
            stream: StreamId::DEFAULT,
            addr: 0x1000,
            size,
            requested,
            time_us,
            context: ContextId::NONE,
        }
    }

    fn sample(time_us: u64, allocated: u64, reserved: u64, requested: u64) -> MemorySample {
        MemorySample {
            time_us,
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            requested_bytes: requested,
        }
    }

    #[test]
    fn memory_live_before_the_trace_is_the_end_state_minus_the_net_change() {
        // End state: one 8 KiB segment with a live 1 KiB block (1000 requested) and a 2 KiB
        // block pending free (2000 requested). The trace frees a 512-byte block allocated
        // before it began, and allocates the 2 KiB block.
        let block = |address, size, requested, state| Block {
            address,
            size,
            requested,
            state,
            context: ContextId::NONE,
        };
        let snapshot = Snapshot {
            segments: vec![Segment {
                device: 0,
                address: 0x1000,
                size: 8192,
                stream: StreamId::DEFAULT,
                pool: PoolKind::Large,
                expandable: false,
                context: ContextId::NONE,
                blocks: vec![
                    block(0x1000, 1024, 1000, BlockState::ActiveAllocated),
                    block(0x1400, 2048, 2000, BlockState::ActivePendingFree),
                    block(0x1c00, 5120, 0, BlockState::Inactive),
                ],
            }],
            events: vec![
                event(Action::FreeRequested, 7, 512, 500),
                event(Action::FreeCompleted, 8, 512, 500),
                event(Action::Alloc, 9, 2048, 2000),
                event(Action::FreeRequested, 12, 2048, 2000),
                event(Action::Oom, 15, 1 << 40, 0),
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            memory_timeline(&snapshot, 0),
            [
                sample(7, 1536, 8192, 1500),
                sample(8, 1024, 8192, 1000),
                sample(9, 3072, 8192, 3000),
            ],
            "starts at end - net; only alloc and free_completed move allocated bytes"
        );
        assert_eq!(
            memory_timeline(&snapshot, 1),
            [sample(0, 0, 0, 0)],
            "a device with nothing is zero at time 0"
        );
    }

    #[test]
    fn without_segments_counters_start_where_they_never_go_negative() {
        // No end state (as from an RMM log): a free of memory allocated before the log began.
        let snapshot = Snapshot {
            events: vec![
                event(Action::Alloc, 1, 100, 100),
                event(Action::FreeCompleted, 2, 300, 300),
                event(Action::SegmentAlloc, 3, 4096, 0),
                event(Action::SegmentUnmap, 4, 1024, 0),
            ],
            ..Snapshot::default()
        };
        assert_eq!(
            memory_timeline(&snapshot, 0),
            [
                sample(1, 200, 0, 200),
                sample(1, 300, 0, 300),
                sample(2, 0, 0, 0),
                sample(3, 0, 4096, 0),
                sample(4, 0, 3072, 0),
            ]
        );
    }
}
