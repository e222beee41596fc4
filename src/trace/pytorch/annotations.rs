//! Events the import inserted from `external_annotations`, written back there on export, so
//! that they take no index in `device_traces` and a file read, converted and written again
//! keeps PyTorch's numbering of its trace entries.
//!
//! The import turns each `{stage, name, device, time_us}` entry into an `annotate` event whose
//! tags are the device's `record_function` stack after it (see [`import`](super::import));
//! [`ExternalAnnotation::from_stack_change`] reads the entry back from the stack before and
//! after, and importing the entry gives the same stack again.

use std::sync::Arc;

use crate::trace::{Action, Snapshot, TraceEvent};

/// One `external_annotations` entry: `stage` and `name`; the device and time are the event's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ExternalAnnotation {
    /// `START`, `END`, or another stage.
    pub(super) stage: Arc<str>,
    /// The range's name.
    pub(super) name: Arc<str>,
}

impl ExternalAnnotation {
    /// The entry that changes the stack `before` into the tags `after` as the import reads
    /// entries: `START name` pushes, `END name` removes the innermost `name`, another stage
    /// leaves the stack and tags the event `[.., name, stage]`, and an `END` of a name not on
    /// the stack changes nothing. `None` when no one entry does it.
    pub(super) fn from_stack_change(
        before: &[Arc<str>],
        after: &[Arc<str>],
    ) -> Option<ExternalAnnotation> {
        let entry = |stage: &str, name: &Arc<str>| {
            Some(ExternalAnnotation {
                stage: Arc::from(stage),
                name: Arc::clone(name),
            })
        };
        if after.len() == before.len() + 1 && after.starts_with(before) {
            return entry("START", &after[before.len()]);
        }
        if after.len() == before.len() + 2 && after.starts_with(before) {
            let (name, stage) = (&after[before.len()], &after[before.len() + 1]);
            if &**stage != "START" && &**stage != "END" {
                return entry(stage, name);
            }
        }
        if before.len() == after.len() + 1 {
            // The removed tag is the innermost of its name: the last place the two differ.
            let at = (0..before.len()).rev().find(|&i| {
                before[..i] == after[..i]
                    && before[i + 1..] == after[i..]
                    && !before[i + 1..].contains(&before[i])
            })?;
            return entry("END", &before[at]);
        }
        if before == after {
            // An END of a range begun before recording: a name that is not on the stack.
            let mut name = String::from("<unmatched>");
            while before.iter().any(|t| **t == *name) {
                name.push('_');
            }
            return entry("END", &Arc::from(name));
        }
        None
    }
}

/// For each event of `snapshot` (by index), the `external_annotations` entry it is written back
/// as: `Some` for an inserted `annotate` event whose tags one entry gives, `None` for the
/// others, which go to `device_traces`.
pub(super) fn external_entries(snapshot: &Snapshot) -> Vec<Option<ExternalAnnotation>> {
    let mut entries = vec![None; snapshot.events.len()];
    let mut stacks: std::collections::HashMap<u32, Vec<Arc<str>>> = Default::default();
    for &index in &snapshot.pytorch.inserted_events {
        let Some(event) = snapshot.events.get(index) else {
            continue;
        };
        let Some(tags) = annotation_tags(snapshot, event) else {
            continue;
        };
        let stack = stacks.entry(event.device).or_default();
        if let Some(entry) = ExternalAnnotation::from_stack_change(stack, tags) {
            // A stage other than START and END tags the event but leaves the stack.
            if matches!(&*entry.stage, "START" | "END") {
                *stack = tags.to_vec();
            }
            entries[index] = Some(entry);
        }
    }
    entries
}

/// The tags of an `annotate` event without frames (what an external annotation becomes).
fn annotation_tags<'s>(snapshot: &'s Snapshot, event: &TraceEvent) -> Option<&'s [Arc<str>]> {
    if event.action != Action::Annotate {
        return None;
    }
    let context = snapshot.contexts.get(event.context);
    match context {
        Some(context) if context.frames.is_empty() => Some(&context.tags),
        Some(_) => None,
        None => Some(&[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    fn read(before: &[&str], after: &[&str]) -> Option<(String, String)> {
        ExternalAnnotation::from_stack_change(&tags(before), &tags(after))
            .map(|e| (e.stage.to_string(), e.name.to_string()))
    }

    #[test]
    fn stack_changes_read_back_as_the_entries_that_made_them() {
        let pair = |s: &str, n: &str| Some((s.to_string(), n.to_string()));
        assert_eq!(read(&["a"], &["a", "b"]), pair("START", "b"));
        assert_eq!(read(&["a", "b"], &["a"]), pair("END", "b"));
        assert_eq!(read(&["a", "b", "c"], &["a", "c"]), pair("END", "b"));
        assert_eq!(read(&["a"], &["a", "x", "MARK"]), pair("MARK", "x"));
        assert_eq!(read(&["a"], &["a"]), pair("END", "<unmatched>"));
        assert_eq!(read(&["a"], &["b", "c", "d", "e"]), None);
    }
}
