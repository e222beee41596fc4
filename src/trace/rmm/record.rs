//! One event of an RMM allocation log, and the words RMM uses for its columns and actions.

use std::fmt;
use std::num::NonZeroU64;

/// The header line RMM writes first, without its line ending.
pub const HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// Microseconds in a day: every [`RmmRecord::time_us`] is below this.
pub const MICROS_PER_DAY: u64 = 24 * 60 * 60 * 1_000_000;

/// One line of the log: an allocation, a free, or an allocation the upstream resource refused.
///
/// The fields are what the line says, checked but not interpreted: a free of a pointer never
/// allocated, or times that go backwards, are the business of whoever replays the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmmRecord {
    /// The OS id of the thread that made the call (`gettid` on Linux), as RMM's `%t` writes it.
    pub thread: u64,
    /// Local wall-clock time of the event, in microseconds since local midnight (always below
    /// [`MICROS_PER_DAY`]).
    ///
    /// RMM writes the time of day only, with no date, so a log running past midnight starts
    /// again from zero; a reader that needs a monotonic clock adds a day at each such step back.
    pub time_us: u64,
    /// What happened.
    pub action: RmmAction,
    /// The device address allocated or freed; `None` for a null pointer, as in every
    /// `allocate failure` line (RMM writes `(nil)`; versions before 24.12, which formatted with
    /// fmt, wrote `0x0`).
    pub pointer: Option<NonZeroU64>,
    /// The size of the request or of the freed allocation, in bytes.
    pub size: u64,
    /// The CUDA stream (`cudaStream_t`) as a number: `0` is the legacy default stream, `1`
    /// `cudaStreamLegacy`, `2` `cudaStreamPerThread`, anything else a created stream's handle.
    pub stream: u64,
}

impl RmmRecord {
    /// A record whose pointer is a plain address, 0 standing for null (RMM's `(nil)`).
    ///
    /// ```
    /// use blockpool::trace::rmm::{time_of_day_us, RmmAction, RmmRecord};
    ///
    /// let at = time_of_day_us(15, 47, 2, 841_961);
    /// let record = RmmRecord::new(2342727, at, RmmAction::Allocate, 0x100_1240_0000, 1 << 20, 0);
    /// assert_eq!(record.pointer.map(|p| p.get()), Some(0x100_1240_0000));
    /// assert!(RmmRecord::new(1, at, RmmAction::AllocateFailure, 0, 256, 2).pointer.is_none());
    /// ```
    pub fn new(
        thread: u64,
        time_us: u64,
        action: RmmAction,
        pointer: u64,
        size: u64,
        stream: u64,
    ) -> RmmRecord {
        RmmRecord {
            thread,
            time_us,
            action,
            pointer: NonZeroU64::new(pointer),
            size,
            stream,
        }
    }
}

/// The time of day `hours:minutes:seconds.micros` in microseconds since midnight, as
/// [`RmmRecord::time_us`] holds it (no range check: 25:00:00 gives a time past a day).
pub fn time_of_day_us(hours: u64, minutes: u64, seconds: u64, micros: u64) -> u64 {
    ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + micros
}

/// What a log line records, spelled in the log as [`RmmAction::as_str`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RmmAction {
    /// `allocate`: the upstream resource returned `pointer`.
    Allocate,
    /// `free`: `pointer` was given back.
    Free,
    /// `allocate failure`: the upstream resource threw (usually out of memory); the pointer is
    /// null. RMM writes it since 22.04; older logs have none.
    AllocateFailure,
}

impl RmmAction {
    /// Every action, in the order RMM's replay tool numbers them.
    pub const ALL: [RmmAction; 3] = [Self::Allocate, Self::Free, Self::AllocateFailure];

    /// The action as RMM spells it in the `Action` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allocate => "allocate",
            Self::Free => "free",
            Self::AllocateFailure => "allocate failure",
        }
    }

    /// The action spelled exactly `text` (case and spaces matter, as in RMM's own parser).
    pub fn from_log_text(text: &[u8]) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|action| action.as_str().as_bytes() == text)
    }
}

impl fmt::Display for RmmAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
