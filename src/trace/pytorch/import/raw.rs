//! What the import reads of the plain-data tree beside the typed model: blockpool's table and
//! keys in files it exported, and each entry's `user_metadata`. It is all read before the
//! events are built ([`Importer::read_raw`]), so the tree can be dropped first.

use std::sync::Arc;

use super::super::error::SnapshotError;
use super::super::extras;
use super::super::fields::{bool_at, str_at, u64_at, Fields, Path};
use super::{Importer, Table};
use crate::trace::pickle::Value;
use crate::trace::{Context, Frame};
use crate::AllocatorConfig;

/// What blockpool's keys and `user_metadata` say about one segment, block or trace entry.
#[derive(Default)]
pub(super) struct Extras {
    pub context: Option<u64>,
    pub block_size: Option<u64>,
    pub requested: Option<u64>,
    pub user_metadata: Option<Arc<str>>,
}

impl Extras {
    /// Whether it says nothing (a PyTorch file's entries, but for a `user_metadata`).
    pub(super) fn is_empty(&self) -> bool {
        self.context.is_none()
            && self.block_size.is_none()
            && self.requested.is_none()
            && self.user_metadata.is_none()
    }
}

/// Reads the extras of the dict at `path` in one pass over its keys.
pub(super) fn extras_of(value: Option<&Value>, path: &Path<'_>) -> Result<Extras, SnapshotError> {
    let mut extras = Extras::default();
    let Some(Value::Dict(pairs)) = value else {
        return Ok(extras);
    };
    for (key, value) in pairs.iter() {
        let Value::Str(key) = key else { continue };
        match &**key {
            extras::CONTEXT => extras.context = Some(u64_at(value, &path.key(extras::CONTEXT))?),
            extras::BLOCK_SIZE => {
                extras.block_size = Some(u64_at(value, &path.key(extras::BLOCK_SIZE))?)
            }
            extras::REQUESTED => {
                extras.requested = Some(u64_at(value, &path.key(extras::REQUESTED))?)
            }
            "user_metadata" => {
                let text = str_at(value, &path.key("user_metadata"))?;
                if !text.is_empty() {
                    extras.user_metadata = Some(Arc::clone(text));
                }
            }
            _ => {}
        }
    }
    Ok(extras)
}

/// The item `index` of the list under `key` of a dict, if all of that is there.
pub(super) fn item<'v>(value: Option<&'v Value>, key: &str, index: usize) -> Option<&'v Value> {
    let Some(Value::Dict(pairs)) = value else {
        return None;
    };
    let (_, items) = pairs
        .iter()
        .find(|(k, _)| matches!(k, Value::Str(name) if &**name == key))?;
    match items {
        Value::List(items) | Value::Tuple(items) => items.get(index),
        _ => None,
    }
}

impl<'a, 'r> Importer<'a, 'r> {
    /// Reads everything the import needs of the plain-data tree (the rounding settings, the
    /// segments, the entries' extras), and lets go of it.
    pub(super) fn read_raw(mut self) -> Result<Importer<'a, 'static>, SnapshotError> {
        // Block sizes are rounded as the file's own allocator rounded them; settings blockpool
        // does not understand round as PyTorch's defaults do (512 bytes).
        self.rounding = self
            .allocator_config()
            .as_deref()
            .and_then(|conf| AllocatorConfig::parse(conf).ok())
            .unwrap_or_default();
        self.segments = Some(self.segments()?);
        self.entry_extras = self.entry_extras()?;
        Ok(Importer {
            source: self.source,
            raw: None,
            contexts: self.contexts,
            table: self.table,
            by_pointer: self.by_pointer,
            budget: self.budget,
            rounding: self.rounding,
            segments: self.segments,
            entry_extras: self.entry_extras,
            absorbed: self.absorbed,
            segment_contexts: self.segment_contexts,
        })
    }

    /// The extras of each device's trace entries that have any, by index.
    fn entry_extras(&self) -> Result<Vec<Vec<(usize, Extras)>>, SnapshotError> {
        let traces_path = Path::ROOT.key("device_traces");
        let mut all = Vec::with_capacity(self.source.device_traces.len());
        for d in 0..self.source.device_traces.len() {
            let trace_path = traces_path.index(d);
            let mut found = Vec::new();
            if let Some(Value::List(items) | Value::Tuple(items)) =
                item(self.raw, "device_traces", d)
            {
                for (i, raw) in items.iter().enumerate() {
                    let extras = extras_of(Some(raw), &trace_path.index(i))?;
                    if !extras.is_empty() {
                        found.push((i, extras));
                    }
                }
            }
            all.push(found);
        }
        Ok(all)
    }

    pub(super) fn read_table(&mut self) -> Result<(), SnapshotError> {
        let Some(Value::Dict(pairs)) = self.raw else {
            return Ok(());
        };
        let Some((_, table)) = pairs
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(name) if &**name == extras::ROOT))
        else {
            return Ok(());
        };
        let root = Path::ROOT;
        let path = root.key(extras::ROOT);
        let fields = Fields::new(table, &path)?;
        let version = fields.u64("version")?;
        if version != extras::VERSION {
            return Err(SnapshotError::OutOfRange {
                path: path.key("version").to_string(),
                expected: "version 1 of blockpool's table (written by this blockpool)",
                found: version.to_string(),
            });
        }
        let time_origin_unix_us = match fields.require("time_origin_unix_us")? {
            Value::None => None,
            origin => Some(u64_at(origin, &path.key("time_origin_unix_us"))?),
        };
        let contexts_path = path.key("contexts");
        let mut ids = Vec::new();
        for (i, entry) in fields.list("contexts")?.iter().enumerate() {
            let entry_path = contexts_path.index(i);
            let entry = Fields::new(entry, &entry_path)?;
            let tags_path = entry_path.key("tags");
            let tags = entry
                .list("tags")?
                .iter()
                .enumerate()
                .map(|(t, tag)| str_at(tag, &tags_path.index(t)).cloned())
                .collect::<Result<Vec<Arc<str>>, _>>()?;
            let text = tags.iter().map(|t| t.len()).sum();
            self.budget
                .tags(tags.len(), text)
                .map_err(|source| SnapshotError::Limit {
                    path: tags_path.to_string(),
                    source,
                })?;
            let frames_path = entry_path.key("frames");
            let listed = entry.list("frames")?;
            // The list ends with one frame per tag, for PyTorch's viewer.
            let real =
                listed
                    .len()
                    .checked_sub(tags.len())
                    .ok_or_else(|| SnapshotError::OutOfRange {
                        path: frames_path.to_string(),
                        expected: "at least one frame per tag",
                        found: format!("{} frames for {} tags", listed.len(), tags.len()),
                    })?;
            let frames = listed[..real]
                .iter()
                .enumerate()
                .map(|(f, frame)| {
                    let frame_path = frames_path.index(f);
                    let frame = Fields::new(frame, &frame_path)?;
                    let frame = Frame {
                        name: Arc::clone(frame.str("name")?),
                        filename: Arc::clone(frame.str("filename")?),
                        line: frame.line("line")?,
                    };
                    self.budget
                        .frame(&frame.name, &frame.filename)
                        .map_err(|source| SnapshotError::Limit {
                            path: frame_path.to_string(),
                            source,
                        })?;
                    Ok(frame)
                })
                .collect::<Result<Vec<Frame>, SnapshotError>>()?;
            ids.push(self.contexts.intern(Context { tags, frames }));
        }
        let settings_recorded = match fields.get(extras::SETTINGS_RECORDED) {
            Some(flag) => bool_at(flag, &path.key(extras::SETTINGS_RECORDED))?,
            None => false,
        };
        self.table = Some(Table {
            time_origin_unix_us,
            ids,
            settings_recorded,
        });
        Ok(())
    }
}
