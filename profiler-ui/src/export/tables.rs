//! The rows of one trace's tables (see the [module docs](super) for the schema): each device's
//! events with the memory after each, the allocations with where they were made and freed,
//! the contexts with their sites, frames, stacks and tags, the end state's segments and
//! blocks, and what the file says about itself.

use super::table::{optional, required, Cell, Column, Kind, TableWriter};
use crate::analysis::frames::FrameView;
use crate::analysis::sites::SiteNames;
use crate::analysis::timeline::walker;
use blockpool::trace::snapshot::pool_name;
use blockpool::trace::{Action, BlockState, ContextId, Frame, Snapshot};
use std::collections::HashMap;
use std::path::Path;

/// The tables' names, in the order they are written.
pub const TABLE_NAMES: [&str; 11] = [
    "source",
    "settings",
    "devices",
    "events",
    "allocations",
    "contexts",
    "tags",
    "stacks",
    "frames",
    "segments",
    "blocks",
];

const SOURCE: &[Column] = &[
    required("path", Kind::Text),
    required("format", Kind::Text),
    optional("allocator_config", Kind::Text),
    optional("time_origin_unix_us", Kind::U64),
];
const SETTINGS: &[Column] = &[required("key", Kind::Text), required("value", Kind::Text)];
const DEVICES: &[Column] = &[
    required("device", Kind::U32),
    required("events", Kind::U64),
    required("start_allocated", Kind::U64),
    required("start_reserved", Kind::U64),
    required("start_active", Kind::U64),
    required("start_requested", Kind::U64),
    required("end_reserved", Kind::U64),
];
const EVENTS: &[Column] = &[
    required("device", Kind::U32),
    required("position", Kind::U64),
    optional("number", Kind::U64),
    required("action", Kind::Text),
    required("address", Kind::U64),
    required("size", Kind::U64),
    required("requested", Kind::U64),
    required("stream", Kind::U64),
    required("time_us", Kind::U64),
    optional("context", Kind::U32),
    required("device_allocated", Kind::U64),
    required("device_reserved", Kind::U64),
    required("device_active", Kind::U64),
    required("device_requested", Kind::U64),
];
const ALLOCATIONS: &[Column] = &[
    required("device", Kind::U32),
    required("address", Kind::U64),
    required("size", Kind::U64),
    required("requested", Kind::U64),
    optional("context", Kind::U32),
    required("site", Kind::Text),
    optional("allocated_at", Kind::U64),
    optional("freed_at", Kind::U64),
];
const CONTEXTS: &[Column] = &[
    required("context", Kind::U32),
    required("site", Kind::Text),
    required("frames", Kind::U32),
    required("tags", Kind::U32),
];
const TAGS: &[Column] = &[
    required("context", Kind::U32),
    required("depth", Kind::U32),
    required("tag", Kind::Text),
];
const STACKS: &[Column] = &[
    required("context", Kind::U32),
    required("depth", Kind::U32),
    required("frame", Kind::U32),
];
const FRAMES: &[Column] = &[
    required("frame", Kind::U32),
    required("name", Kind::Text),
    required("filename", Kind::Text),
    optional("line", Kind::U32),
];
const SEGMENTS: &[Column] = &[
    required("device", Kind::U32),
    required("address", Kind::U64),
    required("size", Kind::U64),
    required("stream", Kind::U64),
    required("pool", Kind::Text),
    required("expandable", Kind::Bool),
    optional("context", Kind::U32),
];
const BLOCKS: &[Column] = &[
    required("device", Kind::U32),
    required("segment", Kind::U64),
    required("address", Kind::U64),
    required("size", Kind::U64),
    required("requested", Kind::U64),
    required("state", Kind::Text),
    optional("context", Kind::U32),
];

/// The rows each table got, in [`TABLE_NAMES`]' order.
pub type RowCounts = Vec<(&'static str, usize)>;

/// One writer per table.
struct Tables {
    source: TableWriter,
    settings: TableWriter,
    devices: TableWriter,
    events: TableWriter,
    allocations: TableWriter,
    contexts: TableWriter,
    tags: TableWriter,
    stacks: TableWriter,
    frames: TableWriter,
    segments: TableWriter,
    blocks: TableWriter,
}

impl Tables {
    /// Creates `folder/TABLE/PARTITION/part-0.parquet` for every table.
    fn create(folder: &Path, partition: &str) -> anyhow::Result<Tables> {
        let open = |name: &str, columns: &[Column]| {
            let dir = folder.join(name).join(partition);
            std::fs::create_dir_all(&dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            TableWriter::create(&dir.join("part-0.parquet"), columns)
        };
        Ok(Tables {
            source: open("source", SOURCE)?,
            settings: open("settings", SETTINGS)?,
            devices: open("devices", DEVICES)?,
            events: open("events", EVENTS)?,
            allocations: open("allocations", ALLOCATIONS)?,
            contexts: open("contexts", CONTEXTS)?,
            tags: open("tags", TAGS)?,
            stacks: open("stacks", STACKS)?,
            frames: open("frames", FRAMES)?,
            segments: open("segments", SEGMENTS)?,
            blocks: open("blocks", BLOCKS)?,
        })
    }

    /// Writes every table's footer.
    fn finish(self) -> anyhow::Result<RowCounts> {
        let all = [
            self.source,
            self.settings,
            self.devices,
            self.events,
            self.allocations,
            self.contexts,
            self.tags,
            self.stacks,
            self.frames,
            self.segments,
            self.blocks,
        ];
        TABLE_NAMES
            .into_iter()
            .zip(all)
            .map(|(name, writer)| Ok((name, writer.finish()?)))
            .collect()
    }
}

/// Writes the tables of `snapshot` (read from `source`, in `format`) into `folder`'s
/// `TABLE/PARTITION/part-0.parquet` files, creating the folders.
pub fn write_tables(
    snapshot: &Snapshot,
    source: &Path,
    format: &str,
    folder: &Path,
    partition: &str,
) -> anyhow::Result<RowCounts> {
    let mut tables = Tables::create(folder, partition)?;
    tables.source.push(&[
        Cell::Text(Some(&source.display().to_string())),
        Cell::Text(Some(format)),
        Cell::Text(snapshot.allocator_config.as_deref()),
        Cell::U64(snapshot.time_origin_unix_us),
    ])?;
    for (key, value) in &snapshot.pytorch.allocator_settings {
        tables
            .settings
            .push(&[Cell::Text(Some(key)), Cell::Text(Some(&value.to_string()))])?;
    }
    let names = SiteNames::new(snapshot, FrameView::User);
    // Each device's events and segments apart, in one pass over them.
    for (device, part) in snapshot.by_device() {
        device_rows(&part, device, &names, &mut tables)?;
    }
    context_rows(snapshot, &names, &mut tables)?;
    state_rows(snapshot, &mut tables)?;
    tables.finish()
}

/// The id a context column holds: `None` for no context.
fn context_cell(context: ContextId) -> Cell<'static> {
    Cell::U32((context != ContextId::NONE).then_some(context.0))
}

/// An allocation not yet freed at the walk's position.
struct Open {
    size: u64,
    requested: u64,
    context: ContextId,
    allocated_at: Option<u64>,
}

/// The device's row, its events and its allocations; `snapshot` holds the device's events and
/// segments (a part of [`Snapshot::by_device`]), `names` the whole trace's sites.
fn device_rows(
    snapshot: &Snapshot,
    device: u32,
    names: &SiteNames,
    tables: &mut Tables,
) -> anyhow::Result<()> {
    let mut walker = walker(snapshot, device)?;
    let start = walker.totals();
    let end_reserved = snapshot.device_segments(device).map(|s| s.size).sum();
    let numbers = snapshot.event_numbers(device);
    let mut open: HashMap<u64, Open> = HashMap::new();
    let state = walker.state();
    let blocks = state.segments.iter().flat_map(|s| &s.blocks);
    for block in blocks.chain(&state.unsegmented) {
        if block.state == BlockState::ActiveAllocated {
            open.insert(
                block.address,
                Open {
                    size: block.size,
                    requested: block.requested,
                    context: block.context,
                    allocated_at: None,
                },
            );
        }
    }
    let mut allocation = |address: u64, block: Open, freed_at: Option<u64>| {
        let site = names
            .of_allocation(block.context, block.allocated_at.is_none())
            .label();
        tables.allocations.push(&[
            Cell::U32(Some(device)),
            Cell::U64(Some(address)),
            Cell::U64(Some(block.size)),
            Cell::U64(Some(block.requested)),
            context_cell(block.context),
            Cell::Text(Some(&site)),
            Cell::U64(block.allocated_at),
            Cell::U64(freed_at),
        ])
    };
    let mut position = 0u64;
    while let Some(event) = walker.step().copied() {
        let index = position as usize;
        position += 1;
        match event.action {
            Action::Alloc => {
                // The block as the walk knows it: its size is the end state's when it lives on
                // there, else the request rounded as the file's allocator rounds it.
                let block = walker.active_block(event.addr);
                let block = Open {
                    size: block.as_ref().map_or(event.size, |b| b.size),
                    requested: block.as_ref().map_or(event.requested, |b| b.requested),
                    context: event.context,
                    allocated_at: Some(position),
                };
                if let Some(earlier) = open.insert(event.addr, block) {
                    // The walker refuses an alloc over a live block; a second one is a bug.
                    allocation(event.addr, earlier, Some(position))?;
                }
            }
            Action::FreeRequested => {
                if let Some(block) = open.remove(&event.addr) {
                    allocation(event.addr, block, Some(position))?;
                }
            }
            _ => {}
        }
        let totals = walker.totals();
        tables.events.push(&[
            Cell::U32(Some(device)),
            Cell::U64(Some(position)),
            Cell::U64(numbers.number(index).map(|n| n as u64)),
            Cell::Text(Some(event.action.as_str())),
            Cell::U64(Some(event.addr)),
            Cell::U64(Some(event.size)),
            Cell::U64(Some(event.requested)),
            Cell::U64(Some(event.stream.raw())),
            Cell::U64(Some(event.time_us)),
            context_cell(event.context),
            Cell::U64(Some(totals.allocated_bytes)),
            Cell::U64(Some(totals.reserved_bytes)),
            Cell::U64(Some(totals.active_bytes)),
            Cell::U64(Some(totals.requested_bytes)),
        ])?;
    }
    // Alive at the end, lowest address first.
    let mut alive: Vec<(u64, Open)> = open.into_iter().collect();
    alive.sort_unstable_by_key(|(address, _)| *address);
    for (address, block) in alive {
        allocation(address, block, None)?;
    }
    tables.devices.push(&[
        Cell::U32(Some(device)),
        Cell::U64(Some(position)),
        Cell::U64(Some(start.allocated_bytes)),
        Cell::U64(Some(start.reserved_bytes)),
        Cell::U64(Some(start.active_bytes)),
        Cell::U64(Some(start.requested_bytes)),
        Cell::U64(Some(end_reserved)),
    ])
}

/// Each context with its site, tags and frames (innermost first), each distinct frame
/// numbered once.
fn context_rows(snapshot: &Snapshot, names: &SiteNames, tables: &mut Tables) -> anyhow::Result<()> {
    let mut frame_ids: HashMap<&Frame, u32> = HashMap::new();
    let count = |n: usize| Cell::U32(Some(u32::try_from(n).unwrap_or(u32::MAX)));
    for (id, context) in snapshot.contexts.iter() {
        tables.contexts.push(&[
            Cell::U32(Some(id.0)),
            Cell::Text(Some(&names.get(id).label())),
            count(context.frames.len()),
            count(context.tags.len()),
        ])?;
        for (depth, tag) in (0u32..).zip(&context.tags) {
            tables.tags.push(&[
                Cell::U32(Some(id.0)),
                Cell::U32(Some(depth)),
                Cell::Text(Some(tag)),
            ])?;
        }
        for (depth, frame) in (0u32..).zip(&context.frames) {
            let next = u32::try_from(frame_ids.len()).unwrap_or(u32::MAX);
            let frame_id = *frame_ids.entry(frame).or_insert(next);
            if frame_id == next {
                tables.frames.push(&[
                    Cell::U32(Some(frame_id)),
                    Cell::Text(Some(&frame.name)),
                    Cell::Text(Some(&frame.filename)),
                    Cell::U32((frame.line != 0).then_some(frame.line)),
                ])?;
            }
            tables.stacks.push(&[
                Cell::U32(Some(id.0)),
                Cell::U32(Some(depth)),
                Cell::U32(Some(frame_id)),
            ])?;
        }
    }
    Ok(())
}

/// The end state: segments and their blocks.
fn state_rows(snapshot: &Snapshot, tables: &mut Tables) -> anyhow::Result<()> {
    for segment in &snapshot.segments {
        tables.segments.push(&[
            Cell::U32(Some(segment.device)),
            Cell::U64(Some(segment.address)),
            Cell::U64(Some(segment.size)),
            Cell::U64(Some(segment.stream.raw())),
            Cell::Text(Some(pool_name(segment.pool))),
            Cell::Bool(segment.expandable),
            context_cell(segment.context),
        ])?;
        for block in &segment.blocks {
            tables.blocks.push(&[
                Cell::U32(Some(segment.device)),
                Cell::U64(Some(segment.address)),
                Cell::U64(Some(block.address)),
                Cell::U64(Some(block.size)),
                Cell::U64(Some(block.requested)),
                Cell::Text(Some(block.state.as_str())),
                context_cell(block.context),
            ])?;
        }
    }
    Ok(())
}
