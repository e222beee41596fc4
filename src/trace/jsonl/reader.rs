//! Reading a trace file in one pass: [`JsonlReader`] yields its events and segments one at a
//! time, holding one line (at most [`MAX_LINE_BYTES`]) and the frames and contexts defined so
//! far; [`read_snapshot`] and [`load`] collect them into a [`Snapshot`].

use super::details;
use super::error::JsonlError;
use super::format::{Header, ReadReport, FORMAT_VERSION, MAX_LINE_BYTES};
use super::line::{self, RawLine};
use crate::backend::StreamId;
use crate::trace::limits::{ContextBudget, ImportLimits};
use crate::trace::lines::{impl_record_iterator, LineError};
use crate::trace::snapshot::{Block, Contexts, Segment, Snapshot};
use crate::trace::{Context, ContextId, Frame, PytorchDetails, SnapshotInvalid, TraceEvent};
use flate2::bufread::MultiGzDecoder;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What a trace holds besides frames and contexts, in file order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// An event; its context is an id of [`JsonlReader::contexts`].
    Event(TraceEvent),
    /// A segment of the end state; its contexts are ids of [`JsonlReader::contexts`].
    Segment(Segment),
}

/// The input, decompressed when it starts with gzip's magic bytes.
enum Input<R: BufRead> {
    Plain(R),
    Gzip(BufReader<MultiGzDecoder<R>>),
}

impl<R: BufRead> Read for Input<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Plain(r) => r.read(buf),
            Input::Gzip(r) => r.read(buf),
        }
    }
}

impl<R: BufRead> BufRead for Input<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match self {
            Input::Plain(r) => r.fill_buf(),
            Input::Gzip(r) => r.fill_buf(),
        }
    }
    fn consume(&mut self, amount: usize) {
        match self {
            Input::Plain(r) => r.consume(amount),
            Input::Gzip(r) => r.consume(amount),
        }
    }
}

/// Reads a trace file one record at a time: an iterator of `Result<`[`Record`]`, JsonlError>`
/// that stops after its first error.
///
/// Plain and gzip input are both accepted (told apart by gzip's magic bytes). Frame and
/// context lines are absorbed as they come: read [`contexts`](JsonlReader::contexts) for what
/// the records' context ids name. A last line cut short (no line ending, not valid JSON) is
/// dropped and noted in the [`report`](JsonlReader::report), as is gzip input that ends early.
///
/// ```
/// use blockpool::trace::jsonl::{JsonlReader, Record};
///
/// let file = "{\"blockpool_trace\":1}\n\
///             {\"context\":1,\"tags\":[\"step\"]}\n\
///             {\"event\":\"alloc\",\"device\":0,\"addr\":4096,\"size\":512,\"time_us\":3,\"context\":1}\n\
///             {\"event\":\"free_req";
/// let mut reader = JsonlReader::new(file.as_bytes())?;
/// let Some(Ok(Record::Event(event))) = reader.next() else { panic!("one event") };
/// assert_eq!((event.addr, event.size), (4096, 512));
/// assert_eq!(reader.contexts().tag_path(event.context), "step");
/// assert!(reader.next().is_none(), "the torn last line is dropped");
/// assert_eq!(reader.report().torn_line, Some(4));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct JsonlReader<R: BufRead> {
    input: Input<R>,
    /// The line being parsed, without its line ending.
    buf: Vec<u8>,
    /// Number of the line in `buf` (1-based).
    line: u64,
    header: Header,
    /// Frames by file id, with the line that defined each.
    frames: HashMap<u64, (Frame, u64)>,
    /// Context ids of the file, mapped to ids of `contexts`, with their defining lines.
    context_ids: HashMap<u64, (ContextId, u64)>,
    contexts: Contexts,
    /// What the contexts built so far spell out, against [`ImportLimits::max_context_bytes`].
    budget: ContextBudget,
    report: ReadReport,
    /// The end line's number and counts once read.
    end: Option<(u64, Option<u64>, Option<u64>)>,
    /// What the `pytorch` line holds, once read.
    pytorch: Option<PytorchDetails>,
    finished: bool,
}

impl<R: BufRead> JsonlReader<R> {
    /// Reads and checks the header (line 1); the rest is read as the iterator advances.
    ///
    /// Fails on empty input, a first line that is not a header, or a version other than
    /// [`FORMAT_VERSION`]. The contexts are bounded by [`ImportLimits::from_env`].
    pub fn new(input: R) -> Result<Self, JsonlError> {
        JsonlReader::with_limits(input, &ImportLimits::from_env())
    }

    /// As [`new`](JsonlReader::new), with the contexts bounded by `limits`: a context line
    /// that would take the contexts past [`ImportLimits::max_context_bytes`] is refused with
    /// [`JsonlError::Limit`].
    pub fn with_limits(mut input: R, limits: &ImportLimits) -> Result<Self, JsonlError> {
        let magic = loop {
            match input.fill_buf() {
                Ok(bytes) => break bytes.starts_with(&GZIP_MAGIC),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(JsonlError::Read { line: 1, source }),
            }
        };
        let input = if magic {
            Input::Gzip(BufReader::with_capacity(
                1 << 16,
                MultiGzDecoder::new(input),
            ))
        } else {
            Input::Plain(input)
        };
        let mut reader = JsonlReader {
            input,
            buf: Vec::new(),
            line: 0,
            header: Header {
                version: FORMAT_VERSION,
                created_by: None,
                time_origin_unix_us: None,
                allocator_config: None,
            },
            frames: HashMap::new(),
            context_ids: HashMap::new(),
            contexts: Contexts::new(),
            budget: ContextBudget::new(limits),
            report: ReadReport::default(),
            end: None,
            pytorch: None,
            finished: false,
        };
        let Some(complete) = reader.read_line()? else {
            return Err(JsonlError::Empty);
        };
        let raw = match line::parse(&reader.buf) {
            Ok(raw) => raw,
            Err(_) if !complete => return Err(JsonlError::NotATrace),
            Err((message, _)) => return Err(JsonlError::Json { line: 1, message }),
        };
        let Some(version) = raw.blockpool_trace else {
            return Err(JsonlError::NotATrace);
        };
        if version != FORMAT_VERSION {
            return Err(JsonlError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        reader.header = Header {
            version,
            created_by: raw.created_by,
            time_origin_unix_us: raw.time_origin_unix_us,
            allocator_config: raw.allocator_config,
        };
        Ok(reader)
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The contexts defined so far, numbered from 1 in order of definition (equal contexts
    /// share an id).
    pub fn contexts(&self) -> &Contexts {
        &self.contexts
    }

    /// What was found so far; complete once the iterator has returned `None`.
    pub fn report(&self) -> &ReadReport {
        &self.report
    }

    /// The number of the last line read (1-based).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// Reads the next line into `buf`: `Some(true)` for a line with its ending, `Some(false)`
    /// for a last line without one, `None` at the end of input.
    fn read_line(&mut self) -> Result<Option<bool>, JsonlError> {
        let gzip = matches!(self.input, Input::Gzip(_));
        // Blank lines are counted in bulk; the line read next is numbered after them.
        let read = crate::trace::lines::skip_blank_lines(&mut self.input).and_then(|skipped| {
            self.line += skipped;
            crate::trace::lines::read_line(&mut self.input, &mut self.buf, MAX_LINE_BYTES)
        });
        let number = self.line + 1;
        let ended = match read {
            Ok(None) => return Ok(None),
            Ok(Some(ended)) => ended,
            Err(LineError::TooLong) => {
                self.line = number;
                return Err(JsonlError::LineTooLong {
                    line: number,
                    limit_bytes: MAX_LINE_BYTES,
                });
            }
            // A gzip stream cut short (a crash mid-write) ends the input.
            Err(LineError::Io(e)) if gzip && e.kind() == io::ErrorKind::UnexpectedEof => {
                self.report.gzip_cut_short = true;
                if self.buf.is_empty() {
                    return Ok(None);
                }
                false
            }
            Err(LineError::Io(source)) => {
                self.line = number;
                return Err(JsonlError::Read {
                    line: number,
                    source,
                });
            }
        };
        self.line = number;
        self.report.lines = number;
        Ok(Some(ended))
    }

    fn next_record(&mut self) -> Result<Option<Record>, JsonlError> {
        loop {
            let Some(complete) = self.read_line()? else {
                return self.finish();
            };
            if self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let line = self.line;
            if let Some((end_line, _, _)) = self.end {
                return Err(JsonlError::AfterEnd { line, end_line });
            }
            let raw = match line::parse(&self.buf) {
                Ok(raw) => raw,
                Err((_, cut)) if !complete && (cut || self.report.gzip_cut_short) => {
                    self.report.torn_line = Some(line);
                    return self.finish();
                }
                Err((message, _)) => return Err(JsonlError::Json { line, message }),
            };
            if let Some(record) = self.absorb(raw)? {
                return Ok(Some(record));
            }
        }
    }

    /// Checks the end line's counts at the end of input.
    fn finish(&mut self) -> Result<Option<Record>, JsonlError> {
        if let Some((line, events, segments)) = self.end {
            for (what, expected, found) in [
                ("events", events, self.report.events),
                ("segments", segments, self.report.segments),
            ] {
                if let Some(expected) = expected.filter(|&n| n != found) {
                    return Err(JsonlError::CountMismatch {
                        line,
                        what,
                        expected,
                        found,
                    });
                }
            }
            self.report.complete = true;
        }
        Ok(None)
    }

    /// Takes in one parsed line: frames, contexts and the end line are kept, events and
    /// segments returned.
    fn absorb(&mut self, raw: RawLine) -> Result<Option<Record>, JsonlError> {
        let line = self.line;
        if let Some(version) = raw.blockpool_trace {
            return Err(JsonlError::BadValue {
                line,
                field: "blockpool_trace",
                value: version.to_string(),
                expected: "a header only on line 1",
            });
        }
        if let Some(id) = raw.frame {
            let frame = Frame {
                name: raw
                    .name
                    .ok_or(JsonlError::MissingField {
                        line,
                        kind: "frame",
                        field: "name",
                    })?
                    .into(),
                filename: raw.file.unwrap_or_default().into(),
                line: raw.line.unwrap_or(0),
            };
            nonzero(id, line, "frame")?;
            if let Some(&(_, first)) = self.frames.get(&id) {
                return Err(redefined(line, "frame", id, first));
            }
            self.frames.insert(id, (frame, line));
            return Ok(None);
        }
        if let Some(action) = raw.event {
            let need = |field, value: Option<u64>| {
                value.ok_or(JsonlError::MissingField {
                    line,
                    kind: "event",
                    field,
                })
            };
            let event = TraceEvent {
                action: action.known(line, "event")?,
                device: raw.device.ok_or(JsonlError::MissingField {
                    line,
                    kind: "event",
                    field: "device",
                })?,
                stream: StreamId::from_raw(raw.stream.unwrap_or(0)),
                addr: need("addr", raw.addr)?,
                size: need("size", raw.size)?,
                requested: raw.requested.unwrap_or(0),
                time_us: need("time_us", raw.time_us)?,
                context: self.context_ref(raw.context.unwrap_or(0))?,
            };
            self.report.events += 1;
            return Ok(Some(Record::Event(event)));
        }
        if let Some(address) = raw.segment {
            return self.segment(address, raw).map(Some);
        }
        if let Some(details) = &raw.pytorch {
            self.pytorch = Some(details::from_json(details, line)?);
            return Ok(None);
        }
        if let Some(end) = raw.end {
            self.report.dropped_events = end.dropped_events.unwrap_or(0);
            self.end = Some((line, end.events, end.segments));
            return Ok(None);
        }
        if let Some(id) = raw.context {
            nonzero(id, line, "context")?;
            if let Some(&(_, first)) = self.context_ids.get(&id) {
                return Err(redefined(line, "context", id, first));
            }
            let tags = raw.tags.unwrap_or_default();
            let text: usize = tags.iter().map(String::len).sum();
            let limit = |source| JsonlError::Limit { line, source };
            self.budget.tags(tags.len(), text).map_err(limit)?;
            // Each frame is charged before it is added: a line that lists one frame millions
            // of times stops at the limit, not after building the list.
            let mut frames = Vec::new();
            for frame in raw.frames.unwrap_or_default() {
                match self.frames.get(&frame) {
                    Some((frame, _)) => {
                        self.budget
                            .frame(&frame.name, &frame.filename)
                            .map_err(limit)?;
                        frames.push(frame.clone());
                    }
                    None => {
                        return Err(JsonlError::Undefined {
                            line,
                            kind: "frame",
                            id: frame,
                        })
                    }
                }
            }
            let context = Context {
                tags: tags.into_iter().map(Arc::from).collect(),
                frames,
            };
            let local = self.contexts.intern(context);
            self.context_ids.insert(id, (local, line));
            return Ok(None);
        }
        Err(JsonlError::UnknownLine { line })
    }

    fn segment(&mut self, address: u64, raw: RawLine) -> Result<Record, JsonlError> {
        let line = self.line;
        let missing = |field| JsonlError::MissingField {
            line,
            kind: "segment",
            field,
        };
        let raw_blocks = raw.blocks.ok_or(missing("blocks"))?;
        let mut blocks = Vec::with_capacity(raw_blocks.len());
        for (address, size, requested, state, context) in raw_blocks {
            blocks.push(Block {
                address,
                size,
                requested,
                state: state.known(line, "blocks")?,
                context: self.context_ref(context)?,
            });
        }
        let segment = Segment {
            device: raw.device.ok_or(missing("device"))?,
            address,
            size: raw.size.ok_or(missing("size"))?,
            stream: StreamId::from_raw(raw.stream.unwrap_or(0)),
            pool: raw.pool.ok_or(missing("pool"))?.known(line, "pool")?,
            expandable: raw.expandable.unwrap_or(false),
            context: self.context_ref(raw.context.unwrap_or(0))?,
            blocks,
        };
        let alone = Snapshot {
            segments: vec![segment],
            ..Snapshot::default()
        };
        match alone.validate() {
            Ok(()) | Err(SnapshotInvalid::UnknownContext { .. }) => {}
            Err(source) => return Err(JsonlError::Invalid { line, source }),
        }
        self.report.segments += 1;
        let Snapshot { mut segments, .. } = alone;
        match segments.pop() {
            Some(segment) => Ok(Record::Segment(segment)),
            None => Err(missing("segment")),
        }
    }

    /// The context of this reader that the file's context `id` names.
    #[inline]
    fn context_ref(&self, id: u64) -> Result<ContextId, JsonlError> {
        if id == 0 {
            return Ok(ContextId::NONE);
        }
        match self.context_ids.get(&id) {
            Some(&(local, _)) => Ok(local),
            None => Err(JsonlError::Undefined {
                line: self.line,
                kind: "context",
                id,
            }),
        }
    }
}

fn nonzero(id: u64, line: u64, kind: &'static str) -> Result<(), JsonlError> {
    if id == 0 {
        return Err(JsonlError::BadValue {
            line,
            field: kind,
            value: "0".into(),
            expected: "an id of 1 or more (0 means none)",
        });
    }
    Ok(())
}

fn redefined(line: u64, kind: &'static str, id: u64, first: u64) -> JsonlError {
    JsonlError::Redefined {
        line,
        kind,
        id,
        first,
    }
}

impl_record_iterator!(JsonlReader, Record, JsonlError);

/// Reads a whole trace (plain or gzip) into a [`Snapshot`], with what the reader found.
///
/// Segments are put in device and address order and checked not to overlap; the first
/// problem stops reading and names its line.
///
/// ```
/// use blockpool::trace::jsonl::read_snapshot;
///
/// let bad = "{\"blockpool_trace\":1}\n{\"event\":\"alloc\",\"device\":0,\"addr\":0,\"size\":512,\"time_us\":1,\"context\":9}\n";
/// let err = read_snapshot(bad.as_bytes()).unwrap_err();
/// assert_eq!(err.to_string(), "line 2: context 9 is not defined by an earlier line");
/// ```
pub fn read_snapshot<R: BufRead>(input: R) -> Result<(Snapshot, ReadReport), JsonlError> {
    read_snapshot_with(input, &ImportLimits::from_env())
}

/// As [`read_snapshot`], with the contexts bounded by `limits` instead of
/// [`ImportLimits::from_env`].
pub fn read_snapshot_with<R: BufRead>(
    input: R,
    limits: &ImportLimits,
) -> Result<(Snapshot, ReadReport), JsonlError> {
    let mut reader = JsonlReader::with_limits(input, limits)?;
    let mut events = Vec::new();
    // Each segment with its line, to name the line of an overlap.
    let mut segments: Vec<(Segment, u64)> = Vec::new();
    while let Some(record) = reader.next() {
        match record? {
            Record::Event(event) => {
                // Amortized doubling, as `push`, but an error instead of an abort.
                events.try_reserve(1).map_err(|_| JsonlError::OutOfMemory {
                    line: reader.line_number(),
                    events: events.len(),
                })?;
                events.push(event);
            }
            Record::Segment(segment) => segments.push((segment, reader.line_number())),
        }
    }
    segments.sort_by_key(|(s, _)| (s.device, s.address));
    for pair in segments.windows(2) {
        let ((a, _), (b, line)) = (&pair[0], &pair[1]);
        if a.device == b.device && a.address.saturating_add(a.size) > b.address {
            return Err(JsonlError::Invalid {
                line: *line,
                source: SnapshotInvalid::SegmentsOverlap {
                    device: b.device,
                    first: a.address,
                    second: b.address,
                },
            });
        }
    }
    let JsonlReader {
        header,
        contexts,
        report,
        pytorch,
        ..
    } = reader;
    let snapshot = Snapshot {
        segments: segments.into_iter().map(|(s, _)| s).collect(),
        events,
        contexts,
        allocator_config: header.allocator_config,
        time_origin_unix_us: header.time_origin_unix_us,
        pytorch: pytorch.unwrap_or_default(),
    };
    Ok((snapshot, report))
}

/// Reads the trace file at `path` (plain or gzip) into a [`Snapshot`]; see [`read_snapshot`].
pub fn load(path: impl AsRef<Path>) -> Result<(Snapshot, ReadReport), JsonlError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| JsonlError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    read_snapshot(BufReader::with_capacity(1 << 16, file))
}
