//! Trace entries taken as `APPENDS` puts them into their device's list: each dict becomes a
//! 40-byte [`Entry`].

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::events::EntryFields;
use super::super::Extras;
use super::{str_of, Fields, Key, Reading, Unreadable};
use crate::trace::pickle::{Container, Slot, View};
use crate::trace::{Action, AddressHasher};

/// One trace entry, as the import needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in super::super) struct Entry {
    pub addr: u64,
    pub size: u64,
    /// `time_us` when [`has_time`](Self::has_time).
    pub time_us: u64,
    /// Index into the streams.
    pub stream: u32,
    /// Index into the stacks (0: no frames).
    pub stack: u32,
    /// `compile_context` as an index into the texts plus one (0: none).
    pub compile_context: u32,
    pub action: Action,
    pub has_time: bool,
}

/// One device's entries, in file order, and those with extras by index.
#[derive(Default)]
pub(in super::super) struct Trace {
    pub entries: Entries,
    pub extras: Vec<(usize, Extras)>,
}

/// Entries in chunks of a fixed size: growing never copies them (a vector that doubles holds
/// one and a half times its entries while it moves), and the import lets go of each chunk
/// as soon as its events are made.
#[derive(Default)]
pub(in super::super) struct Entries {
    chunks: Vec<Vec<Entry>>,
    len: usize,
}

impl Entries {
    /// Entries per chunk: 2.5 MB of them.
    const CHUNK: usize = 1 << 16;

    /// How many there are.
    pub(in super::super) fn len(&self) -> usize {
        self.len
    }

    /// Appends `entry`, or fails without the memory for it.
    fn push(&mut self, entry: Entry) -> Result<(), Unreadable> {
        let full = match self.chunks.last() {
            Some(chunk) => chunk.len() == Self::CHUNK,
            None => true,
        };
        if full {
            self.chunks.try_reserve(1).map_err(|_| Unreadable)?;
            let mut chunk = Vec::new();
            chunk
                .try_reserve_exact(Self::CHUNK)
                .map_err(|_| Unreadable)?;
            self.chunks.push(chunk);
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(entry);
            self.len += 1;
        }
        Ok(())
    }

    /// The entries in order, each chunk freed once it is passed.
    pub(in super::super) fn into_iter(self) -> impl Iterator<Item = Entry> {
        self.chunks.into_iter().flatten()
    }

    /// The entries in order.
    pub(in super::super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flatten()
    }
}

/// The entries' part of the absorber: the traces taken from, and the streams and
/// `compile_context` texts their entries name.
#[derive(Default)]
pub(super) struct EntryTaker {
    /// The traces, by the order their lists were first taken from.
    pub traces: Vec<Trace>,
    /// `stream` values.
    pub streams: Vec<u64>,
    /// `compile_context` texts.
    pub texts: Vec<Arc<str>>,
    stream_ids: HashMap<u64, u32>,
    /// The last stream seen and its index: most entries have their neighbour's.
    last_stream: Option<(u64, u32)>,
    /// `compile_context` strings by their string index: index into `texts` plus one.
    text_ids: HashMap<u32, u32, BuildHasherDefault<AddressHasher>>,
}

impl EntryTaker {
    /// Takes the entry `dict` into trace `trace` (a new one when `None`), as
    /// `Converter::trace_entry` and `extras_of` would read it; returns the trace's index.
    pub(super) fn take(
        &mut self,
        mut read: Reading<'_, '_>,
        dict: Container<'_>,
        trace: Option<usize>,
    ) -> Result<usize, Unreadable> {
        let fields = read.fields(dict);
        let (entry, extras) = self.entry(&mut read, &fields)?;
        let index = match trace {
            Some(index) => index,
            None => {
                self.traces.try_reserve(1).map_err(|_| Unreadable)?;
                self.traces.push(Trace::default());
                self.traces.len() - 1
            }
        };
        let trace = &mut self.traces[index];
        if !extras.is_empty() {
            trace.extras.try_reserve(1).map_err(|_| Unreadable)?;
            trace.extras.push((trace.entries.len(), extras));
        }
        trace.entries.push(entry)?;
        Ok(index)
    }

    fn entry(
        &mut self,
        read: &mut Reading<'_, '_>,
        fields: &Fields<'_>,
    ) -> Result<(Entry, Extras), Unreadable> {
        let view = read.view;
        let action = fields.get(Key::Action).ok_or(Unreadable)?;
        let action = read.names.name(view, action).action.ok_or(Unreadable)?;
        let addr = match (action, fields.get(Key::Addr), fields.get(Key::DeviceFree)) {
            (Action::Oom, None, Some(_)) => fields.u64(Key::DeviceFree)?,
            _ => fields.u64(Key::Addr)?,
        };
        let time_us = fields.opt_u64(Key::TimeUs)?;
        let compile_context = match fields.get(Key::CompileContext) {
            Some(text) => self.text(view, text)?,
            None => 0,
        };
        let entry = Entry {
            addr,
            size: fields.u64(Key::Size)?,
            time_us: time_us.unwrap_or(0),
            stream: self.stream(fields.u64(Key::Stream)?)?,
            stack: read.stack(fields)?,
            compile_context,
            action,
            has_time: time_us.is_some(),
        };
        Ok((entry, fields.extras()?))
    }

    /// The index of `stream` in `streams`.
    fn stream(&mut self, stream: u64) -> Result<u32, Unreadable> {
        if let Some((_, id)) = self.last_stream.filter(|(last, _)| *last == stream) {
            return Ok(id);
        }
        if let Some(&id) = self.stream_ids.get(&stream) {
            self.last_stream = Some((stream, id));
            return Ok(id);
        }
        let id = u32::try_from(self.streams.len()).map_err(|_| Unreadable)?;
        self.streams.push(stream);
        self.stream_ids.insert(stream, id);
        self.last_stream = Some((stream, id));
        Ok(id)
    }

    /// The `compile_context` string `slot`, as an index into the texts plus one.
    fn text(&mut self, view: View<'_>, slot: Slot) -> Result<u32, Unreadable> {
        let (index, text) = str_of(view, slot)?;
        if let Some(&id) = self.text_ids.get(&index) {
            return Ok(id);
        }
        self.texts.push(Arc::clone(text));
        let id = u32::try_from(self.texts.len()).map_err(|_| Unreadable)?;
        self.text_ids.insert(index, id);
        Ok(id)
    }
}

impl super::Absorbed {
    /// What `entry` makes an event of, its `time_us` and its `compile_context`.
    pub(in super::super) fn fields(
        &self,
        entry: &Entry,
    ) -> (EntryFields<'_>, Option<u64>, Option<Arc<str>>) {
        // Every index was pushed with the entry that holds it; the fallbacks are unreachable.
        let fields = EntryFields {
            action: entry.action,
            addr: entry.addr,
            size: entry.size,
            stream: self
                .streams
                .get(entry.stream as usize)
                .copied()
                .unwrap_or(0),
            frames: self
                .stacks
                .get(entry.stack as usize)
                .unwrap_or(&self.stacks[0]),
        };
        let compile_context = (entry.compile_context as usize)
            .checked_sub(1)
            .and_then(|i| self.texts.get(i))
            .cloned();
        (
            fields,
            entry.has_time.then_some(entry.time_us),
            compile_context,
        )
    }
}
