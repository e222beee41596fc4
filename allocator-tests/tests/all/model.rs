//! Model-based property test: random operations against a `CachingAllocator` on two simulated
//! devices, with every invariant of DESIGN.md section 7 checked after every step (the pattern
//! of bumpalo's `quickchecks.rs`).
//!
//! The reference model knows only what a user of the allocator can know: the live allocations
//! (handles and raw pointers) with their streams and the other streams they were recorded on,
//! the events the allocator must record when such a block is freed and which of them have
//! completed, and the faults injected into the device. From that it predicts which error each
//! failing call must return, and which memory must not be handed out yet (a block freed with
//! events pending). Before each request it also works out, from the segments the allocator
//! shows, which cached block PyTorch's best fit picks (same stream and pool, smallest, lowest
//! address, oversize rules), and then checks the allocator took that block, or a new segment
//! of the right size when none fits, and rounded and split it as PyTorch does.
//!
//! The device capacities are small (256 and 192 MiB) so that out-of-memory, the release ladder
//! and memory fractions are exercised; faults (failed device allocations, hung streams, a
//! lower out-of-memory limit) are injected at random.

use blockpool::pool::{BlockState, BlockView, PoolKind, SegmentView};
use blockpool::{
    Allocation, AllocatorConfig, BackendError, CachingAllocator, Error, MemoryStats, SimBackend,
    SimFault, StreamId,
};
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::test_runner::FileFailurePersistence;

const MIB: usize = 1 << 20;
const DEVICES: usize = 2;
/// Small devices, so that out-of-memory and the release ladder happen often.
const CAPACITY: [usize; DEVICES] = [256 * MIB, 192 * MIB];
const STREAMS: [StreamId; 3] = [StreamId::DEFAULT, StreamId(1), StreamId(2)];
const OPS_PER_CASE: usize = 200;
/// Cases per run unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 1000;
/// Below every simulated device's address range: never a block.
const BOGUS_PTR: u64 = 0x1234_5600;

/// Configurations the model runs under; each case picks one.
const CONFIGS: &[&str] = &[
    "",
    "max_split_size_mb:32",
    "max_split_size_mb:20",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[2:8,16:4,>:2]",
    "garbage_collection_threshold:0.6,per_process_memory_fraction:0.75",
    "max_split_size_mb:24,roundup_power2_divisions:2,garbage_collection_threshold:0.5,\
     per_process_memory_fraction:0.9",
];

#[derive(Clone, Copy, Debug)]
enum RawCall {
    Free,
    RecordStream(usize),
}

/// Ways to hand the raw-pointer API a pointer it must refuse.
#[derive(Clone, Copy, Debug)]
enum BadPointer {
    /// An address no segment holds.
    Unknown,
    /// 512 bytes into a live allocation.
    Interior,
    /// A raw pointer freed earlier.
    AlreadyFreed,
    /// A live raw pointer, named with the other device.
    WrongDevice,
    /// The pointer of a live handle, named with the device given in the operation.
    HandleOwned,
    /// A live pointer, named with a device that does not exist.
    InvalidDevice,
}

#[derive(Clone, Debug)]
enum Op {
    Stats {
        device: usize,
        reset_peaks: bool,
    },
    Allocate {
        device: usize,
        size: usize,
        stream: usize,
    },
    Malloc {
        device: usize,
        size: usize,
        stream: usize,
    },
    Free {
        which: Index,
    },
    RecordStream {
        which: Index,
        stream: usize,
    },
    AdvanceStream {
        device: usize,
        stream: usize,
        events: u64,
    },
    CompleteStream {
        device: usize,
        stream: usize,
    },
    EmptyCache,
    SetFraction {
        device: usize,
        fraction: f64,
    },
    Inject {
        device: usize,
        fault: SimFault,
    },
    ClearFaults {
        device: usize,
    },
    BadPointer {
        call: RawCall,
        bad: BadPointer,
        device: usize,
        which: Index,
    },
}

/// Request sizes: every boundary of the sizing rules, ranges in each tier, and sizes that can
/// never fit.
fn request_size() -> impl Strategy<Value = usize> {
    let boundaries = vec![
        0,
        1,
        511,
        512,
        513,
        MIB - 512,
        MIB,
        MIB + 1,
        10 * MIB - 1,
        10 * MIB,
        10 * MIB + 1,
        20 * MIB - 1,
        20 * MIB,
        20 * MIB + 1,
        24 * MIB - 1,
        24 * MIB + 1,
        32 * MIB - 1,
        32 * MIB,
        32 * MIB + 1,
    ];
    let never_fits = vec![200 * MIB, 300 * MIB, usize::MAX - 600, usize::MAX];
    prop_oneof![
        8 => select(boundaries),
        8 => 1..=MIB,
        5 => MIB + 1..10 * MIB,
        3 => 10 * MIB..=48 * MIB,
        1 => select(never_fits),
    ]
}

/// A device index: usually valid, sometimes one past the last.
fn device() -> impl Strategy<Value = usize> {
    prop_oneof![20 => 0..DEVICES, 1 => Just(DEVICES)]
}

fn stream() -> impl Strategy<Value = usize> {
    0..STREAMS.len()
}

fn fault() -> impl Strategy<Value = SimFault> {
    prop_oneof![
        (1..=3u64).prop_map(|nth| SimFault::AllocOutOfMemory { nth }),
        (1..=3u64).prop_map(|nth| SimFault::AllocError { nth }),
        stream().prop_map(|s| SimFault::HangStream { stream: STREAMS[s] }),
        select(vec![64 * MIB, 128 * MIB, 200 * MIB])
            .prop_map(|limit_bytes| SimFault::OutOfMemoryAbove { limit_bytes }),
    ]
}

fn bad_pointer() -> impl Strategy<Value = BadPointer> {
    select(vec![
        BadPointer::Unknown,
        BadPointer::Interior,
        BadPointer::AlreadyFreed,
        BadPointer::WrongDevice,
        BadPointer::HandleOwned,
        BadPointer::InvalidDevice,
    ])
}

fn op() -> impl Strategy<Value = Op> {
    let raw_call = prop_oneof![
        Just(RawCall::Free),
        stream().prop_map(RawCall::RecordStream)
    ];
    let fraction = select(vec![0.0, 0.25, 0.5, 0.75, 1.0, 1.0, -0.5, 1.5, f64::NAN]);
    // The first alternative is harmless, so that shrinking turns irrelevant steps into it.
    prop_oneof![
        2 => (device(), any::<bool>())
            .prop_map(|(device, reset_peaks)| Op::Stats { device, reset_peaks }),
        30 => (device(), request_size(), stream())
            .prop_map(|(device, size, stream)| Op::Allocate { device, size, stream }),
        10 => (device(), request_size(), stream())
            .prop_map(|(device, size, stream)| Op::Malloc { device, size, stream }),
        30 => any::<Index>().prop_map(|which| Op::Free { which }),
        10 => (any::<Index>(), stream())
            .prop_map(|(which, stream)| Op::RecordStream { which, stream }),
        8 => (0..DEVICES, stream(), 1..=3u64)
            .prop_map(|(device, stream, events)| Op::AdvanceStream { device, stream, events }),
        3 => (0..DEVICES, stream()).prop_map(|(device, stream)| Op::CompleteStream { device, stream }),
        2 => Just(Op::EmptyCache),
        2 => (device(), fraction).prop_map(|(device, fraction)| Op::SetFraction { device, fraction }),
        3 => (0..DEVICES, fault()).prop_map(|(device, fault)| Op::Inject { device, fault }),
        // Often enough that hung streams and lowered limits do not last long.
        6 => (0..DEVICES).prop_map(|device| Op::ClearFaults { device }),
        4 => (raw_call, bad_pointer(), 0..DEVICES, any::<Index>())
            .prop_map(|(call, bad, device, which)| Op::BadPointer { call, bad, device, which }),
    ]
}

/// Who owns a live allocation.
enum Owner {
    Handle(Allocation<SimBackend>),
    Raw,
}

/// A live allocation as the model sees it.
struct Live {
    owner: Owner,
    device: usize,
    ptr: u64,
    size: usize,
    stream: StreamId,
    /// Streams other than `stream` it was recorded on.
    used_on: Vec<StreamId>,
}

/// Memory freed while other streams still had work queued on it: it must not be handed out
/// until every event in `waits` (stream, ticket) has completed.
struct Guard {
    device: usize,
    ptr: u64,
    size: usize,
    waits: Vec<(StreamId, u64)>,
}

/// Events the allocator has recorded on a simulated stream, and how many have completed.
#[derive(Clone, Copy, Default)]
struct StreamModel {
    recorded: u64,
    completed: u64,
    hung: bool,
}

impl StreamModel {
    fn pending(&self) -> bool {
        self.completed < self.recorded
    }
}

#[derive(Default)]
struct DeviceModel {
    streams: [StreamModel; STREAMS.len()],
    /// Injected allocation faults: (device allocations left until it fires, fires as OOM).
    faults: Vec<(u64, bool)>,
    fraction: Option<f64>,
    oom_above: Option<usize>,
    /// Device allocation calls (successful or not) seen so far.
    alloc_calls: u64,
    /// Segments allocated on the device so far.
    segment_allocs: u64,
    /// `num_sync_all_streams` seen so far.
    syncs: i64,
    /// `num_ooms` seen so far.
    ooms: i64,
    /// Raw pointers freed on this device, for double frees.
    freed_raw: Vec<u64>,
}

/// What one operation did to a device, read from its counters.
#[derive(Clone, Copy, Default, Debug)]
struct Effects {
    new_segments: u64,
    /// Out-of-memory failures the allocator counted.
    ooms: i64,
    fired_oom: bool,
    fired_error: bool,
}

struct Harness {
    sim: SimBackend,
    alloc: CachingAllocator<SimBackend>,
    config: AllocatorConfig,
    live: Vec<Live>,
    guards: Vec<Guard>,
    devices: [DeviceModel; DEVICES],
    /// "step N (op)", for assertion messages.
    context: String,
}

fn stream_index(stream: StreamId) -> usize {
    STREAMS
        .iter()
        .position(|&s| s == stream)
        .unwrap_or_else(|| panic!("{stream} is not one of the model's streams"))
}

/// PyTorch's `round_size`, written independently of the library's.
fn round_size(size: usize, config: &AllocatorConfig) -> Option<usize> {
    if size < 512 {
        return Some(512);
    }
    let divisions = config.roundup_power2_divisions(size);
    if divisions > 1 && size > 512 * divisions {
        if size.is_power_of_two() {
            return Some(size);
        }
        let floor = 1usize << size.ilog2();
        return size.checked_next_multiple_of(floor >> divisions.ilog2());
    }
    size.checked_next_multiple_of(512)
}

/// PyTorch's segment size for a rounded request.
fn segment_size(rounded: usize) -> Option<usize> {
    if rounded <= MIB {
        Some(2 * MIB)
    } else if rounded < 10 * MIB {
        Some(20 * MIB)
    } else {
        rounded.checked_next_multiple_of(2 * MIB)
    }
}

fn block_at(segments: &[SegmentView], ptr: u64) -> Option<(&SegmentView, &BlockView)> {
    let segment = segments
        .iter()
        .find(|s| s.addr <= ptr && ptr < s.addr + s.size as u64)?;
    let block = segment.blocks.iter().find(|b| b.addr == ptr)?;
    Some((segment, block))
}

fn is_whole_free_segment(segment: &SegmentView) -> bool {
    matches!(segment.blocks.as_slice(), [b] if b.state == BlockState::Free)
}

impl Harness {
    fn new(config: AllocatorConfig) -> Harness {
        let sim = SimBackend::builder()
            .devices(DEVICES)
            .capacity(CAPACITY[0])
            .device_capacity(1, CAPACITY[1])
            .build();
        let alloc = CachingAllocator::new(sim.clone(), config.clone());
        let devices = std::array::from_fn(|_| DeviceModel {
            fraction: config.per_process_memory_fraction(),
            ..DeviceModel::default()
        });
        Harness {
            sim,
            alloc,
            config,
            live: Vec::new(),
            guards: Vec::new(),
            devices,
            context: String::new(),
        }
    }

    fn segments(&self, device: usize) -> Vec<SegmentView> {
        self.alloc
            .segments(device)
            .unwrap_or_else(|e| panic!("{}: segments({device}) failed: {e}", self.context))
    }

    fn stats_of(&self, device: usize) -> MemoryStats {
        let stats = self.alloc.memory_stats(device);
        stats.unwrap_or_else(|e| panic!("{}: memory_stats failed: {e}", self.context))
    }

    /// Most bytes the device will hand out (its capacity or an injected limit).
    fn device_limit(&self, device: usize) -> usize {
        let oom_above = self.devices[device].oom_above.unwrap_or(usize::MAX);
        CAPACITY[device].min(oom_above)
    }

    /// The memory-fraction limit in bytes, computed as the allocator documents it.
    fn fraction_limit(&self, device: usize) -> Option<usize> {
        let fraction = self.devices[device].fraction?;
        Some((fraction * CAPACITY[device] as f64) as usize)
    }

    fn hung_with_pending_events(&self, device: usize, stream: StreamId) -> bool {
        let s = self.devices[device].streams[stream_index(stream)];
        s.hung && s.pending()
    }

    /// Reads what the last operation did to each device: faults that fired, segments added,
    /// and whether the allocator synchronized every event (which completes every pending
    /// event of a stream that does not hang).
    fn observe(&mut self) -> [Effects; DEVICES] {
        std::array::from_fn(|d| {
            let calls = self.sim.calls(d);
            let stats = self.alloc.device_stats(d);
            let stats = stats.unwrap_or_else(|e| panic!("{}: device_stats: {e}", self.context));
            let model = &mut self.devices[d];
            let alloc_calls = calls.segment_allocs + calls.failed_allocs;
            let n = alloc_calls - model.alloc_calls;
            model.alloc_calls = alloc_calls;
            let mut effects = Effects {
                new_segments: calls.segment_allocs - model.segment_allocs,
                ooms: stats.num_ooms - model.ooms,
                ..Effects::default()
            };
            model.segment_allocs = calls.segment_allocs;
            model.ooms = stats.num_ooms;
            model.faults.retain_mut(|(left, as_oom)| {
                if *left <= n {
                    if *as_oom {
                        effects.fired_oom = true;
                    } else {
                        effects.fired_error = true;
                    }
                    false
                } else {
                    *left -= n;
                    true
                }
            });
            if stats.num_sync_all_streams != model.syncs {
                model.syncs = stats.num_sync_all_streams;
                for s in model.streams.iter_mut().filter(|s| !s.hung) {
                    s.completed = s.recorded;
                }
            }
            effects
        })
    }

    fn run(&mut self, step: usize, op: &Op) {
        self.context = format!("step {step} ({op:?})");
        match *op {
            Op::Stats {
                device,
                reset_peaks,
            } => self.stats(device, reset_peaks),
            Op::Allocate {
                device,
                size,
                stream,
            } => self.allocate(device, size, STREAMS[stream], false),
            Op::Malloc {
                device,
                size,
                stream,
            } => self.allocate(device, size, STREAMS[stream], true),
            Op::Free { which } => self.free(which),
            Op::RecordStream { which, stream } => self.record_stream(which, STREAMS[stream]),
            Op::AdvanceStream {
                device,
                stream,
                events,
            } => self.advance(device, STREAMS[stream], events),
            Op::CompleteStream { device, stream } => {
                self.advance(device, STREAMS[stream], u64::MAX)
            }
            Op::EmptyCache => self.empty_cache(),
            Op::SetFraction { device, fraction } => self.set_fraction(device, fraction),
            Op::Inject { device, fault } => self.inject(device, fault),
            Op::ClearFaults { device } => self.clear_faults(device),
            Op::BadPointer {
                call,
                bad,
                device,
                which,
            } => self.bad_pointer(call, bad, device, which),
        }
        self.check();
    }

    fn stats(&mut self, device: usize, reset_peaks: bool) {
        let ctx = self.context.clone();
        let missing = Error::InvalidDevice {
            device,
            device_count: DEVICES,
        };
        let stats = match self.alloc.memory_stats(device) {
            Ok(stats) => stats,
            Err(e) => {
                assert_eq!(e, missing, "{ctx}: memory_stats of a missing device");
                let peaks = self.alloc.reset_peak_memory_stats(device);
                assert_eq!(peaks, Err(missing), "{ctx}: peak reset of a missing device");
                return;
            }
        };
        let live: Vec<&Live> = self.live.iter().filter(|l| l.device == device).collect();
        let bytes: usize = live.iter().map(|l| l.size).sum();
        let count = live.iter().filter(|l| l.size > 0).count();
        assert_eq!(
            (
                stats["allocated_bytes.all.current"],
                stats["allocation.all.current"]
            ),
            (bytes as i64, count as i64),
            "{ctx}: allocated bytes and count differ from the live allocations"
        );
        let summary = self.alloc.memory_summary(device);
        assert!(
            summary.is_ok_and(|s| !s.is_empty()),
            "{ctx}: memory_summary failed"
        );
        if reset_peaks {
            let result = self.alloc.reset_peak_memory_stats(device);
            assert_eq!(result, Ok(()), "{ctx}: reset_peak_memory_stats");
            for (key, peak) in self.stats_of(device).iter() {
                if let Some(stem) = key.strip_suffix(".peak") {
                    let current = stats[format!("{stem}.current").as_str()];
                    assert_eq!(peak, current, "{ctx}: {key} after resetting peaks");
                }
            }
        }
    }

    fn allocate(&mut self, device: usize, size: usize, stream: StreamId, raw: bool) {
        let rounded = round_size(size, &self.config);
        let best = match rounded {
            Some(rounded) if device < DEVICES && size > 0 && segment_size(rounded).is_some() => {
                self.best_fit(device, stream, rounded)
            }
            _ => None,
        };
        let result = if raw {
            self.alloc
                .malloc(device, size, stream)
                .map(|ptr| (ptr, None))
        } else {
            let a = self.alloc.allocate(device, size, stream);
            a.map(|a| (a.ptr(), Some(a)))
        };
        let effects = self.observe();
        let ctx = self.context.clone();
        if device >= DEVICES {
            let err = result.err();
            let want = Error::InvalidDevice {
                device,
                device_count: DEVICES,
            };
            assert_eq!(err, Some(want), "{ctx}: allocation on a missing device");
            return;
        }
        let effects = effects[device];
        let segment = rounded.and_then(segment_size);
        let is_oom = matches!(result, Err(Error::OutOfMemory(_)));
        assert_eq!(
            effects.ooms,
            i64::from(is_oom),
            "{ctx}: num_ooms must count exactly the out-of-memory failures"
        );
        let (ptr, handle) = match result {
            Ok(ok) => ok,
            Err(e) => {
                assert_eq!(
                    best, None,
                    "{ctx}: failed although a cached block fits: {e:?}"
                );
                return self.check_allocation_error(device, stream, size, effects, e);
            }
        };
        assert!(
            !effects.fired_error || effects.fired_oom,
            "{ctx}: an injected device error fired but the allocation succeeded"
        );
        let (Some(rounded), Some(segment_bytes)) = (rounded, segment) else {
            panic!("{ctx}: a request whose size overflows when rounded succeeded");
        };
        if size == 0 {
            assert_eq!(
                ptr, 0,
                "{ctx}: a zero-byte allocation must have a null pointer"
            );
            assert_eq!(
                handle.as_ref().map_or(0, |h| h.size()),
                0,
                "{ctx}: size of 0 bytes"
            );
            assert_eq!(effects.new_segments, 0, "{ctx}: zero bytes took a segment");
        } else {
            match best {
                Some((addr, block_size)) => assert_eq!(
                    (ptr, effects.new_segments),
                    (addr, 0),
                    "{ctx}: best fit is the cached {block_size}-byte block at {addr:#x}"
                ),
                None => assert_eq!(
                    effects.new_segments, 1,
                    "{ctx}: no cached block fits, so a new segment must serve the request"
                ),
            }
            let size = self.check_new_block(device, stream, ptr, rounded, segment_bytes, effects);
            if let Some(h) = &handle {
                assert_eq!(h.size(), size, "{ctx}: handle size differs from its block");
                assert_eq!((h.device(), h.stream()), (device, stream), "{ctx}: handle");
            }
        }
        let size = handle.as_ref().map_or_else(
            || {
                let segments = self.segments(device);
                block_at(&segments, ptr).map_or(0, |(_, b)| b.size)
            },
            |h| h.size(),
        );
        self.live.push(Live {
            owner: handle.map_or(Owner::Raw, Owner::Handle),
            device,
            ptr,
            size,
            stream,
            used_on: Vec::new(),
        });
    }

    /// Whether the block at `ptr` of `device` was freed with events that have not completed.
    fn waits_for_events(&self, device: usize, ptr: u64) -> bool {
        self.guards.iter().any(|g| {
            g.device == device
                && g.ptr == ptr
                && g.waits.iter().any(|&(s, ticket)| {
                    self.devices[device].streams[stream_index(s)].completed < ticket
                })
        })
    }

    /// The cached block (address, size) PyTorch's best fit picks for `rounded` bytes on
    /// `stream`, or `None` when no cached block may serve it.
    ///
    /// Blocks whose deferred free has completed count as free and merged with their free
    /// neighbours, since `malloc` processes finished events first. The candidate is the
    /// smallest block of the stream's segments in the request's pool, lowest address first;
    /// it is refused when it is oversize for a request that could split, or wastes
    /// `max_non_split_rounding_size` or more for an oversize request.
    fn best_fit(&self, device: usize, stream: StreamId, rounded: usize) -> Option<(u64, usize)> {
        let pool = if rounded <= MIB {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        let mut best: Option<(usize, u64)> = None;
        let mut consider = |run: Option<(usize, u64)>| {
            if let Some(run) = run.filter(|&(size, _)| size >= rounded) {
                best = Some(best.map_or(run, |b| b.min(run)));
            }
        };
        let segments = self.segments(device);
        for segment in segments
            .iter()
            .filter(|s| s.stream == stream && s.pool == pool)
        {
            let mut run: Option<(usize, u64)> = None;
            for b in &segment.blocks {
                let free = match b.state {
                    BlockState::Free => true,
                    BlockState::PendingFree => !self.waits_for_events(device, b.addr),
                    BlockState::Allocated => false,
                };
                if free {
                    run = Some(run.map_or((b.size, b.addr), |(size, addr)| (size + b.size, addr)));
                } else {
                    consider(run.take());
                }
            }
            consider(run);
        }
        let (size, addr) = best?;
        let max_split = self.config.max_split_size();
        let margin = self.config.max_non_split_rounding_size();
        let oversize_for_split = rounded < max_split && size >= max_split;
        let too_wasteful = rounded >= max_split && size >= rounded.saturating_add(margin);
        (!oversize_for_split && !too_wasteful).then_some((addr, size))
    }

    /// Checks a block just handed out for `rounded` bytes on `stream`; returns its size.
    fn check_new_block(
        &self,
        device: usize,
        stream: StreamId,
        ptr: u64,
        rounded: usize,
        segment_bytes: usize,
        effects: Effects,
    ) -> usize {
        let ctx = &self.context;
        let segments = self.segments(device);
        let Some((segment, block)) = block_at(&segments, ptr) else {
            panic!("{ctx}: the new allocation at {ptr:#x} is not a block of any segment");
        };
        let size = block.size;
        assert_eq!(block.state, BlockState::Allocated, "{ctx}: new block state");
        assert_eq!(
            segment.stream, stream,
            "{ctx}: allocation on {stream} placed in a segment of {}",
            segment.stream
        );
        let small = rounded <= MIB;
        let pool = if small {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        assert_eq!(
            segment.pool, pool,
            "{ctx}: {rounded} bytes served from the wrong pool"
        );
        assert!(
            size >= rounded,
            "{ctx}: block of {size} bytes for {rounded} rounded bytes"
        );
        let max_split = self.config.max_split_size();
        if size != rounded {
            assert!(
                !small && (rounded >= max_split || size - rounded <= MIB),
                "{ctx}: a {size}-byte block for {rounded} bytes should have been split"
            );
        }
        if effects.new_segments > 0 {
            assert_eq!(
                (segment.addr, segment.size),
                (ptr, segment_bytes),
                "{ctx}: a new segment for {rounded} bytes has the wrong size or block"
            );
        } else if rounded < max_split {
            assert!(
                size < max_split,
                "{ctx}: oversize block for a splittable request"
            );
        } else {
            let margin = self.config.max_non_split_rounding_size();
            assert!(
                size < rounded + margin,
                "{ctx}: cached oversize block of {size} bytes wastes too much for {rounded}"
            );
        }
        for guard in self.guards.iter().filter(|g| g.device == device) {
            let overlaps = guard.ptr < ptr + size as u64 && ptr < guard.ptr + guard.size as u64;
            let waiting = guard.waits.iter().find(|&&(s, ticket)| {
                self.devices[device].streams[stream_index(s)].completed < ticket
            });
            if let (true, Some((s, ticket))) = (overlaps, waiting) {
                panic!(
                    "{ctx}: handed out {ptr:#x}+{size} over memory freed at {:#x} while event \
                     {ticket} on {s} had not completed",
                    guard.ptr
                );
            }
        }
        size
    }

    fn check_allocation_error(
        &self,
        device: usize,
        stream: StreamId,
        size: usize,
        effects: Effects,
        error: Error,
    ) {
        let ctx = &self.context;
        let rounded = round_size(size, &self.config);
        let segment = rounded.and_then(segment_size);
        let (Some(rounded), Some(segment_bytes)) = (rounded, segment) else {
            let want = Error::SizeTooLarge {
                requested_bytes: size,
            };
            assert_eq!(error, want, "{ctx}: a size that overflows when rounded");
            return;
        };
        if let Error::Backend(BackendError::InjectedFault { device: d, .. }) = error {
            assert!(
                d == device && effects.fired_error,
                "{ctx}: an injected device error on device {d} that the model did not inject"
            );
            return;
        }
        let ceiling = self.fraction_limit(device).unwrap_or(CAPACITY[device]);
        match error {
            Error::ExceedsCapacity {
                device: d,
                requested_bytes,
                limit_bytes,
                limited,
            } => {
                let want = (
                    device,
                    segment_bytes,
                    ceiling,
                    self.devices[device].fraction.is_some(),
                );
                assert_eq!(
                    (d, requested_bytes, limit_bytes, limited),
                    want,
                    "{ctx}: ExceedsCapacity names the wrong numbers"
                );
                assert!(
                    segment_bytes > ceiling,
                    "{ctx}: {segment_bytes} bytes do fit"
                );
            }
            Error::OutOfMemory(oom) => {
                let got = (
                    oom.device,
                    oom.stream,
                    oom.requested_bytes,
                    oom.rounded_bytes,
                );
                assert_eq!(got, (device, stream, size, rounded), "{ctx}: OOM fields");
                assert_eq!(
                    oom.allocation_bytes, segment_bytes,
                    "{ctx}: OOM segment size"
                );
                let segments = self.segments(device);
                assert!(
                    !segments.iter().any(is_whole_free_segment),
                    "{ctx}: out of memory while a wholly free segment is still cached"
                );
                let in_use = self.sim.allocated_bytes(device);
                let live = self.live.iter().filter(|l| l.device == device);
                let numbers = (
                    oom.device_total_bytes,
                    oom.device_free_bytes,
                    oom.limit_bytes,
                    oom.allocated_bytes,
                    oom.reserved_bytes,
                );
                let want = (
                    CAPACITY[device],
                    self.device_limit(device).saturating_sub(in_use),
                    self.fraction_limit(device),
                    live.map(|l| l.size).sum(),
                    in_use,
                );
                assert_eq!(
                    numbers, want,
                    "{ctx}: OOM (total, free, limit, allocated, reserved) bytes are wrong"
                );
                let device_full = in_use + segment_bytes > self.device_limit(device);
                let over_fraction = self
                    .fraction_limit(device)
                    .is_some_and(|limit| in_use + segment_bytes > limit);
                assert!(
                    effects.fired_oom || device_full || over_fraction,
                    "{ctx}: out of memory with {in_use} bytes in use, {segment_bytes} asked, \
                     device limit {}, fraction limit {:?}",
                    self.device_limit(device),
                    self.fraction_limit(device)
                );
            }
            Error::Backend(BackendError::EventNeverCompletes {
                device: d,
                stream: s,
            }) => {
                assert!(
                    d == device && self.hung_with_pending_events(device, s),
                    "{ctx}: EventNeverCompletes for {s} of device {d}, which does not hang"
                );
            }
            other => panic!("{ctx}: unexpected allocation error {other:?}"),
        }
    }

    fn free(&mut self, which: Index) {
        if !self.live.is_empty() {
            self.free_at(which.index(self.live.len()));
        }
    }

    fn free_at(&mut self, i: usize) {
        let mut live = self.live.swap_remove(i);
        let raw = matches!(live.owner, Owner::Raw);
        let result = match std::mem::replace(&mut live.owner, Owner::Raw) {
            Owner::Handle(handle) => handle.free(),
            Owner::Raw => self.alloc.free(live.device, live.ptr),
        };
        self.observe();
        let ctx = &self.context;
        assert_eq!(result, Ok(()), "{ctx}: freeing a live allocation failed");
        let model = &mut self.devices[live.device];
        if raw && live.ptr != 0 {
            model.freed_raw.push(live.ptr);
        }
        if live.used_on.is_empty() {
            return;
        }
        let waits = live
            .used_on
            .iter()
            .map(|&s| {
                let stream = &mut model.streams[stream_index(s)];
                stream.recorded += 1;
                (s, stream.recorded)
            })
            .collect();
        self.guards.push(Guard {
            device: live.device,
            ptr: live.ptr,
            size: live.size,
            waits,
        });
    }

    fn record_stream(&mut self, which: Index, stream: StreamId) {
        if self.live.is_empty() {
            return;
        }
        let i = which.index(self.live.len());
        let live = &self.live[i];
        let result = match &live.owner {
            Owner::Handle(handle) => handle.record_stream(stream),
            Owner::Raw => self.alloc.record_stream(live.device, live.ptr, stream),
        };
        assert_eq!(
            result,
            Ok(()),
            "{}: record_stream on a live allocation",
            self.context
        );
        let live = &mut self.live[i];
        if live.size > 0 && stream != live.stream && !live.used_on.contains(&stream) {
            live.used_on.push(stream);
        }
    }

    fn advance(&mut self, device: usize, stream: StreamId, events: u64) {
        let done = self.sim.advance_stream(device, stream, events);
        let model = &mut self.devices[device].streams[stream_index(stream)];
        let want = if model.hung {
            0
        } else {
            events.min(model.recorded - model.completed)
        };
        model.completed += want;
        assert_eq!(
            done,
            Ok(want),
            "{}: the stream did not have the events the allocator should have recorded",
            self.context
        );
    }

    fn empty_cache(&mut self) {
        let result = self.alloc.empty_cache();
        let stuck =
            (0..DEVICES).any(|d| STREAMS.iter().any(|&s| self.hung_with_pending_events(d, s)));
        let ctx = self.context.clone();
        match result {
            Ok(()) => assert!(!stuck, "{ctx}: empty_cache waited on a hung stream"),
            Err(Error::Backend(BackendError::EventNeverCompletes { device, stream })) => assert!(
                self.hung_with_pending_events(device, stream),
                "{ctx}: empty_cache says {stream} of device {device} hangs; it does not"
            ),
            Err(e) => panic!("{ctx}: empty_cache failed: {e:?}"),
        }
        self.observe();
        for d in 0..DEVICES {
            let segments = self.segments(d);
            assert!(
                !segments.iter().any(is_whole_free_segment),
                "{ctx}: empty_cache left a wholly free segment on device {d}"
            );
        }
    }

    fn set_fraction(&mut self, device: usize, fraction: f64) {
        let result = self.alloc.set_per_process_memory_fraction(fraction, device);
        let ctx = &self.context;
        if !(0.0..=1.0).contains(&fraction) {
            assert!(
                matches!(result, Err(Error::InvalidMemoryFraction { fraction: f }) if f.to_bits() == fraction.to_bits()),
                "{ctx}: an invalid fraction must be refused, got {result:?}"
            );
        } else if device >= DEVICES {
            let want = Error::InvalidDevice {
                device,
                device_count: DEVICES,
            };
            assert_eq!(result, Err(want), "{ctx}: fraction of a missing device");
        } else {
            assert_eq!(result, Ok(()), "{ctx}: a valid fraction was refused");
            self.devices[device].fraction = Some(fraction);
        }
    }

    fn inject(&mut self, device: usize, fault: SimFault) {
        let result = self.sim.inject(device, fault);
        assert_eq!(result, Ok(()), "{}: inject", self.context);
        let model = &mut self.devices[device];
        match fault {
            SimFault::AllocOutOfMemory { nth } => model.faults.push((nth, true)),
            SimFault::AllocError { nth } => model.faults.push((nth, false)),
            SimFault::HangStream { stream } => model.streams[stream_index(stream)].hung = true,
            SimFault::OutOfMemoryAbove { limit_bytes } => model.oom_above = Some(limit_bytes),
            _ => unreachable!("the model injects only the faults above"),
        }
    }

    fn clear_faults(&mut self, device: usize) {
        let result = self.sim.clear_faults(device);
        assert_eq!(result, Ok(()), "{}: clear_faults", self.context);
        let model = &mut self.devices[device];
        model.faults.clear();
        model.oom_above = None;
        model.streams.iter_mut().for_each(|s| s.hung = false);
    }

    fn bad_pointer(&mut self, call: RawCall, bad: BadPointer, device: usize, which: Index) {
        let pick = |filter: &dyn Fn(&Live) -> bool| {
            let candidates: Vec<&Live> = self.live.iter().filter(|l| filter(l)).collect();
            (!candidates.is_empty()).then(|| candidates[which.index(candidates.len())])
        };
        let (device, ptr) = match bad {
            BadPointer::Unknown => (device, BOGUS_PTR),
            BadPointer::Interior => match pick(&|l| l.size > 512) {
                Some(l) => (l.device, l.ptr + 512),
                None => return,
            },
            BadPointer::AlreadyFreed => {
                let freed = &self.devices[device].freed_raw;
                if freed.is_empty() {
                    return;
                }
                let ptr = freed[which.index(freed.len())];
                if self
                    .live
                    .iter()
                    .any(|l| l.ptr == ptr && matches!(l.owner, Owner::Raw))
                {
                    return; // handed out again as a raw pointer: freeing it would be valid
                }
                (device, ptr)
            }
            BadPointer::WrongDevice => match pick(&|l| matches!(l.owner, Owner::Raw) && l.ptr != 0)
            {
                Some(l) => ((l.device + 1) % DEVICES, l.ptr),
                None => return,
            },
            BadPointer::HandleOwned => {
                match pick(&|l| matches!(l.owner, Owner::Handle(_)) && l.ptr != 0) {
                    Some(l) => (device, l.ptr),
                    None => return,
                }
            }
            BadPointer::InvalidDevice => match pick(&|l| l.ptr != 0) {
                Some(l) => (DEVICES, l.ptr),
                None => return,
            },
        };
        let want = match (self.expected_bad_pointer_error(device, ptr), call) {
            (Error::DoubleFree { device, ptr }, RawCall::RecordStream(_)) => {
                Error::UseAfterFree { device, ptr }
            }
            (want, _) => want,
        };
        let result = match call {
            RawCall::Free => self.alloc.free(device, ptr),
            RawCall::RecordStream(s) => self.alloc.record_stream(device, ptr, STREAMS[s]),
        };
        self.observe();
        assert_eq!(
            result,
            Err(want),
            "{}: a bad pointer must be refused with the right error",
            self.context
        );
    }

    /// The error for `ptr` named with `device`, when it is not a live raw pointer of `device`.
    fn expected_bad_pointer_error(&self, device: usize, ptr: u64) -> Error {
        if device >= DEVICES {
            return Error::InvalidDevice {
                device,
                device_count: DEVICES,
            };
        }
        let live_raw = self
            .live
            .iter()
            .find(|l| l.ptr == ptr && matches!(l.owner, Owner::Raw));
        if let Some(l) = live_raw {
            assert_ne!(
                l.device, device,
                "{}: the model picked a valid pointer",
                self.context
            );
            return Error::WrongDevice {
                ptr,
                given: device,
                actual: l.device,
            };
        }
        for d in 0..DEVICES {
            let segments = self.segments(d);
            match block_at(&segments, ptr) {
                Some(_) if d != device => {
                    return Error::WrongDevice {
                        ptr,
                        given: device,
                        actual: d,
                    }
                }
                // Freed and still a block of its own: a double free.
                Some((_, b)) if b.state != BlockState::Allocated => {
                    return Error::DoubleFree { device, ptr }
                }
                _ => {}
            }
        }
        Error::UnknownPointer { device, ptr }
    }

    /// Every invariant of DESIGN.md section 7 that holds between operations.
    fn check(&mut self) {
        let ctx = self.context.clone();
        for d in 0..DEVICES {
            if let Err(e) = self.alloc.check_invariants(d) {
                panic!("{ctx}: invariant broken: {e}");
            }
            let stats = self.stats_of(d);
            let reserved = stats["reserved_bytes.all.current"];
            assert_eq!(
                reserved as usize,
                self.sim.allocated_bytes(d),
                "{ctx}: device {d}: reserved bytes differ from what the device handed out"
            );
            let segments = self.segments(d);
            assert_eq!(
                segments.len(),
                self.sim.segment_count(d),
                "{ctx}: device {d}: segment count differs from the device's"
            );
            let sum: usize = segments.iter().map(|s| s.size).sum();
            assert_eq!(
                sum as i64, reserved,
                "{ctx}: device {d}: segments do not sum to reserved"
            );

            let mut live: Vec<&Live> = self
                .live
                .iter()
                .filter(|l| l.device == d && l.size > 0)
                .collect();
            live.sort_by_key(|l| l.ptr);
            for pair in live.windows(2) {
                assert!(
                    pair[0].ptr + pair[0].size as u64 <= pair[1].ptr,
                    "{ctx}: live allocations {:#x}+{} and {:#x} overlap",
                    pair[0].ptr,
                    pair[0].size,
                    pair[1].ptr
                );
            }
            for l in &live {
                let block = block_at(&segments, l.ptr).map(|(_, b)| (b.size, b.state));
                assert_eq!(
                    block,
                    Some((l.size, BlockState::Allocated)),
                    "{ctx}: live allocation {:#x} is not an allocated block of its size",
                    l.ptr
                );
            }
            let allocated = segments
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::Allocated)
                .count();
            assert_eq!(
                allocated,
                live.len(),
                "{ctx}: device {d}: allocated blocks nobody owns"
            );

            let calls = self.sim.calls(d);
            let device_calls = (stats["num_device_alloc"], stats["num_device_free"]);
            assert_eq!(
                device_calls,
                (calls.segment_allocs as i64, calls.segment_frees as i64),
                "{ctx}: device {d}: num_device_alloc/free differ from the device's counts"
            );
            let recorded: u64 = self.devices[d].streams.iter().map(|s| s.recorded).sum();
            assert_eq!(
                recorded, calls.events_recorded,
                "{ctx}: device {d}: events recorded differ from the frees of recorded blocks"
            );
        }
        // Invariant 3: memory freed with events pending stays out of the free lists.
        let devices = &self.devices;
        self.guards.retain(|g| {
            g.waits
                .iter()
                .any(|&(s, ticket)| devices[g.device].streams[stream_index(s)].completed < ticket)
        });
        for g in &self.guards {
            let segments = self.segments(g.device);
            let block = block_at(&segments, g.ptr).map(|(_, b)| (b.size, b.state));
            assert_eq!(
                block,
                Some((g.size, BlockState::PendingFree)),
                "{ctx}: block {:#x} freed with events pending is not waiting for them",
                g.ptr
            );
        }
    }

    /// Drops everything, completes every stream and empties the cache: nothing may remain.
    fn finish(mut self) {
        self.context = "teardown".to_owned();
        for d in 0..DEVICES {
            self.clear_faults(d);
        }
        while !self.live.is_empty() {
            self.free_at(0);
        }
        self.sim.complete_all();
        assert_eq!(
            self.alloc.empty_cache(),
            Ok(()),
            "teardown: empty_cache failed"
        );
        for d in 0..DEVICES {
            if let Err(e) = self.alloc.check_invariants(d) {
                panic!("teardown: invariant broken: {e}");
            }
            let stats = self.stats_of(d);
            assert_eq!(stats["reserved_bytes.all.current"], 0, "teardown: reserved");
            assert_eq!(stats["active_bytes.all.current"], 0, "teardown: active");
            assert_eq!(
                self.sim.allocated_bytes(d),
                0,
                "teardown: the device still holds memory"
            );
            assert_eq!(
                self.sim.segment_count(d),
                0,
                "teardown: the device still has segments"
            );
        }
    }
}

fn proptest_config() -> ProptestConfig {
    let mut config = ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt",
        ))),
        ..ProptestConfig::default()
    };
    // `ProptestConfig::default()` has read PROPTEST_CASES; only its absence gets our default.
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = DEFAULT_CASES;
    }
    config
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn random_operations_keep_every_invariant(
        config in select(CONFIGS.to_vec()),
        ops in proptest::collection::vec(op(), OPS_PER_CASE),
    ) {
        let config = AllocatorConfig::parse(config)
            .unwrap_or_else(|e| panic!("model config {config:?} does not parse: {e}"));
        let mut harness = Harness::new(config);
        for (step, op) in ops.iter().enumerate() {
            harness.run(step, op);
        }
        harness.finish();
    }
}

#[test]
fn default_case_count_is_at_least_1000_without_proptest_cases() {
    if std::env::var_os("PROPTEST_CASES").is_none() {
        assert!(
            proptest_config().cases >= 1000,
            "the model must run 1000 cases by default"
        );
    }
}

#[test]
fn reference_rounding_matches_pytorch_examples() {
    let default = AllocatorConfig::default();
    assert_eq!(round_size(0, &default), Some(512));
    assert_eq!(round_size(513, &default), Some(1024));
    assert_eq!(round_size(usize::MAX, &default), None);
    let four = AllocatorConfig::parse("roundup_power2_divisions:4").expect("valid config");
    assert_eq!(
        round_size(1200 << 10, &four),
        Some(1280 << 10),
        "next quarter step"
    );
    assert_eq!(
        round_size(1 << 21, &four),
        Some(1 << 21),
        "powers of two stay"
    );
    assert_eq!(segment_size(MIB), Some(2 * MIB));
    assert_eq!(segment_size(MIB + 512), Some(20 * MIB));
    assert_eq!(segment_size(10 * MIB + 512), Some(12 * MIB));
}
