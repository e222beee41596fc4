//! Which allocations a search keeps: by text in the tags or the stack, by stream and by size
//! range. Every condition given must hold.

use super::error::RequestError;
use super::model::{Allocation, TraceModel};
use super::query::Target;

/// A search, read from the query parameters `q` (tags, stack or site), `tag`, `stack`,
/// `stream`, `min_size` and `max_size` (bytes, inclusive). Text matches are substrings,
/// case-insensitive.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Text found in the tags, the stack or the site name.
    pub text: Option<String>,
    /// Text found in the tags.
    pub tag: Option<String>,
    /// Text found in the stack.
    pub stack: Option<String>,
    /// The stream handle.
    pub stream: Option<u64>,
    /// Smallest size kept, in bytes.
    pub min_size: Option<u64>,
    /// Largest size kept, in bytes.
    pub max_size: Option<u64>,
}

impl Filter {
    /// The filter a request's parameters describe.
    pub fn from_target(target: &Target) -> Result<Filter, RequestError> {
        let text = |name| target.text(name).map(|t| t.trim().to_lowercase());
        Ok(Filter {
            text: text("q").filter(|t| !t.is_empty()),
            tag: text("tag").filter(|t| !t.is_empty()),
            stack: text("stack").filter(|t| !t.is_empty()),
            stream: target.number("stream")?,
            min_size: target.number("min_size")?,
            max_size: target.number("max_size")?,
        })
    }

    /// Per context id, whether its texts match; `None` when no text condition is given.
    pub fn context_mask(&self, model: &TraceModel) -> Option<Vec<bool>> {
        if self.text.is_none() && self.tag.is_none() && self.stack.is_none() {
            return None;
        }
        let found =
            |hay: &str, needle: &Option<String>| needle.as_deref().is_none_or(|n| hay.contains(n));
        Some(
            model
                .contexts
                .iter()
                .map(|c| {
                    let text_found = self.text.as_deref().is_none_or(|n| {
                        c.tags.contains(n)
                            || c.stack.contains(n)
                            || c.site.to_lowercase().contains(n)
                    });
                    text_found && found(&c.tags, &self.tag) && found(&c.stack, &self.stack)
                })
                .collect(),
        )
    }

    /// Whether `allocation` passes, given the [`context_mask`](Filter::context_mask).
    pub fn keeps(&self, allocation: &Allocation, mask: Option<&[bool]>) -> bool {
        self.stream.is_none_or(|s| allocation.stream == s)
            && self.min_size.is_none_or(|m| allocation.size >= m)
            && self.max_size.is_none_or(|m| allocation.size <= m)
            && mask.is_none_or(|m| {
                m.get(allocation.context.0 as usize)
                    .copied()
                    .unwrap_or(false)
            })
    }
}
