//! The events of an import: every device's `device_traces` entries and the
//! `external_annotations` ranges, each turned into a [`TraceEvent`] and merged into one list
//! ordered by time (see the parent module for what each field becomes).

use super::super::convert::SeenShared;
use super::super::error::SnapshotError;
use super::super::extras::is_block_event;
use super::super::fields::{list, Fields, Path};
use super::super::model::{Frame as PtFrame, PytorchTraceEntry};
use super::merge::Stream;
use super::{Extras, Importer};
use crate::backend::StreamId;
use crate::pool::sizing::round_size;
use crate::trace::pickle::Value;
use crate::trace::{Action, Context, TraceEvent};
use std::collections::HashMap;
use std::sync::Arc;

impl Importer<'_, '_> {
    /// Every device's events, then the external annotations', each list in time order and
    /// each event with its entry's `compile_context`; and the origin.
    pub(super) fn events(&mut self) -> Result<(Vec<Stream>, Option<u64>), SnapshotError> {
        let source = self.source;
        let annotations = self.external_annotations()?;
        let mut absorbed = self.absorbed.take().unwrap_or_default();
        let origin = match &self.table {
            Some(table) => table.time_origin_unix_us,
            None => source
                .device_traces
                .iter()
                .flatten()
                .filter_map(|e| e.time_us)
                .chain(
                    absorbed
                        .traces
                        .iter()
                        .flat_map(|(_, trace)| trace.entries.iter())
                        .filter_map(|e| e.has_time.then_some(e.time_us)),
                )
                .chain(annotations.iter().map(|a| a.1))
                .min(),
        };
        let since_origin = |t: u64| origin.map_or(t, |o| t.saturating_sub(o));
        let mut streams: Vec<Stream> = Vec::with_capacity(source.device_traces.len() + 1);
        let entry_extras = std::mem::take(&mut self.entry_extras);
        for (d, trace) in source.device_traces.iter().enumerate() {
            let taken = absorbed
                .traces
                .iter_mut()
                .find(|(device, _)| *device == d)
                .map(|(_, trace)| std::mem::take(trace));
            let events = match taken {
                Some(taken) => {
                    let count = taken.entries.len();
                    let entries = taken.entries.into_iter().map(|e| absorbed.fields(&e));
                    self.device_events(d, count, entries, &taken.extras, &since_origin)?
                }
                None => {
                    let entries = trace
                        .iter()
                        .map(|e| (EntryFields::from(e), e.time_us, e.compile_context.clone()));
                    let extras = entry_extras.get(d).map_or(&[][..], Vec::as_slice);
                    self.device_events(d, trace.len(), entries, extras, &since_origin)?
                }
            };
            streams.push(events);
        }
        let mut annotation_events = Vec::with_capacity(annotations.len());
        for (device, time_us, tags) in annotations {
            let event = TraceEvent {
                action: Action::Annotate,
                device,
                stream: StreamId::DEFAULT,
                addr: 0,
                size: 0,
                requested: 0,
                time_us: since_origin(time_us),
                context: self.contexts.intern(Context {
                    tags,
                    frames: Vec::new(),
                }),
            };
            annotation_events.push(event);
        }
        annotation_events.sort_by_key(|e| e.time_us);
        streams.push(Stream {
            events: annotation_events,
            compile_contexts: Vec::new(),
            inserted: true,
        });
        Ok((streams, origin))
    }

    /// The events of device `d`'s `entries` (fields, `time_us`, `compile_context`), with the
    /// extras of those that have any by index.
    fn device_events<'e>(
        &mut self,
        d: usize,
        count: usize,
        entries: impl Iterator<Item = (EntryFields<'e>, Option<u64>, Option<Arc<str>>)>,
        extras: &[(usize, Extras)],
        since_origin: &dyn Fn(u64) -> u64,
    ) -> Result<Stream, SnapshotError> {
        let device = u32::try_from(d).unwrap_or(u32::MAX);
        let traces_path = Path::ROOT.key("device_traces");
        let trace_path = traces_path.index(d);
        let no_extras = Extras::default();
        let mut with_extras = extras.iter();
        let mut next_extras = with_extras.next();
        let mut last = 0;
        let mut events = Vec::with_capacity(count);
        let mut compile_contexts = Vec::new();
        for (i, (entry, time_us, compile_context)) in entries.enumerate() {
            let path = trace_path.index(i);
            let extras = match next_extras {
                Some((at, extras)) if *at == i => {
                    next_extras = with_extras.next();
                    extras
                }
                _ => &no_extras,
            };
            // An entry without time_us (old files) takes the time of the one before it.
            let time_us = time_us.map_or(last, since_origin);
            last = time_us;
            let event = self.event(device, entry, extras, time_us, &path)?;
            compile_contexts.extend(compile_context.map(|text| (events.len(), text)));
            events.push(event);
        }
        Ok(Stream {
            events,
            compile_contexts,
            inserted: false,
        })
    }

    pub(super) fn event(
        &mut self,
        device: u32,
        entry: EntryFields<'_>,
        extras: &Extras,
        time_us: u64,
        path: &Path<'_>,
    ) -> Result<TraceEvent, SnapshotError> {
        let (size, requested) = if is_block_event(entry.action) {
            let block_size = extras
                .block_size
                .unwrap_or_else(|| self.block_size(entry.size));
            (block_size, entry.size)
        } else {
            (entry.size, extras.requested.unwrap_or(0))
        };
        let context = if self.table.is_some() {
            self.table_context(extras.context, path)?
        } else {
            self.frames_context(entry.frames, extras.user_metadata.as_ref(), path)?
        };
        Ok(TraceEvent {
            action: entry.action,
            device,
            stream: StreamId::from_raw(entry.stream),
            addr: entry.addr,
            size,
            requested,
            time_us,
            context,
        })
    }

    /// The block size PyTorch's allocator gives a request of `requested` bytes: rounded up to
    /// 512 bytes (or a `roundup_power2_divisions` step), as `round_size` does. A block can be
    /// larger still (a remainder too small to split stays in it), which the file does not say.
    pub(super) fn block_size(&self, requested: u64) -> u64 {
        usize::try_from(requested)
            .ok()
            .and_then(|size| round_size(size, &self.rounding))
            .and_then(|size| u64::try_from(size).ok())
            .unwrap_or(requested)
    }

    /// `(device, time_us, tag stack)` of each well-formed external annotation, in time order.
    /// PyTorch records `record_function` ranges as a `START` and an `END` entry per name; as
    /// blockpool's own `annotate` events do, each becomes the device's tag stack after the
    /// change: `START` pushes the name, `END` removes its innermost occurrence (an `END`
    /// without its `START`, from a range begun before recording, changes nothing but is kept).
    /// An entry of another stage gets the stack with `[name, stage]` on top. Entries without a
    /// device or time are skipped, as PyTorch's viewer cannot place them either. An entry the
    /// file references twice is refused, and every stack is charged to the budget before it
    /// is copied: each event holds its whole stack, so the work grows as entries times depth.
    #[allow(clippy::type_complexity)]
    pub(super) fn external_annotations(
        &mut self,
    ) -> Result<Vec<(u32, u64, Vec<Arc<str>>)>, SnapshotError> {
        let Some(annotations) = &self.source.external_annotations else {
            return Ok(Vec::new());
        };
        let root = Path::ROOT;
        let Ok(items) = list(annotations, &root) else {
            return Ok(Vec::new());
        };
        let annotations_path = root.key("external_annotations");
        let mut seen = SeenShared::default();
        for (i, item) in items.iter().enumerate() {
            seen.check(item, &annotations_path.index(i), "external annotation")?;
        }
        let text = |fields: &Fields<'_, '_>, key: &str| match fields.get(key) {
            Some(Value::Str(s)) => Some(Arc::clone(s)),
            _ => None,
        };
        // (device, time_us, name, stage)
        type Entry = (u32, u64, Option<Arc<str>>, Option<Arc<str>>);
        let mut entries: Vec<Entry> = items
            .iter()
            .filter_map(|item| {
                let fields = Fields::new(item, &root).ok()?;
                let device = fields.u32("device").ok()?;
                let time_us = fields.u64("time_us").ok()?;
                Some((
                    device,
                    time_us,
                    text(&fields, "name"),
                    text(&fields, "stage"),
                ))
            })
            .collect();
        entries.sort_by_key(|e| e.1);
        let mut stacks: HashMap<u32, Vec<Arc<str>>> = HashMap::new();
        let budget = &mut self.budget;
        entries
            .into_iter()
            .map(|(device, time_us, name, stage)| {
                let stack = stacks.entry(device).or_default();
                let text = stack.iter().map(|t| t.len()).sum::<usize>()
                    + name.as_ref().map_or(0, |n| n.len());
                budget
                    .tags(stack.len() + 2, text)
                    .map_err(|source| SnapshotError::Limit {
                        path: annotations_path.to_string(),
                        source,
                    })?;
                let tags = match (name, stage.as_deref()) {
                    (Some(name), Some("START")) => {
                        stack.push(name);
                        stack.clone()
                    }
                    (Some(name), Some("END")) => {
                        if let Some(at) = stack.iter().rposition(|t| *t == name) {
                            stack.remove(at);
                        }
                        stack.clone()
                    }
                    (name, _) => {
                        let mut tags = stack.clone();
                        tags.extend(name);
                        tags.extend(stage.clone());
                        tags
                    }
                };
                Ok((device, time_us, tags))
            })
            .collect()
    }
}

/// What an event is made of, from a trace entry of the typed model or an absorbed one.
#[derive(Clone, Copy)]
pub(super) struct EntryFields<'e> {
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub frames: &'e Arc<[PtFrame]>,
}

impl<'e> From<&'e PytorchTraceEntry> for EntryFields<'e> {
    fn from(entry: &'e PytorchTraceEntry) -> Self {
        EntryFields {
            action: entry.action,
            addr: entry.addr,
            size: entry.size,
            stream: entry.stream,
            frames: &entry.frames,
        }
    }
}
