//! The trace entries and segments of a PyTorch snapshot taken out of the pickle as it is read
//! ([`read_absorbing`](crate::trace::pickle::read_absorbing)): each entry dict becomes a
//! 40-byte [`Entry`] the moment `APPENDS` puts it into its device's list, each block and
//! segment its typed model as it joins its list, frame lists become stacks interned by
//! content, and the reader lets go of the dicts. Ten million entries and half a million
//! segments then cost what their compact forms do, instead of a tree of `Arc`s ten times that
//! size, built and then converted.
//!
//! It reads exactly what [`snapshot_from_value`](super::super::snapshot_from_value) and the
//! import read of an entry, block or segment, and takes nothing it cannot read the same way:
//! anything unusual (a malformed dict, one shared or out of place, a list mixing what it
//! takes with other items, a legacy block without its address) abandons the read, and the
//! caller reads the file again the plain way, which gives the same snapshot or the error with
//! its path.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::super::extras;
use super::super::fields::{u64_at, Path};
use super::super::model::Frame as PtFrame;
use super::Extras;
use crate::trace::pickle::{Absorb, Container, Kind, Offer, Slot, View};
use crate::trace::{Action, AddressHasher};

mod entries;
mod segments;
mod stacks;

pub(super) use entries::Trace;
pub(super) use segments::TakenSegments;

/// What the absorber took, placed: each trace under its device, and the segments.
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
    /// The segments, when they were taken.
    pub segments: Option<TakenSegments>,
}

/// The keys of trace entries, blocks and segments the import reads.
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
    Device,
    Address,
    TotalSize,
    SegmentType,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    Blocks,
    IsExpandable,
    SegmentPoolId,
    State,
    History,
    Other,
}

impl Key {
    /// How many keys are read (all but [`Key::Other`]).
    const COUNT: usize = Key::Other as usize;

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
            "device" => Key::Device,
            "address" => Key::Address,
            "total_size" => Key::TotalSize,
            "segment_type" => Key::SegmentType,
            "allocated_size" => Key::AllocatedSize,
            "active_size" => Key::ActiveSize,
            "requested_size" => Key::RequestedSize,
            "blocks" => Key::Blocks,
            "is_expandable" => Key::IsExpandable,
            "segment_pool_id" => Key::SegmentPoolId,
            "state" => Key::State,
            "history" => Key::History,
            _ => Key::Other,
        }
    }
}

/// A dict's values for the keys the import reads, read as the import reads them.
struct Fields<'v> {
    view: View<'v>,
    /// The value of each key the dict has, by [`Key`].
    found: [Option<Slot>; Key::COUNT],
}

impl<'v> Fields<'v> {
    /// The value of `key`, if the dict has it.
    fn get(&self, key: Key) -> Option<Slot> {
        self.found[key as usize]
    }

    /// Whether the dict has `key`.
    fn has(&self, key: Key) -> bool {
        self.get(key).is_some()
    }

    /// The `u64` under `key`, which the dict must have.
    fn u64(&self, key: Key) -> Result<u64, Unreadable> {
        u64_of(self.view, self.get(key).ok_or(Unreadable)?)
    }

    /// The `u64` under `key`, if the dict has it.
    fn opt_u64(&self, key: Key) -> Result<Option<u64>, Unreadable> {
        self.get(key).map(|v| u64_of(self.view, v)).transpose()
    }

    /// The `str` under `key`, which the dict must have.
    fn str(&self, key: Key) -> Result<&'v Arc<str>, Unreadable> {
        Ok(str_of(self.view, self.get(key).ok_or(Unreadable)?)?.1)
    }

    /// blockpool's keys and `user_metadata`, as `extras_of` reads them of any dict.
    fn extras(&self) -> Result<Extras, Unreadable> {
        let user_metadata = match self.get(Key::UserMetadata) {
            Some(_) => Some(self.str(Key::UserMetadata)?).filter(|text| !text.is_empty()),
            None => None,
        };
        Ok(Extras {
            context: self.opt_u64(Key::Context)?,
            block_size: self.opt_u64(Key::BlockSize)?,
            requested: self.opt_u64(Key::Requested)?,
            user_metadata: user_metadata.cloned(),
        })
    }
}

/// What a string names, as a key and as an action.
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

/// What each string used as a key or an action names, by string index (`None`: not worked
/// out yet).
#[derive(Default)]
struct Names(Vec<Option<Name>>);

impl Names {
    /// What the `str` `slot` names, as a key and as an action.
    fn name(&mut self, view: View<'_>, slot: Slot) -> Name {
        let Some((index, text)) = view.str(slot) else {
            return Name::NOTHING; // keys that are not str are not looked up
        };
        let at = index as usize;
        if let Some(&Some(name)) = self.0.get(at) {
            return name;
        }
        let name = Name {
            key: Key::of(text),
            action: Action::from_name(text),
        };
        if self.0.len() <= at && self.0.try_reserve(at + 1 - self.0.len()).is_ok() {
            self.0.resize(at + 1, None);
        }
        if let Some(cached) = self.0.get_mut(at) {
            *cached = Some(name);
        }
        name
    }

    /// The key `slot` names, for a `str`.
    fn key(&mut self, view: View<'_>, slot: Slot) -> Key {
        self.name(view, slot).key
    }

    /// The values of the keys the import reads in `dict`.
    fn fields<'v>(&mut self, view: View<'v>, dict: Container<'_>) -> Fields<'v> {
        let mut found = [None; Key::COUNT];
        for pair in dict.items.chunks_exact(2) {
            let key = self.key(view, pair[0]);
            if key != Key::Other {
                found[key as usize] = Some(pair[1]);
            }
        }
        Fields { view, found }
    }

    /// What the dict `dict` is, by its keys, when it can start a list to take from: a trace
    /// entry has an `action`; a block its `state`, `size` and `address` (legacy blocks,
    /// without an address or with only a `history`, are left in the tree); a segment its
    /// `blocks` and `segment_type`, and its blocks were taken (its `blocks` list is empty).
    fn kind(&mut self, view: View<'_>, dict: Container<'_>) -> Option<Taking> {
        let fields = self.fields(view, dict);
        let has = |key: Key| fields.has(key);
        let no_blocks = fields
            .get(Key::Blocks)
            .and_then(|slot| view.container(slot))
            .is_some_and(|list| list.items.is_empty());
        if has(Key::Action) {
            Some(Taking::Trace(None))
        } else if has(Key::SegmentType) && no_blocks {
            Some(Taking::Segments)
        } else if has(Key::State) && has(Key::Size) && has(Key::Address) {
            (has(Key::Frames) || !has(Key::History)).then_some(Taking::Blocks)
        } else {
            None
        }
    }
}

/// The value under the `str` key `key` of the dict `dict`.
fn value_under(view: View<'_>, dict: Container<'_>, key: &str) -> Option<Slot> {
    dict.items.chunks_exact(2).find_map(|pair| {
        view.str(pair[0])
            .filter(|(_, name)| &***name == key)
            .map(|_| pair[1])
    })
}

/// Why a dict cannot be taken: the read is abandoned.
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

/// What a taker reads a dict with: what the key strings name, the stacks, the values read
/// so far, and the lists to take over with the dict (its frame lists, a segment's blocks).
struct Reading<'r, 'v> {
    names: &'r mut Names,
    stacks: &'r mut stacks::Stacks,
    view: View<'v>,
    lists: &'r mut Vec<u32>,
}

impl<'v> Reading<'_, 'v> {
    /// The values of the keys the import reads in `dict`.
    fn fields(&mut self, dict: Container<'_>) -> Fields<'v> {
        self.names.fields(self.view, dict)
    }

    /// The stack of the frame list under `Frames` in `fields` (the empty one without it).
    fn stack(&mut self, fields: &Fields<'_>) -> Result<u32, Unreadable> {
        match fields.get(Key::Frames) {
            Some(frames) => self.stacks.stack(self.view, frames, self.lists),
            None => Ok(0),
        }
    }
}

/// What a list is taken from for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Taking {
    /// A device's trace, by index into the traces taken (`None`: a new one).
    Trace(Option<usize>),
    /// A segment's blocks.
    Blocks,
    /// The segments.
    Segments,
}

/// The absorber of trace entries, blocks and segments; see the module.
#[derive(Default)]
pub(super) struct SnapshotAbsorber {
    names: Names,
    stacks: stacks::Stacks,
    entries: entries::EntryTaker,
    segments: segments::SegmentTaker,
    /// The lists taken from, by container index.
    lists: HashMap<u32, Taking, BuildHasherDefault<AddressHasher>>,
    /// Each trace taken, under its device once [`Absorb::finish`] has placed it.
    placed: Vec<(usize, Trace)>,
}

impl SnapshotAbsorber {
    /// What was taken, placed by [`Absorb::finish`].
    pub(super) fn into_absorbed(self) -> Absorbed {
        Absorbed {
            traces: self.placed,
            stacks: self.stacks.into_stacks(),
            streams: self.entries.streams,
            texts: self.entries.texts,
            segments: self.segments.into_taken(),
        }
    }

    /// Takes `dict` on its way into `list`, for what `taking` says.
    fn take(
        &mut self,
        view: View<'_>,
        list: u32,
        dict: Container<'_>,
        taking: Taking,
        lists: &mut Vec<u32>,
    ) -> Result<(), Unreadable> {
        let read = Reading {
            names: &mut self.names,
            stacks: &mut self.stacks,
            view,
            lists: &mut *lists,
        };
        let taking = match taking {
            Taking::Trace(trace) => Taking::Trace(Some(self.entries.take(read, dict, trace)?)),
            Taking::Blocks => {
                self.segments.take_block(read, dict, list)?;
                Taking::Blocks
            }
            Taking::Segments => {
                self.segments.take_segment(read, dict, list)?;
                Taking::Segments
            }
        };
        self.lists.try_reserve(1).map_err(|_| Unreadable)?;
        self.lists.insert(list, taking);
        // The segment took over its blocks list: nothing more is taken from it.
        for taken in lists.iter() {
            if self.lists.get(taken) == Some(&Taking::Blocks) {
                self.lists.remove(taken);
            }
        }
        Ok(())
    }

    /// Places the traces taken under the devices of `device_traces`, each once.
    fn place_traces(&mut self, view: View<'_>, root: Slot) -> Result<(), Unreadable> {
        let mut taken = std::mem::take(&mut self.entries.traces);
        if taken.is_empty() {
            return Ok(());
        }
        let device_traces = view
            .container(root)
            .filter(|c| c.kind == Kind::Dict)
            .and_then(|root| value_under(view, root, "device_traces"))
            .and_then(|slot| view.container(slot))
            .ok_or(Unreadable)?;
        let mut placed = HashSet::new();
        for (device, &slot) in device_traces.items.iter().enumerate() {
            let Some(list) = view.container(slot) else {
                continue;
            };
            if let Some(&Taking::Trace(Some(index))) = self.lists.get(&list.id) {
                if !placed.insert(list.id) {
                    return Err(Unreadable); // one trace under two devices: the plain read copies it
                }
                self.placed
                    .push((device, std::mem::take(&mut taken[index])));
            }
        }
        if placed.len() == taken.len() {
            Ok(())
        } else {
            Err(Unreadable)
        }
    }
}

impl Absorb for SnapshotAbsorber {
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
            // Not a dict: kept, unless the list is one taken from.
            _ if taking.is_some() => return Offer::Abandon,
            _ => return Offer::Keep,
        };
        let taking = match taking {
            Some(taking) => taking,
            // Not the start of a list to take from: the plain read keeps it.
            None if held > 0 => return Offer::Keep,
            None => match self.names.kind(view, dict) {
                Some(taking) => taking,
                None => return Offer::Keep,
            },
        };
        if !free {
            return Offer::Abandon;
        }
        match self.take(view, list, dict, taking, lists) {
            Ok(()) => Offer::Take,
            Err(Unreadable) => Offer::Abandon,
        }
    }

    fn restore(&mut self, list: u32) -> Option<Vec<Slot>> {
        self.stacks.restore(list)
    }

    fn finish(&mut self, view: View<'_>, root: Slot) -> bool {
        self.stacks.unchanged(view)
            && self.segments.finish(view, root).is_ok()
            && self.place_traces(view, root).is_ok()
    }
}
