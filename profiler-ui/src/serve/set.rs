//! What one `memtrace serve` shows: one trace (the viewer's page, as always) or several side by
//! side (the comparison page), each with its label, and the comparison of them computed once.

use super::compare::{compare, Comparison};
use super::error::ServeError;
use super::files::FileEntry;
use super::model::TraceModel;

/// The traces one `serve` shows, in the page's order.
#[derive(Debug)]
pub struct TraceSet {
    /// Each file's path and label.
    pub files: Vec<FileEntry>,
    /// Each file's trace, in the same order.
    pub traces: Vec<TraceModel>,
    /// What `/api/compare` answers.
    pub comparison: Comparison,
}

impl TraceSet {
    /// The set of `traces` (at least one), labelled by `files`.
    pub fn new(files: Vec<FileEntry>, traces: Vec<TraceModel>) -> Result<TraceSet, ServeError> {
        debug_assert_eq!(files.len(), traces.len(), "one label per trace");
        let comparison = compare(&files, &traces)?;
        Ok(TraceSet {
            files,
            traces,
            comparison,
        })
    }

    /// Whether several files are shown: `/` is then the comparison page.
    pub fn is_comparison(&self) -> bool {
        self.traces.len() > 1
    }

    /// The trace of file `index`.
    pub fn trace(&self, index: usize) -> Option<&TraceModel> {
        self.traces.get(index)
    }
}
