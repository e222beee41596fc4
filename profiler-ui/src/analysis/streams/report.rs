//! What the streams report holds, as `memtrace streams --json` and `/api/streams` give it.

use serde::Serialize;

/// What a device's streams held, as `memtrace streams --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct StreamsReport {
    /// The device.
    pub device: u32,
    /// Whether the trace records `free_completed` events: without them a free completes at
    /// once, and nothing is seen waiting.
    pub completions: bool,
    /// Every stream that allocated or held segments, lowest handle first.
    pub streams: Vec<StreamUsage>,
    /// The state where reserved bytes first peaked, split by what the bytes were doing.
    pub reserved_peak: Moment,
    /// Bytes cached on streams that had made their last allocation while another stream still
    /// allocated.
    pub stranded: Stranded,
    /// Bytes freed and waiting for the streams that used them.
    pub waiting: Waiting,
    /// Cached bytes over the events, per column.
    pub chart: Chart,
}

/// One stream's memory over the trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamUsage {
    /// The stream's handle as the trace records it (0: the default stream).
    pub stream: u64,
    /// Allocations made on it during the trace.
    pub allocations: u64,
    /// Bytes of those allocations (block sizes).
    pub allocated_bytes: u64,
    /// The state after its last allocation; absent when it made none during the trace.
    pub last_allocation_state: Option<usize>,
    /// Its last allocation, as people read it (`event 41`).
    pub last_allocation: Option<String>,
    /// The most bytes in its segments at once.
    pub peak_reserved_bytes: u64,
    /// The most bytes cached for it (in its segments, not in active blocks) at once.
    pub peak_cached_bytes: u64,
    /// Bytes in its segments at the end.
    pub end_reserved_bytes: u64,
    /// Bytes cached for it at the end.
    pub end_cached_bytes: u64,
    /// The most bytes it cached after its last allocation while another stream still
    /// allocated: memory that only it could reuse, and never did.
    pub stranded_bytes: u64,
    /// Frees of its blocks that waited for other streams (a `free_completed` after other
    /// events, not right after its `free_requested`).
    pub frees_waited: u64,
    /// Bytes of those frees.
    pub bytes_waited: u64,
    /// The most bytes of its blocks waiting at once.
    pub peak_waiting_bytes: u64,
}

/// The memory of one state, split.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Moment {
    /// The state: how many of the device's events had happened.
    pub state: usize,
    /// The state as people read it (`after event 41`).
    pub at: String,
    /// Bytes in segments.
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks.
    pub allocated_bytes: u64,
    /// Bytes freed and waiting for other streams.
    pub waiting_bytes: u64,
    /// Bytes cached (free, reusable by their own stream).
    pub cached_bytes: u64,
    /// Of the cached bytes, those stranded on streams done allocating.
    pub stranded_bytes: u64,
}

/// Memory stranded on streams done allocating.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stranded {
    /// The most bytes stranded at once.
    pub peak_bytes: u64,
    /// Where, first.
    pub peak: Option<Moment>,
    /// Streams that stranded any bytes.
    pub streams: u64,
    /// Bytes still cached at the end on streams that stopped allocating before the device's
    /// last allocation (`empty_cache` would return them).
    pub left_at_end_bytes: u64,
}

/// Freed memory waiting for other streams.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// Frees that waited.
    pub frees: u64,
    /// Their bytes.
    pub bytes: u64,
    /// The most bytes waiting at once.
    pub peak_bytes: u64,
    /// Where, first.
    pub peak: Option<Moment>,
    /// The longest wait, in events between the `free_requested` and its `free_completed`.
    pub longest_events: u64,
    /// The longest wait in microseconds, when the trace records times.
    pub longest_us: u64,
}

/// Cached bytes over the events: each column covers a run of states and shows the most bytes
/// of any of them, so no peak is lost however many states a column covers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Chart {
    /// The last state of each column; the first column starts at state 0.
    pub column_ends: Vec<usize>,
    /// Cached bytes of all streams.
    pub cached: Vec<u64>,
    /// Stranded bytes.
    pub stranded: Vec<u64>,
    /// Waiting bytes.
    pub waiting: Vec<u64>,
    /// The streams that cached the most at once, each on its own.
    pub streams: Vec<StreamLine>,
}

/// One stream's cached bytes, per column of a [`Chart`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StreamLine {
    /// The stream's handle.
    pub stream: u64,
    /// Its cached bytes.
    pub cached: Vec<u64>,
}
