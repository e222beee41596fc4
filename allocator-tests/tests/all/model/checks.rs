//! The checks: that a block just handed out is where PyTorch puts it, that a failed request
//! failed with the error the model predicts, and every invariant of DESIGN.md section 7 after
//! every step.

use blockpool::backend::BackendError;
use blockpool::introspect::Introspect;
use blockpool::introspect::{BlockState, PoolKind};
use blockpool::{Error, StreamId};

use super::harness::Harness;
use super::ops::{CAPACITY, DEVICES, MIB};
use super::placement::{block_at, is_whole_free_segment, round_size, segment_size};
use super::state::{stream_index, Effects, Live, Owner};
use blockpool::DeviceIndex;

impl Harness {
    /// Checks a block just handed out for `rounded` bytes on `stream`; returns its size.
    pub(super) fn check_new_block(
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

    pub(super) fn check_allocation_error(
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
                d == DeviceIndex::new(device) && effects.fired_error,
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
                    DeviceIndex::new(device),
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
                assert_eq!(
                    got,
                    (DeviceIndex::new(device), stream, size, rounded),
                    "{ctx}: OOM fields"
                );
                assert_eq!(
                    oom.allocation_bytes, segment_bytes,
                    "{ctx}: OOM segment size"
                );
                let segments = self.segments(device);
                assert!(
                    !segments.iter().any(is_whole_free_segment),
                    "{ctx}: out of memory while a wholly free segment is still cached"
                );
                let in_use = self.sim.allocated_bytes(DeviceIndex::new(device));
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
                    d == DeviceIndex::new(device) && self.hung_with_pending_events(device, s),
                    "{ctx}: EventNeverCompletes for {s} of device {d}, which does not hang"
                );
            }
            other => panic!("{ctx}: unexpected allocation error {other:?}"),
        }
    }

    /// Every invariant of DESIGN.md section 7 that holds between operations.
    pub(super) fn check(&mut self) {
        let ctx = self.context.clone();
        for d in 0..DEVICES {
            if let Err(e) = self.alloc.check_invariants(DeviceIndex::new(d)) {
                panic!("{ctx}: invariant broken: {e}");
            }
            let stats = self.stats_of(d);
            let reserved = stats["reserved_bytes.all.current"];
            assert_eq!(
                reserved as usize,
                self.sim.allocated_bytes(DeviceIndex::new(d)),
                "{ctx}: device {d}: reserved bytes differ from what the device handed out"
            );
            let segments = self.segments(d);
            assert_eq!(
                segments.len(),
                self.sim.segment_count(DeviceIndex::new(d)),
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
            // Leak tracking, an observer of the pool's events, lists exactly the live
            // allocations: each at its block, with its stream, raw or owned by a handle.
            let mut tracked: Vec<(u64, u64, StreamId, bool)> = self
                .alloc
                .live_allocations(d)
                .unwrap_or_else(|e| panic!("{ctx}: live_allocations({d}) failed: {e}"))
                .iter()
                .map(|a| (a.ptr, a.size, a.stream, a.raw))
                .collect();
            tracked.sort_unstable();
            let owned: Vec<(u64, u64, StreamId, bool)> = live
                .iter()
                .map(|l| {
                    (
                        l.ptr,
                        l.size as u64,
                        l.stream,
                        matches!(l.owner, Owner::Raw),
                    )
                })
                .collect();
            assert_eq!(
                tracked, owned,
                "{ctx}: device {d}: the live table differs from the live allocations"
            );
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

            let calls = self.sim.calls(DeviceIndex::new(d));
            let device_calls = (stats["num_device_alloc"], stats["num_device_free"]);
            let (allocs_at_reset, frees_at_reset) = self.devices[d].calls_at_reset;
            assert_eq!(
                device_calls,
                (
                    (calls.segment_allocs - allocs_at_reset) as i64,
                    (calls.segment_frees - frees_at_reset) as i64
                ),
                "{ctx}: device {d}: num_device_alloc/free differ from the device's counts since \
                 the last reset of accumulated stats"
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
}
