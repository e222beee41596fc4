//! Writing a [`Snapshot`] as Chrome trace-event JSON (the "JSON Object Format" of the Trace
//! Event Format), which ui.perfetto.dev and `chrome://tracing` load.
//!
//! Events are written as they are produced, one per line; only a device's counter timeline and
//! annotation intervals are held in memory, never the whole document.

use super::annotations::annotation_intervals;
use super::counters::{memory_timeline, MemorySample};
use crate::event::Action;
use crate::trace::snapshot::Snapshot;
use serde::Serialize;
use std::io::{self, BufWriter, Write};

/// One trace event. Field names are the format's: `ph` is the phase (event type), `ts` and
/// `dur` are microseconds, `s` an instant event's scope.
#[derive(Serialize)]
struct Event<'a, A: Serialize> {
    name: &'a str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<u64>,
    pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<A>,
}

#[derive(Serialize)]
struct NameArgs<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct BytesArgs {
    bytes: u64,
}

#[derive(Serialize)]
struct OomArgs {
    requested_bytes: u64,
    device_free_bytes: u64,
    stream: u64,
}

/// The document's `otherData`: what the snapshot says about itself.
#[derive(Serialize)]
struct OtherData<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    time_origin_unix_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    allocator_config: Option<&'a str>,
}

/// Writes `snapshot` as Chrome trace-event JSON, timestamps in microseconds since the
/// snapshot's time origin.
///
/// Each device `d` becomes a process named `GPU d` with pid `d + 1` (Perfetto treats pid 0 as
/// the kernel's idle task, so pids start at 1), holding:
/// - counter tracks (`"ph":"C"`) `allocated`, `reserved` and `requested`, each with the series
///   `bytes` (Perfetto names the tracks `allocated bytes`, ...): the values of
///   [`memory_timeline`], all three at the device's first event and then each one when it
///   changes. `reserved` is left out for a device with neither segments nor segment events
///   (a snapshot read from an RMM log), which says nothing about it;
/// - out-of-memory failures as process-wide instant events (`"ph":"i"`, `"s":"p"`) named
///   `oom`, with the rounded request, the device's free bytes and the stream in `args`;
/// - the annotation tags as complete slices (`"ph":"X"`) from [`annotation_intervals`], on a
///   thread named `annotations` (tid = pid).
///
/// The top-level `otherData` holds the snapshot's time origin (`time_origin_unix_us`) and
/// allocator configuration when known. Fails only when `w` does; output is buffered
/// internally and flushed before returning.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
/// use blockpool::trace::perfetto::write_perfetto;
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// alloc.record_memory_history(HistorySettings::default())?;
/// drop(alloc.allocate(0, 4096, StreamId::DEFAULT)?);
/// let mut json = Vec::new();
/// write_perfetto(&alloc.snapshot(), &mut json)?;
/// let json = String::from_utf8(json)?;
/// assert!(json.starts_with("{\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,"));
/// assert!(json.contains("\"name\":\"allocated\",\"ph\":\"C\""));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_perfetto<W: Write>(snapshot: &Snapshot, w: W) -> io::Result<()> {
    let mut out = TraceWriter {
        out: BufWriter::new(w),
        first: true,
    };
    out.out.write_all(b"{\"traceEvents\":[")?;
    // Split once: each device's tracks filter its own events, not the whole trace's.
    for (device, part) in snapshot.by_device() {
        write_device(&mut out, &part, device)?;
    }
    out.out
        .write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    let other = OtherData {
        time_origin_unix_us: snapshot.time_origin_unix_us,
        allocator_config: snapshot.allocator_config.as_deref(),
    };
    serde_json::to_writer(&mut out.out, &other)?;
    out.out.write_all(b"}\n")?;
    out.out.flush()
}

/// The events array being written: each event on its own line, comma-separated.
struct TraceWriter<W: Write> {
    out: BufWriter<W>,
    first: bool,
}

impl<W: Write> TraceWriter<W> {
    fn event<A: Serialize>(&mut self, event: &Event<'_, A>) -> io::Result<()> {
        let separator: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.out.write_all(separator)?;
        serde_json::to_writer(&mut self.out, event)?;
        Ok(())
    }

    fn counter(&mut self, name: &str, ts: u64, pid: u64, bytes: u64) -> io::Result<()> {
        self.event(&Event {
            name,
            ph: "C",
            ts: Some(ts),
            dur: None,
            pid,
            tid: None,
            s: None,
            args: Some(BytesArgs { bytes }),
        })
    }

    fn metadata(&mut self, kind: &str, pid: u64, tid: Option<u64>, name: &str) -> io::Result<()> {
        self.event(&Event {
            name: kind,
            ph: "M",
            ts: None,
            dur: None,
            pid,
            tid,
            s: None,
            args: Some(NameArgs { name }),
        })
    }
}

fn write_device<W: Write>(
    out: &mut TraceWriter<W>,
    snapshot: &Snapshot,
    device: u32,
) -> io::Result<()> {
    let pid = u64::from(device) + 1;
    out.metadata("process_name", pid, None, &format!("GPU {device}"))?;
    let intervals = annotation_intervals(snapshot, device);
    if !intervals.is_empty() {
        out.metadata("thread_name", pid, Some(pid), "annotations")?;
    }

    let has_reserved = snapshot.has_segment_information(device);
    let mut previous: Option<MemorySample> = None;
    for sample in memory_timeline(snapshot, device) {
        let changed =
            |get: fn(&MemorySample) -> u64| previous.map_or(true, |p| get(&p) != get(&sample));
        if changed(|s| s.allocated_bytes) {
            out.counter("allocated", sample.time_us, pid, sample.allocated_bytes)?;
        }
        if has_reserved && changed(|s| s.reserved_bytes) {
            out.counter("reserved", sample.time_us, pid, sample.reserved_bytes)?;
        }
        if changed(|s| s.requested_bytes) {
            out.counter("requested", sample.time_us, pid, sample.requested_bytes)?;
        }
        previous = Some(sample);
    }

    for event in snapshot
        .device_events(device)
        .filter(|e| e.action == Action::Oom)
    {
        out.event(&Event {
            name: "oom",
            ph: "i",
            ts: Some(event.time_us),
            dur: None,
            pid,
            tid: None,
            s: Some("p"),
            args: Some(OomArgs {
                requested_bytes: event.size,
                device_free_bytes: event.addr,
                stream: event.stream.raw(),
            }),
        })?;
    }

    for interval in &intervals {
        out.event(&Event::<()> {
            name: &interval.tag,
            ph: "X",
            ts: Some(interval.start_us),
            dur: Some(interval.end_us.saturating_sub(interval.start_us)),
            pid,
            tid: Some(pid),
            s: None,
            args: None,
        })?;
    }
    Ok(())
}
