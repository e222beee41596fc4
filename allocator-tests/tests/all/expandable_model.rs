//! Property test of expandable segments: random allocations, frees, cross-stream uses,
//! stream progress, `empty_cache`, memory fractions and injected out-of-memory against a
//! `CachingAllocator` with `expandable_segments:True`, every invariant checked after every step.
//!
//! The reference model is what a user knows: the live allocations and which freed ranges
//! still wait for another stream's events. After each step it checks the allocator's own
//! invariants (`check_invariants`, which covers unmapped blocks and mapped bytes), that reserved
//! bytes are exactly what the device has mapped for us, that live allocations never overlap and
//! lie inside mapped memory of their own stream, and that memory freed with pending events is
//! not handed out before they complete (or a synchronize of every stream). At the end, with
//! every allocation dropped, `empty_cache` must give everything back: no memory mapped and no
//! address range reserved.

use crate::support::{assert_tracked_exactly, disjoint_ranges, proptest_config};
use blockpool::backend::SimFault;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use proptest::prelude::*;
use proptest::sample::select;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

const MIB: usize = 1 << 20;
const CAPACITY: usize = 128 * MIB;
const STREAMS: u64 = 3;

const CONFIGS: &[&str] = &[
    "expandable_segments:True",
    "expandable_segments:True,max_split_size_mb:40",
    "expandable_segments:True,roundup_power2_divisions:4",
    "expandable_segments:True,garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
];

#[derive(Clone, Debug)]
enum Op {
    Allocate { size: usize, stream: u64 },
    Free(usize),
    RecordStream(usize, u64),
    Complete(u64),
    EmptyCache,
    Fraction(f64),
    OutOfMemoryAt(u64),
    Limit(usize),
    ClearFaults,
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1usize..MIB,
        3 => MIB..10 * MIB,
        2 => 10 * MIB..60 * MIB,
    ];
    prop_oneof![
        10 => (size, 0..STREAMS).prop_map(|(size, stream)| Op::Allocate { size, stream }),
        7 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), 0..STREAMS).prop_map(|(i, s)| Op::RecordStream(i, s)),
        2 => (0..STREAMS).prop_map(Op::Complete),
        1 => Just(Op::EmptyCache),
        1 => select(vec![0.5, 0.8, 1.0]).prop_map(Op::Fraction),
        1 => (1u64..4).prop_map(Op::OutOfMemoryAt),
        1 => (40usize..120).prop_map(|mib| Op::Limit(mib * MIB)),
        1 => Just(Op::ClearFaults),
    ]
}

/// A live allocation and the other streams it was used on.
struct Live {
    handle: Allocation<SimBackend>,
    uses: Vec<u64>,
}

struct Model {
    sim: SimBackend,
    alloc: CachingAllocator<SimBackend>,
    live: Vec<Live>,
    /// Freed ranges waiting for events on a stream: (start, end, stream).
    pending: Vec<(u64, u64, u64)>,
    syncs: i64,
}

impl Model {
    fn new(config: &str) -> Model {
        let config = AllocatorConfig::parse(config).expect("model config parses");
        let sim = SimBackend::new(1, CAPACITY);
        let alloc = CachingAllocator::new(sim.clone(), config);
        Model {
            sim,
            alloc,
            live: Vec::new(),
            pending: Vec::new(),
            syncs: 0,
        }
    }

    fn stat(&self, key: &str) -> i64 {
        self.alloc.memory_stats(0).expect("device 0")[key]
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Allocate { size, stream } => {
                match self.alloc.allocate(0, size, StreamId::from_raw(stream)) {
                    Ok(handle) => {
                        self.forget_synced();
                        let (start, end) = (handle.ptr(), handle.ptr() + handle.size() as u64);
                        if let Some(p) = self.pending.iter().find(|p| p.0 < end && start < p.1) {
                            panic!("{start:#x}..{end:#x} handed out while {p:x?} waits for events");
                        }
                        self.live.push(Live {
                            handle,
                            uses: Vec::new(),
                        });
                    }
                    Err(Error::OutOfMemory(_) | Error::ExceedsCapacity { .. }) => {
                        self.forget_synced()
                    }
                    Err(e) => panic!("allocation of {size} bytes failed unexpectedly: {e}"),
                }
            }
            Op::Free(i) if !self.live.is_empty() => {
                let live = self.live.swap_remove(i % self.live.len());
                let (start, end) = (
                    live.handle.ptr(),
                    live.handle.ptr() + live.handle.size() as u64,
                );
                for stream in live.uses {
                    self.pending.push((start, end, stream));
                }
                live.handle.free().expect("free of a live allocation");
            }
            Op::RecordStream(i, stream) if !self.live.is_empty() => {
                let n = self.live.len();
                let live = &mut self.live[i % n];
                live.handle
                    .record_stream(StreamId::from_raw(stream))
                    .expect("record_stream of a live allocation");
                if StreamId::from_raw(stream) != live.handle.stream()
                    && !live.uses.contains(&stream)
                {
                    live.uses.push(stream);
                }
            }
            Op::Complete(stream) => {
                self.sim
                    .complete_stream(D0, StreamId::from_raw(stream))
                    .expect("device 0");
                self.pending.retain(|p| p.2 != stream);
            }
            Op::EmptyCache => {
                self.alloc.empty_cache().expect("empty_cache");
                self.forget_synced();
            }
            Op::Fraction(f) => self
                .alloc
                .set_per_process_memory_fraction(f, D0)
                .expect("fraction"),
            Op::OutOfMemoryAt(nth) => self
                .sim
                .inject(D0, SimFault::AllocOutOfMemory { nth })
                .expect("device 0"),
            Op::Limit(bytes) => self.sim.set_oom_above(D0, Some(bytes)).expect("device 0"),
            Op::ClearFaults => self.sim.clear_faults(D0).expect("device 0"),
            Op::Free(_) | Op::RecordStream(..) => {}
        }
    }

    /// After a synchronize of every stream (empty_cache, the out-of-memory path), nothing
    /// waits any more.
    fn forget_synced(&mut self) {
        let syncs = self.stat("num_sync_all_streams");
        if syncs != self.syncs {
            self.syncs = syncs;
            self.pending.clear();
        }
    }

    fn check(&self, step: usize, op: &Op) {
        if let Err(e) = self.alloc.check_invariants(D0) {
            panic!("step {step} ({op:?}): {e}");
        }
        let reserved = self.stat("reserved_bytes.all.current") as usize;
        assert_eq!(
            reserved,
            self.sim.mapped_bytes(D0),
            "step {step} ({op:?}): reserved is mapped"
        );
        assert_eq!(
            self.sim.segment_count(D0),
            0,
            "no fixed segment with expandable segments"
        );
        let runs = self.alloc.segments(D0).expect("device 0");
        disjoint_ranges(self.live.iter().map(|l| &l.handle), step);
        assert_tracked_exactly(&self.alloc, self.live.iter().map(|l| &l.handle), step);
        for live in &self.live {
            let (ptr, size) = (live.handle.ptr(), live.handle.size() as u64);
            let inside = runs.iter().any(|r| {
                r.stream == live.handle.stream()
                    && r.addr <= ptr
                    && ptr + size <= r.addr + r.size as u64
            });
            assert!(
                inside,
                "step {step}: live {ptr:#x} is in no mapped run of its stream"
            );
        }
    }

    fn finish(mut self) {
        self.live.clear();
        self.sim.clear_faults(D0).expect("device 0");
        self.alloc.empty_cache().expect("final empty_cache");
        self.alloc
            .check_invariants(D0)
            .expect("invariants at the end");
        assert_eq!(self.stat("reserved_bytes.all.current"), 0);
        assert_eq!(self.sim.allocated_bytes(D0), 0, "the device holds nothing");
        assert_eq!(
            self.sim.address_range_count(D0),
            0,
            "no address range is left"
        );
    }
}

proptest! {
    #![proptest_config(proptest_config("proptest-regressions/expandable_model.txt", 500))]

    #[test]
    fn random_operations_on_expandable_segments_keep_every_invariant(
        config in select(CONFIGS.to_vec()),
        ops in proptest::collection::vec(op(), 150),
    ) {
        let mut model = Model::new(config);
        for (step, op) in ops.iter().enumerate() {
            model.run(op);
            model.check(step, op);
        }
        model.finish();
    }
}
