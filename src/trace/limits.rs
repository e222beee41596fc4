//! [`ImportLimits`]: how much a trace file may expand to when read. Trace formats share values
//! by reference (a frame id listed by many contexts, a memoized pickle object pushed again), so
//! a small file can name far more than it holds; the readers keep shared values shared, and
//! these limits bound what is left: the contexts spelled out one by one.

use std::mem::size_of;

use crate::event::Frame;

/// The environment variable that overrides [`ImportLimits::max_context_bytes`] in
/// [`ImportLimits::from_env`] (and so in [`load_trace`](super::file::load_trace) and memtrace).
pub const MAX_CONTEXT_BYTES_ENV: &str = "BLOCKPOOL_MAX_CONTEXT_BYTES";

/// The environment variable that overrides [`ImportLimits::max_decompression_ratio`] in
/// [`ImportLimits::from_env`].
pub const MAX_DECOMPRESSION_RATIO_ENV: &str = "BLOCKPOOL_MAX_DECOMPRESSION_RATIO";

/// The environment variable that overrides [`ImportLimits::max_values_per_byte`] in
/// [`ImportLimits::from_env`].
pub const MAX_VALUES_PER_BYTE_ENV: &str = "BLOCKPOOL_MAX_VALUES_PER_BYTE";

/// The environment variable that sets [`ImportLimits::whole_pickle_tree`] in
/// [`ImportLimits::from_env`]: `tree` reads PyTorch pickles whole.
pub const PICKLE_READ_ENV: &str = "BLOCKPOOL_PICKLE_READ";

/// Bounds on what reading one trace may build beyond the file's own bytes.
///
/// ```
/// use blockpool::trace::ImportLimits;
///
/// let limits = ImportLimits::default();
/// assert_eq!(limits.max_context_bytes, 1 << 30);
/// assert_eq!(limits.max_decompression_ratio, 200);
/// // A 10 MB .gz may hold 2 GB; anything smaller may hold 1 GiB.
/// assert_eq!(limits.max_decompressed_bytes(10_000_000), 2_000_000_000);
/// assert_eq!(limits.max_decompressed_bytes(1_000), 1 << 30);
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
    /// How many times its own size a compressed (gzip) trace may decompress to, beyond
    /// [`min_decompressed_bytes`](Self::min_decompressed_bytes) (default 200). Real traces
    /// compress far less: PyTorch snapshots 5 to 35 times, JSON Lines traces less than 50;
    /// a file of blank lines or repeated values compresses a thousand times, and reading it
    /// whole would take minutes.
    pub max_decompression_ratio: u64,
    /// What any compressed trace may decompress to, whatever its size (default 1 GiB).
    pub min_decompressed_bytes: u64,
    /// How many values a pickle may push per byte of the file, beyond
    /// [`min_values`](Self::min_values) (default 100). Each value costs tens of bytes while
    /// it is read, so this bounds memory by the file's size: real snapshots push at most
    /// about 20 per byte of gzip and under one per byte uncompressed, where a few kilobytes
    /// of gzip can push a hundred million `None`s.
    pub max_values_per_byte: u64,
    /// How many values any pickle may push, whatever its size (default 16 Mi).
    pub min_values: u64,
    /// Read a PyTorch pickle whole (its plain-data tree, then the import) instead of taking
    /// each trace entry as it is read (default `false`). Both give the same snapshot; the
    /// whole tree costs several times the memory and time of a large file, and is kept to
    /// compare against. A file the streaming read cannot take the same way (an entry shared
    /// or out of place, a malformed entry) is read whole either way, which gives the error
    /// with its place. Context bytes ([`max_context_bytes`](Self::max_context_bytes)) are
    /// charged once per distinct frame list object read whole, once per distinct content
    /// streaming.
    pub whole_pickle_tree: bool,
}

impl Default for ImportLimits {
    fn default() -> Self {
        ImportLimits {
            max_context_bytes: 1 << 30,
            max_decompression_ratio: 200,
            min_decompressed_bytes: 1 << 30,
            max_values_per_byte: 100,
            min_values: 16 << 20,
            whole_pickle_tree: false,
        }
    }
}

impl ImportLimits {
    /// The defaults, with [`max_context_bytes`](Self::max_context_bytes) taken from
    /// [`MAX_CONTEXT_BYTES_ENV`] (`BLOCKPOOL_MAX_CONTEXT_BYTES`) and
    /// [`max_decompression_ratio`](Self::max_decompression_ratio) from
    /// [`MAX_DECOMPRESSION_RATIO_ENV`] (`BLOCKPOOL_MAX_DECOMPRESSION_RATIO`) and
    /// [`max_values_per_byte`](Self::max_values_per_byte) from [`MAX_VALUES_PER_BYTE_ENV`]
    /// (`BLOCKPOOL_MAX_VALUES_PER_BYTE`) when they hold a whole number, and
    /// [`whole_pickle_tree`](Self::whole_pickle_tree) when [`PICKLE_READ_ENV`]
    /// (`BLOCKPOOL_PICKLE_READ`) is `tree`.
    pub fn from_env() -> ImportLimits {
        let number = |name: &str| -> Option<u64> { std::env::var(name).ok()?.trim().parse().ok() };
        let mut limits = ImportLimits::default();
        if let Some(bytes) = number(MAX_CONTEXT_BYTES_ENV) {
            limits.max_context_bytes = bytes;
        }
        if let Some(ratio) = number(MAX_DECOMPRESSION_RATIO_ENV) {
            limits.max_decompression_ratio = ratio;
        }
        if let Some(values) = number(MAX_VALUES_PER_BYTE_ENV) {
            limits.max_values_per_byte = values;
        }
        limits.whole_pickle_tree = std::env::var(PICKLE_READ_ENV).is_ok_and(|read| read == "tree");
        limits
    }

    /// The most values a pickle file of `file_bytes` (as stored, compressed or not) may push:
    /// its size times [`max_values_per_byte`](Self::max_values_per_byte), at least
    /// [`min_values`](Self::min_values).
    pub fn max_pickle_values(&self, file_bytes: u64) -> u64 {
        file_bytes
            .saturating_mul(self.max_values_per_byte)
            .max(self.min_values)
    }

    /// The most bytes a compressed file of `compressed_bytes` may decompress to: its size
    /// times [`max_decompression_ratio`](Self::max_decompression_ratio), and at least
    /// [`min_decompressed_bytes`](Self::min_decompressed_bytes).
    pub fn max_decompressed_bytes(&self, compressed_bytes: u64) -> u64 {
        compressed_bytes
            .saturating_mul(self.max_decompression_ratio)
            .max(self.min_decompressed_bytes)
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
