//! `Snapshot::validate` and the block state names.

use super::*;
use crate::trace::Action;

fn block(address: u64, size: u64, state: BlockState) -> Block {
    Block {
        address,
        size,
        requested: if state.is_active() { size } else { 0 },
        state,
        context: ContextId::NONE,
    }
}

fn segment(address: u64, blocks: Vec<Block>) -> Segment {
    Segment {
        device: 0,
        address,
        size: blocks.iter().map(|b| b.size).sum(),
        stream: StreamId::DEFAULT,
        pool: PoolKind::Large,
        expandable: false,
        context: ContextId::NONE,
        blocks,
    }
}

#[test]
fn validate_accepts_a_tiled_snapshot_and_names_each_fault() {
    let good = Snapshot {
        segments: vec![segment(
            0x1000,
            vec![
                block(0x1000, 512, BlockState::ActiveAllocated),
                block(0x1200, 1536, BlockState::Inactive),
            ],
        )],
        ..Snapshot::default()
    };
    assert_eq!(good.validate(), Ok(()));
    assert_eq!(good.segments[0].active_bytes(), 512);
    assert_eq!(good.segments[0].bytes_in(BlockState::Inactive), 1536);

    let mut gap = good.clone();
    gap.segments[0].blocks[1].address = 0x1400;
    assert_eq!(
        gap.validate().unwrap_err().to_string(),
        "segment at 0x1000 on device 0: a block starts at 0x1400 where 0x1200 was \
         expected; its blocks must tile it exactly, lowest address first"
    );

    let mut short = good.clone();
    short.segments[0].size = 4096;
    assert!(matches!(
        short.validate(),
        Err(SnapshotInvalid::BlocksDoNotTile { .. })
    ));

    let mut overasked = good.clone();
    overasked.segments[0].blocks[0].requested = 513;
    assert_eq!(
        overasked.validate().unwrap_err().to_string(),
        "segment at 0x1000 on device 0: the block at 0x1000 was asked for 513 bytes but \
         holds only 512; its blocks must tile it exactly, lowest address first"
    );

    let mut overlap = good.clone();
    overlap.segments.push(segment(
        0x1400,
        vec![block(0x1400, 512, BlockState::Inactive)],
    ));
    assert_eq!(
        overlap.validate(),
        Err(SnapshotInvalid::SegmentsOverlap {
            device: 0,
            first: 0x1000,
            second: 0x1400
        })
    );

    let mut dangling = good;
    dangling.events.push(TraceEvent {
        action: Action::Alloc,
        device: 0,
        stream: StreamId::DEFAULT,
        addr: 0x1000,
        size: 512,
        requested: 512,
        time_us: 0,
        context: ContextId(7),
    });
    assert_eq!(
        dangling.validate().unwrap_err().to_string(),
        "event 0 (alloc at 0x1000) refers to context 7, but the snapshot has only 0 contexts"
    );
}

#[test]
fn state_names_round_trip() {
    for state in BlockState::ALL {
        assert_eq!(BlockState::from_name(state.as_str()), Some(state));
    }
    assert_eq!(BlockState::from_name("free"), None);
    assert_eq!(
        pool_from_name(pool_name(PoolKind::Small)),
        Some(PoolKind::Small)
    );
    assert_eq!(pool_from_name("huge"), None);
}
