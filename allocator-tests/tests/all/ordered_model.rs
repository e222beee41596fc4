//! Property tests of the stream-ordered policy (`stream_reuse:ordered`): random allocations on
//! three streams, frees, cross-stream uses, stream progress, `empty_cache` and injected
//! out-of-memory, with every invariant checked after every step.
//!
//! The ordering invariant comes from the simulated device, not from the allocator: each use of
//! memory is noted as (stream, position in that stream's work) when its allocation is freed,
//! and whenever a range is handed out again on stream B, every earlier use of any of its bytes
//! must have completed or be ordered before B's new work by a chain of stream waits
//! ([`SimBackend::is_ordered`]). A second property runs one-stream workloads under both
//! policies and requires the same addresses, statistics and segments.

use crate::support::{assert_tracked_exactly, disjoint_ranges, proptest_config};
use blockpool::backend::SimFault;
use blockpool::config::StreamReuse;
use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use proptest::prelude::*;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

const MIB: usize = 1 << 20;
const CAPACITY: usize = 256 * MIB;
const STREAMS: u64 = 3;

const CONFIGS: &[&str] = &[
    "stream_reuse:ordered",
    "stream_reuse:ordered,max_split_size_mb:40",
    "stream_reuse:ordered,roundup_power2_divisions:4",
    "stream_reuse:ordered,expandable_segments:True",
    "stream_reuse:ordered,garbage_collection_threshold:0.6,per_process_memory_fraction:0.8",
];

#[derive(Clone, Debug)]
enum Op {
    Allocate { size: usize, stream: u64 },
    Free(usize),
    RecordStream(usize, u64),
    Advance(u64),
    Complete(u64),
    EmptyCache,
    OutOfMemoryAt(u64),
    Limit(usize),
    ClearFaults,
}

fn op(streams: u64) -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        5 => 1usize..MIB,
        3 => MIB..10 * MIB,
        2 => 10 * MIB..60 * MIB,
    ];
    prop_oneof![
        10 => (size, 0..streams).prop_map(|(size, stream)| Op::Allocate { size, stream }),
        7 => any::<usize>().prop_map(Op::Free),
        3 => (any::<usize>(), 0..streams).prop_map(|(i, s)| Op::RecordStream(i, s)),
        2 => (0..streams).prop_map(Op::Advance),
        1 => (0..streams).prop_map(Op::Complete),
        1 => Just(Op::EmptyCache),
        1 => (1u64..4).prop_map(Op::OutOfMemoryAt),
        1 => (60usize..200).prop_map(|mib| Op::Limit(mib * MIB)),
        1 => Just(Op::ClearFaults),
    ]
}

/// A live allocation and the streams it was used on besides its own.
struct Live {
    handle: Allocation<SimBackend>,
    uses: Vec<StreamId>,
}

/// Work that used `start..end` on `stream`, queued at `position` of that stream.
#[derive(Debug)]
struct Use {
    start: u64,
    end: u64,
    stream: StreamId,
    position: u64,
}

struct Model {
    sim: SimBackend,
    alloc: CachingAllocator<SimBackend>,
    live: Vec<Live>,
    uses: Vec<Use>,
    /// Addresses handed out, in order (for comparing two policies).
    handed_out: Vec<u64>,
    /// Segments the device has freed and units it has unmapped, so far.
    segment_frees: u64,
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
            uses: Vec::new(),
            handed_out: Vec::new(),
            segment_frees: 0,
        }
    }

    fn stat(&self, key: &str) -> i64 {
        self.alloc.memory_stats(0).expect("device 0")[key]
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Allocate { size, stream } => match self.allocate(size, stream) {
                Ok(handle) => {
                    self.check_ordered(&handle);
                    self.handed_out.push(handle.ptr());
                    self.live.push(Live {
                        handle,
                        uses: Vec::new(),
                    });
                }
                Err(Error::OutOfMemory(_) | Error::ExceedsCapacity { .. }) => {}
                Err(e) => panic!("allocation of {size} bytes failed unexpectedly: {e}"),
            },
            Op::Free(i) if !self.live.is_empty() => {
                let live = self.live.swap_remove(i % self.live.len());
                let (start, end) = (
                    live.handle.ptr(),
                    live.handle.ptr() + live.handle.size() as u64,
                );
                for stream in live.uses.iter().copied().chain([live.handle.stream()]) {
                    let position = self.sim.stream_position(D0, stream).expect("device 0");
                    self.uses.push(Use {
                        start,
                        end,
                        stream,
                        position,
                    });
                }
                live.handle.free().expect("free of a live allocation");
            }
            Op::RecordStream(i, stream) if !self.live.is_empty() => {
                let n = self.live.len();
                let live = &mut self.live[i % n];
                let stream = StreamId::from_raw(stream);
                live.handle
                    .record_stream(stream)
                    .expect("record_stream of a live allocation");
                if !live.uses.contains(&stream) {
                    live.uses.push(stream);
                }
            }
            Op::Advance(stream) => {
                self.sim
                    .advance_stream(D0, StreamId::from_raw(stream), 1)
                    .expect("device 0");
            }
            Op::Complete(stream) => {
                self.sim
                    .complete_stream(D0, StreamId::from_raw(stream))
                    .expect("device 0");
            }
            Op::EmptyCache => {
                self.alloc.empty_cache().expect("empty_cache");
                self.forget_if_synchronized();
            }
            Op::OutOfMemoryAt(nth) => self
                .sim
                .inject(D0, SimFault::AllocOutOfMemory { nth })
                .expect("device 0"),
            Op::Limit(bytes) => self.sim.set_oom_above(D0, Some(bytes)).expect("device 0"),
            Op::ClearFaults => self.sim.clear_faults(D0).expect("device 0"),
            Op::Free(_) | Op::RecordStream(..) => {}
        }
    }

    /// Allocates, forgetting every use when the allocator gave a segment back on the way.
    fn allocate(&mut self, size: usize, stream: u64) -> blockpool::Result<Allocation<SimBackend>> {
        let result = self.alloc.allocate(0, size, StreamId::from_raw(stream));
        self.forget_if_synchronized();
        result
    }

    /// Freeing a segment (`cuMemFree`) waits for all work on the device, which PyTorch's
    /// allocator relies on too, and a backend unmaps memory only after the same wait
    /// (`Backend::unmap_memory`): every use before either is done.
    fn forget_if_synchronized(&mut self) {
        let calls = self.sim.calls(D0);
        let frees = calls.segment_frees + calls.unmaps;
        if frees != self.segment_frees {
            self.segment_frees = frees;
            self.uses.clear();
        }
    }

    /// Every earlier use of the new allocation's bytes is done or ordered before its stream.
    fn check_ordered(&self, handle: &Allocation<SimBackend>) {
        let (start, end) = (handle.ptr(), handle.ptr() + handle.size() as u64);
        let stream = handle.stream();
        for used in self.uses.iter().filter(|u| u.start < end && start < u.end) {
            let ordered = self.sim.is_ordered(D0, used.stream, used.position, stream);
            assert!(
                ordered.expect("device 0"),
                "{start:#x}..{end:#x} handed to {stream} before {used:x?} is ordered before it"
            );
        }
    }

    fn check(&self, step: usize, op: &Op) {
        if let Err(e) = self.alloc.check_invariants(D0) {
            panic!("step {step} ({op:?}): {e}");
        }
        let reserved = self.stat("reserved_bytes.all.current") as usize;
        assert_eq!(
            reserved,
            self.sim.allocated_bytes(D0),
            "step {step} ({op:?}): reserved is what the device handed out"
        );
        let ranges = disjoint_ranges(self.live.iter().map(|l| &l.handle), step);
        let live_bytes: u64 = ranges.iter().map(|r| r.1 - r.0).sum();
        assert_eq!(
            self.stat("allocated_bytes.all.current") as u64,
            live_bytes,
            "step {step} ({op:?}): allocated bytes are the live allocations"
        );
        assert_tracked_exactly(&self.alloc, self.live.iter().map(|l| &l.handle), step);
    }

    /// Drops everything and empties the cache: the device must get every byte back, mixed
    /// segments included.
    fn finish(mut self) {
        self.live.clear();
        self.sim.clear_faults(D0).expect("device 0");
        self.alloc.empty_cache().expect("empty_cache");
        assert_eq!(
            (self.sim.allocated_bytes(D0), self.sim.mapped_bytes(D0)),
            (0, 0),
            "empty_cache with nothing live gives every segment back"
        );
        if let Err(e) = self.alloc.check_invariants(D0) {
            panic!("after the last empty_cache: {e}");
        }
    }
}

proptest! {
    #![proptest_config(proptest_config("proptest-regressions/ordered_model.txt", 96))]

    #[test]
    fn memory_is_never_handed_to_a_stream_before_its_last_uses_are_ordered_before_it(
        config in prop::sample::select(CONFIGS),
        ops in prop::collection::vec(op(STREAMS), 1..160),
    ) {
        let mut model = Model::new(config);
        for (step, op) in ops.iter().enumerate() {
            model.run(op);
            model.check(step, op);
        }
        model.finish();
    }

    #[test]
    fn one_stream_workloads_are_the_same_under_both_policies(
        extra in prop::sample::select(vec!["", ",max_split_size_mb:40", ",expandable_segments:True"]),
        ops in prop::collection::vec(op(1), 1..120),
    ) {
        let mut compatible = Model::new(&format!("stream_reuse:compatible{extra}"));
        let mut ordered = Model::new(&format!("stream_reuse:ordered{extra}"));
        assert_eq!(ordered.alloc.config().stream_reuse(), StreamReuse::Ordered);
        for (step, op) in ops.iter().enumerate() {
            compatible.run(op);
            ordered.run(op);
            prop_assert_eq!(&compatible.handed_out, &ordered.handed_out, "step {}", step);
        }
        prop_assert_eq!(compatible.alloc.memory_stats(0), ordered.alloc.memory_stats(0));
        prop_assert_eq!(compatible.alloc.segments(D0), ordered.alloc.segments(D0));
    }
}
