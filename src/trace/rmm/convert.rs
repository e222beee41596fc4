//! Conversion between RMM's log ([`RmmRecord`]s) and [`Snapshot`], so an RMM log can be
//! viewed and analysed with every tool that takes a snapshot, and a snapshot's allocations can
//! be replayed with RMM's replay benchmark.
//!
//! | RMM log | snapshot event |
//! |---|---|
//! | `allocate` | `alloc`, `size` = `requested` = the log's size |
//! | `free` | `free_requested` then `free_completed` at the same time (an immediate free, as PyTorch records one with no stream uses pending) |
//! | `allocate failure` | `oom`, `size` = the log's size, `addr` (the device's free bytes) 0: unknown |
//! | `Thread` | the event's context: one tag `thread <id>` |
//! | `Stream` | the event's stream |
//! | `Time` | microseconds since the first record, [`Snapshot::time_origin_unix_us`] = the first record's time of day |
//!
//! RMM logs have no segments and no device: the snapshot has no segments and every event is
//! on device 0.

use super::record::{RmmAction, RmmRecord, MICROS_PER_DAY};
use crate::backend::StreamId;
use crate::event::Context;
use crate::event::{Action, ContextId, TraceEvent};
use crate::trace::snapshot::{Contexts, Snapshot};
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;

/// The tag that names a log's thread in a snapshot context: `thread <id>`.
const THREAD_TAG_PREFIX: &str = "thread ";

/// A step back in time of more than this is the clock passing midnight.
const MIDNIGHT_STEP_US: u64 = MICROS_PER_DAY / 2;

/// The snapshot an RMM log describes: its allocations, frees and failures as device-0 events.
///
/// - Each record's thread becomes its event's context, a single tag `thread <id>` (no
///   frames), so tools that group by annotation group by thread.
/// - Times count microseconds from the first record. RMM writes only the local time of day,
///   so [`Snapshot::time_origin_unix_us`] is the first record's time of day, as if the log
///   were of 1 January 1970 (the date is unknown); [`snapshot_to_rmm`] writes the same times
///   back. A step back of more than 12 hours is the clock passing midnight and adds a day; a
///   smaller one (threads logging a moment out of order) is raised to the previous record's
///   time, as the allocator's own history does, so event times never go back.
/// - The snapshot has no segments (RMM logs none), so its end state says nothing; see
///   [`memory_timeline`](crate::trace::perfetto::memory_timeline) for how the byte counters
///   start then.
///
/// ```
/// use blockpool::trace::rmm::{read_rmm_csv, snapshot_from_rmm};
/// use blockpool::trace::Action;
///
/// let log = "Thread,Time,Action,Pointer,Size,Stream\n\
///            2342727,15:47:02.841961,allocate,0x10012400000,1048576,0\n\
///            2342727,15:47:02.841977,free,0x10012400000,1048576,0\n";
/// let snapshot = snapshot_from_rmm(&read_rmm_csv(log.as_bytes())?);
/// let events: Vec<(Action, u64)> = snapshot.events.iter().map(|e| (e.action, e.time_us)).collect();
/// assert_eq!(
///     events,
///     [(Action::Alloc, 0), (Action::FreeRequested, 16), (Action::FreeCompleted, 16)]
/// );
/// assert_eq!(snapshot.contexts.tag_path(snapshot.events[0].context), "thread 2342727");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn snapshot_from_rmm(records: &[RmmRecord]) -> Snapshot {
    let mut import = RmmImport::default();
    import.events.reserve(records.len() + records.len() / 2);
    for record in records {
        import.add(record);
    }
    import.finish()
}

/// Builds a [`Snapshot`] from RMM records one at a time (as [`snapshot_from_rmm`] does), so a
/// log is converted while it is read and its records are never all held; the events' memory
/// is asked for fallibly, so a log larger than the machine's memory is an error, not an abort.
#[derive(Default)]
pub struct RmmImport {
    contexts: Contexts,
    threads: HashMap<u64, ContextId>,
    events: Vec<TraceEvent>,
    clock: Option<Clock>,
}

impl RmmImport {
    /// Adds the events of `record`; fails, adding nothing, when the memory for them cannot be
    /// had.
    ///
    /// ```
    /// use blockpool::trace::rmm::{RmmImport, RmmReader};
    ///
    /// let log = "Thread,Time,Action,Pointer,Size,Stream\n\
    ///            7,10:00:00.000001,allocate,0x7f0000000000,512,0\n";
    /// let mut import = RmmImport::default();
    /// for record in RmmReader::new(log.as_bytes())? {
    ///     import.push(&record?)?;
    /// }
    /// assert_eq!(import.finish().events.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn push(&mut self, record: &RmmRecord) -> Result<(), std::collections::TryReserveError> {
        // Amortized: `try_reserve` grows the vector by doubling, as `push` does.
        self.events.try_reserve(2)?;
        self.add(record);
        Ok(())
    }

    /// Events held so far.
    pub fn events(&self) -> usize {
        self.events.len()
    }

    /// Adds the events of `record` (two at most), growing the vector as `push` does.
    fn add(&mut self, record: &RmmRecord) {
        let clock = self.clock.get_or_insert_with(|| Clock::new(record.time_us));
        let time_us = clock.since_first(record.time_us);
        let contexts = &mut self.contexts;
        let context = *self.threads.entry(record.thread).or_insert_with(|| {
            contexts.intern(Context {
                tags: vec![Arc::from(format!("{THREAD_TAG_PREFIX}{}", record.thread))],
                frames: Vec::new(),
            })
        });
        let event = |action, addr, requested| TraceEvent {
            action,
            device: 0,
            stream: StreamId::from_raw(record.stream),
            addr,
            size: record.size,
            requested,
            time_us,
            context,
        };
        let pointer = record.pointer.map_or(0, NonZeroU64::get);
        match record.action {
            RmmAction::Allocate => self.events.push(event(Action::Alloc, pointer, record.size)),
            RmmAction::Free => {
                self.events
                    .push(event(Action::FreeRequested, pointer, record.size));
                self.events
                    .push(event(Action::FreeCompleted, pointer, record.size));
            }
            RmmAction::AllocateFailure => self.events.push(event(Action::Oom, 0, 0)),
        }
    }

    /// The snapshot of the records pushed.
    pub fn finish(self) -> Snapshot {
        let Some(clock) = self.clock else {
            return Snapshot::default();
        };
        Snapshot {
            segments: Vec::new(),
            events: self.events,
            contexts: self.contexts,
            allocator_config: None,
            time_origin_unix_us: Some(clock.first_us),
            pytorch: Default::default(),
        }
    }
}

/// Turns the times of day of a log into microseconds since its first record.
struct Clock {
    first_us: u64,
    days_us: u64,
    previous_time_of_day: u64,
    previous_us: u64,
}

impl Clock {
    fn new(first_time_of_day: u64) -> Clock {
        Clock {
            first_us: first_time_of_day,
            days_us: 0,
            previous_time_of_day: first_time_of_day,
            previous_us: first_time_of_day,
        }
    }

    fn since_first(&mut self, time_of_day: u64) -> u64 {
        if time_of_day.saturating_add(MIDNIGHT_STEP_US) < self.previous_time_of_day {
            self.days_us = self.days_us.saturating_add(MICROS_PER_DAY);
        }
        self.previous_time_of_day = time_of_day;
        let time_us = self
            .days_us
            .saturating_add(time_of_day)
            .max(self.previous_us);
        self.previous_us = time_us;
        time_us - self.first_us
    }
}

/// The RMM log that replays `snapshot`'s allocations: its `alloc`, `free_completed` and `oom`
/// events, in order, as `allocate`, `free` and `allocate failure` records.
///
/// - Size: the bytes the caller requested (what RMM's caller passes), or the block size when
///   the event has no requested size (0); for `oom`, the event's size (the rounded request).
/// - Pointer: the event's address (`None` for 0); always `None` for a failure.
/// - Thread: `<id>` from the first tag `thread <id>` of the event's context (as
///   [`snapshot_from_rmm`] makes them), else 0.
/// - Time: the time of day of [`Snapshot::time_origin_unix_us`] (0 when unknown) plus the
///   event's time, modulo a day; for a snapshot taken by the allocator that is UTC, where RMM
///   writes local time.
///
/// What the log cannot hold is lost: segments and segment events, `free_requested` (so when
/// a free waited for other streams), snapshot and annotate events, block sizes where a request
/// is known, devices (events of every device are merged), contexts other than thread tags,
/// and an out-of-memory event's free bytes. Converting the snapshot of an RMM log back gives
/// the log's records, except that times raised by [`snapshot_from_rmm`] stay raised.
///
/// ```
/// use blockpool::trace::rmm::{read_rmm_csv, snapshot_from_rmm, snapshot_to_rmm};
///
/// let log = "Thread,Time,Action,Pointer,Size,Stream\n\
///            1979932,14:21:19.998533,allocate,0x30a000000,256,0x2\n\
///            1979932,14:21:19.998540,allocate failure,(nil),1099511627776,0x2\n\
///            1980043,14:21:32.661875,free,0x30a000000,256,0x2\n";
/// let records = read_rmm_csv(log.as_bytes())?;
/// assert_eq!(snapshot_to_rmm(&snapshot_from_rmm(&records)), records);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn snapshot_to_rmm(snapshot: &Snapshot) -> Vec<RmmRecord> {
    let origin = snapshot.time_origin_unix_us.unwrap_or(0) % MICROS_PER_DAY;
    let mut threads: HashMap<ContextId, u64> = HashMap::new();
    let mut records = Vec::new();
    for event in &snapshot.events {
        let (action, pointer, size) = match event.action {
            Action::Alloc => (
                RmmAction::Allocate,
                NonZeroU64::new(event.addr),
                request(event),
            ),
            Action::FreeCompleted => (RmmAction::Free, NonZeroU64::new(event.addr), request(event)),
            Action::Oom => (RmmAction::AllocateFailure, None, event.size),
            Action::FreeRequested
            | Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap
            | Action::Snapshot
            | Action::Annotate => continue,
        };
        let thread = *threads
            .entry(event.context)
            .or_insert_with(|| thread_of(snapshot, event.context));
        records.push(RmmRecord {
            thread,
            time_us: (origin + event.time_us % MICROS_PER_DAY) % MICROS_PER_DAY,
            action,
            pointer,
            size,
            stream: event.stream.raw(),
        });
    }
    records
}

/// The bytes the caller asked for, or the block size when that is unknown.
fn request(event: &TraceEvent) -> u64 {
    if event.requested != 0 {
        event.requested
    } else {
        event.size
    }
}

/// The thread id a `thread <id>` tag of `context` names, or 0.
fn thread_of(snapshot: &Snapshot, context: ContextId) -> u64 {
    snapshot
        .contexts
        .get(context)
        .and_then(|c| {
            c.tags.iter().find_map(|tag| {
                let id = tag.strip_prefix(THREAD_TAG_PREFIX)?;
                // `u64::from_str` takes a leading `+`; RMM's decimal ids have none.
                id.bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| id.parse().ok())
                    .flatten()
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PoolKind;
    use crate::trace::rmm::{read_rmm_csv, write_rmm_csv};
    use crate::trace::snapshot::{Block, BlockState, Segment};

    use crate::trace::rmm::time_of_day_us as time_of_day;

    /// (action, stream, addr, size, requested, time_us, tags) of each event.
    type Shape = (Action, u64, u64, u64, u64, u64, String);

    fn shape(snapshot: &Snapshot) -> Vec<Shape> {
        snapshot
            .events
            .iter()
            .map(|e| {
                let tags = snapshot.contexts.tag_path(e.context);
                (
                    e.action,
                    e.stream.raw(),
                    e.addr,
                    e.size,
                    e.requested,
                    e.time_us,
                    tags,
                )
            })
            .collect()
    }

    /// A log over midnight, with two threads, a created stream, a null allocation and a
    /// failure: every kind of field the writer spells specially.
    const LOG: &str = "Thread,Time,Action,Pointer,Size,Stream\n\
        7,23:59:59.999990,allocate,0x7f0000000000,1048576,0\n\
        8,23:59:59.999995,allocate,0x7f0000100000,256,0x7f3a2c001230\n\
        7,00:00:00.000005,allocate failure,(nil),1099511627776,0x2\n\
        8,00:00:00.000007,allocate,(nil),0,0x2\n\
        7,00:00:01.000000,free,0x7f0000000000,1048576,0\n";

    #[test]
    fn an_rmm_log_becomes_device_0_events_with_thread_contexts() {
        let records = read_rmm_csv(LOG.as_bytes()).expect("a valid log");
        let snapshot = snapshot_from_rmm(&records);
        let (t7, t8) = ("thread 7".to_string(), "thread 8".to_string());
        use Action::*;
        assert_eq!(
            shape(&snapshot),
            [
                (Alloc, 0, 0x7f00_0000_0000, 1 << 20, 1 << 20, 0, t7.clone()),
                (
                    Alloc,
                    0x7f3a_2c00_1230,
                    0x7f00_0010_0000,
                    256,
                    256,
                    5,
                    t8.clone()
                ),
                (Oom, 2, 0, 1 << 40, 0, 15, t7.clone()),
                (Alloc, 2, 0, 0, 0, 17, t8),
                (
                    FreeRequested,
                    0,
                    0x7f00_0000_0000,
                    1 << 20,
                    1 << 20,
                    1_000_010,
                    t7.clone()
                ),
                (
                    FreeCompleted,
                    0,
                    0x7f00_0000_0000,
                    1 << 20,
                    1 << 20,
                    1_000_010,
                    t7
                ),
            ],
            "times count from the first record across midnight; a free is requested and \
             completed at once"
        );
        assert!(snapshot.events.iter().all(|e| e.device == 0));
        assert_eq!(snapshot.contexts.len(), 2, "one context per thread");
        assert_eq!(snapshot.segments, []);
        assert_eq!(
            snapshot.time_origin_unix_us,
            Some(time_of_day(23, 59, 59, 999_990))
        );
        assert_eq!(snapshot.validate(), Ok(()));
    }

    #[test]
    fn rmm_to_snapshot_to_rmm_gives_back_the_same_log() {
        let records = read_rmm_csv(LOG.as_bytes()).expect("a valid log");
        let back = snapshot_to_rmm(&snapshot_from_rmm(&records));
        assert_eq!(back, records);
        let mut text = Vec::new();
        write_rmm_csv(&back, &mut text).expect("writing to a Vec");
        assert_eq!(
            String::from_utf8(text).expect("ASCII"),
            LOG,
            "the same text too"
        );
        assert_eq!(snapshot_to_rmm(&snapshot_from_rmm(&[])), []);
        assert_eq!(snapshot_from_rmm(&[]), Snapshot::default());
    }

    #[test]
    fn a_small_step_back_in_time_is_raised_to_the_previous_record() {
        let noon = time_of_day(12, 0, 0, 0);
        let records = [
            RmmRecord::new(1, noon + 10, RmmAction::Allocate, 0x1000, 8, 0),
            RmmRecord::new(2, noon + 4, RmmAction::Allocate, 0x2000, 8, 0),
            RmmRecord::new(1, noon + 12, RmmAction::Free, 0x1000, 8, 0),
        ];
        let snapshot = snapshot_from_rmm(&records);
        let times: Vec<u64> = snapshot.events.iter().map(|e| e.time_us).collect();
        assert_eq!(
            times,
            [0, 0, 2, 2],
            "the early record takes the time before it"
        );
        let back = snapshot_to_rmm(&snapshot);
        assert_eq!(back[1].time_us, noon + 10, "and keeps it on the way back");
        assert_eq!((back[0], back[2]), (records[0], records[2]));
    }

    #[test]
    fn a_recorded_snapshot_keeps_only_what_the_log_can_hold() {
        let mut contexts = Contexts::new();
        let user = contexts.intern(Context {
            tags: vec!["forward".into(), "thread 12".into()],
            frames: Vec::new(),
        });
        let not_a_thread = contexts.intern(Context {
            tags: vec!["thread +3".into(), "thread x".into()],
            frames: Vec::new(),
        });
        let event = |action, device, addr, size, requested, time_us, context| TraceEvent {
            action,
            device,
            stream: StreamId::from_raw(1),
            addr,
            size,
            requested,
            time_us,
            context,
        };
        use Action::{
            Alloc, Annotate, FreeCompleted, FreeRequested, Oom, SegmentAlloc, SegmentFree,
        };
        let snapshot = Snapshot {
            segments: vec![Segment {
                device: 0,
                address: 0x1000,
                size: 2048,
                stream: StreamId::from_raw(1),
                pool: PoolKind::Small,
                expandable: false,
                context: ContextId::NONE,
                blocks: vec![Block {
                    address: 0x1000,
                    size: 2048,
                    requested: 0,
                    state: BlockState::Inactive,
                    context: ContextId::NONE,
                }],
            }],
            events: vec![
                event(SegmentAlloc, 0, 0x1000, 2048, 0, 1, user),
                event(Annotate, 0, 0, 0, 0, 2, user),
                event(Alloc, 0, 0x1000, 1024, 1000, 3, user),
                event(Alloc, 1, 0x9000, 512, 0, 4, not_a_thread),
                event(FreeRequested, 0, 0x1000, 1024, 1000, 5, user),
                event(FreeCompleted, 0, 0x1000, 1024, 1000, 6, ContextId::NONE),
                event(Oom, 1, 1 << 20, 4096, 0, 7, ContextId(9)),
                event(Action::Snapshot, 0, 0, 0, 0, 8, ContextId::NONE),
                event(SegmentFree, 0, 0x1000, 2048, 0, 9, user),
            ],
            contexts,
            allocator_config: None,
            time_origin_unix_us: Some(3 * MICROS_PER_DAY + time_of_day(1, 2, 3, 999_996)),
            pytorch: Default::default(),
        };
        let at = |micros| time_of_day(1, 2, 3, 999_996) + micros;
        assert_eq!(
            snapshot_to_rmm(&snapshot),
            [
                RmmRecord::new(12, at(3), RmmAction::Allocate, 0x1000, 1000, 1),
                RmmRecord::new(0, at(4), RmmAction::Allocate, 0x9000, 512, 1),
                RmmRecord::new(0, time_of_day(1, 2, 4, 2), RmmAction::Free, 0x1000, 1000, 1),
                RmmRecord::new(
                    0,
                    time_of_day(1, 2, 4, 3),
                    RmmAction::AllocateFailure,
                    0,
                    4096,
                    1
                ),
            ],
            "requests where known, block sizes otherwise; thread ids only from `thread <id>` \
             tags; the origin's time of day"
        );
    }
}
