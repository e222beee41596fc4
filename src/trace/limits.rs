//! [`ImportLimits`]: how much a trace file may expand to when read. Trace formats share values
//! by reference (a frame id listed by many contexts, a memoized pickle object pushed again), so
//! a small file can name far more than it holds; the readers keep shared values shared, and
//! these limits bound what is left: the contexts spelled out one by one.

use std::mem::size_of;

use crate::event::Frame;

/// The environment variable that overrides [`ImportLimits::max_context_bytes`] in
/// [`ImportLimits::from_env`] (and so in [`load_trace`](super::file::load_trace) and memtrace).
pub const MAX_CONTEXT_BYTES_ENV: &str = "BLOCKPOOL_MAX_CONTEXT_BYTES";

/// Bounds on what reading one trace may build beyond the file's own bytes.
///
/// ```
/// use blockpool::trace::ImportLimits;
///
/// let limits = ImportLimits::default();
/// assert_eq!(limits.max_context_bytes, 1 << 30);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportLimits {
    /// The most bytes the contexts of one trace may spell out, each context counted once per
    /// distinct context in the file (a shared frame list once) and each of its frames and tags
    /// in full: the size of a [`Frame`] (40 bytes) plus its name and file name, 16 bytes plus
    /// the text per tag. Strings stay shared in memory, so this is what hashing and comparing
    /// the contexts costs, not what they occupy. Default 1 GiB, far above real files (the
    /// largest PyTorch snapshots we have seen spell out under 100 MiB).
    pub max_context_bytes: u64,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_context_bytes: 1 << 30,
        }
    }
}

impl ImportLimits {
    /// The defaults, with [`max_context_bytes`](Self::max_context_bytes) taken from
    /// [`MAX_CONTEXT_BYTES_ENV`] (`BLOCKPOOL_MAX_CONTEXT_BYTES`) when it holds a number of
    /// bytes.
    pub fn from_env() -> ImportLimits {
        let mut limits = ImportLimits::default();
        if let Some(bytes) = std::env::var(MAX_CONTEXT_BYTES_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            limits.max_context_bytes = bytes;
        }
        limits
    }
}

/// A limit of [`ImportLimits`] that a trace exceeds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportLimitExceeded {
    /// The contexts spell out more than [`ImportLimits::max_context_bytes`].
    #[error(
        "its contexts (call stacks and tags, each spelled out) exceed the import limit of \
         {limit} bytes; a file that names one frame or tag over and over can ask for far more \
         than it holds. If the file is trusted, raise the limit with \
         {MAX_CONTEXT_BYTES_ENV}=<bytes> (ImportLimits::max_context_bytes in the library)"
    )]
    ContextBytes {
        /// The limit in bytes.
        limit: u64,
    },
}

/// What one import has spent of [`ImportLimits::max_context_bytes`].
#[derive(Clone, Debug)]
pub(crate) struct ContextBudget {
    limit: u64,
    used: u64,
}

impl ContextBudget {
    /// Nothing spent yet.
    pub(crate) fn new(limits: &ImportLimits) -> ContextBudget {
        ContextBudget {
            limit: limits.max_context_bytes,
            used: 0,
        }
    }

    /// Spends what one frame costs; refused once past the limit.
    pub(crate) fn frame(&mut self, name: &str, filename: &str) -> Result<(), ImportLimitExceeded> {
        self.spend(size_of::<Frame>() + name.len() + filename.len())
    }

    /// Spends what `count` tags of `text_bytes` bytes together cost, at once.
    pub(crate) fn tags(
        &mut self,
        count: usize,
        text_bytes: usize,
    ) -> Result<(), ImportLimitExceeded> {
        self.spend(count.saturating_mul(16).saturating_add(text_bytes))
    }

    fn spend(&mut self, bytes: usize) -> Result<(), ImportLimitExceeded> {
        self.used = self.used.saturating_add(bytes as u64);
        if self.used > self.limit {
            return Err(ImportLimitExceeded::ContextBytes { limit: self.limit });
        }
        Ok(())
    }
}
