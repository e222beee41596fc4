//! The state of one simulated device: its segments and where they sit, its streams, its
//! injected faults and its call counters. [`SimBackend`](super::SimBackend) keeps one behind a
//! mutex per device and forwards each call here.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::placement::{self, Placement};
use super::streams::Streams;
use super::vmm::Reservation;
use super::{SimCalls, SimFault};
use crate::backend::{BackendError, DeviceIndex, MemInfo, StreamId};

/// Start of device 0's fake address range; device `d` starts `d` times [`FAKE_SPAN`] higher.
pub(super) const FAKE_BASE: u64 = 0x7f00_0000_0000;
/// Size of each device's fake address range, in bytes (1 TiB).
pub(super) const FAKE_SPAN: u64 = 1 << 40;
/// Alignment of every segment address, in bytes, as `cudaMalloc` guarantees.
const SEGMENT_ALIGN: u64 = 512;
/// Alignment, in bytes, of fake segments whose size is a multiple of it (the driver's 2 MiB page).
const LARGE_PAGE: u64 = 2 << 20;
/// The code `cuMemAlloc` returns for a 0-byte request.
const CUDA_ERROR_INVALID_VALUE: i32 = 1;

/// One simulated device.
pub(super) struct Device {
    index: DeviceIndex,
    capacity_bytes: usize,
    oom_above: Option<usize>,
    in_use_bytes: usize,
    /// Unused fake address ranges, start -> end (exclusive); empty in host-backed mode.
    free_ranges: BTreeMap<u64, u64>,
    /// Live segments by address.
    segments: BTreeMap<u64, Segment>,
    /// Reserved address ranges by address, with what is mapped in them (`vmm.rs`).
    pub(super) reservations: BTreeMap<u64, Reservation>,
    /// Unused address space for reservations, start -> end (exclusive); empty when host-backed.
    pub(super) free_vmm_ranges: BTreeMap<u64, u64>,
    streams: Streams,
    /// Countdowns of injected allocation failures: (allocations left, fail as out-of-memory).
    alloc_faults: Vec<(u64, bool)>,
    /// Countdowns of injected event-record failures: events left to record before one fails.
    record_faults: Vec<u64>,
    pub(super) calls: SimCalls,
    /// Where the next fake segment should go, and how such requests went (`placement.rs`).
    pub(super) placement: Placement,
}

struct Segment {
    size_bytes: usize,
    /// End (exclusive) of the fake address range the segment holds: its size rounded up to
    /// [`SEGMENT_ALIGN`].
    range_end: u64,
    /// The bytes behind the segment in host-backed mode.
    host: Option<HostBytes>,
}

/// Host memory behind a segment; the segment's address is that of `buf[offset]`, aligned to
/// [`SEGMENT_ALIGN`].
struct HostBytes {
    buf: Vec<u8>,
    offset: usize,
}

impl Device {
    pub(super) fn new(index: DeviceIndex, capacity_bytes: usize, host_backed: bool) -> Device {
        let mut free_ranges = BTreeMap::new();
        if !host_backed {
            // A device index too large for the address space gets no range: it is always full.
            let start = u64::try_from(index.get())
                .ok()
                .and_then(|i| i.checked_mul(FAKE_SPAN))
                .and_then(|offset| offset.checked_add(FAKE_BASE));
            if let Some((start, end)) = start.and_then(|s| Some((s, s.checked_add(FAKE_SPAN)?))) {
                free_ranges.insert(start, end);
            }
        }
        Device {
            index,
            capacity_bytes,
            oom_above: None,
            in_use_bytes: 0,
            free_ranges,
            segments: BTreeMap::new(),
            reservations: BTreeMap::new(),
            free_vmm_ranges: super::vmm::address_window(index.get(), host_backed),
            streams: Streams::default(),
            alloc_faults: Vec::new(),
            record_faults: Vec::new(),
            calls: SimCalls::default(),
            placement: Placement::default(),
        }
    }

    pub(super) fn index(&self) -> DeviceIndex {
        self.index
    }

    pub(super) fn in_use_bytes(&self) -> usize {
        self.in_use_bytes
    }

    pub(super) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub(super) fn mem_info(&mut self) -> MemInfo {
        self.calls.mem_info_queries += 1;
        MemInfo {
            free_bytes: self.limit_bytes().saturating_sub(self.in_use_bytes),
            total_bytes: self.capacity_bytes,
        }
    }

    /// Most bytes the device hands out: the capacity, or the injected limit when lower.
    fn limit_bytes(&self) -> usize {
        self.oom_above
            .map_or(self.capacity_bytes, |limit| limit.min(self.capacity_bytes))
    }

    pub(super) fn inject(&mut self, fault: SimFault) {
        match fault {
            SimFault::AllocOutOfMemory { nth } => self.alloc_faults.push((nth.max(1), true)),
            SimFault::AllocError { nth } => self.alloc_faults.push((nth.max(1), false)),
            SimFault::OutOfMemoryAbove { limit_bytes } => self.oom_above = Some(limit_bytes),
            SimFault::HangStream { stream } => self.streams.hang(stream),
            SimFault::RecordEventError { nth } => self.record_faults.push(nth.max(1)),
        }
    }

    /// Counts one event record against the injected record faults; true when it must fail.
    pub(super) fn take_record_fault(&mut self) -> bool {
        let mut fail = false;
        self.record_faults.retain_mut(|left| {
            *left -= 1;
            fail |= *left == 0;
            *left > 0
        });
        fail
    }

    pub(super) fn set_oom_above(&mut self, limit_bytes: Option<usize>) {
        self.oom_above = limit_bytes;
    }

    pub(super) fn clear_faults(&mut self) {
        self.alloc_faults.clear();
        self.record_faults.clear();
        self.oom_above = None;
        self.streams.unhang_all();
    }

    pub(super) fn alloc(
        &mut self,
        size_bytes: usize,
        host_backed: bool,
    ) -> Result<u64, BackendError> {
        let result = self.try_alloc(size_bytes, host_backed);
        match result {
            Ok(_) => self.calls.segment_allocs += 1,
            Err(_) => self.calls.failed_allocs += 1,
        }
        result
    }

    fn try_alloc(&mut self, size_bytes: usize, host_backed: bool) -> Result<u64, BackendError> {
        let device = self.index;
        let out_of_memory = BackendError::OutOfMemory {
            device,
            requested_bytes: size_bytes,
        };
        // Every call counts down every injected fault, whatever else makes it fail.
        self.take_alloc_fault("alloc_segment", size_bytes)?;
        if size_bytes == 0 {
            return Err(BackendError::Driver {
                device,
                code: CUDA_ERROR_INVALID_VALUE,
                name: "CUDA_ERROR_INVALID_VALUE".to_owned(),
                message: "cannot allocate a segment of 0 bytes".to_owned(),
            });
        }
        let in_use_bytes = self
            .in_use_bytes
            .checked_add(size_bytes)
            .filter(|&bytes| bytes <= self.limit_bytes())
            .ok_or(out_of_memory.clone())?;
        let placed = if host_backed {
            host_segment(size_bytes)
        } else {
            self.place_fake(size_bytes)
        };
        let (ptr, segment) = placed.ok_or(out_of_memory)?;
        self.segments.insert(ptr, segment);
        self.in_use_bytes = in_use_bytes;
        Ok(ptr)
    }

    /// Counts one allocation (a segment or a mapping) against the injected countdowns: the
    /// error of a fault that fires now.
    fn take_alloc_fault(
        &mut self,
        what: &'static str,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        let device = self.index;
        let mut fired = None;
        self.alloc_faults.retain_mut(|(left, as_oom)| {
            *left -= 1;
            if *left == 0 {
                fired = fired.or(Some(*as_oom));
            }
            *left > 0
        });
        match fired {
            Some(true) => Err(BackendError::OutOfMemory {
                device,
                requested_bytes: size_bytes,
            }),
            Some(false) => Err(BackendError::InjectedFault { device, what }),
            None => Ok(()),
        }
    }

    /// Takes `size_bytes` more of the device's memory for a mapping, as a segment allocation
    /// would: injected faults first, then the capacity or injected limit.
    pub(super) fn charge(
        &mut self,
        size_bytes: usize,
        what: &'static str,
    ) -> Result<(), BackendError> {
        self.take_alloc_fault(what, size_bytes)?;
        self.in_use_bytes = self
            .in_use_bytes
            .checked_add(size_bytes)
            .filter(|&bytes| bytes <= self.limit_bytes())
            .ok_or(BackendError::OutOfMemory {
                device: self.index,
                requested_bytes: size_bytes,
            })?;
        Ok(())
    }

    /// Gives back `size_bytes` taken by [`Device::charge`].
    pub(super) fn uncharge(&mut self, size_bytes: usize) {
        debug_assert!(
            self.in_use_bytes >= size_bytes,
            "in-use bytes lost track of a mapping"
        );
        self.in_use_bytes = self.in_use_bytes.saturating_sub(size_bytes);
    }

    /// Takes the lowest free fake range that fits `size_bytes` at the alignment `cudaMalloc`
    /// gives it; `None` when none does.
    fn place_fake(&mut self, size_bytes: usize) -> Option<(u64, Segment)> {
        let size = u64::try_from(size_bytes).ok()?;
        let footprint = round_up(size, SEGMENT_ALIGN)?;
        let align = if size % LARGE_PAGE == 0 {
            LARGE_PAGE
        } else {
            SEGMENT_ALIGN
        };
        if let Some(ptr) = self.placement.take_next() {
            if placement::carve(&mut self.free_ranges, ptr, footprint, SEGMENT_ALIGN) {
                self.placement.placed += 1;
                let range_end = ptr + footprint;
                let host = None;
                return Some((
                    ptr,
                    Segment {
                        size_bytes,
                        range_end,
                        host,
                    },
                ));
            }
            self.placement.missed += 1;
        }
        let ptr = take_range(&mut self.free_ranges, footprint, align)?;
        let range_end = ptr + footprint;
        let segment = Segment {
            size_bytes,
            range_end,
            host: None,
        };
        Some((ptr, segment))
    }

    /// Frees the segment at `ptr` if it has `size_bytes`; changes nothing otherwise.
    pub(super) fn free(&mut self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        let segment = match self.segments.entry(ptr) {
            Entry::Occupied(entry) if entry.get().size_bytes == size_bytes => entry.remove(),
            _ => {
                self.calls.failed_frees += 1;
                let device = self.index;
                return Err(BackendError::UnknownSegment {
                    device,
                    ptr,
                    size_bytes,
                });
            }
        };
        debug_assert!(
            self.in_use_bytes >= size_bytes,
            "in-use bytes lost track of a segment"
        );
        self.in_use_bytes = self.in_use_bytes.saturating_sub(size_bytes);
        if segment.host.is_none() {
            self.release_range(ptr, segment.range_end);
        }
        self.calls.segment_frees += 1;
        Ok(())
    }

    /// Gives `start..end` back to the free fake ranges, merged with its neighbours.
    fn release_range(&mut self, start: u64, end: u64) {
        give_back_range(&mut self.free_ranges, start, end);
    }

    /// The host bytes `addr..addr + len`, which must lie inside one live segment.
    pub(super) fn host_bytes(&mut self, addr: u64, len: usize) -> Result<&mut [u8], BackendError> {
        let device = self.index;
        let unknown = BackendError::UnknownSegment {
            device,
            ptr: addr,
            size_bytes: len,
        };
        let Some((&start, segment)) = self.segments.range_mut(..=addr).next_back() else {
            return Err(unknown);
        };
        let from = usize::try_from(addr - start).ok();
        let to = from
            .and_then(|from| from.checked_add(len))
            .filter(|&to| to <= segment.size_bytes);
        let (Some(from), Some(to)) = (from, to) else {
            return Err(unknown);
        };
        let Some(host) = segment.host.as_mut() else {
            let what = "read or write of a fake-address segment (build with host_backed(true))";
            return Err(BackendError::InjectedFault { device, what });
        };
        host.buf
            .get_mut(host.offset + from..host.offset + to)
            .ok_or(unknown)
    }

    /// Records an event on `stream` and returns its ticket.
    pub(super) fn record(&mut self, stream: StreamId) -> u64 {
        self.calls.events_recorded += 1;
        self.streams.record(stream)
    }

    pub(super) fn query(&mut self, stream: StreamId, ticket: u64) -> bool {
        self.calls.event_queries += 1;
        self.streams.is_complete(stream, ticket)
    }

    /// Makes later work on `stream` wait for event `ticket` of `on`.
    pub(super) fn wait(&mut self, stream: StreamId, on: StreamId, ticket: u64) {
        self.calls.stream_waits += 1;
        self.streams.wait(stream, on, ticket);
    }

    /// The streams, for questions of order that count no call.
    pub(super) fn streams(&self) -> &Streams {
        &self.streams
    }

    /// Runs `stream` up to `ticket` (and the streams it waits on first); fails instead of
    /// blocking forever when a stream on the way hangs or never recorded that ticket.
    pub(super) fn synchronize(
        &mut self,
        stream: StreamId,
        ticket: u64,
    ) -> Result<(), BackendError> {
        self.calls.event_syncs += 1;
        let index = self.index;
        self.streams.synchronize(stream, ticket).map_err(|stream| {
            BackendError::EventNeverCompletes {
                device: index,
                stream,
            }
        })
    }

    /// Completes up to `n` pending events of `stream`; returns how many completed.
    pub(super) fn advance(&mut self, stream: StreamId, n: u64) -> u64 {
        self.streams.advance(stream, n)
    }

    /// Completes every pending event on every stream that does not hang; returns how many.
    pub(super) fn complete_all(&mut self) -> u64 {
        self.streams.complete_all()
    }
}

/// Zeroed host memory for a segment of `size_bytes`, at an address aligned to
/// [`SEGMENT_ALIGN`]; `None` when the host cannot provide it.
fn host_segment(size_bytes: usize) -> Option<(u64, Segment)> {
    const ALIGN: usize = SEGMENT_ALIGN as usize;
    let len = size_bytes.checked_add(ALIGN - 1)?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(len).ok()?;
    buf.resize(len, 0u8);
    // The address is the real one, so host-backed segments never overlap.
    let start = buf.as_ptr() as usize;
    let offset = (ALIGN - start % ALIGN) % ALIGN;
    let ptr = u64::try_from(start.checked_add(offset)?).ok()?;
    let range_end = ptr.checked_add(u64::try_from(size_bytes).ok()?)?;
    let host = Some(HostBytes { buf, offset });
    let segment = Segment {
        size_bytes,
        range_end,
        host,
    };
    Some((ptr, segment))
}

/// Takes the lowest range of `footprint` bytes starting at a multiple of `align` out of `free`
/// (start -> end, exclusive); `None` when none fits.
pub(super) fn take_range(free: &mut BTreeMap<u64, u64>, footprint: u64, align: u64) -> Option<u64> {
    let (start, end, ptr) = free.iter().find_map(|(&start, &end)| {
        let ptr = round_up(start, align)?;
        (ptr.checked_add(footprint)? <= end).then_some((start, end, ptr))
    })?;
    free.remove(&start);
    if start < ptr {
        free.insert(start, ptr);
    }
    if ptr + footprint < end {
        free.insert(ptr + footprint, end);
    }
    Some(ptr)
}

/// Gives `start..end` back to `free`, merged with its neighbours.
pub(super) fn give_back_range(free: &mut BTreeMap<u64, u64>, mut start: u64, mut end: u64) {
    if let Some((&before, &before_end)) = free.range(..start).next_back() {
        if before_end == start {
            free.remove(&before);
            start = before;
        }
    }
    if let Some(after_end) = free.remove(&end) {
        end = after_end;
    }
    free.insert(start, end);
}

/// `value` rounded up to a multiple of `align` (a power of two); `None` on overflow.
fn round_up(value: u64, align: u64) -> Option<u64> {
    Some(value.checked_add(align - 1)? & !(align - 1))
}
