//! From PyTorch's snapshot to [`Snapshot`]: segments and blocks, each device's trace merged
//! into one time-ordered list, frame lists turned into contexts once per shared list, and
//! PyTorch's annotations.
//!
//! What the fields become:
//!
//! - `TraceEvent::size` and `requested`: PyTorch's `size` of `alloc`, `free_requested` and
//!   `free_completed` is what the caller asked for (`orig_size`), which becomes `requested`;
//!   the block size is not in PyTorch's files, so `size` is that request rounded as the file's
//!   allocator rounds it (`allocator_settings`' `PYTORCH_CUDA_ALLOC_CONF`: 512 bytes, or a
//!   `roundup_power2_divisions` step), the smallest block the request can have had. Block
//!   sums over a walk of the trace are then block sizes throughout, as the end state's are. For
//!   other actions `size` is PyTorch's and `requested` 0. Files we exported carry the block
//!   size and give it back exactly.
//! - `time_us`: microseconds since the earliest `time_us` in the file (trace entries and
//!   external annotations), which becomes `time_origin_unix_us`; without `time_us` (files
//!   before late 2023) every event is at 0 and the origin unknown.
//! - Contexts: a trace entry's frames with its `user_metadata` (PyTorch's per-allocation user
//!   string), when not empty, as its one tag; frames of [`TAG_FILENAME`] at the end of a list
//!   (ours) are tags again. No frames and no metadata is [`ContextId::NONE`]. An inactive
//!   block has no context, as in our snapshots.
//! - `external_annotations` (`record_function` ranges: `{stage, name, device, time_us}`) become
//!   [`Action::Annotate`] events whose tags are the device's range stack after each `START` or
//!   `END`, as blockpool's own annotations record it, listed in
//!   [`PytorchDetails::inserted_events`]: they are not entries of `device_traces`, so they get
//!   no event number and the file's entries keep PyTorch's indices
//!   ([`Snapshot::event_numbers`]); `user_defined` entries become `Annotate` events with their
//!   frames.
//! - `allocator_settings["PYTORCH_CUDA_ALLOC_CONF"]` becomes `allocator_config`, and the whole
//!   `allocator_settings` dict (max_split_size, garbage_collection_threshold,
//!   roundup_power2_divisions, ...) is kept in [`PytorchDetails`] with each segment's private
//!   pool (`segment_pool_id` other than `(0, 0)`) and each entry's `compile_context`, so an
//!   export writes them back; streams are PyTorch's `cudaStream_t` values; `segment_type` is
//!   the pool. Segments are ordered by device then address.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::convert::snapshot_from_value;
use super::error::SnapshotError;
use super::extras::{self, TAG_FILENAME};
use super::fields::Path;
use super::model::{self, Frame as PtFrame, PytorchSnapshot, SegmentType};
use crate::backend::StreamId;
use crate::pool::PoolKind;
use crate::trace::limits::{ContextBudget, ImportLimits};
use crate::trace::pickle::{read, read_absorbing, PickleError, ReadLimits, Value};
use crate::trace::snapshot::{Block, Segment};
use crate::trace::{
    AddressHasher, BlockState, Context, ContextId, Contexts, Frame, PytorchDetails, SegmentPool,
    SettingValue, Snapshot,
};
use crate::AllocatorConfig;

mod absorb;
mod events;
mod merge;
mod raw;

use raw::{extras_of, item, Extras};

/// Reads a PyTorch memory snapshot file (or one [`write_pytorch_snapshot`] wrote) straight
/// into a [`Snapshot`]: [`pickle::read`](crate::trace::pickle::read) with default limits, then
/// [`snapshot_from_pytorch_value`].
///
/// [`write_pytorch_snapshot`]: super::write_pytorch_snapshot
///
/// # Errors
///
/// As [`load_pytorch_snapshot`](super::load_pytorch_snapshot), and as
/// [`snapshot_from_pytorch_value`] for blockpool's own keys.
///
/// # Examples
///
/// ```
/// use blockpool::trace::pytorch::load_pytorch_snapshot_as_snapshot;
///
/// // pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4)
/// let bytes = b"\x80\x04\x95\x27\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments\x94]\x94\
///               \x8c\x0ddevice_traces\x94]\x94]\x94au.";
/// let snapshot = load_pytorch_snapshot_as_snapshot(bytes)?;
/// assert!(snapshot.segments.is_empty() && snapshot.events.is_empty());
/// assert_eq!(snapshot.time_origin_unix_us, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_pytorch_snapshot_as_snapshot(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    let value = read(bytes, &ReadLimits::default())?;
    snapshot_from_pytorch_value(&value)
}

/// As [`snapshot_from_pytorch_value`], with the contexts bounded by `limits` instead of
/// [`ImportLimits::from_env`].
///
/// # Errors
///
/// As [`snapshot_from_pytorch_value`].
pub fn snapshot_from_pytorch_value_with(
    value: &Value,
    limits: &ImportLimits,
) -> Result<Snapshot, SnapshotError> {
    let source = snapshot_from_value(value)?;
    Importer::new(&source, Some(value), limits)?.run()
}

/// As [`snapshot_from_pytorch_value_with`], taking the tree: it is dropped as soon as what
/// the import needs of it is read (the typed model, blockpool's table and each entry's
/// extras), before the events are built, so the tree and the events are never all in memory
/// at once. For a file read whole, the tree is most of the memory.
pub(crate) fn snapshot_from_owned_pytorch_value(
    value: Value,
    limits: &ImportLimits,
) -> Result<Snapshot, SnapshotError> {
    let source = snapshot_from_value(&value)?;
    let read = Importer::new(&source, Some(&value), limits)?.read_raw()?;
    drop(value);
    read.finish()
}

/// What the streaming read of a PyTorch pickle gave.
#[derive(Debug)]
pub(crate) enum Streamed {
    /// The snapshot, the same as the whole read's.
    Read(Snapshot),
    /// Nothing: the file is something the stream cannot take the same way (see `absorb`),
    /// or it failed where taking entries may be the cause. Read it whole.
    Again,
    /// The pickle cannot be read, whichever way (a limit, a truncated or corrupt input).
    Failed(PickleError),
}

/// Reads a PyTorch snapshot pickle from `source` straight into a [`Snapshot`], taking each
/// trace entry out of the pickle as it is read (see `absorb`): what
/// [`snapshot_from_owned_pytorch_value`] gives for the same file, in a fraction of the memory
/// and time. [`Streamed::Again`] asks for the whole read, with
/// [`read_from`](crate::trace::pickle::read_from) and [`snapshot_from_owned_pytorch_value`],
/// which give the snapshot or the error with its path.
pub(crate) fn read_pytorch_pickle(
    source: &mut dyn std::io::Read,
    read_limits: &ReadLimits,
    limits: &ImportLimits,
) -> Streamed {
    let mut absorber = absorb::SnapshotAbsorber::default();
    let value = match read_absorbing(source, read_limits, &mut absorber) {
        Ok(Some(value)) => value,
        Ok(None) => return Streamed::Again,
        // A memo entry of a taken entry pushed again, a taken-over list used: the whole read
        // tells whether the file itself is at fault.
        Err(PickleError::MissingMemo { .. } | PickleError::WrongType { .. }) => {
            return Streamed::Again
        }
        Err(e) => return Streamed::Failed(e),
    };
    let Ok(mut source) = snapshot_from_value(&value) else {
        return Streamed::Again;
    };
    let mut absorbed = absorber.into_absorbed();
    let segment_contexts = match absorbed.segments.take() {
        // The list they were taken from is left empty.
        Some(_) if !source.segments.is_empty() => return Streamed::Again,
        Some(taken) => {
            source.segments = taken.segments;
            Some(taken.contexts)
        }
        None => None,
    };
    let Ok(mut importer) = Importer::new(&source, Some(&value), limits) else {
        return Streamed::Again;
    };
    importer.absorbed = Some(absorbed);
    importer.segment_contexts = segment_contexts;
    let Ok(read) = importer.read_raw() else {
        return Streamed::Again;
    };
    drop(value);
    read.finish().map_or(Streamed::Again, Streamed::Read)
}

/// How many trace entries and segments the streaming read of `bytes` takes out of the tree
/// (`None`: it leaves the file to the whole read).
#[cfg(test)]
pub(super) fn taken_by_stream(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut absorber = absorb::SnapshotAbsorber::default();
    read_absorbing(&mut &bytes[..], &ReadLimits::default(), &mut absorber).ok()??;
    let absorbed = absorber.into_absorbed();
    let entries = absorbed.traces.iter().map(|(_, t)| t.entries.len()).sum();
    let segments = absorbed.segments.map_or(0, |taken| taken.segments.len());
    Some((entries, segments))
}

/// Converts a PyTorch snapshot's plain-data tree into a [`Snapshot`], as described in this
/// module: [`snapshot_from_value`] for PyTorch's keys, plus each trace entry's
/// `user_metadata` and blockpool's own keys, so that a file [`snapshot_to_pytorch_value`]
/// made gives its `Snapshot` back exactly.
///
/// [`snapshot_to_pytorch_value`]: super::snapshot_to_pytorch_value
///
/// # Errors
///
/// The errors of [`snapshot_from_value`]; a [`SnapshotError`] naming the path of a
/// `user_metadata` that is not a str, or of a blockpool key of the wrong type, or a context id
/// past blockpool's table; [`SnapshotError::Limit`] when the contexts would spell out more
/// than [`ImportLimits::from_env`] allows (frame lists and strings the file shares are
/// converted once and stay shared).
pub fn snapshot_from_pytorch_value(value: &Value) -> Result<Snapshot, SnapshotError> {
    snapshot_from_pytorch_value_with(value, &ImportLimits::from_env())
}

impl From<&PytorchSnapshot> for Snapshot {
    /// The typed model as a [`Snapshot`]. Without the file's plain data, trace entries'
    /// `user_metadata` and blockpool's own keys are not seen; use
    /// [`snapshot_from_pytorch_value`] for files we exported.
    fn from(source: &PytorchSnapshot) -> Snapshot {
        // The model is already in memory, expanded as it is: no limit to guard.
        let unlimited = ImportLimits {
            max_context_bytes: u64::MAX,
            ..ImportLimits::default()
        };
        let snapshot = Importer::new(source, None, &unlimited).and_then(|i| i.run());
        // Without plain data nothing is read that could fail: no table, no extra keys, no
        // limit.
        debug_assert!(snapshot.is_ok(), "typed import failed: {snapshot:?}");
        snapshot.unwrap_or_default()
    }
}

/// blockpool's table from a file we exported.
struct Table {
    time_origin_unix_us: Option<u64>,
    /// Our id of the table's context `n` at index `n - 1`.
    ids: Vec<ContextId>,
    /// Whether `allocator_settings` are a file's own (else the exporter made them from the
    /// configuration, which `allocator_config` already holds).
    settings_recorded: bool,
}

/// Conversion state: `source` the typed model, `raw` the plain-data tree it came from (for
/// blockpool's keys and `user_metadata`), until [`Importer::read_raw`] has read what the
/// import needs of it.
struct Importer<'a, 'r> {
    source: &'a PytorchSnapshot,
    raw: Option<&'r Value>,
    contexts: Contexts,
    table: Option<Table>,
    /// Context ids by (frame list, user_metadata) pointers, so each shared list is converted
    /// once however often it is referenced.
    by_pointer: HashMap<(usize, usize), ContextId, BuildHasherDefault<AddressHasher>>,
    /// What the contexts built so far spell out.
    budget: ContextBudget,
    /// The settings that round a request to its block size (the file's, else the defaults).
    rounding: AllocatorConfig,
    /// What [`read_raw`](Importer::read_raw) read: the segments, and each device's trace
    /// entries that have extras, by index.
    segments: Option<Vec<Segment>>,
    entry_extras: Vec<Vec<(usize, Extras)>>,
    /// The trace entries an absorbing read took out of the tree.
    absorbed: Option<absorb::Absorbed>,
    /// blockpool's `context` of the segments and blocks an absorbing read took out of the
    /// tree, as [`absorb::TakenSegments::contexts`] lists them.
    segment_contexts: Option<Vec<(usize, Option<usize>, u64)>>,
}

impl<'a, 'r> Importer<'a, 'r> {
    fn new(
        source: &'a PytorchSnapshot,
        raw: Option<&'r Value>,
        limits: &ImportLimits,
    ) -> Result<Self, SnapshotError> {
        let mut importer = Importer {
            source,
            raw,
            contexts: Contexts::new(),
            table: None,
            by_pointer: HashMap::default(),
            budget: ContextBudget::new(limits),
            rounding: AllocatorConfig::default(),
            segments: None,
            entry_extras: Vec::new(),
            absorbed: None,
            segment_contexts: None,
        };
        importer.read_table()?;
        Ok(importer)
    }

    /// The whole import: [`read_raw`](Self::read_raw), then [`finish`](Self::finish).
    fn run(self) -> Result<Snapshot, SnapshotError> {
        self.read_raw()?.finish()
    }

    /// The snapshot, once [`read_raw`](Self::read_raw) has read the tree.
    fn finish(mut self) -> Result<Snapshot, SnapshotError> {
        let allocator_config = self.allocator_config();
        let segments = self.segments.take().unwrap_or_default();
        let (streams, time_origin_unix_us) = self.events()?;
        let merge::Merged {
            events,
            compile_contexts,
            inserted: inserted_events,
        } = merge::merge_by_time(streams);
        let pytorch = PytorchDetails {
            allocator_settings: self.allocator_settings(),
            segment_pools: self.segment_pools(),
            compile_contexts,
            inserted_events,
        };
        Ok(Snapshot {
            segments,
            events,
            contexts: self.contexts,
            allocator_config,
            time_origin_unix_us,
            pytorch,
        })
    }

    /// `allocator_settings` whole, string keys only (PyTorch writes no other).
    fn allocator_settings(&self) -> Vec<(String, SettingValue)> {
        if self.table.as_ref().is_some_and(|t| !t.settings_recorded) {
            return Vec::new();
        }
        match &self.source.allocator_settings {
            Some(Value::Dict(pairs)) => setting_pairs(pairs),
            _ => Vec::new(),
        }
    }

    /// The segments of private pools, by device and address.
    fn segment_pools(&self) -> Vec<SegmentPool> {
        let mut pools: Vec<SegmentPool> = self
            .source
            .segments
            .iter()
            .filter(|s| s.segment_pool_id != (0, 0))
            .map(|s| SegmentPool {
                device: s.device,
                address: s.address,
                pool_id: s.segment_pool_id,
            })
            .collect();
        pools.sort_by_key(|p| (p.device, p.address));
        pools
    }

    fn allocator_config(&self) -> Option<String> {
        let Some(Value::Dict(pairs)) = &self.source.allocator_settings else {
            return None;
        };
        pairs.iter().find_map(|(k, v)| match (k, v) {
            (Value::Str(key), Value::Str(conf)) if &**key == "PYTORCH_CUDA_ALLOC_CONF" => {
                Some(conf.to_string())
            }
            _ => None,
        })
    }

    /// The context of a table id (file we exported) at `path`.
    fn table_context(&self, id: Option<u64>, path: &Path<'_>) -> Result<ContextId, SnapshotError> {
        let (Some(table), Some(id)) = (&self.table, id) else {
            return Ok(ContextId::NONE);
        };
        let index = usize::try_from(id).ok().and_then(|id| id.checked_sub(1));
        match index.and_then(|i| table.ids.get(i)) {
            Some(&context) => Ok(context),
            None => Err(SnapshotError::OutOfRange {
                path: path.key(extras::CONTEXT).to_string(),
                expected: "an id of blockpool's context table",
                found: format!("{id} with {} contexts", table.ids.len()),
            }),
        }
    }

    /// The context of a PyTorch frame list with an optional `user_metadata`, at `path`; each
    /// shared list is converted (and charged to the budget) once.
    fn frames_context(
        &mut self,
        frames: &Arc<[PtFrame]>,
        metadata: Option<&Arc<str>>,
        path: &Path<'_>,
    ) -> Result<ContextId, SnapshotError> {
        if frames.is_empty() && metadata.is_none() {
            return Ok(ContextId::NONE);
        }
        let key = (
            frames.as_ptr() as usize,
            metadata.map_or(0, |m| m.as_ptr() as usize),
        );
        if let Some(&id) = self.by_pointer.get(&key) {
            return Ok(id);
        }
        // Charged before anything is built: a list naming one frame of long strings a
        // hundred thousand times stops here, not after hashing every copy.
        let limit = |source| SnapshotError::Limit {
            path: path.key("frames").to_string(),
            source,
        };
        for f in frames.iter() {
            self.budget.frame(&f.name, &f.filename).map_err(limit)?;
        }
        let text = metadata.map_or(0, |m| m.len());
        self.budget.tags(1, text).map_err(limit)?;
        let tagged = frames
            .iter()
            .rev()
            .take_while(|f| &*f.filename == TAG_FILENAME)
            .count();
        let real = frames.len() - tagged;
        let mut tags: Vec<Arc<str>> = frames[real..]
            .iter()
            .rev()
            .map(|f| f.name.clone())
            .collect();
        if tags.is_empty() {
            tags.extend(metadata.cloned());
        }
        let context = Context {
            tags,
            frames: frames[..real]
                .iter()
                .map(|f| Frame {
                    name: Arc::clone(&f.name),
                    filename: Arc::clone(&f.filename),
                    line: f.line,
                })
                .collect(),
        };
        let id = self.contexts.intern(context);
        self.by_pointer.insert(key, id);
        Ok(id)
    }

    fn segments(&mut self) -> Result<Vec<Segment>, SnapshotError> {
        let root = Path::ROOT;
        let segments_path = root.key("segments");
        let source = self.source;
        let taken = self.segment_contexts.take();
        let mut taken_contexts = taken.iter().flatten().copied().peekable();
        let mut segments = Vec::with_capacity(source.segments.len());
        for (s, segment) in source.segments.iter().enumerate() {
            let path = segments_path.index(s);
            let raw = self.table.as_ref().and(item(self.raw, "segments", s));
            // blockpool's context id of the segment and of block `b` in a file it exported
            // (`None` in PyTorch's files: the frames tell the context).
            let exported = self.table.is_some() && (taken.is_some() || raw.is_some());
            let mut table_id = |b: Option<usize>, path: &Path<'_>| -> Result<_, SnapshotError> {
                if !exported {
                    return Ok(None);
                }
                if taken.is_some() {
                    let id = taken_contexts
                        .next_if(|&(at, block, _)| at == s && block == b)
                        .map(|(_, _, id)| id);
                    return Ok(Some(id));
                }
                let raw = match b {
                    None => raw,
                    Some(b) => item(raw, "blocks", b),
                };
                Ok(Some(extras_of(raw, path)?.context))
            };
            let context = match table_id(None, &path)? {
                Some(id) => self.table_context(id, &path)?,
                None => self.frames_context(&segment.frames, None, &path)?,
            };
            let blocks_path = path.key("blocks");
            let mut blocks = Vec::with_capacity(segment.blocks.len());
            for (b, block) in segment.blocks.iter().enumerate() {
                let path = blocks_path.index(b);
                let id = table_id(Some(b), &path)?;
                blocks.push(self.block(block, id, &path)?);
            }
            segments.push(Segment {
                device: segment.device,
                address: segment.address,
                size: segment.total_size,
                stream: StreamId::from_raw(segment.stream),
                pool: match segment.segment_type {
                    SegmentType::Small => PoolKind::Small,
                    SegmentType::Large => PoolKind::Large,
                },
                expandable: segment.is_expandable,
                context,
                blocks,
            });
        }
        segments.sort_by_key(|s| (s.device, s.address));
        Ok(segments)
    }

    /// A block; `table_id` is its context id in blockpool's table, in a file blockpool
    /// exported.
    fn block(
        &mut self,
        block: &model::Block,
        table_id: Option<Option<u64>>,
        path: &Path<'_>,
    ) -> Result<Block, SnapshotError> {
        let state = match block.state {
            model::BlockState::ActiveAllocated => BlockState::ActiveAllocated,
            model::BlockState::ActivePendingFree => BlockState::ActivePendingFree,
            model::BlockState::Inactive => BlockState::Inactive,
        };
        let (requested, context) = if let Some(id) = table_id {
            (block.requested_size, self.table_context(id, path)?)
        } else if state.is_active() {
            (
                block.requested_size,
                self.frames_context(&block.frames, None, path)?,
            )
        } else {
            (0, ContextId::NONE)
        };
        Ok(Block {
            address: block.address,
            size: block.size,
            requested,
            state,
            context,
        })
    }
}

/// Settings pairs with string keys, converted; pairs with other keys are left out.
fn setting_pairs(pairs: &[(Value, Value)]) -> Vec<(String, SettingValue)> {
    pairs
        .iter()
        .filter_map(|(key, value)| match key {
            Value::Str(key) => Some((key.to_string(), setting_value(value))),
            _ => None,
        })
        .collect()
}

/// One settings value; a kind settings never hold (bytes, sets, huge ints) is kept as its text.
fn setting_value(value: &Value) -> SettingValue {
    match value {
        Value::None => SettingValue::None,
        Value::Bool(flag) => SettingValue::Bool(*flag),
        Value::Int(n) => SettingValue::Int(*n),
        Value::Float(x) => SettingValue::Float(*x),
        Value::Str(text) => SettingValue::Text(text.to_string()),
        Value::List(items) | Value::Tuple(items) => {
            SettingValue::List(items.iter().map(setting_value).collect())
        }
        Value::Dict(pairs) => SettingValue::Map(setting_pairs(pairs)),
        other => SettingValue::Text(format!("{other:?}")),
    }
}
