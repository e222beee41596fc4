//! From [`Snapshot`] to PyTorch's newest snapshot schema, as `torch.cuda.memory._snapshot()`
//! returns it and `_dump_snapshot` pickles it, so PyTorch's viewer (`pytorch.org/memory_viz`)
//! and `torch.cuda._memory_viz` load our snapshots.
//!
//! Every key PyTorch writes is written, in its order. Sizes follow PyTorch's meaning: the
//! `size` of an `alloc`, `free_requested` or `free_completed` entry is what the caller asked
//! for, and `time_us` counts from the Unix epoch. What the schema cannot hold travels in the
//! extra keys of [`extras`](super::extras), so importing the file gives the same `Snapshot`
//! back. Each distinct context becomes one shared frame list (and each distinct frame one
//! shared dict), so the pickle writer stores it once and refers to it with two bytes.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use super::annotations::{self, ExternalAnnotation};
use super::extras::{self, is_block_event, TAG_FILENAME};
use crate::event::{Context, Frame};
use crate::trace::pickle::{write_to, Value};
use crate::trace::snapshot::{pool_name, Block, Segment};
use crate::trace::{Action, BlockState, ContextId, SettingValue, Snapshot, TraceEvent};

/// The highest device index an export accepts: PyTorch's `device_traces` has one list per index
/// below it, so a stray huge index would otherwise cost a list per index.
pub const MAX_EXPORT_DEVICE: u32 = 65_535;

/// Why a snapshot cannot be exported. Not retryable: the snapshot itself must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// A segment or event is on a device index past [`MAX_EXPORT_DEVICE`].
    #[error(
        "device index {device} is past {max}; PyTorch's snapshot has one trace list per device \
         index, so renumber the devices from 0 before exporting"
    )]
    DeviceOutOfRange {
        /// The device index.
        device: u32,
        /// [`MAX_EXPORT_DEVICE`].
        max: u32,
    },
}

impl From<ExportError> for io::Error {
    fn from(error: ExportError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, error)
    }
}

/// Writes `snapshot` as a PyTorch memory snapshot pickle (protocol 4), the format of
/// `torch.cuda.memory._dump_snapshot`; see [`snapshot_to_pytorch_value`] for what it holds.
///
/// # Errors
///
/// Any error of `out`, and [`io::ErrorKind::InvalidInput`] wrapping an [`ExportError`] for a
/// device index past [`MAX_EXPORT_DEVICE`].
///
/// # Examples
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, HistorySettings, SimBackend, StreamId};
/// use blockpool::trace::pytorch::{load_pytorch_snapshot_as_snapshot, write_pytorch_snapshot};
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// alloc.record_memory_history(HistorySettings::default())?;
/// let block = alloc.allocate(0, 1000, StreamId::DEFAULT)?;
/// let snapshot = alloc.snapshot();
/// let mut file = Vec::new();
/// write_pytorch_snapshot(&snapshot, &mut file)?;
/// assert_eq!(load_pytorch_snapshot_as_snapshot(&file)?, snapshot);
/// # drop(block);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_pytorch_snapshot<W: Write>(snapshot: &Snapshot, out: W) -> io::Result<()> {
    let value = snapshot_to_pytorch_value(snapshot)?;
    write_to(&value, out)
}

/// The plain-data tree of `snapshot` in PyTorch's newest schema, ready for
/// [`pickle::write`](crate::trace::pickle::write).
///
/// The root holds `segments`, `device_traces` (one list per device index, from 0 to the
/// highest device present), `allocator_settings` (the recorded ones whole, from
/// [`PytorchDetails`](crate::trace::PytorchDetails), with `PYTORCH_CUDA_ALLOC_CONF` the
/// snapshot's configuration; else when the configuration is known,
/// `PYTORCH_CUDA_ALLOC_CONF` and `expandable_segments`), `external_annotations` (the events
/// an import inserted from a file's own, written back there, so they take no index in
/// `device_traces`: see [`Snapshot::event_numbers`]), and blockpool's table. `segment_pool_id` is the segment's recorded private pool, else `(0, 0)`;
/// an entry's `compile_context` is written where one was recorded. A segment is written as PyTorch writes one (`device, address, total_size,
/// allocated_size, active_size, requested_size, stream, segment_type, segment_pool_id,
/// is_expandable, frames, blocks`), `is_expandable` from [`Segment::expandable`]; a block as
/// `address, size, requested_size, state, frames`. A
/// trace entry has `action` (annotations are `user_defined`), `addr` (for `oom` also
/// `device_free`, the key PyTorch uses), `size` (the request, for block events), `stream`,
/// `time_us` (microseconds since the epoch when the snapshot's time origin is known, else since
/// the origin), `frames` and `user_metadata` (the tag path, `a/b`).
///
/// # Errors
///
/// [`ExportError::DeviceOutOfRange`] for a device index past [`MAX_EXPORT_DEVICE`].
pub fn snapshot_to_pytorch_value(snapshot: &Snapshot) -> Result<Value, ExportError> {
    let devices = device_count(snapshot)?;
    let exporter = Exporter::new(snapshot);
    let segments = snapshot
        .segments
        .iter()
        .map(|segment| exporter.segment(segment))
        .collect();
    let mut traces: Vec<Vec<Value>> = vec![Vec::new(); devices];
    let compile_contexts: HashMap<usize, &Arc<str>> = snapshot
        .pytorch
        .compile_contexts
        .iter()
        .map(|(index, text)| (*index, text))
        .collect();
    let external = annotations::external_entries(snapshot);
    let mut external_annotations = Vec::new();
    for (index, event) in snapshot.events.iter().enumerate() {
        if let Some(Some(annotation)) = external.get(index) {
            external_annotations.push(exporter.external_annotation(event, annotation));
            continue;
        }
        let entry = exporter.entry(event, compile_contexts.get(&index).copied());
        // device_count saw every device, so the index is in range.
        if let Some(trace) = traces.get_mut(event.device as usize) {
            trace.push(entry);
        }
    }
    let k = &exporter.keys;
    let mut root = vec![
        (k.segments.clone(), list(segments)),
        (
            k.device_traces.clone(),
            list(traces.into_iter().map(list).collect()),
        ),
    ];
    if !snapshot.pytorch.allocator_settings.is_empty() {
        root.push((k.allocator_settings.clone(), recorded_settings(snapshot)));
    } else if let Some(config) = &snapshot.allocator_config {
        let settings = vec![
            (k.alloc_conf.clone(), text(config)),
            (
                k.expandable_segments.clone(),
                Value::Bool(extras::expandable_segments(config)),
            ),
        ];
        root.push((k.allocator_settings.clone(), dict(settings)));
    }
    root.push((k.external_annotations.clone(), list(external_annotations)));
    root.push((text(extras::ROOT), exporter.table()));
    Ok(dict(root))
}

/// The recorded `allocator_settings`, whole and in order; `PYTORCH_CUDA_ALLOC_CONF` is the
/// snapshot's configuration where it has one.
fn recorded_settings(snapshot: &Snapshot) -> Value {
    const CONF: &str = "PYTORCH_CUDA_ALLOC_CONF";
    let mut pairs: Vec<(Value, Value)> = snapshot
        .pytorch
        .allocator_settings
        .iter()
        .map(
            |(key, value)| match (key.as_str(), &snapshot.allocator_config) {
                (CONF, Some(config)) => (text(key), text(config)),
                _ => (text(key), setting(value)),
            },
        )
        .collect();
    let has_conf = snapshot
        .pytorch
        .allocator_settings
        .iter()
        .any(|(k, _)| k == CONF);
    if let (false, Some(config)) = (has_conf, &snapshot.allocator_config) {
        pairs.insert(0, (text(CONF), text(config)));
    }
    dict(pairs)
}

/// A settings value as the plain data PyTorch wrote.
fn setting(value: &SettingValue) -> Value {
    match value {
        SettingValue::None => Value::None,
        SettingValue::Bool(flag) => Value::Bool(*flag),
        SettingValue::Int(n) => Value::Int(*n),
        SettingValue::Float(x) => Value::Float(*x),
        SettingValue::Text(s) => text(s),
        SettingValue::List(items) => list(items.iter().map(setting).collect()),
        SettingValue::Map(pairs) => dict(
            pairs
                .iter()
                .map(|(key, value)| (text(key), setting(value)))
                .collect(),
        ),
    }
}

/// One trace list per device index up to the highest present.
fn device_count(snapshot: &Snapshot) -> Result<usize, ExportError> {
    let highest = snapshot
        .segments
        .iter()
        .map(|s| s.device)
        .chain(snapshot.events.iter().map(|e| e.device))
        .max();
    match highest {
        None => Ok(0),
        Some(device) if device > MAX_EXPORT_DEVICE => Err(ExportError::DeviceOutOfRange {
            device,
            max: MAX_EXPORT_DEVICE,
        }),
        Some(device) => Ok(device as usize + 1),
    }
}

fn text(s: &str) -> Value {
    Value::Str(Arc::from(s))
}

fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

fn dict(pairs: Vec<(Value, Value)>) -> Value {
    Value::Dict(Arc::new(pairs))
}

/// A `u64` as a Python int: `Int` when it fits in `i64`, else the little-endian bytes of a
/// positive `BigInt`.
pub(super) fn int(n: u64) -> Value {
    match i64::try_from(n) {
        Ok(small) => Value::Int(small),
        Err(_) => {
            let mut bytes = n.to_le_bytes().to_vec();
            bytes.push(0); // sign byte: positive
            Value::BigInt(bytes.into())
        }
    }
}

/// Every key, built once so each is one shared string the writer memoizes.
struct Keys {
    segments: Value,
    device_traces: Value,
    allocator_settings: Value,
    external_annotations: Value,
    alloc_conf: Value,
    expandable_segments: Value,
    device: Value,
    address: Value,
    total_size: Value,
    allocated_size: Value,
    active_size: Value,
    requested_size: Value,
    stream: Value,
    segment_type: Value,
    segment_pool_id: Value,
    is_expandable: Value,
    frames: Value,
    blocks: Value,
    size: Value,
    state: Value,
    action: Value,
    addr: Value,
    device_free: Value,
    time_us: Value,
    compile_context: Value,
    user_metadata: Value,
    name: Value,
    stage: Value,
    filename: Value,
    line: Value,
    context: Value,
    block_size: Value,
    requested: Value,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            segments: text("segments"),
            device_traces: text("device_traces"),
            allocator_settings: text("allocator_settings"),
            external_annotations: text("external_annotations"),
            alloc_conf: text("PYTORCH_CUDA_ALLOC_CONF"),
            expandable_segments: text("expandable_segments"),
            device: text("device"),
            address: text("address"),
            total_size: text("total_size"),
            allocated_size: text("allocated_size"),
            active_size: text("active_size"),
            requested_size: text("requested_size"),
            stream: text("stream"),
            segment_type: text("segment_type"),
            segment_pool_id: text("segment_pool_id"),
            is_expandable: text("is_expandable"),
            frames: text("frames"),
            blocks: text("blocks"),
            size: text("size"),
            state: text("state"),
            action: text("action"),
            addr: text("addr"),
            device_free: text("device_free"),
            time_us: text("time_us"),
            compile_context: text("compile_context"),
            user_metadata: text("user_metadata"),
            name: text("name"),
            stage: text("stage"),
            filename: text("filename"),
            line: text("line"),
            context: text(extras::CONTEXT),
            block_size: text(extras::BLOCK_SIZE),
            requested: text(extras::REQUESTED),
        }
    }
}

/// Conversion state: shared keys and names, and the frame list and tag path of each context.
struct Exporter<'s> {
    snapshot: &'s Snapshot,
    keys: Keys,
    /// `action` values by [`Action::ALL`] index.
    actions: Vec<Value>,
    states: [Value; 3],
    small: Value,
    large: Value,
    pool_id: Value,
    /// Frame list of context `id` at index `id` (index 0: none, the empty list).
    frame_lists: Vec<Value>,
    /// `user_metadata` of context `id` at index `id`.
    tag_paths: Vec<Value>,
}

impl<'s> Exporter<'s> {
    fn new(snapshot: &'s Snapshot) -> Exporter<'s> {
        let keys = Keys::new();
        let empty_list = list(Vec::new());
        let empty_text = text("");
        let mut frame_lists = vec![empty_list];
        let mut tag_paths = vec![empty_text.clone()];
        let mut frame_dicts: HashMap<&Frame, Value> = HashMap::new();
        let mut tag_frames: HashMap<&str, Value> = HashMap::new();
        let tag_file = text(TAG_FILENAME);
        for (_, context) in snapshot.contexts.iter() {
            let mut frames: Vec<Value> = context
                .frames
                .iter()
                .map(|frame| {
                    frame_dicts
                        .entry(frame)
                        .or_insert_with(|| {
                            dict(vec![
                                (keys.name.clone(), text(&frame.name)),
                                (keys.filename.clone(), text(&frame.filename)),
                                (keys.line.clone(), int(u64::from(frame.line))),
                            ])
                        })
                        .clone()
                })
                .collect();
            frames.extend(context.tags.iter().rev().map(|tag| {
                tag_frames
                    .entry(tag)
                    .or_insert_with(|| {
                        dict(vec![
                            (keys.name.clone(), Value::Str(Arc::clone(tag))),
                            (keys.filename.clone(), tag_file.clone()),
                            (keys.line.clone(), Value::Int(0)),
                        ])
                    })
                    .clone()
            }));
            frame_lists.push(list(frames));
            // Cut as a tag is: the path of a deep stack of long tags would be written once per
            // context, each one longer than the last.
            tag_paths.push(if context.tags.is_empty() {
                empty_text.clone()
            } else {
                Value::Str(crate::event::bounded_tag(&context.tags.join("/")))
            });
        }
        Exporter {
            snapshot,
            keys,
            actions: Action::ALL.iter().map(|a| text(a.pytorch_name())).collect(),
            states: BlockState::ALL.map(|s| text(s.as_str())),
            small: text(pool_name(crate::pool::PoolKind::Small)),
            large: text(pool_name(crate::pool::PoolKind::Large)),
            pool_id: Value::Tuple(Arc::new(vec![Value::Int(0), Value::Int(0)])),
            frame_lists,
            tag_paths,
        }
    }

    /// The frame list of `id`; an id the snapshot lacks has none.
    fn frames(&self, id: ContextId) -> Value {
        let index = id.0 as usize;
        self.frame_lists
            .get(index)
            .unwrap_or(&self.frame_lists[0])
            .clone()
    }

    /// Pushes the `blockpool_context` key when there is a context.
    fn push_context(&self, pairs: &mut Vec<(Value, Value)>, id: ContextId) {
        if id != ContextId::NONE {
            pairs.push((self.keys.context.clone(), int(u64::from(id.0))));
        }
    }

    fn segment(&self, segment: &Segment) -> Value {
        let k = &self.keys;
        let pool = match segment.pool {
            crate::pool::PoolKind::Small => self.small.clone(),
            crate::pool::PoolKind::Large => self.large.clone(),
        };
        let blocks = segment.blocks.iter().map(|b| self.block(b)).collect();
        let mut pairs = vec![
            (k.device.clone(), int(u64::from(segment.device))),
            (k.address.clone(), int(segment.address)),
            (k.total_size.clone(), int(segment.size)),
            (
                k.allocated_size.clone(),
                int(segment.bytes_in(BlockState::ActiveAllocated)),
            ),
            (k.active_size.clone(), int(segment.active_bytes())),
            (k.requested_size.clone(), int(segment.requested_bytes())),
            (k.stream.clone(), int(segment.stream.raw())),
            (k.segment_type.clone(), pool),
            (k.segment_pool_id.clone(), self.pool_id(segment)),
            (k.is_expandable.clone(), Value::Bool(segment.expandable)),
            (k.frames.clone(), self.frames(segment.context)),
            (k.blocks.clone(), list(blocks)),
        ];
        self.push_context(&mut pairs, segment.context);
        dict(pairs)
    }

    /// `segment_pool_id`: the recorded private pool, else the default pool's `(0, 0)`.
    fn pool_id(&self, segment: &Segment) -> Value {
        match self
            .snapshot
            .pytorch
            .pool_of(segment.device, segment.address)
        {
            (0, 0) => self.pool_id.clone(),
            (a, b) => Value::Tuple(Arc::new(vec![int(a), int(b)])),
        }
    }

    fn block(&self, block: &Block) -> Value {
        let k = &self.keys;
        let state = match block.state {
            BlockState::ActiveAllocated => &self.states[0],
            BlockState::ActivePendingFree => &self.states[1],
            BlockState::Inactive => &self.states[2],
        };
        let mut pairs = vec![
            (k.address.clone(), int(block.address)),
            (k.size.clone(), int(block.size)),
            (k.requested_size.clone(), int(block.requested)),
            (k.state.clone(), state.clone()),
            (k.frames.clone(), self.frames(block.context)),
        ];
        self.push_context(&mut pairs, block.context);
        dict(pairs)
    }

    /// Microseconds since the epoch of `event` when the origin is known, else since the origin.
    fn time_us(&self, event: &TraceEvent) -> u64 {
        self.snapshot
            .time_origin_unix_us
            .map_or(event.time_us, |origin| origin.saturating_add(event.time_us))
    }

    /// An `external_annotations` entry, `{name, stage, device, time_us}` as PyTorch writes it.
    fn external_annotation(&self, event: &TraceEvent, annotation: &ExternalAnnotation) -> Value {
        let k = &self.keys;
        dict(vec![
            (k.name.clone(), Value::Str(Arc::clone(&annotation.name))),
            (k.stage.clone(), Value::Str(Arc::clone(&annotation.stage))),
            (k.device.clone(), int(u64::from(event.device))),
            (k.time_us.clone(), int(self.time_us(event))),
        ])
    }

    fn entry(&self, event: &TraceEvent, compile_context: Option<&Arc<str>>) -> Value {
        let k = &self.keys;
        let action_index = Action::ALL
            .iter()
            .position(|&a| a == event.action)
            .unwrap_or(0);
        let block_event = is_block_event(event.action);
        let size = if block_event {
            event.requested
        } else {
            event.size
        };
        let time_us = self.time_us(event);
        let mut pairs = Vec::with_capacity(11);
        pairs.push((k.action.clone(), self.actions[action_index].clone()));
        if event.action == Action::Oom {
            pairs.push((k.device_free.clone(), int(event.addr)));
        }
        pairs.extend([
            (k.addr.clone(), int(event.addr)),
            (k.size.clone(), int(size)),
            (k.stream.clone(), int(event.stream.raw())),
            (k.time_us.clone(), int(time_us)),
        ]);
        if let Some(compile_context) = compile_context {
            pairs.push((
                k.compile_context.clone(),
                Value::Str(Arc::clone(compile_context)),
            ));
        }
        pairs.extend([
            (k.frames.clone(), self.frames(event.context)),
            (
                k.user_metadata.clone(),
                self.tag_paths
                    .get(event.context.0 as usize)
                    .unwrap_or(&self.tag_paths[0])
                    .clone(),
            ),
        ]);
        self.push_context(&mut pairs, event.context);
        if block_event && event.size != event.requested {
            pairs.push((k.block_size.clone(), int(event.size)));
        }
        if !block_event && event.requested != 0 {
            pairs.push((k.requested.clone(), int(event.requested)));
        }
        dict(pairs)
    }

    /// blockpool's table: version, time origin and every context (tags, and the shared frame
    /// list the entries use).
    fn table(&self) -> Value {
        let tags_key = text("tags");
        let contexts = self
            .snapshot
            .contexts
            .iter()
            .map(|(id, context): (ContextId, &Context)| {
                let tags = context
                    .tags
                    .iter()
                    .map(|t| Value::Str(Arc::clone(t)))
                    .collect();
                dict(vec![
                    (tags_key.clone(), list(tags)),
                    (self.keys.frames.clone(), self.frames(id)),
                ])
            })
            .collect();
        let origin = self.snapshot.time_origin_unix_us.map_or(Value::None, int);
        let mut table = vec![
            (text("version"), int(extras::VERSION)),
            (text("time_origin_unix_us"), origin),
            (text("contexts"), list(contexts)),
        ];
        if !self.snapshot.pytorch.allocator_settings.is_empty() {
            table.push((text(extras::SETTINGS_RECORDED), Value::Bool(true)));
        }
        dict(table)
    }
}
