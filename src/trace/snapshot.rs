//! [`Snapshot`]: the allocator's memory at one moment and the history that led there, in one
//! format-neutral value. Every trace format blockpool reads becomes a `Snapshot`, and every
//! format it writes is written from one: our JSON Lines trace files, PyTorch's pickled memory
//! snapshots, RMM's CSV logs and Perfetto's trace-event JSON.
//!
//! A snapshot holds segments with their blocks (the end state), the recorded events of every
//! device (oldest first), and the contexts those refer to. Contexts are numbered within the
//! snapshot: [`ContextId`]`(n)` is [`Contexts::get`]`(n)`, so a snapshot stands on its own once
//! written to a file or read back from one.

use crate::backend::StreamId;
use crate::event::{Action, ContextId, TraceEvent};
use crate::pool::PoolKind;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

mod contexts;
mod stored;
pub use contexts::{frames_context, Contexts};

/// The allocator's segments at one moment, the events recorded before it and their contexts.
///
/// It is `Serialize` and `Deserialize` (serde), as memtrace's import cache stores it; that
/// encoding follows the types and is not a file format to exchange.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Every segment, ordered by device then address.
    pub segments: Vec<Segment>,
    /// The recorded events of every device, oldest first. Each device's events are in the order
    /// they happened; events of different devices are ordered by time.
    pub events: Vec<TraceEvent>,
    /// The contexts the segments, blocks and events refer to.
    pub contexts: Contexts,
    /// The allocator's configuration, in `PYTORCH_CUDA_ALLOC_CONF` syntax, when known.
    pub allocator_config: Option<String>,
    /// When event time 0 was, in microseconds since the Unix epoch, when known.
    pub time_origin_unix_us: Option<u64>,
    /// What only PyTorch's snapshot files record (private pools, the allocator's settings
    /// whole, `compile_context`), kept so that a conversion back to PyTorch's format gives it
    /// back; empty for other sources.
    pub pytorch: PytorchDetails,
}

/// What PyTorch's snapshot files record beside segments, events and contexts, which the rest
/// of a [`Snapshot`] has no place for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PytorchDetails {
    /// `allocator_settings` whole, every key in the file's order (`PYTORCH_CUDA_ALLOC_CONF`,
    /// `max_split_size`, `garbage_collection_threshold`, `roundup_power2_divisions`,
    /// `expandable_segments`, ...); empty when the file has none.
    pub allocator_settings: Vec<(String, SettingValue)>,
    /// The segments of private memory pools (`segment_pool_id` other than `(0, 0)`: a CUDA
    /// graph's pool, or one made with `torch.cuda.MemPool`), lowest device and address first.
    pub segment_pools: Vec<SegmentPool>,
    /// `compile_context` of the events that recorded one (torch.compile's frame and graph of
    /// the allocation, `"N/A"` outside compiled code): index into [`Snapshot::events`], text.
    pub compile_contexts: Vec<(usize, Arc<str>)>,
    /// Indices into [`Snapshot::events`], ascending, of the events the import inserted among
    /// the file's own trace entries (each of `external_annotations` becomes an `annotate`
    /// event): they have no index in the file's `device_traces`, so
    /// [`Snapshot::event_numbers`] gives them no number and the others keep PyTorch's.
    pub inserted_events: Vec<usize>,
}

impl PytorchDetails {
    /// The private pool of the segment at `address` on `device`; `(0, 0)`, the default pool,
    /// when it is in none.
    pub fn pool_of(&self, device: u32, address: u64) -> (u64, u64) {
        self.segment_pools
            .binary_search_by_key(&(device, address), |p| (p.device, p.address))
            .map_or((0, 0), |i| self.segment_pools[i].pool_id)
    }
}

/// A segment of a private memory pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentPool {
    /// Device of the segment.
    pub device: u32,
    /// Address of the segment.
    pub address: u64,
    /// PyTorch's `segment_pool_id`: the pool's id, a pair of integers.
    pub pool_id: (u64, u64),
}

/// One value of the allocator's settings as a trace file recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SettingValue {
    /// Python's `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer (`max_split_size` is -1 when unlimited).
    Int(i64),
    /// A float (`garbage_collection_threshold`).
    Float(f64),
    /// A string.
    Text(String),
    /// A list.
    List(Vec<SettingValue>),
    /// A dict with string keys, in order (`roundup_power2_divisions`: size class in MiB ->
    /// divisions).
    Map(Vec<(String, SettingValue)>),
}

impl fmt::Display for SettingValue {
    /// As Python prints it: `True`, `-1`, `0.8`, `'text'`, `[...]`, `{'1': 0, ...}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingValue::None => f.write_str("None"),
            SettingValue::Bool(true) => f.write_str("True"),
            SettingValue::Bool(false) => f.write_str("False"),
            SettingValue::Int(n) => write!(f, "{n}"),
            SettingValue::Float(x) => write!(f, "{x:?}"),
            SettingValue::Text(text) => write!(f, "'{text}'"),
            SettingValue::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            SettingValue::Map(pairs) => {
                f.write_str("{")?;
                for (i, (key, value)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "'{key}': {value}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// A segment: one device allocation, tiled by its blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Device index.
    pub device: u32,
    /// Device address of the segment's first byte.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// The stream the segment serves.
    pub stream: StreamId,
    /// The pool the segment belongs to.
    pub pool: PoolKind,
    /// Whether this is mapped memory of an expandable segment (`expandable_segments:True`):
    /// a run of a reserved address range that `segment_map` / `segment_unmap` events grow and
    /// shrink, rather than one device allocation.
    pub expandable: bool,
    /// Context of the allocation that created the segment ([`ContextId::NONE`] when unknown).
    pub context: ContextId,
    /// The blocks, lowest address first; they tile the segment exactly.
    pub blocks: Vec<Block>,
}

/// A block of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// Device address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Bytes the caller asked for (0 for an inactive block).
    pub requested: u64,
    /// Whether and how the block is in use.
    pub state: BlockState,
    /// Context of the allocation ([`ContextId::NONE`] for an inactive block or when unknown).
    pub context: ContextId,
}

/// A block's state, named as PyTorch's snapshots name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BlockState {
    /// Handed out to a caller, `active_allocated`.
    ActiveAllocated,
    /// Freed by its caller, waiting for the streams that used it, `active_pending_free`.
    ActivePendingFree,
    /// Free and cached, `inactive`.
    Inactive,
}

impl BlockState {
    /// Every state.
    pub const ALL: [BlockState; 3] = [
        BlockState::ActiveAllocated,
        BlockState::ActivePendingFree,
        BlockState::Inactive,
    ];

    /// PyTorch's name: `active_allocated`, `active_pending_free` or `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// The state PyTorch names `name`.
    pub fn from_name(name: &str) -> Option<BlockState> {
        BlockState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the block is active (allocated or pending free).
    pub fn is_active(self) -> bool {
        self != BlockState::Inactive
    }
}

impl fmt::Display for BlockState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<crate::pool::BlockState> for BlockState {
    fn from(state: crate::pool::BlockState) -> BlockState {
        match state {
            crate::pool::BlockState::Allocated => BlockState::ActiveAllocated,
            crate::pool::BlockState::PendingFree => BlockState::ActivePendingFree,
            crate::pool::BlockState::Free => BlockState::Inactive,
        }
    }
}

/// The name of a pool in trace files: `small` or `large`, as PyTorch's `segment_type`.
pub fn pool_name(pool: PoolKind) -> &'static str {
    match pool {
        PoolKind::Small => "small",
        PoolKind::Large => "large",
    }
}

/// The pool named `name` (`small` or `large`).
pub fn pool_from_name(name: &str) -> Option<PoolKind> {
    match name {
        "small" => Some(PoolKind::Small),
        "large" => Some(PoolKind::Large),
        _ => None,
    }
}

/// Why a [`Snapshot`] is not consistent, found by [`Snapshot::validate`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotInvalid {
    /// A segment's blocks do not tile it.
    #[error(
        "segment at {address:#x} on device {device}: {reason}; its blocks must tile it \
         exactly, lowest address first"
    )]
    BlocksDoNotTile {
        /// Device of the segment.
        device: u32,
        /// Address of the segment.
        address: u64,
        /// What is wrong.
        reason: String,
    },
    /// Two segments of one device overlap.
    #[error(
        "segments at {first:#x} and {second:#x} on device {device} overlap or are out of order"
    )]
    SegmentsOverlap {
        /// Device of the segments.
        device: u32,
        /// The lower segment.
        first: u64,
        /// The segment that starts inside it or before it.
        second: u64,
    },
    /// Something refers to a context the snapshot does not have.
    #[error("{what} refers to context {id}, but the snapshot has only {count} contexts")]
    UnknownContext {
        /// What refers to it.
        what: String,
        /// The id.
        id: u32,
        /// How many contexts there are.
        count: usize,
    },
}

impl Snapshot {
    /// The device indices that have segments or events, ascending. One pass, and a set only
    /// as large as the number of devices.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices = BTreeSet::new();
        let mut last = None;
        let all = self.segments.iter().map(|s| s.device);
        for device in all.chain(self.events.iter().map(|e| e.device)) {
            if last != Some(device) {
                devices.insert(device);
                last = Some(device);
            }
        }
        devices.into_iter().collect()
    }

    /// The snapshot split by device, in one pass: each device of [`devices`](Self::devices)
    /// with a snapshot of its segments and events alone (in their order here), sharing the
    /// contexts, configuration and time origin. With one device or none, that is this
    /// snapshot itself, borrowed.
    ///
    /// A loop over devices that calls [`device_events`](Self::device_events) (which filters
    /// every event) would take devices times events; over these it takes events.
    pub fn by_device(&self) -> Vec<(u32, Cow<'_, Snapshot>)> {
        let devices = self.devices();
        if let [device] = devices[..] {
            return vec![(device, Cow::Borrowed(self))];
        }
        let mut split: BTreeMap<u32, Snapshot> = devices
            .iter()
            .map(|&device| {
                let part = Snapshot {
                    segments: Vec::new(),
                    events: Vec::new(),
                    contexts: self.contexts.clone(),
                    allocator_config: self.allocator_config.clone(),
                    time_origin_unix_us: self.time_origin_unix_us,
                    pytorch: PytorchDetails {
                        allocator_settings: self.pytorch.allocator_settings.clone(),
                        segment_pools: (self.pytorch.segment_pools.iter())
                            .filter(|p| p.device == device)
                            .copied()
                            .collect(),
                        compile_contexts: Vec::new(),
                        inserted_events: Vec::new(),
                    },
                };
                (device, part)
            })
            .collect();
        for segment in &self.segments {
            if let Some(part) = split.get_mut(&segment.device) {
                part.segments.push(segment.clone());
            }
        }
        // Compile contexts name events by index: each follows its event to the index it has
        // in its device's part.
        let mut compile = self.pytorch.compile_contexts.iter().peekable();
        let mut inserted = self.pytorch.inserted_events.iter().peekable();
        for (index, event) in self.events.iter().enumerate() {
            let is_inserted = inserted.next_if_eq(&&index).is_some();
            if let Some(part) = split.get_mut(&event.device) {
                if is_inserted {
                    part.pytorch.inserted_events.push(part.events.len());
                }
                part.events.push(*event);
                while let Some((at, text)) = compile.next_if(|(at, _)| *at <= index) {
                    if *at == index {
                        let moved = part.events.len() - 1;
                        part.pytorch
                            .compile_contexts
                            .push((moved, Arc::clone(text)));
                    }
                }
            }
        }
        split
            .into_iter()
            .map(|(device, part)| (device, Cow::Owned(part)))
            .collect()
    }

    /// The events of `device`, oldest first.
    pub fn device_events(&self, device: u32) -> impl Iterator<Item = &TraceEvent> + '_ {
        self.events.iter().filter(move |e| e.device == device)
    }

    /// The segments of `device`, lowest address first.
    pub fn device_segments(&self, device: u32) -> impl Iterator<Item = &Segment> + '_ {
        self.segments.iter().filter(move |s| s.device == device)
    }

    /// Whether the snapshot says anything about `device`'s segments (reserved memory): segments
    /// at the end, or segment events in the trace. RMM logs, for one, do not.
    pub fn has_segment_information(&self, device: u32) -> bool {
        self.device_segments(device).next().is_some()
            || self.device_events(device).any(|e| {
                matches!(
                    e.action,
                    Action::SegmentAlloc
                        | Action::SegmentFree
                        | Action::SegmentMap
                        | Action::SegmentUnmap
                )
            })
    }

    /// Checks that blocks tile their segments, segments of a device do not overlap and are in
    /// address order with devices ascending, and every context id names a context.
    pub fn validate(&self) -> Result<(), SnapshotInvalid> {
        let count = self.contexts.len();
        let check_context = |id: ContextId, what: &dyn Fn() -> String| {
            if self.contexts.contains(id) {
                Ok(())
            } else {
                Err(SnapshotInvalid::UnknownContext {
                    what: what(),
                    id: id.0,
                    count,
                })
            }
        };
        let mut previous: Option<&Segment> = None;
        for segment in &self.segments {
            if let Some(prev) = previous {
                let ordered = (prev.device, prev.address) < (segment.device, segment.address);
                let disjoint = prev.device != segment.device
                    || prev.address.saturating_add(prev.size) <= segment.address;
                if !ordered || !disjoint {
                    return Err(SnapshotInvalid::SegmentsOverlap {
                        device: segment.device,
                        first: prev.address,
                        second: segment.address,
                    });
                }
            }
            previous = Some(segment);
            segment.check_tiling()?;
            check_context(segment.context, &|| {
                format!(
                    "segment {:#x} on device {}",
                    segment.address, segment.device
                )
            })?;
            for block in &segment.blocks {
                check_context(block.context, &|| {
                    format!("block {:#x} on device {}", block.address, segment.device)
                })?;
            }
        }
        for (index, event) in self.events.iter().enumerate() {
            check_context(event.context, &|| {
                format!("event {index} ({} at {:#x})", event.action, event.addr)
            })?;
        }
        Ok(())
    }
}

impl Segment {
    /// Bytes in blocks of `state`.
    pub fn bytes_in(&self, state: BlockState) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .fold(0, u64::saturating_add)
    }

    /// Bytes in active blocks (allocated or pending free).
    pub fn active_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.state.is_active())
            .map(|b| b.size)
            .fold(0, u64::saturating_add)
    }

    /// Bytes the callers of active blocks asked for.
    pub fn requested_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.state.is_active())
            .map(|b| b.requested)
            .fold(0, u64::saturating_add)
    }

    fn check_tiling(&self) -> Result<(), SnapshotInvalid> {
        let fail = |reason: String| SnapshotInvalid::BlocksDoNotTile {
            device: self.device,
            address: self.address,
            reason,
        };
        if self.blocks.is_empty() {
            return Err(fail("it has no blocks".into()));
        }
        let mut next = self.address;
        for block in &self.blocks {
            if block.address != next {
                return Err(fail(format!(
                    "a block starts at {:#x} where {next:#x} was expected",
                    block.address
                )));
            }
            if block.size == 0 {
                return Err(fail(format!("the block at {:#x} is empty", block.address)));
            }
            if block.requested > block.size {
                return Err(fail(format!(
                    "the block at {:#x} was asked for {} bytes but holds only {}",
                    block.address, block.requested, block.size
                )));
            }
            next = block
                .address
                .checked_add(block.size)
                .ok_or_else(|| fail(format!("the block at {:#x} ends past 2^64", block.address)))?;
        }
        let end = self.address.checked_add(self.size);
        if end != Some(next) {
            return Err(fail(format!(
                "its blocks end at {next:#x} but the segment is {} bytes",
                self.size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
