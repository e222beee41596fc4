//! From the plain-data tree to [`PytorchSnapshot`]: which form the file has, the segments and
//! blocks, the trace entries, and frame lists converted once per shared list.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use super::error::SnapshotError;
use super::fields::{bool_at, list, str_at, u64_at, wrong_type, Fields, Path};
use super::model::{
    Block, BlockState, Frame, PytorchSnapshot, PytorchTraceEntry, Schema, Segment, SegmentType,
};
use crate::trace::pickle::{read, ReadLimits, Value};
use crate::trace::{Action, AddressHasher};

/// Reads a PyTorch memory snapshot file (the bytes `torch.cuda.memory._dump_snapshot` wrote)
/// with the restricted pickle reader and its default [`ReadLimits`], then converts it with
/// [`snapshot_from_value`].
///
/// # Errors
///
/// [`SnapshotError::Pickle`] when the bytes are not a pickle of plain data (anything that would
/// import or call code is refused); the errors of [`snapshot_from_value`] otherwise.
///
/// # Examples
///
/// ```
/// use blockpool::trace::pytorch::{load_pytorch_snapshot, Schema};
///
/// // pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4)
/// let bytes = b"\x80\x04\x95\x27\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x08segments\x94]\x94\
///               \x8c\x0ddevice_traces\x94]\x94]\x94au.";
/// let snapshot = load_pytorch_snapshot(bytes)?;
/// assert_eq!(snapshot.schema, Schema::DeviceTraces);
/// assert!(snapshot.segments.is_empty());
/// assert_eq!(snapshot.device_traces, [vec![]]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn load_pytorch_snapshot(bytes: &[u8]) -> Result<PytorchSnapshot, SnapshotError> {
    let value = read(bytes, &ReadLimits::default())?;
    snapshot_from_value(&value)
}

/// Converts a snapshot read by [`pickle::read`](crate::trace::pickle::read) into the typed
/// model, accepting every form of [`Schema`]. Keys it does not know are ignored.
///
/// Required: `segments` and `device_traces` (unless the whole value is the list of segments);
/// in a segment `device`, `address`, `total_size`, `stream`, `segment_type`,
/// `allocated_size`, `active_size`, `requested_size` and `blocks`; in a block `size` and
/// `state`; in a trace entry `action`, `addr`, `size` and `stream`; in a frame `filename`,
/// `line` and `name`. Everything else is optional. A frame list shared in the value (the same
/// `Arc`) becomes one shared `Arc<[Frame]>`.
///
/// # Errors
///
/// A [`SnapshotError`] naming the path of the first value at fault: a missing required key,
/// a value of the wrong type, an int out of range, or an unknown action, block state or
/// segment type. No value makes it panic.
///
/// # Examples
///
/// ```
/// use blockpool::trace::pickle::Value;
/// use blockpool::trace::pytorch::snapshot_from_value;
/// use std::sync::Arc;
///
/// let snapshot = Value::Dict(Arc::new(vec![
///     (Value::Str("segments".into()), Value::Str("oops".into())),
///     (Value::Str("device_traces".into()), Value::List(Arc::new(vec![]))),
/// ]));
/// let error = snapshot_from_value(&snapshot).unwrap_err();
/// assert_eq!(error.to_string(), "segments: expected a list, found str");
/// ```
pub fn snapshot_from_value(value: &Value) -> Result<PytorchSnapshot, SnapshotError> {
    let mut converter = Converter::default();
    let root = Path::ROOT;
    match value {
        Value::List(_) | Value::Tuple(_) => {
            let segments = converter.segments(list(value, &root)?, &root)?;
            Ok(PytorchSnapshot {
                segments,
                device_traces: Vec::new(),
                allocator_settings: None,
                external_annotations: None,
                schema: Schema::SegmentList,
            })
        }
        Value::Dict(_) => converter.snapshot(Fields::new(value, &root)?),
        other => Err(wrong_type(&root, "a dict or a list of segments", other)),
    }
}

/// The dicts of segments, blocks, trace entries and annotations seen so far that are held in
/// more than one place, by address: a dict the file pushed again from the memo is the same
/// `Arc` at each reference. PyTorch writes each of these dicts once (only frames, frame lists
/// and strings are shared in real files), so a dict met twice is refused: expanding the copies
/// would let a few kilobytes ask for gigabytes. A dict whose `Arc` is held once cannot be met
/// twice and is not recorded, so a real file leaves this empty.
#[derive(Default)]
pub(super) struct SeenShared(HashSet<usize, BuildHasherDefault<AddressHasher>>);

impl SeenShared {
    /// Refuses `value` at `path` when it is a shared dict already met.
    pub(super) fn check(
        &mut self,
        value: &Value,
        path: &Path<'_>,
        what: &'static str,
    ) -> Result<(), SnapshotError> {
        match value {
            Value::Dict(pairs) if Arc::strong_count(pairs) > 1 => {
                if self.0.insert(Arc::as_ptr(pairs) as usize) {
                    Ok(())
                } else {
                    Err(SnapshotError::Shared {
                        path: path.to_string(),
                        what,
                    })
                }
            }
            _ => Ok(()),
        }
    }
}

/// A `segment_pool_id`: a tuple (or list) of two ints.
fn pool_id(value: &Value, path: &Path<'_>) -> Result<(u64, u64), SnapshotError> {
    match list(value, path)? {
        [first, second] => Ok((
            u64_at(first, &path.index(0))?,
            u64_at(second, &path.index(1))?,
        )),
        other => Err(SnapshotError::OutOfRange {
            path: path.to_string(),
            expected: "a pair of ints (the pool's id)",
            found: format!("{} items", other.len()),
        }),
    }
}

/// Conversion state: the frame lists already converted, and what the file has shown of its
/// form so far.
#[derive(Default)]
struct Converter {
    /// Converted frame lists by the address of the source list, which the borrowed source
    /// keeps alive and unique for the whole conversion.
    frames: HashMap<usize, Arc<[Frame]>, BuildHasherDefault<AddressHasher>>,
    /// Shared dicts met so far, to refuse one met twice.
    seen: SeenShared,
    /// Shared by every block, segment and entry without frames.
    no_frames: Arc<[Frame]>,
    /// A block without `address` was seen.
    legacy_blocks: bool,
    /// A trace entry with `compile_context` or `user_metadata` was seen.
    compile_context: bool,
    /// The addresses of the key strings of trace entries (see [`Fields::lookup`]).
    entry_keys: [usize; 9],
}

impl Converter {
    fn snapshot(&mut self, root: Fields<'_, '_>) -> Result<PytorchSnapshot, SnapshotError> {
        let path = root.path();
        let segments = self.segments(root.list("segments")?, &path.key("segments"))?;
        let traces_path = path.key("device_traces");
        let device_traces = root
            .list("device_traces")?
            .iter()
            .enumerate()
            .map(|(device, trace)| {
                let trace_path = traces_path.index(device);
                let entries = list(trace, &trace_path)?;
                let mut trace = Vec::with_capacity(entries.len());
                for (i, entry) in entries.iter().enumerate() {
                    trace.push(self.trace_entry(entry, &trace_path.index(i))?);
                }
                Ok::<_, SnapshotError>(trace)
            })
            .collect::<Result<Vec<Vec<_>>, _>>()?;
        let allocator_settings = root.get("allocator_settings").cloned();
        let schema = if self.legacy_blocks {
            Schema::LegacyBlockHistory
        } else if self.compile_context {
            Schema::CompileContext
        } else if allocator_settings.is_some() {
            Schema::AllocatorSettings
        } else {
            Schema::DeviceTraces
        };
        Ok(PytorchSnapshot {
            segments,
            device_traces,
            allocator_settings,
            external_annotations: root.get("external_annotations").cloned(),
            schema,
        })
    }

    fn segments(
        &mut self,
        items: &[Value],
        path: &Path<'_>,
    ) -> Result<Vec<Segment>, SnapshotError> {
        items
            .iter()
            .enumerate()
            .map(|(i, segment)| self.segment(segment, &path.index(i)))
            .collect()
    }

    fn segment(&mut self, value: &Value, path: &Path<'_>) -> Result<Segment, SnapshotError> {
        self.seen.check(value, path, "segment")?;
        let fields = Fields::new(value, path)?;
        let address = fields.u64("address")?;
        let segment_type = match &**fields.str("segment_type")? {
            "small" => SegmentType::Small,
            "large" => SegmentType::Large,
            other => {
                return Err(SnapshotError::UnknownSegmentType {
                    path: path.key("segment_type").to_string(),
                    name: other.to_owned(),
                })
            }
        };
        let is_expandable = match fields.get("is_expandable") {
            Some(flag) => bool_at(flag, &path.key("is_expandable"))?,
            None => false,
        };
        let segment_pool_id = match fields.get("segment_pool_id") {
            Some(id) => pool_id(id, &path.key("segment_pool_id"))?,
            None => (0, 0),
        };
        let blocks_path = path.key("blocks");
        let mut blocks = Vec::new();
        let mut next_address = Some(address);
        for (i, block) in fields.list("blocks")?.iter().enumerate() {
            let block = self.block(block, &blocks_path.index(i), next_address)?;
            next_address = block.address.checked_add(block.size);
            blocks.push(block);
        }
        Ok(Segment {
            device: fields.u32("device")?,
            address,
            total_size: fields.u64("total_size")?,
            stream: fields.u64("stream")?,
            segment_type,
            allocated_size: fields.u64("allocated_size")?,
            active_size: fields.u64("active_size")?,
            requested_size: fields.u64("requested_size")?,
            is_expandable,
            segment_pool_id,
            frames: self.optional_frames(fields.get("frames"), &path.key("frames"))?,
            blocks,
        })
    }

    /// A block; `computed_address` is where it starts if the file does not say (`None` when
    /// the blocks before it run past the end of the address space).
    fn block(
        &mut self,
        value: &Value,
        path: &Path<'_>,
        computed_address: Option<u64>,
    ) -> Result<Block, SnapshotError> {
        self.seen.check(value, path, "block")?;
        let fields = Fields::new(value, path)?;
        let size = fields.u64("size")?;
        let address = match fields.opt_u64("address")? {
            Some(address) => address,
            None => {
                self.legacy_blocks = true;
                computed_address.ok_or_else(|| SnapshotError::OutOfRange {
                    path: path.to_string(),
                    expected: "blocks that end inside the 64-bit address space",
                    found: "a block starting past it".to_owned(),
                })?
            }
        };
        let state = match &**fields.str("state")? {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            other => {
                return Err(SnapshotError::UnknownBlockState {
                    path: path.key("state").to_string(),
                    name: other.to_owned(),
                })
            }
        };
        let frames = match fields.get("frames") {
            Some(frames) => self.frames(frames, &path.key("frames"))?,
            None => self.legacy_frames(fields.get("history"), &path.key("history"))?,
        };
        Ok(Block {
            address,
            size,
            requested_size: fields.opt_u64("requested_size")?.unwrap_or(size),
            state,
            frames,
        })
    }

    /// The frames of a legacy block: those of its first `history` entry, as PyTorch's viewer
    /// takes them.
    fn legacy_frames(
        &mut self,
        history: Option<&Value>,
        path: &Path<'_>,
    ) -> Result<Arc<[Frame]>, SnapshotError> {
        let Some(history) = history else {
            return Ok(self.no_frames.clone());
        };
        let Some(first) = list(history, path)?.first() else {
            return Ok(self.no_frames.clone());
        };
        let first_path = path.index(0);
        let first = Fields::new(first, &first_path)?;
        self.optional_frames(first.get("frames"), &first_path.key("frames"))
    }

    fn trace_entry(
        &mut self,
        value: &Value,
        path: &Path<'_>,
    ) -> Result<PytorchTraceEntry, SnapshotError> {
        const KEYS: [&str; 9] = [
            "action",
            "addr",
            "device_free",
            "size",
            "stream",
            "time_us",
            "frames",
            "compile_context",
            "user_metadata",
        ];
        self.seen.check(value, path, "trace entry")?;
        let fields = Fields::new(value, path)?;
        let [action, addr, device_free, size, stream, time_us, frames, compile_context, user_metadata] =
            fields.lookup(&KEYS, &mut self.entry_keys);
        let name = str_at(fields.required("action", action)?, &path.key("action"))?;
        let action = Action::from_name(name).ok_or_else(|| SnapshotError::UnknownAction {
            path: path.key("action").to_string(),
            name: name.to_string(),
        })?;
        if compile_context.is_some() || user_metadata.is_some() {
            self.compile_context = true;
        }
        let int = |key: &'static str, value: Option<&Value>| {
            u64_at(fields.required(key, value)?, &path.key(key))
        };
        // PyTorch writes an `oom` entry's free bytes as `device_free` instead of `addr`.
        let addr = match (action, addr, device_free) {
            (Action::Oom, None, Some(free)) => u64_at(free, &path.key("device_free"))?,
            (_, addr, _) => int("addr", addr)?,
        };
        Ok(PytorchTraceEntry {
            action,
            addr,
            size: int("size", size)?,
            stream: int("stream", stream)?,
            time_us: time_us
                .map(|value| u64_at(value, &path.key("time_us")))
                .transpose()?,
            frames: self.optional_frames(frames, &path.key("frames"))?,
            compile_context: compile_context
                .map(|text| str_at(text, &path.key("compile_context")).map(Arc::clone))
                .transpose()?,
        })
    }

    fn optional_frames(
        &mut self,
        frames: Option<&Value>,
        path: &Path<'_>,
    ) -> Result<Arc<[Frame]>, SnapshotError> {
        match frames {
            Some(frames) => self.frames(frames, path),
            None => Ok(self.no_frames.clone()),
        }
    }

    /// A frame list, converted once per source list.
    fn frames(&mut self, value: &Value, path: &Path<'_>) -> Result<Arc<[Frame]>, SnapshotError> {
        let items = match value {
            Value::List(items) | Value::Tuple(items) => items,
            other => return Err(wrong_type(path, "a list", other)),
        };
        let key = Arc::as_ptr(items) as usize;
        if let Some(frames) = self.frames.get(&key) {
            return Ok(frames.clone());
        }
        let frames: Arc<[Frame]> = items
            .iter()
            .enumerate()
            .map(|(i, frame)| {
                let frame_path = path.index(i);
                let fields = Fields::new(frame, &frame_path)?;
                Ok(Frame {
                    filename: fields.str("filename")?.clone(),
                    line: fields.line("line")?,
                    name: fields.str("name")?.clone(),
                })
            })
            .collect::<Result<_, SnapshotError>>()?;
        self.frames.insert(key, frames.clone());
        Ok(frames)
    }
}
