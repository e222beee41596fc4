//! The state machine: [`Harness`] runs each operation against the allocator and against the
//! reference model, reads what the operation did to each device, and checks the result of
//! each call; `checks` then checks every invariant after the step.

use blockpool::backend::{BackendError, SimFault};
use blockpool::introspect::Introspect;
use blockpool::introspect::SegmentView;
use blockpool::stats::MemoryStats;
use blockpool::{AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use proptest::sample::Index;

use super::ops::{Op, Reset, CAPACITY, DEVICES, STREAMS};
use super::placement::{block_at, is_whole_free_segment, round_size, segment_size};
use super::state::{stream_index, DeviceModel, Effects, Guard, Live, Owner};
use blockpool::DeviceIndex;

pub(super) struct Harness {
    pub(super) sim: SimBackend,
    pub(super) alloc: CachingAllocator<SimBackend>,
    pub(super) config: AllocatorConfig,
    pub(super) live: Vec<Live>,
    pub(super) guards: Vec<Guard>,
    pub(super) devices: [DeviceModel; DEVICES],
    /// "step N (op)", for assertion messages.
    pub(super) context: String,
}

impl Harness {
    pub(super) fn new(config: AllocatorConfig) -> Harness {
        let sim = SimBackend::builder()
            .devices(DEVICES)
            .capacity(CAPACITY[0])
            .device_capacity(DeviceIndex::new(1), CAPACITY[1])
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

    pub(super) fn segments(&self, device: usize) -> Vec<SegmentView> {
        self.alloc
            .segments(DeviceIndex::new(device))
            .unwrap_or_else(|e| panic!("{}: segments({device}) failed: {e}", self.context))
    }

    pub(super) fn stats_of(&self, device: usize) -> MemoryStats {
        let stats = self.alloc.memory_stats(device);
        stats.unwrap_or_else(|e| panic!("{}: memory_stats failed: {e}", self.context))
    }

    /// Most bytes the device will hand out (its capacity or an injected limit).
    pub(super) fn device_limit(&self, device: usize) -> usize {
        let oom_above = self.devices[device].oom_above.unwrap_or(usize::MAX);
        CAPACITY[device].min(oom_above)
    }

    /// The memory-fraction limit in bytes, computed as the allocator documents it.
    pub(super) fn fraction_limit(&self, device: usize) -> Option<usize> {
        let fraction = self.devices[device].fraction?;
        Some((fraction * CAPACITY[device] as f64) as usize)
    }

    pub(super) fn hung_with_pending_events(&self, device: usize, stream: StreamId) -> bool {
        let s = self.devices[device].streams[stream_index(stream)];
        s.hung && s.pending()
    }

    /// Reads what the last operation did to each device: faults that fired, segments added,
    /// and whether the allocator synchronized every event (which completes every pending
    /// event of a stream that does not hang).
    pub(super) fn observe(&mut self) -> [Effects; DEVICES] {
        std::array::from_fn(|d| {
            let calls = self.sim.calls(DeviceIndex::new(d));
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

    pub(super) fn run(&mut self, step: usize, op: &Op) {
        self.context = format!("step {step} ({op:?})");
        match *op {
            Op::Stats { device, reset } => self.stats(device, reset),
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

    fn stats(&mut self, device: usize, reset: Reset) {
        let ctx = self.context.clone();
        let missing = Error::InvalidDevice {
            device: DeviceIndex::new(device),
            device_count: DEVICES,
        };
        let stats = match self.alloc.memory_stats(device) {
            Ok(stats) => stats,
            Err(e) => {
                assert_eq!(e, missing, "{ctx}: memory_stats of a missing device");
                let peaks = self.alloc.reset_peak_memory_stats(device);
                assert_eq!(
                    peaks,
                    Err(missing.clone()),
                    "{ctx}: peak reset of a missing device"
                );
                let accumulated = self.alloc.reset_accumulated_memory_stats(device);
                assert_eq!(
                    accumulated,
                    Err(missing),
                    "{ctx}: accumulated reset of a missing device"
                );
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
        match reset {
            Reset::Nothing => {}
            Reset::Peaks => {
                let result = self.alloc.reset_peak_memory_stats(device);
                assert_eq!(result, Ok(()), "{ctx}: reset_peak_memory_stats");
                for (key, peak) in self.stats_of(device).iter() {
                    if let Some(stem) = key.strip_suffix(".peak") {
                        let current = stats[format!("{stem}.current").as_str()];
                        assert_eq!(peak, current, "{ctx}: {key} after resetting peaks");
                    }
                }
            }
            Reset::Accumulated => self.reset_accumulated(device, &stats),
        }
    }

    /// Resets the accumulated stats of `device`, read as `before` just now, and checks that
    /// every total and counter reads 0 and nothing else moved.
    ///
    /// The model then counts from zero too: what it has seen of `num_sync_all_streams` and
    /// `num_ooms` (`observe` takes a change for a sync or an out-of-memory failure), and the
    /// device's segment allocations and frees, against which `num_device_alloc` and
    /// `num_device_free` are checked.
    fn reset_accumulated(&mut self, device: usize, before: &MemoryStats) {
        let ctx = self.context.clone();
        let result = self.alloc.reset_accumulated_memory_stats(device);
        assert_eq!(result, Ok(()), "{ctx}: reset_accumulated_memory_stats");
        for (key, value) in self.stats_of(device).iter() {
            // `max_split_size` is a setting, not a counter, and has no `num_` prefix.
            let accumulated =
                key.ends_with(".allocated") || key.ends_with(".freed") || key.starts_with("num_");
            if accumulated {
                assert_eq!(
                    value, 0,
                    "{ctx}: {key} must read 0 right after resetting accumulated stats"
                );
            } else {
                assert_eq!(
                    value, before[key],
                    "{ctx}: {key} is not accumulated; resetting accumulated stats changed it"
                );
            }
        }
        let calls = self.sim.calls(DeviceIndex::new(device));
        let model = &mut self.devices[device];
        model.syncs = 0;
        model.ooms = 0;
        model.calls_at_reset = (calls.segment_allocs, calls.segment_frees);
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
                device: DeviceIndex::new(device),
                device_count: DEVICES,
            };
            assert_eq!(err, Some(want), "{ctx}: allocation on a missing device");
            return;
        }
        let effects = effects[device];
        let segment = rounded.and_then(segment_size);
        // A request that can never fit counts too, as in PyTorch (its device allocation fails).
        let is_oom = matches!(
            result,
            Err(Error::OutOfMemory(_) | Error::ExceedsCapacity { .. })
        );
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
                assert_eq!(
                    (h.device(), h.stream()),
                    (DeviceIndex::new(device), stream),
                    "{ctx}: handle"
                );
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
        let done = self
            .sim
            .advance_stream(DeviceIndex::new(device), stream, events);
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
                self.hung_with_pending_events(device.get(), stream),
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
                device: DeviceIndex::new(device),
                device_count: DEVICES,
            };
            assert_eq!(result, Err(want), "{ctx}: fraction of a missing device");
        } else {
            assert_eq!(result, Ok(()), "{ctx}: a valid fraction was refused");
            self.devices[device].fraction = Some(fraction);
        }
    }

    fn inject(&mut self, device: usize, fault: SimFault) {
        let result = self.sim.inject(DeviceIndex::new(device), fault);
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
        let result = self.sim.clear_faults(DeviceIndex::new(device));
        assert_eq!(result, Ok(()), "{}: clear_faults", self.context);
        let model = &mut self.devices[device];
        model.faults.clear();
        model.oom_above = None;
        model.streams.iter_mut().for_each(|s| s.hung = false);
    }

    /// Drops everything, completes every stream and empties the cache: nothing may remain.
    pub(super) fn finish(mut self) {
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
            if let Err(e) = self.alloc.check_invariants(DeviceIndex::new(d)) {
                panic!("teardown: invariant broken: {e}");
            }
            let stats = self.stats_of(d);
            assert_eq!(stats["reserved_bytes.all.current"], 0, "teardown: reserved");
            assert_eq!(stats["active_bytes.all.current"], 0, "teardown: active");
            assert_eq!(
                self.sim.allocated_bytes(DeviceIndex::new(d)),
                0,
                "teardown: the device still holds memory"
            );
            assert_eq!(
                self.sim.segment_count(DeviceIndex::new(d)),
                0,
                "teardown: the device still has segments"
            );
        }
    }
}
