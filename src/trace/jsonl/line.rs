//! One line of a trace file as JSON: a single borrowed struct with every field any line kind
//! may have, all optional, so serde parses each line in one pass without building a
//! `serde_json::Value`; the reader then decides the kind and checks the fields it needs.
//! Unknown keys are skipped (forward compatibility); a key given twice is an error.
//!
//! Names (event actions, block states, pools) are matched by visitors straight from the input,
//! so an event line allocates nothing.

use super::error::JsonlError;
use crate::pool::PoolKind;
use crate::trace::snapshot::pool_from_name;
use crate::trace::{Action, BlockState};
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// Longest value text quoted in an error, in characters.
const MAX_QUOTED_CHARS: usize = 64;

/// Every field of every line kind; which are present decides the kind.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RawLine {
    // Header.
    pub blockpool_trace: Option<u64>,
    pub created_by: Option<String>,
    pub time_origin_unix_us: Option<u64>,
    pub allocator_config: Option<String>,
    // Frame.
    pub frame: Option<u64>,
    pub name: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    // Context (definition on a context line, reference on event and segment lines).
    pub context: Option<u64>,
    pub tags: Option<Vec<String>>,
    pub frames: Option<Vec<u64>>,
    // Event.
    pub event: Option<Name<Action>>,
    pub device: Option<u32>,
    pub stream: Option<u64>,
    pub addr: Option<u64>,
    pub size: Option<u64>,
    pub requested: Option<u64>,
    pub time_us: Option<u64>,
    // Segment.
    pub segment: Option<u64>,
    pub pool: Option<Name<PoolKind>>,
    pub expandable: Option<bool>,
    pub blocks: Option<Vec<RawBlock>>,
    // End.
    pub end: Option<RawEnd>,
    // What only PyTorch's files record (see `details.rs`).
    pub pytorch: Option<serde_json::Value>,
}

/// `[address, size, requested, state, context]`.
pub(super) type RawBlock = (u64, u64, u64, Name<BlockState>, u64);

/// The end line's counts.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct RawEnd {
    pub events: Option<u64>,
    pub segments: Option<u64>,
    pub dropped_events: Option<u64>,
}

/// A name from a fixed set, or the unknown text (kept only to quote it in the error).
#[derive(Debug)]
pub(super) enum Name<T> {
    Known(T),
    Unknown(String),
}

/// The names a [`Name`] can hold.
pub(super) trait Named: Sized {
    /// The value named `name`.
    fn from_name(name: &str) -> Option<Self>;
    /// The accepted names, for errors.
    const EXPECTED: &'static str;
}

impl Named for Action {
    fn from_name(name: &str) -> Option<Action> {
        Action::from_name(name)
    }
    const EXPECTED: &'static str = "an event action (alloc, free_requested, free_completed, \
         segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot, annotate)";
}

impl Named for BlockState {
    fn from_name(name: &str) -> Option<BlockState> {
        BlockState::from_name(name)
    }
    const EXPECTED: &'static str = "active_allocated, active_pending_free or inactive";
}

impl Named for PoolKind {
    fn from_name(name: &str) -> Option<PoolKind> {
        pool_from_name(name)
    }
    const EXPECTED: &'static str = "small or large";
}

impl<T: Named> Name<T> {
    /// The value, or the error naming `field` on `line`.
    pub fn known(self, line: u64, field: &'static str) -> Result<T, JsonlError> {
        match self {
            Name::Known(value) => Ok(value),
            Name::Unknown(text) => Err(JsonlError::BadValue {
                line,
                field,
                value: quote(&text),
                expected: T::EXPECTED,
            }),
        }
    }
}

impl<'de, T: Named> Deserialize<'de> for Name<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor<T>(std::marker::PhantomData<T>);
        impl<T: Named> Visitor<'_> for NameVisitor<T> {
            type Value = Name<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name string")
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name<T>, E> {
                Ok(match T::from_name(name) {
                    Some(value) => Name::Known(value),
                    None => Name::Unknown(name.to_string()),
                })
            }
        }
        deserializer.deserialize_str(NameVisitor(std::marker::PhantomData))
    }
}

/// Parses one line; `Err` carries serde's message with the column, and whether the line looks
/// cut short (the JSON ended before the object did).
pub(super) fn parse(bytes: &[u8]) -> Result<RawLine, (String, bool)> {
    // Serde would read a struct from an array too; a line is an object.
    if let Some(at) = bytes.iter().position(|b| !b.is_ascii_whitespace()) {
        if bytes[at] != b'{' {
            let found = String::from_utf8_lossy(&bytes[at..at + 1]).into_owned();
            let message = format!(
                "expected a JSON object `{{...}}`, found `{found}` (column {})",
                at + 1
            );
            return Err((message, false));
        }
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let cut = e.is_eof();
        // serde_json says "... at line 1 column N": the line is ours to give, the column is
        // worth keeping.
        let text = e.to_string();
        let message = match text.rfind(" at line ") {
            Some(at) => format!("{} (column {})", &text[..at], e.column()),
            None => text,
        };
        (message, cut)
    })
}

/// `text` for an error message: at most [`MAX_QUOTED_CHARS`] characters.
pub(super) fn quote(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
