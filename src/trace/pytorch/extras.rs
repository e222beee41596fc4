//! What blockpool adds to PyTorch's snapshot schema, shared by [`import`](super::import) and
//! [`export`](super::export) so the two agree on every name.
//!
//! PyTorch's schema cannot say everything a [`Snapshot`](crate::trace::Snapshot) holds: its
//! `alloc` entries carry the requested size but not the block size, it has no annotation tags,
//! and its contexts are anonymous frame lists. An exported file therefore carries a few extra
//! keys, which PyTorch and its viewer ignore:
//!
//! | where | key | what |
//! |---|---|---|
//! | the root | `blockpool` | `{"version": 1, "time_origin_unix_us": int or None, "contexts": [{"tags": [str], "frames": [frame]}], "allocator_settings_recorded": True}` (the last key only when `allocator_settings` holds the settings a file recorded, not the two made from the configuration) |
//! | segment, block, trace entry | `blockpool_context` | the context id (1-based index into `contexts`), absent for none |
//! | `alloc`, `free_requested`, `free_completed` entry | `blockpool_block_size` | the block's size, when it differs from `size` (the request) |
//! | any other entry | `blockpool_requested` | `TraceEvent::requested`, when it is not 0 |
//!
//! Tags are also made visible to PyTorch's viewer, which shows frames and nothing else of a
//! context: each tag becomes one frame named after the tag in the file [`TAG_FILENAME`],
//! after the real frames (innermost tag first, so the outermost tag ends the stack as the
//! outermost frame would), and trace entries carry the tag path in `user_metadata`, which
//! newer viewers print.

/// The root key of blockpool's own table.
pub(super) const ROOT: &str = "blockpool";
/// The version of the table's layout.
pub(super) const VERSION: u64 = 1;
/// Key of the table saying `allocator_settings` are a file's own, kept whole.
pub(super) const SETTINGS_RECORDED: &str = "allocator_settings_recorded";
/// Key of a context id on a segment, block or trace entry.
pub(super) const CONTEXT: &str = "blockpool_context";
/// Key of the block size on a block event whose size differs from its request.
pub(super) const BLOCK_SIZE: &str = "blockpool_block_size";
/// Key of a non-zero `requested` on an event that is not a block event.
pub(super) const REQUESTED: &str = "blockpool_requested";
/// The file name of the frames that stand for annotation tags.
pub const TAG_FILENAME: &str = "<annotate>";

use crate::trace::Action;

/// Whether PyTorch's `size` of this action is the requested size of a block (`orig_size`).
pub(super) fn is_block_event(action: Action) -> bool {
    matches!(
        action,
        Action::Alloc | Action::FreeRequested | Action::FreeCompleted
    )
}

/// Whether an alloc-conf string turns expandable segments on (`expandable_segments:True`).
pub(super) fn expandable_segments(config: &str) -> bool {
    config.split(',').any(|option| {
        let mut parts = option.splitn(2, ':');
        let key = parts.next().unwrap_or("").trim();
        let value = parts.next().unwrap_or("").trim();
        key == "expandable_segments" && value.eq_ignore_ascii_case("true")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expandable_segments_is_read_from_the_alloc_conf() {
        assert!(expandable_segments(
            "max_split_size_mb:128, expandable_segments:True"
        ));
        assert!(!expandable_segments("expandable_segments:False"));
        assert!(!expandable_segments(""));
        assert!(!expandable_segments("expandable_segments"));
    }

    #[test]
    fn only_alloc_and_frees_report_requested_sizes() {
        let block: Vec<Action> = Action::ALL
            .into_iter()
            .filter(|&a| is_block_event(a))
            .collect();
        assert_eq!(
            block,
            [Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
        );
    }
}
