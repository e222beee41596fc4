//! The event interface by itself: each observer keeps what an event tells it, with no pool.

use super::*;
use crate::event::Action;
use std::panic::Location;

const D0: DeviceIndex = DeviceIndex::new(0);

fn place(addr: u64, size: usize) -> Place {
    Place {
        stream: StreamId::from_raw(7),
        addr,
        size,
        small: true,
    }
}

fn origin() -> Option<Origin> {
    Some(Origin {
        site: Location::caller(),
        raw: false,
        details: None,
    })
}

fn stamp(time_us: u64) -> EventStamp {
    EventStamp {
        time_us,
        context: ContextId::NONE,
    }
}

fn live_ids(observers: &Observers) -> Vec<(usize, u64)> {
    let live = observers.live().records();
    live.map(|(index, record)| (index, record.alloc_id))
        .collect()
}

#[test]
fn an_alloc_and_its_free_reach_the_statistics_the_live_table_and_the_history() {
    let mut observers = Observers::new(DeviceStats::default());
    observers.record_history(D0, &HistorySettings::default());
    observers.set_call(stamp(5), origin());
    let block = BlockId::from_index(3);
    let at = place(0x1000, 512);
    observers.emit(PoolEvent::Alloc {
        block,
        alloc_id: 1,
        at,
        requested: 500,
        oversize: false,
    });
    let stats = observers.stats();
    assert_eq!(
        (
            stats.allocation.small_pool.current,
            stats.allocated_bytes.all.current,
            stats.active_bytes.small_pool.current,
            stats.requested_bytes.all.current,
            stats.allocation.large_pool.current,
        ),
        (1, 512, 512, 500, 0)
    );
    assert_eq!(live_ids(&observers), [(3, 1)]);

    observers.set_event_stamp(stamp(9));
    observers.emit(PoolEvent::FreeRequested {
        block,
        at,
        requested: 500,
        oversize: false,
    });
    let stats = observers.stats();
    assert_eq!(
        (
            stats.allocated_bytes.all.current,
            stats.active_bytes.all.current
        ),
        (0, 512),
        "allocated ends at the request, active at the completion"
    );
    observers.emit(PoolEvent::FreeCompleted {
        block,
        at,
        requested: 500,
    });
    observers.emit(PoolEvent::InactiveSplit {
        small: true,
        blocks: 1,
        bytes: 1536,
    });
    let stats = observers.stats();
    assert_eq!(
        (
            stats.active_bytes.all.current,
            stats.requested_bytes.all.current,
            stats.inactive_split.small_pool.current,
            stats.inactive_split_bytes.all.current,
            stats.allocated_bytes.all.peak,
        ),
        (0, 0, 1, 1536, 512)
    );

    let events: Vec<_> = observers
        .history()
        .iter()
        .map(|e| {
            (
                e.action,
                e.stream.raw(),
                e.addr,
                e.size,
                e.requested,
                e.time_us,
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (Action::Alloc, 7, 0x1000, 512, 500, 5),
            (Action::FreeRequested, 7, 0x1000, 512, 500, 9),
            (Action::FreeCompleted, 7, 0x1000, 512, 500, 9),
        ],
        "the inactive-split change leaves no trace event"
    );
}

#[test]
fn an_allocation_enters_the_live_table_only_with_the_origin_its_own_call_set() {
    let mut observers = Observers::new(DeviceStats::default());
    let alloc = |block: usize, alloc_id: u64| PoolEvent::Alloc {
        block: BlockId::from_index(block),
        alloc_id,
        at: place(0x2000 * block as u64, 512),
        requested: 512,
        oversize: false,
    };
    observers.set_call(stamp(0), None);
    observers.emit(alloc(1, 1));
    assert!(
        live_ids(&observers).is_empty(),
        "tracking off for this call"
    );
    observers.set_call(stamp(0), origin());
    observers.emit(alloc(2, 2));
    observers.emit(alloc(4, 3));
    assert_eq!(
        live_ids(&observers),
        [(2, 2)],
        "a call's origin is taken by its one allocation"
    );
    assert_eq!(observers.stats().allocation.all.current, 3);
    assert!(observers.history().is_empty(), "not recording");
}

#[test]
fn segments_and_adoption_count_what_pytorch_counts() {
    let mut observers = Observers::new(DeviceStats::default());
    let at = place(0x10_0000, 2 << 20);
    observers.emit(PoolEvent::SegmentAlloc { at, oversize: true });
    observers.emit(PoolEvent::AdoptSegment {
        at: place(0x40_0000, 2 << 20),
        oversize: false,
    });
    let stats = observers.stats();
    assert_eq!(
        (
            stats.segment.all.current,
            stats.reserved_bytes.small_pool.current,
            stats.num_device_alloc,
            stats.oversize_segments.current,
        ),
        (2, 4 << 20, 1, 1),
        "an adopted segment is no device call"
    );
    observers.emit(PoolEvent::SegmentFree {
        at,
        oversize: true,
        context: ContextId::NONE,
    });
    observers.emit(PoolEvent::SegmentMap {
        at: place(0x80_0000, 1 << 20),
    });
    observers.emit(PoolEvent::Oom {
        stream: StreamId::DEFAULT,
        free_bytes: 0,
        rounded: 1 << 30,
    });
    observers.emit(PoolEvent::AllocRetry);
    observers.emit(PoolEvent::SyncAllStreams);
    let stats = observers.stats();
    assert_eq!(
        (
            stats.segment.all.current,
            stats.reserved_bytes.all.current,
            stats.num_device_alloc,
            stats.num_device_free,
            stats.oversize_segments.current,
            stats.num_ooms,
            stats.num_alloc_retries,
            stats.num_sync_all_streams,
        ),
        (1, 3 << 20, 2, 1, 0, 1, 1, 1),
        "a mapping reserves bytes but adds no segment"
    );
}
