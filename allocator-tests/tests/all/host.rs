//! The pinned host cache (`HostCachingAllocator`) against a reference model, and under threads.
//!
//! The model knows what PyTorch's `CachingHostAllocator` does: power-of-two buckets with LIFO
//! free lists, one event per stream a block was recorded on, the single event queue processed
//! oldest first up to the first incomplete event at every non-empty allocation, `empty_cache`,
//! and the release-and-retry on out-of-pinned-memory. It tracks the simulated streams' tickets
//! to know which events have completed, so it predicts the exact address each allocation
//! gets (a cached block) or that the backend is called (a new one), each out-of-memory error
//! with its numbers, and every statistic. After every step the statistics, the bytes the
//! backend holds, the cached bytes, the queued events and the cache's own invariants are
//! compared. The host capacity is small (64 KiB) so that out-of-memory and the retry happen.

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::support::proptest_config;
use blockpool::backend::BackendError;
use blockpool::host::{round_size, size_index, HostAllocation, HostCachingAllocator, HostError};
use blockpool::host::{HostStats, HOST_BUCKETS};
use blockpool::DeviceIndex;
use blockpool::{SimBackend, StreamId};
use proptest::prelude::*;

const CAPACITY: usize = 64 << 10;
const DEVICES: usize = 2;

type Key = (usize, StreamId);

#[derive(Clone, Debug)]
enum Op {
    Allocate(usize),
    Free(usize),
    Record(usize, usize, u64),
    Advance(usize, u64, u64),
    EmptyCache,
    ResetPeak,
    ResetAccumulated,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![Just(0usize), 1usize..=64, 1usize..=20_000].prop_map(Op::Allocate),
        4 => any::<usize>().prop_map(Op::Free),
        4 => (any::<usize>(), 0..DEVICES, 1u64..=3).prop_map(|(i, d, s)| Op::Record(i, d, s)),
        3 => (0..DEVICES, 1u64..=3, 0u64..=2).prop_map(|(d, s, n)| Op::Advance(d, s, n)),
        1 => Just(Op::EmptyCache),
        1 => Just(Op::ResetPeak),
        1 => Just(Op::ResetAccumulated),
    ]
}

#[derive(Debug)]
enum State {
    InUse(BTreeSet<Key>),
    Waiting(usize),
    Cached,
}

#[derive(Debug)]
struct Block {
    size: usize,
    state: State,
}

/// What PyTorch's host cache holds, and the simulated streams' progress.
struct Model {
    blocks: HashMap<u64, Block>,
    free_lists: Vec<Vec<u64>>,
    /// (stream, ticket, block), oldest first.
    events: VecDeque<(Key, u64, u64)>,
    /// Per stream: events recorded, events completed.
    streams: HashMap<Key, (u64, u64)>,
    stats: HostStats,
}

impl Model {
    fn new() -> Self {
        Model {
            blocks: HashMap::new(),
            free_lists: vec![Vec::new(); HOST_BUCKETS],
            events: VecDeque::new(),
            streams: HashMap::new(),
            stats: HostStats::default(),
        }
    }

    fn held_bytes(&self) -> usize {
        self.blocks.values().map(|b| b.size).sum()
    }

    fn cached_bytes(&self) -> usize {
        let cached = self
            .blocks
            .values()
            .filter(|b| matches!(b.state, State::Cached));
        cached.map(|b| b.size).sum()
    }

    fn cache(&mut self, ptr: u64) {
        let block = self.blocks.get_mut(&ptr).expect("model block");
        block.state = State::Cached;
        self.free_lists[size_index(block.size)].push(ptr);
        self.stats.active_requests.decrease(1);
        self.stats.active_bytes.decrease(block.size as u64);
    }

    fn process_events(&mut self) {
        while let Some(&(key, ticket, ptr)) = self.events.front() {
            if self.streams[&key].1 < ticket {
                break;
            }
            self.events.pop_front();
            let block = self.blocks.get_mut(&ptr).expect("model block");
            let State::Waiting(n) = &mut block.state else {
                panic!("model: event for a block not waiting");
            };
            *n -= 1;
            if *n == 0 {
                self.cache(ptr);
            }
        }
    }

    /// `empty_cache`: returns the bytes given back.
    fn release_cached(&mut self) -> usize {
        self.process_events();
        let mut released = 0;
        for list in &mut self.free_lists {
            for ptr in list.drain(..) {
                let block = self.blocks.remove(&ptr).expect("model block");
                self.stats.allocations.decrease(1);
                self.stats.allocated_bytes.decrease(block.size as u64);
                self.stats.num_host_free += 1;
                released += block.size;
            }
        }
        released
    }

    fn take_cached(&mut self, rounded: usize) -> Option<u64> {
        let ptr = self.free_lists[size_index(rounded)].pop()?;
        self.blocks.get_mut(&ptr).expect("model block").state = State::InUse(BTreeSet::new());
        self.stats.active_requests.increase(1);
        self.stats.active_bytes.increase(rounded as u64);
        Some(ptr)
    }

    fn insert(&mut self, ptr: u64, rounded: usize) {
        let block = Block {
            size: rounded,
            state: State::InUse(BTreeSet::new()),
        };
        assert!(
            self.blocks.insert(ptr, block).is_none(),
            "new block {ptr:#x} was live"
        );
        let s = &mut self.stats;
        s.allocations.increase(1);
        s.allocated_bytes.increase(rounded as u64);
        s.active_requests.increase(1);
        s.active_bytes.increase(rounded as u64);
        s.num_host_alloc += 1;
        s.bucket_allocation[size_index(rounded)] += 1;
    }

    fn free(&mut self, ptr: u64) {
        let block = self.blocks.get_mut(&ptr).expect("model block");
        let State::InUse(streams) = std::mem::replace(&mut block.state, State::Cached) else {
            panic!("model: free of a block not in use");
        };
        if streams.is_empty() {
            block.state = State::InUse(streams);
            self.cache(ptr);
            return;
        }
        block.state = State::Waiting(streams.len());
        for key in streams {
            let stream = self.streams.entry(key).or_default();
            stream.0 += 1;
            self.events.push_back((key, stream.0, ptr));
        }
    }
}

struct Harness {
    sim: SimBackend,
    host: HostCachingAllocator<SimBackend>,
    handles: Vec<HostAllocation<SimBackend>>,
    model: Model,
}

impl Harness {
    fn new() -> Self {
        let sim = SimBackend::builder()
            .devices(DEVICES)
            .host_capacity(CAPACITY)
            .build();
        let host = HostCachingAllocator::new(sim.clone());
        Harness {
            sim,
            host,
            handles: Vec::new(),
            model: Model::new(),
        }
    }

    fn allocate(&mut self, size: usize) {
        let result = self.host.allocate(size);
        if size == 0 {
            let handle = result.expect("0 bytes always succeed");
            assert_eq!(
                (handle.ptr(), handle.size()),
                (0, 0),
                "0 bytes: empty handle"
            );
            return;
        }
        let rounded = round_size(size).expect("small sizes round");
        let model = &mut self.model;
        model.process_events();
        if let Some(ptr) = model.take_cached(rounded) {
            let handle = result.expect("a cached block never fails");
            assert_eq!(handle.ptr(), ptr, "the newest cached block of the bucket");
            assert_eq!(handle.size(), rounded);
            self.handles.push(handle);
            return;
        }
        let mut released = 0;
        if model.held_bytes() + rounded > CAPACITY {
            released = model.release_cached();
        }
        if model.held_bytes() + rounded > CAPACITY {
            let active_bytes = model.stats.active_bytes.current as usize;
            let expected = HostError::OutOfMemory {
                requested_bytes: size,
                rounded_bytes: rounded,
                released_bytes: released,
                active_bytes,
                source: BackendError::HostOutOfMemory {
                    requested_bytes: rounded,
                },
            };
            assert_eq!(result.err(), Some(expected), "out of pinned memory");
            return;
        }
        let handle = result.expect("fits after release");
        assert_eq!(handle.size(), rounded);
        model.insert(handle.ptr(), rounded);
        self.handles.push(handle);
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Allocate(size) => self.allocate(size),
            Op::Free(i) if !self.handles.is_empty() => {
                let handle = self.handles.swap_remove(i % self.handles.len());
                let ptr = handle.ptr();
                handle.free().expect("freeing a handle");
                self.model.free(ptr);
            }
            Op::Record(i, device, stream) if !self.handles.is_empty() => {
                let handle = &self.handles[i % self.handles.len()];
                handle
                    .record_event(DeviceIndex::new(device), StreamId::from_raw(stream))
                    .expect("recording");
                let block = self
                    .model
                    .blocks
                    .get_mut(&handle.ptr())
                    .expect("model block");
                let State::InUse(streams) = &mut block.state else {
                    panic!("model: live handle on a block not in use");
                };
                streams.insert((device, StreamId::from_raw(stream)));
            }
            Op::Advance(device, stream, n) => {
                let key = (device, StreamId::from_raw(stream));
                let done = self
                    .sim
                    .advance_stream(DeviceIndex::new(device), key.1, n)
                    .expect("advance");
                let (recorded, completed) = self.model.streams.entry(key).or_default();
                let expected = n.min(*recorded - *completed);
                assert_eq!(done, expected, "events completed on {key:?}");
                *completed += done;
            }
            Op::EmptyCache => {
                self.host.empty_cache().expect("empty_cache");
                self.model.release_cached();
            }
            Op::ResetPeak => {
                self.host.reset_peak_stats();
                self.model.stats.reset_peak();
            }
            Op::ResetAccumulated => {
                self.host.reset_accumulated_stats();
                self.model.stats.reset_accumulated();
            }
            Op::Free(_) | Op::Record(..) => {}
        }
    }

    fn check(&self, step: usize, op: &Op) {
        let ctx = format!("after step {step} ({op:?})");
        assert_eq!(self.host.stats(), self.model.stats, "stats {ctx}");
        assert_eq!(
            self.sim.host_allocated_bytes(),
            self.model.held_bytes(),
            "bytes the backend holds for us {ctx}"
        );
        assert_eq!(
            self.host.cached_bytes(),
            self.model.cached_bytes(),
            "cached {ctx}"
        );
        assert_eq!(
            self.host.pending_events(),
            self.model.events.len(),
            "events {ctx}"
        );
        self.host
            .check_invariants()
            .unwrap_or_else(|e| panic!("{e} {ctx}"));
    }

    fn finish(mut self) {
        self.handles.clear();
        self.sim.complete_all();
        self.host.empty_cache().expect("final empty_cache");
        assert_eq!(self.sim.host_allocated_bytes(), 0, "everything given back");
        let stats = self.host.stats();
        assert_eq!(stats.allocations.current, 0);
        assert_eq!(stats.active_bytes.current, 0);
        self.host.check_invariants().expect("final invariants");
    }
}

proptest! {
    #![proptest_config(proptest_config("proptest-regressions/host.txt", 500))]

    #[test]
    fn host_cache_matches_the_reference_model(ops in prop::collection::vec(op(), 1..150)) {
        let mut harness = Harness::new();
        for (step, op) in ops.iter().enumerate() {
            harness.apply(op);
            harness.check(step, op);
        }
        harness.finish();
    }
}

/// A small deterministic generator, so the stress test needs no extra dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn threads_share_the_cache_and_everything_is_given_back() {
    const THREADS: u64 = 8;
    const OPS: usize = 2_000;
    let sim = SimBackend::builder().devices(DEVICES).build();
    let host = HostCachingAllocator::new(sim.clone());
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (sim, host) = (sim.clone(), host.clone());
            scope.spawn(move || {
                let mut rng = Lcg(t + 1);
                let stream = StreamId::from_raw(t + 1);
                let device = (t as usize) % DEVICES;
                let mut live = Vec::new();
                for _ in 0..OPS {
                    match rng.next(4) {
                        0 | 1 if live.len() < 8 => {
                            let size = 1 + rng.next(1 << 16) as usize;
                            let a = host.allocate(size).expect("plenty of host memory");
                            assert_eq!(a.size(), size.next_power_of_two());
                            if rng.next(2) == 0 {
                                a.record_event(DeviceIndex::new(device), stream)
                                    .expect("record");
                            }
                            live.push(a);
                        }
                        2 if !live.is_empty() => {
                            let i = rng.next(live.len() as u64) as usize;
                            live.swap_remove(i).free().expect("free");
                        }
                        _ => {
                            sim.advance_stream(DeviceIndex::new(device), stream, rng.next(3))
                                .expect("advance");
                        }
                    }
                }
            });
        }
    });
    sim.complete_all();
    host.empty_cache().expect("empty_cache");
    host.check_invariants().expect("invariants");
    let stats = host.stats();
    assert_eq!(
        sim.host_allocated_bytes(),
        0,
        "every pinned byte given back"
    );
    assert_eq!(
        (stats.allocations.current, stats.active_requests.current),
        (0, 0)
    );
    let calls = sim.host_calls();
    assert_eq!(
        stats.num_host_alloc, calls.host_allocs as i64,
        "each pin counted once"
    );
    assert_eq!(
        stats.num_host_free, calls.host_frees as i64,
        "each release counted once"
    );
    assert_eq!(calls.host_allocs, calls.host_frees);
    assert_eq!(host.pending_events(), 0);
}

#[test]
fn pinned_buffer_reuse_waits_for_the_copy_stream() {
    let sim = SimBackend::new(1, 1 << 30);
    let host = HostCachingAllocator::new(sim.clone());
    let staging = host.allocate(3 << 20).expect("pin");
    assert_eq!(staging.size(), 4 << 20, "3 MiB rounds to 4 MiB");
    let ptr = staging.ptr();
    staging
        .record_event(DeviceIndex::new(0), StreamId::from_raw(9))
        .expect("record");
    drop(staging);
    let next = host.allocate(4 << 20).expect("pin");
    assert_ne!(next.ptr(), ptr, "the copy may still be reading");
    sim.complete_stream(DeviceIndex::new(0), StreamId::from_raw(9))
        .expect("complete");
    let again = host.allocate(4 << 20).expect("reuse");
    assert_eq!(again.ptr(), ptr);
    assert_eq!(sim.host_calls().host_allocs, 2);
}
