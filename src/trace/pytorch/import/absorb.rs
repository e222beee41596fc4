//! The trace entries of a PyTorch snapshot taken out of the pickle as it is read
//! ([`read_absorbing`](crate::trace::pickle::read_absorbing)): each entry dict becomes a
//! 40-byte [`Entry`] the moment `APPENDS` puts it into its device's list, frame lists become
//! stacks interned by content, and the reader lets go of the dict. Ten million entries then
//! cost what their [`Entry`]s do, instead of a tree of `Arc`s ten times that size.
//!
//! It reads exactly what [`snapshot_from_value`](super::super::snapshot_from_value) and the
//! import read of an entry, and takes nothing it cannot read the same way: anything unusual
//! (a malformed entry, an entry shared or out of place, a list mixing entries with other
//! items) abandons the read, and the caller reads the file again the plain way, which gives
//! the same snapshot or the error with its path.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::extras;
use super::super::fields::{line_at, str_at, u64_at, Path};
use super::super::model::Frame as PtFrame;
use super::events::EntryFields;
use super::Extras;
use crate::trace::pickle::{Absorb, Container, Kind, Offer, Slot, View};
use crate::trace::{Action, AddressHasher};

/// One trace entry, as the import needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub addr: u64,
    pub size: u64,
    /// `time_us` when [`has_time`](Self::has_time).
    pub time_us: u64,
    /// Index into [`Absorbed::streams`].
    pub stream: u32,
    /// Index into [`Absorbed::stacks`] (0: no frames).
    pub stack: u32,
    /// `compile_context` as an index into [`Absorbed::texts`] plus one (0: none).
    pub compile_context: u32,
    pub action: Action,
    pub has_time: bool,
}

/// One device's entries, in file order, and those with extras by index.
#[derive(Default)]
pub(super) struct Trace {
    pub entries: Entries,
    pub extras: Vec<(usize, Extras)>,
}

/// Entries in chunks of a fixed size: growing never copies them (a vector that doubles holds
/// one and a half times its entries while it moves), and the import lets go of each chunk
/// as soon as its events are made.
#[derive(Default)]
pub(super) struct Entries {
    chunks: Vec<Vec<Entry>>,
    len: usize,
}

impl Entries {
    /// Entries per chunk: 2.5 MB of them.
    const CHUNK: usize = 1 << 16;

    /// How many there are.
    pub(super) fn len(&self) -> usize {
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
    pub(super) fn into_iter(self) -> impl Iterator<Item = Entry> {
        self.chunks.into_iter().flatten()
    }

    /// The entries in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flatten()
    }
}

/// What the absorber took, placed: each trace under its device.
#[derive(Default)]
pub(super) struct Absorbed {
    /// `(device, trace)`, by device.
    pub traces: Vec<(usize, Trace)>,
    /// Frame lists by content; the first is the empty one.
    pub stacks: Vec<Arc<[PtFrame]>>,
    /// `stream` values.
    pub streams: Vec<u64>,
    /// `compile_context` texts.
    pub texts: Vec<Arc<str>>,
}

impl Absorbed {
    /// What `entry` makes an event of, its `time_us` and its `compile_context`.
    pub(super) fn fields(&self, entry: &Entry) -> (EntryFields<'_>, Option<u64>, Option<Arc<str>>) {
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

/// The keys of a trace entry the import reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Action,
    Addr,
    DeviceFree,
    Size,
    Stream,
    TimeUs,
    Frames,
    CompileContext,
    UserMetadata,
    Context,
    BlockSize,
    Requested,
    Other,
}

impl Key {
    fn of(name: &str) -> Key {
        match name {
            "action" => Key::Action,
            "addr" => Key::Addr,
            "device_free" => Key::DeviceFree,
            "size" => Key::Size,
            "stream" => Key::Stream,
            "time_us" => Key::TimeUs,
            "frames" => Key::Frames,
            "compile_context" => Key::CompileContext,
            "user_metadata" => Key::UserMetadata,
            extras::CONTEXT => Key::Context,
            extras::BLOCK_SIZE => Key::BlockSize,
            extras::REQUESTED => Key::Requested,
            _ => Key::Other,
        }
    }
}

/// The absorber of trace entries; see the module.
pub(super) struct EntryAbsorber {
    absorbed: Absorbed,
    /// The lists taken from, by container index: the index of their [`Trace`] in `traces`.
    lists: HashMap<u32, usize>,
    traces: Vec<Trace>,
    /// What each string used as a key or an action names, by string index (`None`: not
    /// worked out yet).
    names: Vec<Option<Name>>,
    stream_ids: HashMap<u64, u32>,
    /// The last stream seen and its index: most entries have their neighbour's.
    last_stream: Option<(u64, u32)>,
    /// `compile_context` strings by their string index: index into `texts` plus one.
    text_ids: HashMap<u32, u32, BuildHasherDefault<AddressHasher>>,
    /// Frame lists seen, by container index: the stack, and the length it had (a list only
    /// grows, so an equal length at the end means the same items).
    frame_lists: HashMap<u32, (u32, usize), BuildHasherDefault<AddressHasher>>,
    /// Stacks by their frames' indices, and each stack's frames' indices.
    stack_ids: HashMap<Arc<[u32]>, u32>,
    stack_frames: Vec<Arc<[u32]>>,
    /// Frame dicts seen, by container index: index into `frames`.
    frame_ids: HashMap<u32, u32, BuildHasherDefault<AddressHasher>>,
    frames: Vec<(u32, PtFrame)>,
}

impl Default for EntryAbsorber {
    fn default() -> Self {
        let mut absorbed = Absorbed::default();
        absorbed.stacks.push(Arc::from([]));
        let mut stack_ids = HashMap::new();
        let empty: Arc<[u32]> = Arc::from([]);
        stack_ids.insert(Arc::clone(&empty), 0);
        EntryAbsorber {
            absorbed,
            lists: HashMap::new(),
            traces: Vec::new(),
            names: Vec::new(),
            stream_ids: HashMap::new(),
            last_stream: None,
            text_ids: HashMap::default(),
            frame_lists: HashMap::default(),
            stack_ids,
            stack_frames: vec![empty],
            frame_ids: HashMap::default(),
            frames: Vec::new(),
        }
    }
}

/// What a string names, as a key of an entry and as an action.
#[derive(Clone, Copy, Debug)]
struct Name {
    key: Key,
    action: Option<Action>,
}

impl Name {
    /// Not a key the import reads, nor an action.
    const NOTHING: Name = Name {
        key: Key::Other,
        action: None,
    };
}

/// Why an entry cannot be taken: the read is abandoned.
struct Unreadable;

/// A `u64` as the import reads one (`u64_at`).
fn u64_of(view: View<'_>, slot: Slot) -> Result<u64, Unreadable> {
    if let Some(int) = view.small_int(slot) {
        return u64::try_from(int).map_err(|_| Unreadable);
    }
    let value = view.scalar(slot).ok_or(Unreadable)?;
    u64_at(&value, &Path::ROOT).map_err(|_| Unreadable)
}

/// A `str` as the import reads one, with its string index.
fn str_of(view: View<'_>, slot: Slot) -> Result<(u32, &Arc<str>), Unreadable> {
    view.str(slot).ok_or(Unreadable)
}

impl EntryAbsorber {
    /// What was taken, placed under the devices of `device_traces` by [`Absorb::finish`].
    pub(super) fn into_absorbed(self) -> Absorbed {
        self.absorbed
    }

    /// What the `str` `slot` names, as a key and as an action.
    fn name(&mut self, view: View<'_>, slot: Slot) -> Name {
        let Some((index, text)) = view.str(slot) else {
            return Name::NOTHING; // keys that are not str are not looked up
        };
        let at = index as usize;
        if let Some(&Some(name)) = self.names.get(at) {
            return name;
        }
        let name = Name {
            key: Key::of(text),
            action: Action::from_name(text),
        };
        if self.names.len() <= at && self.names.try_reserve(at + 1 - self.names.len()).is_ok() {
            self.names.resize(at + 1, None);
        }
        if let Some(cached) = self.names.get_mut(at) {
            *cached = Some(name);
        }
        name
    }

    /// The key `slot` names, for a `str`.
    fn key(&mut self, view: View<'_>, slot: Slot) -> Key {
        self.name(view, slot).key
    }

    /// Whether the dict `dict` is a trace entry: it has an `action`.
    fn is_entry(&mut self, view: View<'_>, dict: Container<'_>) -> bool {
        dict.items
            .chunks_exact(2)
            .any(|pair| self.key(view, pair[0]) == Key::Action)
    }

    /// Reads the entry `dict`, as `Converter::trace_entry` and `extras_of` would.
    fn entry(
        &mut self,
        view: View<'_>,
        dict: Container<'_>,
        lists: &mut Vec<u32>,
    ) -> Result<(Entry, Extras), Unreadable> {
        let mut found: [Option<Slot>; 12] = [None; 12];
        for pair in dict.items.chunks_exact(2) {
            let key = self.key(view, pair[0]);
            if key != Key::Other {
                found[key as usize] = Some(pair[1]);
            }
        }
        let get = |key: Key| found[key as usize];
        let action = get(Key::Action).ok_or(Unreadable)?;
        let action = self.name(view, action).action.ok_or(Unreadable)?;
        let addr = match (action, get(Key::Addr), get(Key::DeviceFree)) {
            (Action::Oom, None, Some(free)) => u64_of(view, free)?,
            (_, addr, _) => u64_of(view, addr.ok_or(Unreadable)?)?,
        };
        let size = u64_of(view, get(Key::Size).ok_or(Unreadable)?)?;
        let stream = u64_of(view, get(Key::Stream).ok_or(Unreadable)?)?;
        let time_us = get(Key::TimeUs).map(|t| u64_of(view, t)).transpose()?;
        let stack = match get(Key::Frames) {
            Some(frames) => self.stack(view, frames, lists)?,
            None => 0,
        };
        let compile_context = match get(Key::CompileContext) {
            Some(text) => self.text(view, text)?,
            None => 0,
        };
        let extras = Extras {
            context: get(Key::Context).map(|v| u64_of(view, v)).transpose()?,
            block_size: get(Key::BlockSize).map(|v| u64_of(view, v)).transpose()?,
            requested: get(Key::Requested).map(|v| u64_of(view, v)).transpose()?,
            user_metadata: match get(Key::UserMetadata) {
                Some(text) => Some(str_of(view, text)?.1)
                    .filter(|text| !text.is_empty())
                    .cloned(),
                None => None,
            },
        };
        let entry = Entry {
            addr,
            size,
            time_us: time_us.unwrap_or(0),
            stream: self.stream(stream)?,
            stack,
            compile_context,
            action,
            has_time: time_us.is_some(),
        };
        Ok((entry, extras))
    }

    /// The index of `stream` in [`Absorbed::streams`].
    fn stream(&mut self, stream: u64) -> Result<u32, Unreadable> {
        if let Some((_, id)) = self.last_stream.filter(|(last, _)| *last == stream) {
            return Ok(id);
        }
        if let Some(&id) = self.stream_ids.get(&stream) {
            self.last_stream = Some((stream, id));
            return Ok(id);
        }
        let id = u32::try_from(self.absorbed.streams.len()).map_err(|_| Unreadable)?;
        self.absorbed.streams.push(stream);
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
        self.absorbed.texts.push(Arc::clone(text));
        let id = u32::try_from(self.absorbed.texts.len()).map_err(|_| Unreadable)?;
        self.text_ids.insert(index, id);
        Ok(id)
    }

    /// The stack of the frame list `slot`; a list the entry alone holds is taken over.
    fn stack(
        &mut self,
        view: View<'_>,
        slot: Slot,
        lists: &mut Vec<u32>,
    ) -> Result<u32, Unreadable> {
        let list = view.container(slot).ok_or(Unreadable)?;
        if let Some(&(stack, _)) = self.frame_lists.get(&list.id) {
            return Ok(stack);
        }
        if !matches!(list.kind, Kind::List | Kind::Tuple) {
            return Err(Unreadable);
        }
        let mut ids = Vec::with_capacity(list.items.len());
        for &frame in list.items {
            ids.push(self.frame(view, frame)?);
        }
        let stack = match self.stack_ids.get(ids.as_slice()) {
            Some(&stack) => stack,
            None => {
                let stack = u32::try_from(self.absorbed.stacks.len()).map_err(|_| Unreadable)?;
                let frames: Arc<[PtFrame]> = ids
                    .iter()
                    .map(|&id| self.frames[id as usize].1.clone())
                    .collect();
                self.absorbed.stacks.push(frames);
                let ids: Arc<[u32]> = Arc::from(ids);
                self.stack_frames.push(Arc::clone(&ids));
                self.stack_ids.insert(ids, stack);
                stack
            }
        };
        self.frame_lists.insert(list.id, (stack, list.items.len()));
        // Held by the entry alone (the memo may hold it too): its items are not needed again.
        if list.kind == Kind::List && list.holders == 1 {
            lists.push(list.id);
        }
        Ok(stack)
    }

    /// The index of the frame dict `slot` in `frames`.
    fn frame(&mut self, view: View<'_>, slot: Slot) -> Result<u32, Unreadable> {
        let dict = view.container(slot).ok_or(Unreadable)?;
        if let Some(&id) = self.frame_ids.get(&dict.id) {
            return Ok(id);
        }
        let frame = read_frame(view, dict)?;
        let id = u32::try_from(self.frames.len()).map_err(|_| Unreadable)?;
        self.frames.push((dict.id, frame));
        self.frame_ids.insert(dict.id, id);
        Ok(id)
    }

    /// Whether every frame and frame list read is still what it was when read: a file may
    /// change a dict after an entry used it (`SETITEMS` on a memo reference), and the plain
    /// read sees the final one.
    fn unchanged(&self, view: View<'_>) -> bool {
        let frames_same = self.frames.iter().all(|(id, frame)| {
            let dict = view.container_by_id(*id);
            dict.and_then(|dict| read_frame(view, dict).ok()).as_ref() == Some(frame)
        });
        frames_same
            && self.frame_lists.iter().all(|(&id, &(_, len))| {
                view.container_by_id(id)
                    .is_some_and(|list| list.kind == Kind::Absorbed || list.items.len() == len)
            })
    }
}

/// A frame dict, as `Converter::frames` reads one.
fn read_frame(view: View<'_>, dict: Container<'_>) -> Result<PtFrame, Unreadable> {
    if dict.kind != Kind::Dict {
        return Err(Unreadable);
    }
    let mut filename = None;
    let mut line = None;
    let mut name = None;
    for pair in dict.items.chunks_exact(2) {
        let Some((_, key)) = view.str(pair[0]) else {
            continue;
        };
        match &**key {
            "filename" => filename = Some(pair[1]),
            "line" => line = Some(pair[1]),
            "name" => name = Some(pair[1]),
            _ => {}
        }
    }
    let text = |slot: Option<Slot>| -> Result<Arc<str>, Unreadable> {
        let value = view.scalar(slot.ok_or(Unreadable)?).ok_or(Unreadable)?;
        str_at(&value, &Path::ROOT)
            .map(Arc::clone)
            .map_err(|_| Unreadable)
    };
    let line = view.scalar(line.ok_or(Unreadable)?).ok_or(Unreadable)?;
    let line = line_at(&line, &Path::ROOT).map_err(|_| Unreadable)?;
    Ok(PtFrame {
        filename: text(filename)?,
        line,
        name: text(name)?,
    })
}

impl Absorb for EntryAbsorber {
    fn offer(
        &mut self,
        view: View<'_>,
        list: u32,
        held: usize,
        item: Slot,
        free: bool,
        lists: &mut Vec<u32>,
    ) -> Offer {
        let taking = self.lists.get(&list).copied();
        let dict = match view.container(item) {
            Some(dict) if dict.kind == Kind::Dict => dict,
            // Not a dict: kept, unless the list is a trace taken from.
            _ => {
                return if taking.is_some() {
                    Offer::Abandon
                } else {
                    Offer::Keep
                }
            }
        };
        if taking.is_none() && (held > 0 || !self.is_entry(view, dict)) {
            // Not the start of a trace: the plain read keeps it.
            return Offer::Keep;
        }
        if !free {
            return Offer::Abandon;
        }
        let Ok((entry, extras)) = self.entry(view, dict, lists) else {
            return Offer::Abandon;
        };
        let index = match taking {
            Some(index) => index,
            None => {
                self.traces.push(Trace::default());
                self.lists.insert(list, self.traces.len() - 1);
                self.traces.len() - 1
            }
        };
        let trace = &mut self.traces[index];
        if !extras.is_empty() {
            trace.extras.push((trace.entries.len(), extras));
        }
        match trace.entries.push(entry) {
            Ok(()) => Offer::Take,
            Err(Unreadable) => Offer::Abandon,
        }
    }

    fn restore(&mut self, list: u32) -> Option<Vec<Slot>> {
        let &(stack, _) = self.frame_lists.get(&list)?;
        let frames = self.stack_frames.get(stack as usize)?;
        Some(
            frames
                .iter()
                .filter_map(|&frame| self.frames.get(frame as usize))
                .map(|&(id, _)| Slot::node(id))
                .collect(),
        )
    }

    fn finish(&mut self, view: View<'_>, root: Slot) -> bool {
        if !self.unchanged(view) {
            return false;
        }
        if self.traces.is_empty() {
            return true;
        }
        // The lists taken from must be `device_traces`' items, each once.
        let Some(root) = view.container(root).filter(|c| c.kind == Kind::Dict) else {
            return false;
        };
        let traces_slot = root.items.chunks_exact(2).find_map(|pair| {
            view.str(pair[0])
                .filter(|(_, key)| &***key == "device_traces")
                .map(|_| pair[1])
        });
        let Some(traces) = traces_slot.and_then(|slot| view.container(slot)) else {
            return false;
        };
        let mut taken = std::mem::take(&mut self.traces);
        let mut placed = HashSet::new();
        for (device, &slot) in traces.items.iter().enumerate() {
            let Some(list) = view.container(slot) else {
                continue;
            };
            if let Some(index) = self.lists.get(&list.id) {
                if !placed.insert(list.id) {
                    return false; // one trace under two devices: the plain read copies it
                }
                let trace = std::mem::take(&mut taken[*index]);
                self.absorbed.traces.push((device, trace));
            }
        }
        placed.len() == taken.len()
    }
}
