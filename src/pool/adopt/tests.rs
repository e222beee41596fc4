//! Adopting segments: placement, validation, and the allocator's state afterwards.

use super::*;
use crate::backend::SimBackend;
use crate::config::AllocatorConfig;

const MIB: usize = 1 << 20;
const BASE: u64 = 0x7f00_0000_0000;

fn live(offset: usize, size: usize, requested: usize) -> AdoptBlock {
    AdoptBlock {
        offset,
        size,
        requested,
    }
}

fn large(size: usize, blocks: &[AdoptBlock]) -> AdoptSegment<'_> {
    AdoptSegment {
        size,
        pool: PoolKind::Large,
        stream: StreamId::DEFAULT,
        blocks,
    }
}

fn setup() -> (SimBackend, DeviceAllocator<crate::backend::SimEvent>) {
    let sim = SimBackend::new(1, 1 << 30);
    (
        sim,
        DeviceAllocator::new(DeviceIndex::new(0), AllocatorConfig::default()),
    )
}

fn check(dev: &DeviceAllocator<crate::backend::SimEvent>, after: &str) {
    if let Err(e) = dev.check_invariants() {
        panic!("invariants broken after {after}: {e}");
    }
}

#[test]
fn adopted_blocks_sit_at_their_offsets_and_gaps_are_cached() {
    let (sim, mut dev) = setup();
    let blocks = [
        live(2 * MIB, 4 * MIB, 4 * MIB - 100),
        live(6 * MIB, 2 * MIB, 2 * MIB),
    ];
    let adopted = dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
    check(&dev, "adopting");
    let addrs: Vec<u64> = adopted.iter().map(|b| b.addr).collect();
    assert_eq!(addrs, [BASE + 2 * MIB as u64, BASE + 6 * MIB as u64]);
    assert_eq!(adopted[0].requested, 4 * MIB - 100);
    let flat = dev.stats().to_flat();
    assert_eq!(flat["allocated_bytes.all.current"], 6 * MIB as i64);
    assert_eq!(flat["requested_bytes.all.current"], 6 * MIB as i64 - 100);
    assert_eq!(flat["reserved_bytes.all.current"], 20 * MIB as i64);
    assert_eq!(flat["segment.large_pool.current"], 1);
    assert_eq!(
        flat["inactive_split.all.current"], 2,
        "the gap in front and the tail"
    );
    assert_eq!(flat["inactive_split_bytes.all.current"], 14 * MIB as i64);
    assert_eq!(
        flat["num_device_alloc"], 0,
        "adoption is not a device allocation"
    );
    assert_eq!(
        sim.allocated_bytes(DeviceIndex::new(0)),
        20 * MIB,
        "the backend holds the segment"
    );
    let views = dev.segments();
    let sizes: Vec<usize> = views[0].blocks.iter().map(|b| b.size).collect();
    assert_eq!(sizes, [2 * MIB, 4 * MIB, 2 * MIB, 12 * MIB]);
}

#[test]
fn allocating_and_freeing_around_adopted_blocks_keeps_every_invariant() {
    let (sim, mut dev) = setup();
    let blocks = [
        live(2 * MIB, 4 * MIB, 4 * MIB),
        live(6 * MIB, 2 * MIB, 2 * MIB),
    ];
    let adopted = dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
    let s = StreamId::DEFAULT;
    // Best fit: the 2 MiB gap in front, then the 12 MiB tail.
    let front = dev.malloc(&sim, 2 * MIB, s).unwrap();
    assert_eq!(front.addr, BASE);
    check(&dev, "taking the front gap");
    let tail = dev.malloc(&sim, 3 * MIB, s).unwrap();
    assert_eq!(tail.addr, BASE + 8 * MIB as u64);
    check(&dev, "splitting the tail");
    assert_eq!(
        dev.stats().num_device_alloc,
        0,
        "all from the adopted segment"
    );
    dev.free(&sim, adopted[0].id).unwrap();
    check(&dev, "freeing an adopted block between live ones");
    dev.free(&sim, front.id).unwrap();
    check(&dev, "merging the front gap with the freed adopted block");
    let merged = dev.malloc(&sim, 6 * MIB, s).unwrap();
    assert_eq!(merged.addr, BASE, "the merged 6 MiB in front serves 6 MiB");
    check(&dev, "reusing the merged block");
    for id in [merged.id, adopted[1].id, tail.id] {
        dev.free(&sim, id).unwrap();
        check(&dev, "freeing");
    }
    assert_eq!(dev.segments()[0].blocks.len(), 1, "everything merged");
    dev.empty_cache(&sim).unwrap();
    check(&dev, "empty_cache");
    assert_eq!(dev.segments.reserved(), 0);
    assert_eq!(
        sim.allocated_bytes(DeviceIndex::new(0)),
        0,
        "the adopted segment went back to the device"
    );
    assert_eq!(dev.stats().num_device_free, 1);
}

#[test]
fn a_small_segment_whole_live_block_and_oversize_counts() {
    let sim = SimBackend::new(1, 1 << 30);
    let config = AllocatorConfig::parse("max_split_size_mb:20").unwrap();
    let mut dev = DeviceAllocator::new(DeviceIndex::new(0), config);
    let whole = [live(0, 40 * MIB, 40 * MIB)];
    let adopted = dev.adopt_segment(&sim, &large(40 * MIB, &whole)).unwrap();
    check(&dev, "adopting an oversize block");
    let flat = dev.stats().to_flat();
    assert_eq!(flat["oversize_allocations.current"], 1);
    assert_eq!(flat["oversize_segments.current"], 1);
    assert_eq!(flat["inactive_split.all.current"], 0, "an unsplit segment");
    let small = [live(512, 1024, 1000)];
    let segment = AdoptSegment {
        size: 2 * MIB,
        pool: PoolKind::Small,
        stream: StreamId::from_raw(7),
        blocks: &small,
    };
    let small_adopted = dev.adopt_segment(&sim, &segment).unwrap();
    check(&dev, "adopting a small segment");
    let block = dev.malloc(&sim, 512, StreamId::from_raw(7)).unwrap();
    assert_eq!(
        block.addr,
        small_adopted[0].addr - 512,
        "the 512-byte gap in front"
    );
    let other = dev.malloc(&sim, 512, StreamId::from_raw(0)).unwrap();
    assert_ne!(
        other.addr - other.addr % (2 * MIB as u64),
        small_adopted[0].addr - 512,
        "another stream gets its own segment"
    );
    dev.free(&sim, adopted[0].id).unwrap();
    check(&dev, "freeing the oversize block");
    assert_eq!(dev.stats().to_flat()["oversize_allocations.current"], 0);
}

#[test]
fn bad_layouts_are_refused_before_anything_changes() {
    let (sim, mut dev) = setup();
    let cases: [(usize, Vec<AdoptBlock>); 7] = [
        (0, vec![]),
        (1000, vec![]),
        (4096, vec![live(0, 0, 0)]),
        (4096, vec![live(100, 512, 512)]),
        (4096, vec![live(1024, 1024, 1024), live(1536, 512, 512)]),
        (4096, vec![live(3584, 1024, 1024)]),
        (4096, vec![live(usize::MAX - 511, 1024, 10)]),
    ];
    for (size, blocks) in &cases {
        let err = dev.adopt_segment(&sim, &large(*size, blocks)).unwrap_err();
        assert!(
            matches!(
                err,
                AdoptError::SegmentSize { .. } | AdoptError::BlockMisplaced { .. }
            ),
            "{size} {blocks:?}: {err}"
        );
    }
    let greedy = [live(0, 512, 513)];
    assert_eq!(
        dev.adopt_segment(&sim, &large(4096, &greedy)).unwrap_err(),
        AdoptError::RequestedExceedsSize {
            offset: 0,
            size_bytes: 512,
            requested_bytes: 513
        }
    );
    assert_eq!(
        AdoptError::SegmentSize { size_bytes: 1000 }.to_string(),
        "cannot adopt a segment of 1000 bytes: a segment must be a non-zero multiple of 512 \
         bytes"
    );
    assert_eq!(
        sim.calls(DeviceIndex::new(0)).segment_allocs,
        0,
        "no device call for a bad layout"
    );
    assert_eq!(dev.segments.reserved(), 0);
    check(&dev, "refusals");
}

#[test]
fn out_of_memory_is_reported_and_changes_nothing() {
    let sim = SimBackend::new(1, 30 * MIB);
    let mut dev = DeviceAllocator::new(DeviceIndex::new(0), AllocatorConfig::default());
    let blocks = [live(0, 2 * MIB, 2 * MIB)];
    dev.adopt_segment(&sim, &large(20 * MIB, &blocks)).unwrap();
    let err = dev
        .adopt_segment(&sim, &large(20 * MIB, &blocks))
        .unwrap_err();
    assert_eq!(
        err,
        AdoptError::OutOfMemory {
            device: DeviceIndex::new(0),
            size_bytes: 20 * MIB
        }
    );
    assert_eq!(dev.segments.reserved(), 20 * MIB);
    check(&dev, "a refused adoption");
    dev.set_memory_fraction(&sim, 0.5).unwrap();
    let small = [live(0, 512, 512)];
    let err = dev
        .adopt_segment(&sim, &large(2 * MIB, &small))
        .unwrap_err();
    assert!(
        matches!(err, AdoptError::OutOfMemory { .. }),
        "the memory fraction applies: {err}"
    );
}
