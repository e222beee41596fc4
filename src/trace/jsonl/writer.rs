//! Writing a trace file: [`TraceWriter`] writes the header, then frames and contexts the first
//! time they are used, events and segments, and the end line; [`write_snapshot`] and [`save`]
//! write a whole [`Snapshot`] with it.

use super::details;
use super::error::JsonlError;
use super::format::Header;
use crate::trace::file::FileOut;
use crate::trace::snapshot::{pool_name, Segment, Snapshot};
use crate::trace::{Context, ContextId, Frame, PytorchDetails, TraceEvent};
use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Writes a trace file line by line.
///
/// Contexts are interned: [`context`](TraceWriter::context) writes a context (and any frames
/// it has that were not written yet) the first time it is seen and returns its id in the file,
/// which is what events and segments passed to the writer must carry.
///
/// The writer does not buffer: give it a buffered `W`.
///
/// ```
/// use blockpool::trace::jsonl::{Header, TraceWriter};
/// use blockpool::trace::{Action, Context, ContextId, TraceEvent};
/// use blockpool::StreamId;
///
/// let mut writer = TraceWriter::new(Vec::new(), &Header::new(Some(1_700_000_000_000_000), None))?;
/// let context = writer.context(&Context { tags: vec!["step".into()], frames: Vec::new() })?;
/// writer.event(&TraceEvent {
///     action: Action::Alloc, device: 0, stream: StreamId::DEFAULT, addr: 0x7f00_0000_0000,
///     size: 512, requested: 500, time_us: 7, context,
/// })?;
/// let text = String::from_utf8(writer.finish()?)?;
/// let lines: Vec<&str> = text.lines().collect();
/// assert_eq!(lines[1], r#"{"context":1,"tags":["step"],"frames":[]}"#);
/// assert_eq!(
///     lines[2],
///     r#"{"event":"alloc","device":0,"addr":139637976727552,"size":512,"requested":500,"time_us":7,"context":1}"#
/// );
/// assert_eq!(lines[3], r#"{"end":{"events":1,"segments":0}}"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    frames: HashMap<Frame, u64>,
    contexts: HashMap<Context, ContextId>,
    events: u64,
    segments: u64,
    dropped_events: u64,
    /// The event line being built (reused).
    line: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header line.
    pub fn new(mut out: W, header: &Header) -> io::Result<Self> {
        write!(out, "{{\"blockpool_trace\":{}", header.version)?;
        if let Some(created_by) = &header.created_by {
            out.write_all(b",\"created_by\":")?;
            serde_json::to_writer(&mut out, created_by)?;
        }
        if let Some(origin) = header.time_origin_unix_us {
            write!(out, ",\"time_origin_unix_us\":{origin}")?;
        }
        if let Some(config) = &header.allocator_config {
            out.write_all(b",\"allocator_config\":")?;
            serde_json::to_writer(&mut out, config)?;
        }
        out.write_all(b"}\n")?;
        Ok(TraceWriter {
            out,
            frames: HashMap::new(),
            contexts: HashMap::new(),
            events: 0,
            segments: 0,
            dropped_events: 0,
            line: Vec::with_capacity(256),
        })
    }

    /// The file's id for `context`, writing its frame and context lines if it is new.
    pub fn context(&mut self, context: &Context) -> io::Result<ContextId> {
        if let Some(&id) = self.contexts.get(context) {
            return Ok(id);
        }
        let Ok(id) = u32::try_from(self.contexts.len() + 1) else {
            return Ok(ContextId::NONE);
        };
        let mut frame_ids = Vec::with_capacity(context.frames.len());
        for frame in &context.frames {
            let next = self.frames.len() as u64 + 1;
            let frame_id = *self.frames.entry(frame.clone()).or_insert(next);
            if frame_id == next {
                write!(self.out, "{{\"frame\":{frame_id},\"name\":")?;
                serde_json::to_writer(&mut self.out, &*frame.name)?;
                self.out.write_all(b",\"file\":")?;
                serde_json::to_writer(&mut self.out, &*frame.filename)?;
                writeln!(self.out, ",\"line\":{}}}", frame.line)?;
            }
            frame_ids.push(frame_id);
        }
        write!(self.out, "{{\"context\":{id},\"tags\":")?;
        let tags: Vec<&str> = context.tags.iter().map(|t| &**t).collect();
        serde_json::to_writer(&mut self.out, &tags)?;
        self.out.write_all(b",\"frames\":")?;
        serde_json::to_writer(&mut self.out, &frame_ids)?;
        self.out.write_all(b"}\n")?;
        self.contexts.insert(context.clone(), ContextId(id));
        Ok(ContextId(id))
    }

    fn check_context(&self, id: ContextId) -> io::Result<()> {
        if id.0 as usize > self.contexts.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("context {} was not written to this trace yet", id.0),
            ));
        }
        Ok(())
    }

    /// Writes an event line; its context must be [`ContextId::NONE`] or an id returned by
    /// [`context`](TraceWriter::context) (else an `InvalidInput` error, nothing written).
    pub fn event(&mut self, event: &TraceEvent) -> io::Result<()> {
        self.check_context(event.context)?;
        // One line built in a reused buffer with `itoa`: the streaming sink writes millions of
        // these, and `write!` through the formatting machinery costs several times more.
        let line = &mut self.line;
        let mut number = itoa::Buffer::new();
        line.clear();
        line.extend_from_slice(b"{\"event\":\"");
        line.extend_from_slice(event.action.as_str().as_bytes());
        line.extend_from_slice(b"\",\"device\":");
        line.extend_from_slice(number.format(event.device).as_bytes());
        if event.stream.raw() != 0 {
            line.extend_from_slice(b",\"stream\":");
            line.extend_from_slice(number.format(event.stream.raw()).as_bytes());
        }
        line.extend_from_slice(b",\"addr\":");
        line.extend_from_slice(number.format(event.addr).as_bytes());
        line.extend_from_slice(b",\"size\":");
        line.extend_from_slice(number.format(event.size).as_bytes());
        if event.requested != 0 {
            line.extend_from_slice(b",\"requested\":");
            line.extend_from_slice(number.format(event.requested).as_bytes());
        }
        line.extend_from_slice(b",\"time_us\":");
        line.extend_from_slice(number.format(event.time_us).as_bytes());
        if event.context != ContextId::NONE {
            line.extend_from_slice(b",\"context\":");
            line.extend_from_slice(number.format(event.context.0).as_bytes());
        }
        line.extend_from_slice(b"}\n");
        self.out.write_all(line)?;
        self.events += 1;
        Ok(())
    }

    /// Writes a segment line (end state); its contexts must have been written as for
    /// [`event`](TraceWriter::event).
    pub fn segment(&mut self, segment: &Segment) -> io::Result<()> {
        self.check_context(segment.context)?;
        for block in &segment.blocks {
            self.check_context(block.context)?;
        }
        let out = &mut self.out;
        write!(
            out,
            "{{\"segment\":{},\"device\":{},\"size\":{}",
            segment.address, segment.device, segment.size
        )?;
        if segment.stream.raw() != 0 {
            write!(out, ",\"stream\":{}", segment.stream.raw())?;
        }
        write!(out, ",\"pool\":\"{}\"", pool_name(segment.pool))?;
        if segment.expandable {
            out.write_all(b",\"expandable\":true")?;
        }
        if segment.context != ContextId::NONE {
            write!(out, ",\"context\":{}", segment.context.0)?;
        }
        out.write_all(b",\"blocks\":[")?;
        for (i, block) in segment.blocks.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            write!(
                out,
                "{comma}[{},{},{},\"{}\",{}]",
                block.address, block.size, block.requested, block.state, block.context.0
            )?;
        }
        out.write_all(b"]}\n")?;
        self.segments += 1;
        Ok(())
    }

    /// Writes the `pytorch` line: what only PyTorch's snapshot files record (private pools,
    /// the allocator's settings whole, `compile_context`).
    pub fn pytorch_details(&mut self, details: &PytorchDetails) -> io::Result<()> {
        let line = serde_json::json!({ "pytorch": details::to_json(details) });
        serde_json::to_writer(&mut self.out, &line)?;
        self.out.write_all(b"\n")
    }

    /// Counts `count` events that were recorded but never reached the writer; the end line
    /// says how many.
    pub fn note_dropped_events(&mut self, count: u64) {
        self.dropped_events = self.dropped_events.saturating_add(count);
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes the end line, flushes, and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        write!(
            self.out,
            "{{\"end\":{{\"events\":{},\"segments\":{}",
            self.events, self.segments
        )?;
        if self.dropped_events != 0 {
            write!(self.out, ",\"dropped_events\":{}", self.dropped_events)?;
        }
        self.out.write_all(b"}}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Writes `snapshot` as a trace file: header, frames and contexts, events, segments, end line.
pub fn write_snapshot<W: Write>(snapshot: &Snapshot, out: W) -> io::Result<()> {
    let header = Header::new(
        snapshot.time_origin_unix_us,
        snapshot.allocator_config.clone(),
    );
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 16, out), &header)?;
    // The snapshot's contexts are distinct, so the file numbers them the same; map anyway.
    let mut ids = vec![ContextId::NONE];
    for (_, context) in snapshot.contexts.iter() {
        ids.push(writer.context(context)?);
    }
    let id = |c: ContextId| ids.get(c.0 as usize).copied().unwrap_or(ContextId::NONE);
    for event in &snapshot.events {
        writer.event(&TraceEvent {
            context: id(event.context),
            ..*event
        })?;
    }
    for segment in &snapshot.segments {
        let mut segment = segment.clone();
        segment.context = id(segment.context);
        for block in &mut segment.blocks {
            block.context = id(block.context);
        }
        writer.segment(&segment)?;
    }
    if snapshot.pytorch != PytorchDetails::default() {
        writer.pytorch_details(&snapshot.pytorch)?;
    }
    writer.finish()?.into_inner().map_err(|e| e.into_error())?;
    Ok(())
}

/// Creates (or truncates) the trace file at `path`: plain, or gzip when its name ends in `.gz`.
pub(crate) fn create_file(path: &Path) -> Result<FileOut, JsonlError> {
    FileOut::create(path).map_err(|source| JsonlError::Open {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `snapshot` to the file at `path`, gzip-compressed when the name ends in `.gz`.
pub fn save(snapshot: &Snapshot, path: impl AsRef<Path>) -> Result<(), JsonlError> {
    let mut out = create_file(path.as_ref())?;
    write_snapshot(snapshot, &mut out).map_err(JsonlError::Write)?;
    out.close().map_err(JsonlError::Write)
}
