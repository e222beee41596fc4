//! One replay: a device's allocation stream run through blockpool's allocator on a simulated
//! device, from the trace's starting state, with what it cost counted.
//!
//! Allocation events allocate their requested size on their stream; frees free (at
//! `free_completed`, when memory became reusable, or at `free_requested` in traces that record
//! no completions); a map from trace address to replayed address ties them together. Segment
//! events are the trace allocator's own decisions and are not replayed, except that with
//! `exact` each `segment_alloc` names where the next new segment should go.

use super::start::{StartPlan, StartSegment};
use crate::analysis::fragmentation::unallocated_share;
use anyhow::Context as _;
use blockpool::introspect::Introspect;
use blockpool::introspect::{AdoptError, AdoptSegment};
use blockpool::leak::TeardownReport;
use blockpool::trace::{Action, EventNumbers, TraceEvent};
use blockpool::DeviceIndex;
use blockpool::{AllocatorConfig, CachingAllocator, Error, LeakTracking, SimBackend};
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::HashMap;
use std::ops::Range;

/// The simulated device every replay runs on.
const DEVICE: DeviceIndex = DeviceIndex::new(0);

/// Events between two progress-bar updates.
const TICK: usize = 4096;

/// What a replay runs: one device's events and the state they start from.
#[derive(Clone, Debug)]
pub struct Workload<'a> {
    /// The device's events, oldest first.
    pub events: &'a [TraceEvent],
    /// Their numbers as the file gives them (PyTorch's index in `device_traces`), for messages.
    pub numbers: EventNumbers,
    /// The starting state.
    pub start: StartPlan,
    /// The event that makes a block's memory reusable: `free_completed`, or `free_requested`
    /// when the trace records no completions.
    pub free_on: Action,
    /// Where the trace's segments lie, lowest to highest address (for `exact`).
    pub trace_span: Option<Range<u64>>,
}

/// How to run it.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The allocator's configuration.
    pub config: AllocatorConfig,
    /// The simulated device's capacity, in bytes.
    pub capacity_bytes: u64,
    /// Put new segments where the trace had them.
    pub exact: bool,
}

/// What a replay did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Outcome {
    /// The starting state.
    pub start: StartOutcome,
    /// `alloc` events replayed.
    pub allocations: u64,
    /// Blocks freed.
    pub frees: u64,
    /// Free events naming no block live in the replay (its allocation failed, or the trace
    /// does not show it).
    pub unmatched_frees: u64,
    /// Allocations that failed for lack of memory (including requests larger than the device).
    pub failed_allocations: u64,
    /// The recording's out-of-memory requests (`oom` events), replayed as allocations freed at
    /// once.
    pub recorded_oom_requests: u64,
    /// Of those, the ones that failed in the replay too.
    pub recorded_oom_failed: u64,
    /// Highest bytes in segments.
    pub peak_reserved_bytes: u64,
    /// Highest bytes in allocated blocks.
    pub peak_allocated_bytes: u64,
    /// Fragmentation as [`crate::analysis::fragmentation`] defines it: (reserved - allocated)
    /// / reserved when reserved first reached its peak; 0 with nothing reserved.
    pub fragmentation_at_peak: f64,
    /// Segments allocated from the device during the replay (`num_device_alloc`).
    pub device_allocs: u64,
    /// Segments returned to the device (`num_device_free`).
    pub device_frees: u64,
    /// Allocations that released the whole cache and tried again (`num_alloc_retries`).
    pub retries: u64,
    /// `empty_cache` calls replayed: one for each run of `segment_free` events the trace shows
    /// (`segment_unmap` with expandable segments; PyTorch frees segments only when its cache
    /// is emptied, by `empty_cache` or by an allocation's retry; the replayed allocator then
    /// empties its own cache too).
    pub empty_cache_calls: u64,
    /// Out-of-memory failures the allocator counted (`num_ooms`).
    pub allocator_ooms: u64,
    /// Bytes in segments at the end.
    pub reserved_at_end_bytes: u64,
    /// How exact the addresses were, with `exact`.
    pub exact: Option<ExactOutcome>,
}

impl Outcome {
    /// Every out-of-memory event: failed allocations, the recording's out-of-memory requests
    /// that failed again, and starting segments or blocks that did not fit.
    pub fn out_of_memory_events(&self) -> u64 {
        self.failed_allocations
            + self.recorded_oom_failed
            + self.start.failed_segments
            + self.start.failed_blocks
    }
}

/// How the starting state went.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StartOutcome {
    /// Segments adopted with their live blocks.
    pub adopted_segments: u64,
    /// Live blocks in them.
    pub adopted_blocks: u64,
    /// Bytes in adopted segments.
    pub adopted_bytes: u64,
    /// Live blocks allocated afresh before the first event.
    pub fresh_blocks: u64,
    /// Segments whose layout could not be adopted (their blocks were allocated afresh).
    pub not_adoptable_segments: u64,
    /// Segments that did not fit the device.
    pub failed_segments: u64,
    /// Fresh blocks that did not fit the device.
    pub failed_blocks: u64,
}

/// How many allocations got the address the trace gave them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExactOutcome {
    /// Allocations compared (every replayed `alloc` event).
    pub allocations: u64,
    /// Those at the trace's address.
    pub matched: u64,
    /// `matched / allocations` (1 with none).
    pub share: f64,
    /// Segments (adopted or new) put where the trace had them.
    pub segments_placed: u64,
    /// Segments that could not be (the place was taken): they went by first fit.
    pub segments_missed: u64,
}

/// Maps trace addresses into the simulated device's range, keeping offsets, so that exact
/// placement can honour them: the trace's segments go in the upper half of the range, out of
/// the way of segments that have to go by first fit (from the bottom).
#[derive(Clone, Copy, Debug)]
struct Translation {
    trace_base: u64,
    sim_base: u64,
}

impl Translation {
    fn new(trace: &Range<u64>, sim: &Range<u64>) -> Option<Translation> {
        const TWO_MIB: u64 = 2 << 20;
        let trace_base = trace.start - trace.start % TWO_MIB;
        let span = trace.end.checked_sub(trace_base)?;
        let room = sim.end.checked_sub(sim.start)?;
        let sim_base = if span <= room / 2 {
            sim.start + room / 2
        } else if span <= room {
            sim.start
        } else {
            return None;
        };
        Some(Translation {
            trace_base,
            sim_base,
        })
    }

    fn to_sim(self, trace_address: u64) -> Option<u64> {
        trace_address
            .checked_sub(self.trace_base)?
            .checked_add(self.sim_base)
    }
}

/// Runs `workload` under `settings`, advancing `progress` by one per event.
pub fn run(
    workload: &Workload<'_>,
    settings: &Settings,
    progress: &ProgressBar,
) -> anyhow::Result<Outcome> {
    let capacity = usize::try_from(settings.capacity_bytes).unwrap_or(usize::MAX);
    let sim = SimBackend::new(1, capacity);
    let allocator = CachingAllocator::new(sim.clone(), settings.config.clone());
    // A replay asks what the allocator did, not who holds its memory: no live table, and no
    // teardown report for what the trace leaves allocated.
    allocator.set_leak_tracking(LeakTracking::Off);
    allocator.set_teardown_report(TeardownReport::Off);
    let translation = settings
        .exact
        .then(|| Translation::new(workload.trace_span.as_ref()?, &sim.address_range(DEVICE)?))
        .flatten();
    let mut replay = Replay {
        sim,
        allocator,
        exact: settings.exact,
        translation,
        live: HashMap::new(),
        outcome: Outcome::default(),
        matched: 0,
    };
    replay.start(&workload.start)?;
    let mut next_segment: Option<u64> = None;
    let mut releasing = false;
    for (index, event) in workload.events.iter().enumerate() {
        // A run of releases (expandable segments: unmaps) is what `empty_cache` leaves.
        let release = matches!(event.action, Action::SegmentFree | Action::SegmentUnmap);
        if release && !releasing {
            replay
                .empty_cache()
                .with_context(|| stopped_at(&workload.numbers, index))?;
        }
        releasing = release;
        match event.action {
            Action::SegmentAlloc => next_segment = Some(event.addr),
            Action::Alloc => {
                replay
                    .alloc(event, next_segment.take())
                    .with_context(|| stopped_at(&workload.numbers, index))?;
            }
            Action::Oom => replay
                .failed_request(event)
                .with_context(|| stopped_at(&workload.numbers, index))?,
            action if action == workload.free_on => replay
                .free(event.addr)
                .with_context(|| stopped_at(&workload.numbers, index))?,
            _ => {}
        }
        if index % TICK == TICK - 1 {
            progress.inc(TICK as u64);
        }
    }
    replay.finish()
}

/// A replay in progress.
struct Replay {
    sim: SimBackend,
    allocator: CachingAllocator<SimBackend>,
    exact: bool,
    /// How trace addresses map to the simulated device's (`exact`; identity when the trace's
    /// segments span more than the device's range).
    translation: Option<Translation>,
    /// Trace address -> replayed address of every live block.
    live: HashMap<u64, u64>,
    outcome: Outcome,
    matched: u64,
}

impl Replay {
    /// Adopts the starting segments, then allocates the fresh blocks.
    fn start(&mut self, plan: &StartPlan) -> anyhow::Result<()> {
        for segment in &plan.segments {
            self.place(Some(segment.trace_address))?;
            self.adopt(segment)?;
        }
        self.place(None)?;
        let start = &mut self.outcome.start;
        start.not_adoptable_segments = plan.not_adoptable;
        for block in &plan.fresh {
            match self
                .allocator
                .malloc(DEVICE, block.requested.max(1), block.stream)
            {
                Ok(ptr) => {
                    self.live.insert(block.trace_address, ptr);
                    self.outcome.start.fresh_blocks += 1;
                }
                Err(e) if out_of_room(&e) => self.outcome.start.failed_blocks += 1,
                Err(e) => return Err(e).context("cannot allocate the live blocks of the start"),
            }
        }
        self.track_peak()
    }

    fn adopt(&mut self, segment: &StartSegment) -> anyhow::Result<()> {
        let adopt = AdoptSegment {
            size: segment.size,
            pool: segment.pool,
            stream: segment.stream,
            blocks: &segment.blocks,
        };
        let start = &mut self.outcome.start;
        match self.allocator.adopt_segment(DEVICE, &adopt) {
            Ok(pointers) => {
                start.adopted_segments += 1;
                start.adopted_blocks += pointers.len() as u64;
                start.adopted_bytes += segment.size as u64;
                for (block, ptr) in segment.blocks.iter().zip(pointers) {
                    let trace_address = segment.trace_address.saturating_add(block.offset as u64);
                    self.live.insert(trace_address, ptr);
                }
                Ok(())
            }
            Err(AdoptError::OutOfMemory { .. }) => {
                start.failed_segments += 1;
                Ok(())
            }
            Err(AdoptError::Allocator(e)) if out_of_room(&e) => {
                start.failed_segments += 1;
                Ok(())
            }
            Err(e) => Err(e).with_context(|| {
                format!("cannot adopt the segment at {:#x}", segment.trace_address)
            }),
        }
    }

    /// Asks the simulated device to put the next segment where the trace had it (`exact`).
    fn place(&self, trace_address: Option<u64>) -> anyhow::Result<()> {
        if self.exact {
            let at = trace_address.and_then(|a| self.to_sim(a));
            self.sim.place_next_segment(DEVICE, at)?;
        }
        Ok(())
    }

    /// Where the simulated device should have what the trace had at `trace_address`.
    fn to_sim(&self, trace_address: u64) -> Option<u64> {
        match self.translation {
            Some(translation) => translation.to_sim(trace_address),
            None => Some(trace_address),
        }
    }

    fn alloc(&mut self, event: &TraceEvent, segment: Option<u64>) -> anyhow::Result<()> {
        let requested = super::start::request_of(event.requested, event.size);
        if requested == 0 {
            return Ok(());
        }
        self.outcome.allocations += 1;
        self.place(segment)?;
        let result = self.allocator.malloc(DEVICE, requested, event.stream);
        self.place(None)?;
        match result {
            Ok(ptr) => {
                if let Some(old) = self.live.insert(event.addr, ptr) {
                    // The trace reused an address it never freed: its free was lost.
                    self.allocator.free(DEVICE, old)?;
                }
                if self.exact {
                    self.matched += u64::from(self.to_sim(event.addr) == Some(ptr));
                }
            }
            Err(e) if out_of_room(&e) => self.outcome.failed_allocations += 1,
            Err(e) => return Err(e.into()),
        }
        self.track_peak()
    }

    /// Replays a request the recording could not serve: allocated and freed at once.
    fn failed_request(&mut self, event: &TraceEvent) -> anyhow::Result<()> {
        let requested = usize::try_from(event.size).unwrap_or(usize::MAX);
        if requested == 0 {
            return Ok(());
        }
        self.outcome.recorded_oom_requests += 1;
        match self.allocator.malloc(DEVICE, requested, event.stream) {
            Ok(ptr) => {
                self.track_peak()?;
                self.allocator.free(DEVICE, ptr)?;
            }
            Err(e) if out_of_room(&e) => self.outcome.recorded_oom_failed += 1,
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    fn free(&mut self, trace_address: u64) -> anyhow::Result<()> {
        match self.live.remove(&trace_address) {
            Some(ptr) => {
                self.allocator.free(DEVICE, ptr)?;
                self.outcome.frees += 1;
            }
            None => self.outcome.unmatched_frees += 1,
        }
        Ok(())
    }

    /// Notes a new reserved peak and the fragmentation there.
    fn track_peak(&mut self) -> anyhow::Result<()> {
        let totals = self.allocator.device_totals(DEVICE)?;
        let outcome = &mut self.outcome;
        outcome.peak_allocated_bytes = outcome.peak_allocated_bytes.max(totals.allocated_bytes);
        // As `fragmentation` defines it: at the reserved peak, where allocated is highest.
        let share = unallocated_share(totals.reserved_bytes, totals.allocated_bytes);
        if totals.reserved_bytes > outcome.peak_reserved_bytes {
            outcome.peak_reserved_bytes = totals.reserved_bytes;
            outcome.fragmentation_at_peak = share;
        } else if totals.reserved_bytes == outcome.peak_reserved_bytes {
            outcome.fragmentation_at_peak = outcome.fragmentation_at_peak.min(share);
        }
        Ok(())
    }

    /// Empties the replayed allocator's cache, as the trace's run of `segment_free` (or
    /// `segment_unmap`) shows PyTorch did.
    fn empty_cache(&mut self) -> anyhow::Result<()> {
        self.allocator.empty_cache()?;
        self.outcome.empty_cache_calls += 1;
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<Outcome> {
        let stats = self.allocator.device_stats(DEVICE)?;
        let outcome = &mut self.outcome;
        let counter = |value: i64| u64::try_from(value).unwrap_or(0);
        outcome.device_allocs = counter(stats.num_device_alloc);
        outcome.device_frees = counter(stats.num_device_free);
        outcome.retries = counter(stats.num_alloc_retries);
        outcome.allocator_ooms = counter(stats.num_ooms);
        outcome.reserved_at_end_bytes = counter(stats.reserved_bytes.all.current);
        if self.exact {
            let (placed, missed) = self.sim.placements(DEVICE);
            let allocations = outcome.allocations;
            outcome.exact = Some(ExactOutcome {
                allocations,
                matched: self.matched,
                share: if allocations == 0 {
                    1.0
                } else {
                    self.matched as f64 / allocations as f64
                },
                segments_placed: placed,
                segments_missed: missed,
            });
        }
        Ok(self.outcome)
    }
}

/// Whether `error` is a request the device had no room for: out of memory, or larger than
/// the whole device (or than any size). Anything else stops the replay.
/// The context of an error at the event at `position`: "replay stopped at event 7".
fn stopped_at(numbers: &EventNumbers, position: usize) -> String {
    format!("replay stopped at {}", numbers.label(position))
}

fn out_of_room(error: &Error) -> bool {
    matches!(
        error,
        Error::OutOfMemory(_) | Error::ExceedsCapacity { .. } | Error::SizeTooLarge { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_replay_names_the_event_by_the_files_number() {
        // Positions 0..4, the one at 1 inserted on import: numbers 0, -, 1, 2.
        let numbers = EventNumbers::new(4, vec![1]);
        assert_eq!(stopped_at(&numbers, 2), "replay stopped at event 1");
        assert_eq!(
            stopped_at(&numbers, 1),
            "replay stopped at annotation after event 0"
        );
    }
}
