//! Allocator settings, and the parser for `BLOCKPOOL_ALLOC_CONF` in the syntax of PyTorch's
//! `PYTORCH_CUDA_ALLOC_CONF`.
//!
//! [`AllocatorConfig`] holds every knob of the device caching allocator and of the pinned host
//! cache; the pool code reads it through accessors in bytes. A config comes from a string
//! ([`AllocatorConfig::parse`], [`FromStr`]), from the environment ([`AllocatorConfig::from_env`]:
//! `BLOCKPOOL_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF`), or from code
//! ([`AllocatorConfig::builder`]). All three apply the same checks, and
//! [`Display`](fmt::Display) writes a config back in the same syntax, so that parsing what it
//! writes gives the same config. The semantics are those of PyTorch's
//! `c10/core/AllocatorConfig.cpp` and `c10/cuda/CUDAAllocatorConfig.cpp`; the few places where
//! this parser is stricter are listed on [`AllocatorConfig::parse`].

use std::fmt;
use std::num::IntErrorKind;
use std::str::FromStr;

/// Number of size classes for `roundup_power2_divisions`: powers of two from 1 MiB to 64 GiB.
pub const ROUNDUP_POWER2_INTERVALS: usize = 16;
/// Environment variable read first by [`AllocatorConfig::from_env`].
pub const ENV_VAR: &str = "BLOCKPOOL_ALLOC_CONF";
/// Environment variable read when [`ENV_VAR`] is unset: PyTorch's name for the same setting.
pub const PYTORCH_ENV_VAR: &str = "PYTORCH_CUDA_ALLOC_CONF";
/// Largest `pinned_num_register_threads` accepted (PyTorch's `pinned_max_register_threads`).
pub const PINNED_MAX_REGISTER_THREADS: usize = 128;

const MIB: usize = 1 << 20;
/// Smallest `max_split_size_mb` and `max_non_split_rounding_mb` (PyTorch's `kLargeBuffer`).
const MIN_SPLIT_SIZE_MB: u64 = 20;
const DEFAULT_MAX_NON_SPLIT_ROUNDING_SIZE: usize = 20 * MIB;
/// log2 of 1 MiB, where size class 0 starts.
const FIRST_CLASS_LOG2: u32 = 20;

// What each key accepts, as the error messages say it.
const ACCEPTS_SPLIT_MB: &str = "a whole number of MiB, at least 20";
const ACCEPTS_DIVISIONS: &str =
    "a power of two (1, 2, 4, ...) or a list such as `[256:1,512:2,>:8]`";
const ACCEPTS_LIST_SIZE: &str =
    "a size in MiB that is a power of two, or `>`, before each `:` of a list";
const ACCEPTS_LIST_DIVISIONS: &str = "0 or a power of two after each `:` of a list";
const ACCEPTS_GC_THRESHOLD: &str = "a number strictly between 0 and 1, such as 0.6";
const ACCEPTS_FRACTION: &str = "a number from 0 to 1";
const ACCEPTS_THREADS: &str = "a power of two from 1 to 128";
const ACCEPTS_RESERVE_MB: &str = "a whole number of MiB, at least 1";

/// Allocator settings. `Default` is PyTorch's default behaviour.
///
/// ```
/// use blockpool::config::AllocatorConfig;
///
/// let config: AllocatorConfig = "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]"
///     .parse()?;
/// assert_eq!(config.max_split_size(), 128 << 20);
/// assert_eq!(config.roundup_power2_divisions(1200 << 20), 4);
/// assert_eq!(config.to_string(), "max_split_size_mb:128,roundup_power2_divisions:[256:1,>:4]");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    max_split_size: usize,
    max_non_split_rounding_size: usize,
    roundup_power2_divisions: [usize; ROUNDUP_POWER2_INTERVALS],
    garbage_collection_threshold: f64,
    expandable_segments: bool,
    release_lock_on_cudamalloc: bool,
    per_process_memory_fraction: Option<f64>,
    pinned_use_cuda_host_register: bool,
    pinned_num_register_threads: usize,
    pinned_use_background_threads: bool,
    pinned_reserve_segment_size: usize,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: usize::MAX,
            max_non_split_rounding_size: DEFAULT_MAX_NON_SPLIT_ROUNDING_SIZE,
            roundup_power2_divisions: [0; ROUNDUP_POWER2_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            release_lock_on_cudamalloc: false,
            per_process_memory_fraction: None,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_use_background_threads: false,
            pinned_reserve_segment_size: 0,
        }
    }
}

impl AllocatorConfig {
    /// Largest block size that may be split, in bytes (`usize::MAX`: no limit).
    pub fn max_split_size(&self) -> usize {
        self.max_split_size
    }
    /// How much larger than a request (>= max_split_size) a cached block may be, in bytes.
    pub fn max_non_split_rounding_size(&self) -> usize {
        self.max_non_split_rounding_size
    }
    /// Number of power-of-two divisions applied to `size` bytes (0 or 1: plain 512-byte
    /// rounding).
    ///
    /// Size class `k` holds sizes from `2^(20+k)` up to `2^(21+k)` bytes; 64 GiB and more fall
    /// in the last class (15). Sizes below 1 MiB fall in class 0, which is PyTorch's observable
    /// behaviour: its older signed formula clamps them up to 0, and its current one
    /// (`log_size > 20 ? log_size - 20 : 0`) does too, so a `[1:8]` setting also rounds
    /// small-pool requests above 4 KiB. PyTorch's current formula sends size 0 (only 0) to
    /// class 15 through an unsigned wrap; it never asks for sizes below 512 bytes, so that cannot
    /// be observed there. Here 0 is class 0.
    pub fn roundup_power2_divisions(&self, size: usize) -> usize {
        self.roundup_power2_divisions[size_class(size)]
    }
    /// Divisions of every size class, class 0 (up to 2 MiB) first.
    pub fn roundup_power2_divisions_per_class(&self) -> [usize; ROUNDUP_POWER2_INTERVALS] {
        self.roundup_power2_divisions
    }
    /// Garbage-collection threshold as a fraction of the memory limit (0: off).
    pub fn garbage_collection_threshold(&self) -> f64 {
        self.garbage_collection_threshold
    }
    /// Whether expandable segments were asked for.
    pub fn expandable_segments(&self) -> bool {
        self.expandable_segments
    }
    /// Whether the device lock is released around segment allocation.
    pub fn release_lock_on_cudamalloc(&self) -> bool {
        self.release_lock_on_cudamalloc
    }
    /// Memory fraction applied to every device at construction, if any.
    pub fn per_process_memory_fraction(&self) -> Option<f64> {
        self.per_process_memory_fraction
    }
    /// Whether pinned host memory is allocated with `malloc` + `cudaHostRegister` instead of
    /// `cudaHostAlloc`.
    pub fn pinned_use_cuda_host_register(&self) -> bool {
        self.pinned_use_cuda_host_register
    }
    /// Number of threads that register pinned host memory (a power of two, default 1).
    pub fn pinned_num_register_threads(&self) -> usize {
        self.pinned_num_register_threads
    }
    /// Whether the pinned host cache processes its events on a background thread.
    pub fn pinned_use_background_threads(&self) -> bool {
        self.pinned_use_background_threads
    }
    /// Size of the pinned host segment reserved up front, in bytes (0: none).
    pub fn pinned_reserve_segment_size(&self) -> usize {
        self.pinned_reserve_segment_size
    }

    /// A builder that starts from the defaults.
    pub fn builder() -> AllocatorConfigBuilder {
        AllocatorConfigBuilder::default()
    }

    /// Parses a config string: `key:value` pairs separated by commas, as PyTorch reads
    /// `PYTORCH_CUDA_ALLOC_CONF`. The empty string is the default config.
    ///
    /// | key | value |
    /// |---|---|
    /// | `max_split_size_mb` | MiB, at least 20; larger than `usize::MAX` bytes saturates |
    /// | `max_non_split_rounding_mb` | MiB, at least 20 (default 20) |
    /// | `roundup_power2_divisions` | a power of two for every size class, or a list `[256:1,512:2,>:8]` |
    /// | `garbage_collection_threshold` | strictly between 0 and 1 |
    /// | `expandable_segments`, `release_lock_on_cudamalloc` | `True` or `False` |
    /// | `per_process_memory_fraction` | from 0 to 1 |
    /// | `pinned_use_cuda_host_register`, `pinned_use_background_threads` | `True` or `False` |
    /// | `pinned_num_register_threads` | a power of two up to 128 (default 1) |
    /// | `pinned_reserve_segment_size_mb` | MiB, at least 1 |
    /// | `backend` | `native` only |
    ///
    /// In a list, each `size:divisions` entry sets the class of `size` MiB (sizes of 32 GiB and
    /// more set the last class); the first entry also sets every class below it, and `>` sets
    /// every class above the last size given before it. Classes between two sizes keep their
    /// value. As in PyTorch, a `>` that comes before any size leaves class 0 alone.
    ///
    /// As in PyTorch: whitespace anywhere is ignored (`1 00` reads as `100`), a trailing comma
    /// is allowed, a later key overrides an earlier one, and `release_lock_on_hipmalloc` and
    /// `pinned_use_hip_host_register` are accepted as the ROCm spellings. Stricter than PyTorch:
    /// a number must be the whole value (PyTorch reads `100abc` as 100 and `-5` as a huge
    /// number), `>` may appear once in a list, and `backend:cudaMallocAsync` is refused because
    /// blockpool is itself the native allocator.
    pub fn parse(conf: &str) -> Result<Self, ConfigError> {
        let tokens = tokenize(conf);
        let mut cursor = Cursor {
            tokens: &tokens,
            pos: 0,
            end: None,
        };
        let mut config = AllocatorConfig::default();
        let mut previous: Option<&Token<'_>> = None;
        while let Some(key_token) = cursor.next() {
            if key_token.punct.is_some() {
                return Err(ConfigError::UnexpectedToken {
                    expected: "a key",
                    after: previous.map(|t| t.raw.to_owned()),
                    found: Some(key_token.raw.to_owned()),
                });
            }
            let key = Key::from_name(&key_token.text).ok_or_else(|| ConfigError::UnknownKey {
                key: key_token.raw.to_owned(),
            })?;
            cursor.expect_colon(key_token)?;
            let last = config.apply(key, key_token.raw, conf, &mut cursor)?;
            match cursor.next() {
                None => break,
                Some(t) if t.punct == Some(',') => previous = Some(t),
                Some(t) => return Err(cursor.unexpected("`,`", last.raw, Some(t))),
            }
        }
        Ok(config)
    }

    /// Reads the config from `BLOCKPOOL_ALLOC_CONF`, else from `PYTORCH_CUDA_ALLOC_CONF`, else
    /// gives the default. See [`from_env_with`](Self::from_env_with).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// Like [`from_env`](Self::from_env), with `lookup` in place of the process environment
    /// (`None`: the variable is unset).
    ///
    /// A variable that is set wins even when empty, so `BLOCKPOOL_ALLOC_CONF=` selects the
    /// defaults over whatever `PYTORCH_CUDA_ALLOC_CONF` says. An error is
    /// [`ConfigError::InEnvVar`], naming the variable.
    pub fn from_env_with<F>(mut lookup: F) -> Result<Self, ConfigError>
    where
        F: FnMut(&str) -> Option<String>,
    {
        for var in [ENV_VAR, PYTORCH_ENV_VAR] {
            if let Some(conf) = lookup(var) {
                return Self::parse(&conf).map_err(|error| ConfigError::InEnvVar {
                    var,
                    error: Box::new(error),
                });
            }
        }
        Ok(Self::default())
    }

    /// Parses the value of `key` (its name as written: `key_raw`), the `:` already read.
    /// Returns the last token of the value, for error messages about what follows it.
    fn apply<'t, 'a>(
        &mut self,
        key: Key,
        key_raw: &str,
        conf: &str,
        cursor: &mut Cursor<'t, 'a>,
    ) -> Result<&'t Token<'a>, ConfigError> {
        let after_colon = format!("{key_raw}:");
        if key == Key::RoundupPower2Divisions && cursor.peek().is_some_and(|t| t.punct == Some('['))
        {
            return self.apply_divisions_list(key_raw, conf, cursor);
        }
        let value = cursor.word("a value", &after_colon)?;
        let raw = value.raw;
        match key {
            Key::Backend => check_backend(&value.text, raw)?,
            Key::MaxSplitSizeMb => {
                self.max_split_size = split_size_from_mb(key_raw, raw, parse_mib(key_raw, value)?)?
            }
            Key::MaxNonSplitRoundingMb => {
                self.max_non_split_rounding_size =
                    split_size_from_mb(key_raw, raw, parse_mib(key_raw, value)?)?
            }
            Key::RoundupPower2Divisions => {
                let n = parse_whole(key_raw, value, ACCEPTS_DIVISIONS)?;
                let divisions = uniform_divisions(key_raw, raw, n)?;
                self.roundup_power2_divisions = [divisions; ROUNDUP_POWER2_INTERVALS];
            }
            Key::GarbageCollectionThreshold => {
                let t = parse_number(key_raw, value, ACCEPTS_GC_THRESHOLD)?;
                self.garbage_collection_threshold = gc_threshold(key_raw, raw, t)?;
            }
            Key::ExpandableSegments => self.expandable_segments = parse_bool(key_raw, value)?,
            Key::ReleaseLockOnCudamalloc => {
                self.release_lock_on_cudamalloc = parse_bool(key_raw, value)?
            }
            Key::PerProcessMemoryFraction => {
                let f = parse_number(key_raw, value, ACCEPTS_FRACTION)?;
                self.per_process_memory_fraction = Some(memory_fraction(key_raw, raw, f)?);
            }
            Key::PinnedUseCudaHostRegister => {
                self.pinned_use_cuda_host_register = parse_bool(key_raw, value)?
            }
            Key::PinnedNumRegisterThreads => {
                let n = parse_whole(key_raw, value, ACCEPTS_THREADS)?;
                self.pinned_num_register_threads = register_threads(key_raw, raw, n)?;
            }
            Key::PinnedUseBackgroundThreads => {
                self.pinned_use_background_threads = parse_bool(key_raw, value)?
            }
            Key::PinnedReserveSegmentSizeMb => {
                self.pinned_reserve_segment_size =
                    reserve_segment_size(key_raw, raw, parse_mib(key_raw, value)?)?
            }
        }
        Ok(value)
    }

    /// Parses `[size:divisions,...,>:divisions]` with PyTorch's filling rules (see
    /// [`parse`](Self::parse)), updating the classes in place as PyTorch does.
    fn apply_divisions_list<'t, 'a>(
        &mut self,
        key_raw: &str,
        conf: &str,
        cursor: &mut Cursor<'t, 'a>,
    ) -> Result<&'t Token<'a>, ConfigError> {
        let rest = &cursor.tokens[cursor.pos..];
        let (open, inner) = match rest.split_first() {
            Some(split) => split,
            None => return Err(cursor.unexpected("a value", &format!("{key_raw}:"), None)),
        };
        let Some(close_at) = inner.iter().position(|t| t.punct == Some(']')) else {
            return Err(ConfigError::UnclosedList {
                key: key_raw.to_owned(),
                list: conf[open.start..].trim_end().to_owned(),
            });
        };
        let close = &inner[close_at];
        let list = &conf[open.start..close.start + 1];
        cursor.pos += close_at + 2;

        let classes = &mut self.roundup_power2_divisions;
        let mut entries = Cursor {
            tokens: &inner[..close_at],
            pos: 0,
            end: Some("]"),
        };
        let mut first_size = true;
        let mut last_index = 0;
        let mut seen_remainder = false;
        let mut previous = open;
        while let Some(entry) = entries.next() {
            if entry.punct.is_some() {
                return Err(entries.unexpected("a size in MiB or `>`", previous.raw, Some(entry)));
            }
            entries.expect_colon(entry)?;
            let value = entries.word("a number of divisions", &format!("{}:", entry.raw))?;
            let n = parse_whole(key_raw, value, ACCEPTS_LIST_DIVISIONS)?;
            let divisions = class_divisions(key_raw, value.raw, n)?;
            if entry.text == ">" {
                if seen_remainder {
                    return Err(ConfigError::DuplicateRemainder {
                        key: key_raw.to_owned(),
                        list: list.to_owned(),
                    });
                }
                seen_remainder = true;
                // PyTorch fills from the class after the last size, even when no size came
                // before (then class 0 is left alone).
                for class in classes.iter_mut().skip(last_index + 1) {
                    *class = divisions;
                }
            } else {
                let size_mb = parse_whole(key_raw, entry, ACCEPTS_LIST_SIZE)?;
                if !size_mb.is_power_of_two() {
                    return Err(ConfigError::NotPowerOfTwo {
                        key: key_raw.to_owned(),
                        value: entry.raw.to_owned(),
                        accepted: ACCEPTS_LIST_SIZE,
                    });
                }
                // log2 of a size in MiB is its class: 1 MiB is class 0.
                let index = usize::try_from(size_mb.ilog2())
                    .map_or(ROUNDUP_POWER2_INTERVALS - 1, |i| {
                        i.min(ROUNDUP_POWER2_INTERVALS - 1)
                    });
                if first_size {
                    classes[..index].fill(divisions);
                    first_size = false;
                }
                classes[index] = divisions;
                last_index = index;
            }
            match entries.next() {
                None => break,
                Some(t) if t.punct == Some(',') => previous = t,
                Some(t) => return Err(entries.unexpected("`,` or `]`", value.raw, Some(t))),
            }
        }
        Ok(close)
    }
}

/// Size class of `size` bytes for `roundup_power2_divisions` (see the accessor's docs).
fn size_class(size: usize) -> usize {
    let log2 = size.checked_ilog2().unwrap_or(0);
    let class = usize::try_from(log2.saturating_sub(FIRST_CLASS_LOG2)).unwrap_or(usize::MAX);
    class.min(ROUNDUP_POWER2_INTERVALS - 1)
}

impl FromStr for AllocatorConfig {
    type Err = ConfigError;

    fn from_str(conf: &str) -> Result<Self, ConfigError> {
        Self::parse(conf)
    }
}

impl fmt::Display for AllocatorConfig {
    /// Writes the keys that differ from the default, in the parser's syntax (the default
    /// config writes the empty string).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default = AllocatorConfig::default();
        let mut sep = "";
        let mut key = |f: &mut fmt::Formatter<'_>, key: Key| {
            let result = write!(f, "{sep}{}:", key.name());
            sep = ",";
            result
        };
        if self.max_split_size != default.max_split_size {
            key(f, Key::MaxSplitSizeMb)?;
            write!(f, "{}", self.max_split_size / MIB)?;
        }
        if self.max_non_split_rounding_size != default.max_non_split_rounding_size {
            key(f, Key::MaxNonSplitRoundingMb)?;
            write!(f, "{}", self.max_non_split_rounding_size / MIB)?;
        }
        if self.roundup_power2_divisions != default.roundup_power2_divisions {
            key(f, Key::RoundupPower2Divisions)?;
            write_divisions(f, &self.roundup_power2_divisions)?;
        }
        if self.garbage_collection_threshold != default.garbage_collection_threshold {
            key(f, Key::GarbageCollectionThreshold)?;
            write!(f, "{}", self.garbage_collection_threshold)?;
        }
        if self.expandable_segments {
            key(f, Key::ExpandableSegments)?;
            f.write_str("True")?;
        }
        if self.release_lock_on_cudamalloc {
            key(f, Key::ReleaseLockOnCudamalloc)?;
            f.write_str("True")?;
        }
        if let Some(fraction) = self.per_process_memory_fraction {
            key(f, Key::PerProcessMemoryFraction)?;
            write!(f, "{fraction}")?;
        }
        if self.pinned_use_cuda_host_register {
            key(f, Key::PinnedUseCudaHostRegister)?;
            f.write_str("True")?;
        }
        if self.pinned_num_register_threads != default.pinned_num_register_threads {
            key(f, Key::PinnedNumRegisterThreads)?;
            write!(f, "{}", self.pinned_num_register_threads)?;
        }
        if self.pinned_use_background_threads {
            key(f, Key::PinnedUseBackgroundThreads)?;
            f.write_str("True")?;
        }
        if self.pinned_reserve_segment_size != default.pinned_reserve_segment_size {
            key(f, Key::PinnedReserveSegmentSizeMb)?;
            write!(f, "{}", self.pinned_reserve_segment_size / MIB)?;
        }
        Ok(())
    }
}

/// Writes per-class divisions in the shortest form that parses back to them: one number when
/// every class agrees, else a list whose first entry covers the run of equal classes at the
/// bottom and whose `>` covers the run at the top.
fn write_divisions(
    f: &mut fmt::Formatter<'_>,
    classes: &[usize; ROUNDUP_POWER2_INTERVALS],
) -> fmt::Result {
    let top = ROUNDUP_POWER2_INTERVALS - 1;
    if classes.iter().all(|&d| d == classes[0]) && classes[0].is_power_of_two() {
        return write!(f, "{}", classes[0]);
    }
    // Not all equal here (all zero is the default, never written), so both runs end early.
    let bottom_end = classes.iter().take_while(|&&d| d == classes[0]).count() - 1;
    let top_start = ROUNDUP_POWER2_INTERVALS
        - classes
            .iter()
            .rev()
            .take_while(|&&d| d == classes[top])
            .count();
    f.write_str("[")?;
    write!(f, "{}:{}", 1u64 << bottom_end, classes[bottom_end])?;
    for (class, divisions) in classes
        .iter()
        .enumerate()
        .take(top_start)
        .skip(bottom_end + 1)
    {
        write!(f, ",{}:{divisions}", 1u64 << class)?;
    }
    if top_start > bottom_end {
        write!(f, ",>:{}", classes[top])?;
    }
    f.write_str("]")
}

/// Builds an [`AllocatorConfig`] in code, with the parser's checks. Each method is named after
/// its key; the first invalid value is reported by [`build`](Self::build).
///
/// ```
/// use blockpool::config::AllocatorConfig;
///
/// let config = AllocatorConfig::builder()
///     .max_split_size_mb(256)
///     .roundup_power2_divisions(4)
///     .expandable_segments(true)
///     .build()?;
/// assert_eq!(config.to_string(), "max_split_size_mb:256,roundup_power2_divisions:4,expandable_segments:True");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct AllocatorConfigBuilder {
    config: AllocatorConfig,
    error: Option<ConfigError>,
}

impl From<AllocatorConfig> for AllocatorConfigBuilder {
    /// A builder that starts from `config` (say, the one [`AllocatorConfig::from_env`] read).
    fn from(config: AllocatorConfig) -> Self {
        AllocatorConfigBuilder {
            config,
            error: None,
        }
    }
}

impl AllocatorConfigBuilder {
    fn set<T>(
        mut self,
        checked: Result<T, ConfigError>,
        store: impl FnOnce(&mut AllocatorConfig, T),
    ) -> Self {
        match checked {
            Ok(value) => store(&mut self.config, value),
            Err(error) => {
                self.error.get_or_insert(error);
            }
        }
        self
    }

    /// `max_split_size_mb`: blocks of this many MiB and more are never split (at least 20;
    /// values past `usize::MAX` bytes saturate).
    pub fn max_split_size_mb(self, mb: u64) -> Self {
        let key = Key::MaxSplitSizeMb.name();
        self.set(split_size_from_mb(key, &mb.to_string(), mb), |c, v| {
            c.max_split_size = v
        })
    }
    /// `max_split_size_mb` in bytes: a whole number of MiB, at least 20 MiB, or `usize::MAX`
    /// for no limit (the default).
    pub fn max_split_size_bytes(self, bytes: usize) -> Self {
        let key = Key::MaxSplitSizeMb.name();
        let checked = if bytes == usize::MAX {
            Ok(usize::MAX)
        } else if bytes % MIB != 0 {
            Err(ConfigError::NotWholeMebibytes { key, bytes })
        } else {
            let mb = u64::try_from(bytes / MIB).unwrap_or(u64::MAX);
            split_size_from_mb(key, &mb.to_string(), mb)
        };
        self.set(checked, |c, v| c.max_split_size = v)
    }
    /// `max_non_split_rounding_mb`: how many MiB larger than an oversize request a cached
    /// block may be (at least 20, the default).
    pub fn max_non_split_rounding_mb(self, mb: u64) -> Self {
        let key = Key::MaxNonSplitRoundingMb.name();
        let checked = split_size_from_mb(key, &mb.to_string(), mb);
        self.set(checked, |c, v| c.max_non_split_rounding_size = v)
    }
    /// `roundup_power2_divisions:N`: the same power-of-two divisions for every size class.
    pub fn roundup_power2_divisions(self, divisions: usize) -> Self {
        let key = Key::RoundupPower2Divisions.name();
        let checked = uniform_divisions(key, &divisions.to_string(), divisions);
        self.set(checked, |c, v| {
            c.roundup_power2_divisions = [v; ROUNDUP_POWER2_INTERVALS]
        })
    }
    /// `roundup_power2_divisions` per size class, class 0 (up to 2 MiB) first; each 0 or a
    /// power of two, as in the list form.
    pub fn roundup_power2_divisions_per_class(
        self,
        classes: [usize; ROUNDUP_POWER2_INTERVALS],
    ) -> Self {
        let key = Key::RoundupPower2Divisions.name();
        let checked = classes
            .iter()
            .try_for_each(|&d| class_divisions(key, &d.to_string(), d).map(drop))
            .map(|()| classes);
        self.set(checked, |c, v| c.roundup_power2_divisions = v)
    }
    /// `garbage_collection_threshold`: strictly between 0 and 1.
    pub fn garbage_collection_threshold(self, threshold: f64) -> Self {
        let key = Key::GarbageCollectionThreshold.name();
        let checked = gc_threshold(key, &threshold.to_string(), threshold);
        self.set(checked, |c, v| c.garbage_collection_threshold = v)
    }
    /// `expandable_segments`.
    pub fn expandable_segments(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.expandable_segments = v)
    }
    /// `release_lock_on_cudamalloc`.
    pub fn release_lock_on_cudamalloc(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.release_lock_on_cudamalloc = v)
    }
    /// `per_process_memory_fraction`: from 0 to 1.
    pub fn per_process_memory_fraction(self, fraction: f64) -> Self {
        let key = Key::PerProcessMemoryFraction.name();
        let checked = memory_fraction(key, &fraction.to_string(), fraction);
        self.set(checked, |c, v| c.per_process_memory_fraction = Some(v))
    }
    /// `pinned_use_cuda_host_register`.
    pub fn pinned_use_cuda_host_register(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.pinned_use_cuda_host_register = v)
    }
    /// `pinned_num_register_threads`: a power of two up to 128.
    pub fn pinned_num_register_threads(self, threads: usize) -> Self {
        let key = Key::PinnedNumRegisterThreads.name();
        let checked = register_threads(key, &threads.to_string(), threads);
        self.set(checked, |c, v| c.pinned_num_register_threads = v)
    }
    /// `pinned_use_background_threads`.
    pub fn pinned_use_background_threads(self, on: bool) -> Self {
        self.set(Ok(on), |c, v| c.pinned_use_background_threads = v)
    }
    /// `pinned_reserve_segment_size_mb`: at least 1 MiB.
    pub fn pinned_reserve_segment_size_mb(self, mb: u64) -> Self {
        let key = Key::PinnedReserveSegmentSizeMb.name();
        let checked = reserve_segment_size(key, &mb.to_string(), mb);
        self.set(checked, |c, v| c.pinned_reserve_segment_size = v)
    }
    /// The config, or the first invalid value given.
    pub fn build(self) -> Result<AllocatorConfig, ConfigError> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(self.config),
        }
    }
}

/// A config string (or builder value) the allocator refuses. Every message quotes the
/// offending text as written and says what is accepted. Never retryable: fix the config.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key blockpool does not know.
    #[error("invalid allocator config: {}", Detail(self))]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// The syntax breaks off: a missing `:`, value, `,` or key.
    #[error("invalid allocator config: {}", Detail(self))]
    UnexpectedToken {
        /// What was expected, in words.
        expected: &'static str,
        /// The text it should have followed (`None`: the start of the string).
        after: Option<String>,
        /// What came instead (`None`: the end of the string).
        found: Option<String>,
    },
    /// A value that is not a number.
    #[error("invalid allocator config: {}", Detail(self))]
    NotANumber {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A value other than `True` or `False` for a switch.
    #[error("invalid allocator config: {}", Detail(self))]
    NotABool {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A number outside the range the key accepts.
    #[error("invalid allocator config: {}", Detail(self))]
    OutOfRange {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A number that must be a power of two and is not.
    #[error("invalid allocator config: {}", Detail(self))]
    NotPowerOfTwo {
        /// The key as written.
        key: String,
        /// The value as written.
        value: String,
        /// What the key accepts.
        accepted: &'static str,
    },
    /// A `[` with no `]` after it.
    #[error("invalid allocator config: {}", Detail(self))]
    UnclosedList {
        /// The key as written.
        key: String,
        /// The list from its `[` to the end of the string.
        list: String,
    },
    /// A `roundup_power2_divisions` list with two `>` entries.
    #[error("invalid allocator config: {}", Detail(self))]
    DuplicateRemainder {
        /// The key as written.
        key: String,
        /// The whole list.
        list: String,
    },
    /// A `backend` other than `native` or PyTorch's async backends.
    #[error("invalid allocator config: {}", Detail(self))]
    UnknownBackend {
        /// The backend as written.
        backend: String,
    },
    /// `backend:cudaMallocAsync` (or `hipMallocAsync`): PyTorch's other allocator, which
    /// blockpool does not provide.
    #[error("invalid allocator config: {}", Detail(self))]
    UnsupportedBackend {
        /// The backend as written.
        backend: String,
    },
    /// A byte size given to the builder that the config syntax cannot write (it counts MiB).
    #[error("invalid allocator config: {}", Detail(self))]
    NotWholeMebibytes {
        /// The key the size is written under.
        key: &'static str,
        /// The size given, in bytes.
        bytes: usize,
    },
    /// An error in the value of an environment variable.
    #[error("invalid {var}: {}", Detail(error))]
    InEnvVar {
        /// The variable read.
        var: &'static str,
        /// What is wrong with its value.
        error: Box<ConfigError>,
    },
}

/// The message of a [`ConfigError`] without the "invalid ...:" prefix, so that
/// [`ConfigError::InEnvVar`] can name the variable in its place.
struct Detail<'e>(&'e ConfigError);

impl fmt::Display for Detail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            ConfigError::UnknownKey { key } => {
                write!(f, "unknown key `{key}`; accepted keys: ")?;
                for (i, known) in Key::ALL.iter().enumerate() {
                    write!(f, "{}{}", if i == 0 { "" } else { ", " }, known.name())?;
                }
                Ok(())
            }
            ConfigError::UnexpectedToken {
                expected,
                after,
                found,
            } => {
                write!(f, "expected {expected}")?;
                match after {
                    Some(after) => write!(f, " after `{after}`")?,
                    None => f.write_str(" at the start")?,
                }
                match found {
                    Some(found) => write!(f, ", found `{found}`"),
                    None => f.write_str(", found the end of the string"),
                }
            }
            ConfigError::NotANumber {
                key,
                value,
                accepted,
            } => {
                write!(f, "`{value}` is not a number; `{key}` takes {accepted}")
            }
            ConfigError::NotABool { key, value } => {
                write!(
                    f,
                    "`{value}` is not `True` or `False`, the values `{key}` takes"
                )
            }
            ConfigError::OutOfRange {
                key,
                value,
                accepted,
            } => {
                write!(
                    f,
                    "`{value}` is out of range for `{key}`, which takes {accepted}"
                )
            }
            ConfigError::NotPowerOfTwo {
                key,
                value,
                accepted,
            } => {
                write!(
                    f,
                    "`{value}` is not a power of two; `{key}` takes {accepted}"
                )
            }
            ConfigError::UnclosedList { key, list } => {
                write!(f, "the list `{list}` of `{key}` has no closing `]`")
            }
            ConfigError::DuplicateRemainder { key, list } => write!(
                f,
                "the list `{list}` of `{key}` has two `>` entries; `>` may appear once, for \
                 the size classes above the last size given"
            ),
            ConfigError::UnknownBackend { backend } => {
                write!(
                    f,
                    "unknown backend `{backend}`; the only backend is `native`"
                )
            }
            ConfigError::UnsupportedBackend { backend } => write!(
                f,
                "backend `{backend}` is not available: blockpool is the native caching \
                 allocator, so only `backend:native` is accepted"
            ),
            ConfigError::NotWholeMebibytes { key, bytes } => write!(
                f,
                "`{bytes}` bytes is not a whole number of MiB, the unit of `{key}`; give a \
                 multiple of 1048576 bytes"
            ),
            ConfigError::InEnvVar { var, error } => write!(f, "in {var}: {}", Detail(error)),
        }
    }
}

/// The keys, in the order [`AllocatorConfig`]'s `Display` writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Backend,
    MaxSplitSizeMb,
    MaxNonSplitRoundingMb,
    RoundupPower2Divisions,
    GarbageCollectionThreshold,
    ExpandableSegments,
    ReleaseLockOnCudamalloc,
    PerProcessMemoryFraction,
    PinnedUseCudaHostRegister,
    PinnedNumRegisterThreads,
    PinnedUseBackgroundThreads,
    PinnedReserveSegmentSizeMb,
}

impl Key {
    const ALL: [Key; 12] = [
        Key::Backend,
        Key::MaxSplitSizeMb,
        Key::MaxNonSplitRoundingMb,
        Key::RoundupPower2Divisions,
        Key::GarbageCollectionThreshold,
        Key::ExpandableSegments,
        Key::ReleaseLockOnCudamalloc,
        Key::PerProcessMemoryFraction,
        Key::PinnedUseCudaHostRegister,
        Key::PinnedNumRegisterThreads,
        Key::PinnedUseBackgroundThreads,
        Key::PinnedReserveSegmentSizeMb,
    ];

    fn name(self) -> &'static str {
        match self {
            Key::Backend => "backend",
            Key::MaxSplitSizeMb => "max_split_size_mb",
            Key::MaxNonSplitRoundingMb => "max_non_split_rounding_mb",
            Key::RoundupPower2Divisions => "roundup_power2_divisions",
            Key::GarbageCollectionThreshold => "garbage_collection_threshold",
            Key::ExpandableSegments => "expandable_segments",
            Key::ReleaseLockOnCudamalloc => "release_lock_on_cudamalloc",
            Key::PerProcessMemoryFraction => "per_process_memory_fraction",
            Key::PinnedUseCudaHostRegister => "pinned_use_cuda_host_register",
            Key::PinnedNumRegisterThreads => "pinned_num_register_threads",
            Key::PinnedUseBackgroundThreads => "pinned_use_background_threads",
            Key::PinnedReserveSegmentSizeMb => "pinned_reserve_segment_size_mb",
        }
    }

    fn from_name(name: &str) -> Option<Key> {
        match name {
            // PyTorch accepts the ROCm spellings everywhere.
            "release_lock_on_hipmalloc" => Some(Key::ReleaseLockOnCudamalloc),
            "pinned_use_hip_host_register" => Some(Key::PinnedUseCudaHostRegister),
            _ => Key::ALL.into_iter().find(|key| key.name() == name),
        }
    }
}

/// One token of a config string: a word, or one of `,` `:` `[` `]`.
#[derive(Debug)]
struct Token<'a> {
    /// The word with its whitespace removed, as PyTorch's tokenizer sees it.
    text: String,
    /// The text as written, without surrounding whitespace: what error messages quote.
    raw: &'a str,
    /// Byte offset of `raw` in the config string.
    start: usize,
    /// The punctuation character, if this token is one.
    punct: Option<char>,
}

/// Splits at `,` `:` `[` `]` and drops whitespace (C's `isspace`) wherever it is, as PyTorch's
/// `ConfigTokenizer` does, so `max split` is the single word `maxsplit`.
fn tokenize(conf: &str) -> Vec<Token<'_>> {
    fn flush<'a>(
        conf: &'a str,
        tokens: &mut Vec<Token<'a>>,
        word: &mut Option<(usize, usize)>,
        text: &mut String,
    ) {
        if let Some((start, end)) = word.take() {
            tokens.push(Token {
                text: std::mem::take(text),
                raw: &conf[start..end],
                start,
                punct: None,
            });
        }
    }
    let mut tokens = Vec::new();
    let mut word: Option<(usize, usize)> = None;
    let mut text = String::new();
    for (i, c) in conf.char_indices() {
        match c {
            ',' | ':' | '[' | ']' => {
                flush(conf, &mut tokens, &mut word, &mut text);
                let raw = &conf[i..i + 1];
                tokens.push(Token {
                    text: raw.to_owned(),
                    raw,
                    start: i,
                    punct: Some(c),
                });
            }
            ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' => {}
            _ => {
                let end = i + c.len_utf8();
                word = Some(word.map_or((i, end), |(start, _)| (start, end)));
                text.push(c);
            }
        }
    }
    flush(conf, &mut tokens, &mut word, &mut text);
    tokens
}

/// Reads tokens in order: the whole string, or the inside of one list.
struct Cursor<'t, 'a> {
    tokens: &'t [Token<'a>],
    pos: usize,
    /// What running out of tokens means, as an error message shows it: `None` for the end of
    /// the string, `Some("]")` inside a list.
    end: Option<&'static str>,
}

impl<'t, 'a> Cursor<'t, 'a> {
    fn next(&mut self) -> Option<&'t Token<'a>> {
        let token = self.tokens.get(self.pos)?;
        self.pos += 1;
        Some(token)
    }

    fn peek(&self) -> Option<&'t Token<'a>> {
        self.tokens.get(self.pos)
    }

    fn unexpected(
        &self,
        expected: &'static str,
        after: &str,
        found: Option<&Token<'_>>,
    ) -> ConfigError {
        ConfigError::UnexpectedToken {
            expected,
            after: Some(after.to_owned()),
            found: found.map(|t| t.raw).or(self.end).map(str::to_owned),
        }
    }

    fn expect_colon(&mut self, key: &Token<'_>) -> Result<(), ConfigError> {
        match self.next() {
            Some(t) if t.punct == Some(':') => Ok(()),
            other => Err(self.unexpected("`:`", key.raw, other)),
        }
    }

    /// The next token, which must be a word (a value, not punctuation).
    fn word(&mut self, expected: &'static str, after: &str) -> Result<&'t Token<'a>, ConfigError> {
        match self.next() {
            Some(t) if t.punct.is_none() => Ok(t),
            other => Err(self.unexpected(expected, after, other)),
        }
    }
}

fn parse_bool(key: &str, value: &Token<'_>) -> Result<bool, ConfigError> {
    match value.text.as_str() {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(ConfigError::NotABool {
            key: key.to_owned(),
            value: value.raw.to_owned(),
        }),
    }
}

/// A whole number; one too large for `u64` is out of range.
fn parse_whole(key: &str, value: &Token<'_>, accepted: &'static str) -> Result<u64, ConfigError> {
    value.text.parse::<u64>().map_err(|e| {
        let (key, value) = (key.to_owned(), value.raw.to_owned());
        match e.kind() {
            IntErrorKind::PosOverflow => ConfigError::OutOfRange {
                key,
                value,
                accepted,
            },
            _ => ConfigError::NotANumber {
                key,
                value,
                accepted,
            },
        }
    })
}

/// A whole number of MiB; one too large for `u64` saturates, as a size past `usize::MAX` bytes
/// does.
fn parse_mib(key: &str, value: &Token<'_>) -> Result<u64, ConfigError> {
    match parse_whole(key, value, ACCEPTS_SPLIT_MB) {
        Err(ConfigError::OutOfRange { .. }) => Ok(u64::MAX),
        other => other,
    }
}

fn parse_number(key: &str, value: &Token<'_>, accepted: &'static str) -> Result<f64, ConfigError> {
    value
        .text
        .parse::<f64>()
        .map_err(|_| ConfigError::NotANumber {
            key: key.to_owned(),
            value: value.raw.to_owned(),
            accepted,
        })
}

fn out_of_range(key: &str, value: &str, accepted: &'static str) -> ConfigError {
    ConfigError::OutOfRange {
        key: key.to_owned(),
        value: value.to_owned(),
        accepted,
    }
}

fn not_power_of_two(key: &str, value: &str, accepted: &'static str) -> ConfigError {
    ConfigError::NotPowerOfTwo {
        key: key.to_owned(),
        value: value.to_owned(),
        accepted,
    }
}

/// MiB to bytes, saturating at the largest whole number of MiB in a `usize` (as PyTorch does).
fn mib_to_bytes(mb: u64) -> usize {
    usize::try_from(mb)
        .unwrap_or(usize::MAX)
        .min(usize::MAX / MIB)
        * MIB
}

fn split_size_from_mb(key: &str, value: &str, mb: u64) -> Result<usize, ConfigError> {
    if mb < MIN_SPLIT_SIZE_MB {
        return Err(out_of_range(key, value, ACCEPTS_SPLIT_MB));
    }
    Ok(mib_to_bytes(mb))
}

/// The single-value form: PyTorch refuses 0 there, though a list may hold it.
fn uniform_divisions<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_DIVISIONS))?;
    if !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_DIVISIONS));
    }
    Ok(n)
}

fn class_divisions<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_LIST_DIVISIONS))?;
    if n != 0 && !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_LIST_DIVISIONS));
    }
    Ok(n)
}

fn gc_threshold(key: &str, value: &str, t: f64) -> Result<f64, ConfigError> {
    // Written so that NaN fails.
    if t > 0.0 && t < 1.0 {
        Ok(t)
    } else {
        Err(out_of_range(key, value, ACCEPTS_GC_THRESHOLD))
    }
}

fn memory_fraction(key: &str, value: &str, fraction: f64) -> Result<f64, ConfigError> {
    if (0.0..=1.0).contains(&fraction) {
        Ok(fraction)
    } else {
        Err(out_of_range(key, value, ACCEPTS_FRACTION))
    }
}

fn register_threads<N>(key: &str, value: &str, n: N) -> Result<usize, ConfigError>
where
    usize: TryFrom<N>,
{
    // Power of two first, then the limit, in PyTorch's order.
    let n = usize::try_from(n).map_err(|_| out_of_range(key, value, ACCEPTS_THREADS))?;
    if !n.is_power_of_two() {
        return Err(not_power_of_two(key, value, ACCEPTS_THREADS));
    }
    if n > PINNED_MAX_REGISTER_THREADS {
        return Err(out_of_range(key, value, ACCEPTS_THREADS));
    }
    Ok(n)
}

fn reserve_segment_size(key: &str, value: &str, mb: u64) -> Result<usize, ConfigError> {
    if mb == 0 {
        return Err(out_of_range(key, value, ACCEPTS_RESERVE_MB));
    }
    Ok(mib_to_bytes(mb))
}

fn check_backend(name: &str, raw: &str) -> Result<(), ConfigError> {
    match name {
        "native" => Ok(()),
        "cudaMallocAsync" | "hipMallocAsync" => Err(ConfigError::UnsupportedBackend {
            backend: raw.to_owned(),
        }),
        _ => Err(ConfigError::UnknownBackend {
            backend: raw.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB_U: usize = 1 << 20;

    fn parse_err(conf: &str) -> ConfigError {
        match AllocatorConfig::parse(conf) {
            Ok(config) => panic!("`{conf}` should be rejected, parsed as {config:?}"),
            Err(error) => error,
        }
    }

    fn parse_ok(conf: &str) -> AllocatorConfig {
        match AllocatorConfig::parse(conf) {
            Ok(config) => config,
            Err(error) => panic!("`{conf}` should parse, got: {error}"),
        }
    }

    fn divisions(conf: &str) -> [usize; ROUNDUP_POWER2_INTERVALS] {
        parse_ok(conf).roundup_power2_divisions_per_class()
    }

    #[test]
    fn empty_or_blank_string_is_the_default_config() {
        assert_eq!(parse_ok(""), AllocatorConfig::default());
        assert_eq!(parse_ok(" \t\n"), AllocatorConfig::default());
    }

    #[test]
    fn default_config_has_pytorch_defaults() {
        let c = AllocatorConfig::default();
        assert_eq!(
            c.max_split_size(),
            usize::MAX,
            "split size is unlimited by default"
        );
        assert_eq!(c.max_non_split_rounding_size(), 20 * MIB_U);
        assert_eq!(c.roundup_power2_divisions_per_class(), [0; 16]);
        assert_eq!(c.garbage_collection_threshold(), 0.0);
        assert!(!c.expandable_segments() && !c.release_lock_on_cudamalloc());
        assert_eq!(c.per_process_memory_fraction(), None);
        assert!(!c.pinned_use_cuda_host_register() && !c.pinned_use_background_threads());
        assert_eq!(c.pinned_num_register_threads(), 1);
        assert_eq!(c.pinned_reserve_segment_size(), 0);
    }

    #[test]
    fn max_split_size_mb_is_stored_in_bytes() {
        assert_eq!(
            parse_ok("max_split_size_mb:100").max_split_size(),
            100 * MIB_U
        );
    }

    #[test]
    fn max_split_size_below_20_mb_is_rejected() {
        let error = parse_err("max_split_size_mb:19");
        assert_eq!(
            error,
            ConfigError::OutOfRange {
                key: "max_split_size_mb".into(),
                value: "19".into(),
                accepted: ACCEPTS_SPLIT_MB,
            }
        );
        assert_eq!(
            error.to_string(),
            "invalid allocator config: `19` is out of range for `max_split_size_mb`, which \
             takes a whole number of MiB, at least 20"
        );
    }

    #[test]
    fn max_split_size_of_exactly_20_mb_is_accepted_as_in_current_pytorch() {
        assert_eq!(
            parse_ok("max_split_size_mb:20").max_split_size(),
            20 * MIB_U
        );
    }

    #[test]
    fn huge_max_split_size_saturates_at_the_largest_whole_mib() {
        let largest = usize::MAX / MIB_U * MIB_U;
        assert_eq!(
            parse_ok("max_split_size_mb:18446744073709551615").max_split_size(),
            largest
        );
        let past_u64 = "max_split_size_mb:99999999999999999999999999";
        assert_eq!(
            parse_ok(past_u64).max_split_size(),
            largest,
            "digits past u64 saturate too"
        );
    }

    #[test]
    fn max_non_split_rounding_mb_sets_bytes_and_has_the_same_minimum() {
        assert_eq!(
            parse_ok("max_non_split_rounding_mb:64").max_non_split_rounding_size(),
            64 * MIB_U
        );
        assert!(matches!(
            parse_err("max_non_split_rounding_mb:10"),
            ConfigError::OutOfRange { value, .. } if value == "10"
        ));
    }

    #[test]
    fn single_division_applies_to_every_size_class() {
        let c = parse_ok("roundup_power2_divisions:4");
        assert_eq!(c.roundup_power2_divisions_per_class(), [4; 16]);
        assert_eq!(
            c.roundup_power2_divisions(1200 * MIB_U),
            4,
            "1200 MiB request"
        );
        assert_eq!(c.roundup_power2_divisions(1200), 4, "a small-pool request");
        assert_eq!(
            c.roundup_power2_divisions(100 << 30),
            4,
            "100 GiB is in the last class"
        );
    }

    #[test]
    fn single_division_must_be_a_nonzero_power_of_two() {
        let error = parse_err("roundup_power2_divisions:3");
        assert_eq!(
            error.to_string(),
            "invalid allocator config: `3` is not a power of two; `roundup_power2_divisions` \
             takes a power of two (1, 2, 4, ...) or a list such as `[256:1,512:2,>:8]`"
        );
        assert!(matches!(
            parse_err("roundup_power2_divisions:0"),
            ConfigError::NotPowerOfTwo { .. }
        ));
    }

    #[test]
    fn list_fills_classes_below_the_first_size_and_above_the_last() {
        assert_eq!(
            divisions("roundup_power2_divisions:[256:1,512:2,>:8]"),
            [1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8]
        );
    }

    #[test]
    fn list_leaves_classes_between_sizes_alone_as_pytorch_does() {
        // PyTorch's own AllocatorConfig_test expectations.
        let c = parse_ok("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
        let at = |mb: usize| c.roundup_power2_divisions(mb * MIB_U);
        assert_eq!([at(64), at(128), at(256), at(512)], [8, 8, 16, 1]);
        assert_eq!(
            at(1024),
            0,
            "1024 MiB lies between two sizes and keeps its default"
        );
        assert_eq!([at(2048), at(4096)], [8, 2]);
    }

    #[test]
    fn remainder_starts_after_the_last_size_not_at_it() {
        let c = parse_ok("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]");
        let at = |mb: usize| c.roundup_power2_divisions(mb * MIB_U);
        assert_eq!([at(32), at(64), at(128), at(256), at(512)], [8, 8, 2, 4, 2]);
        assert_eq!([at(1024), at(2048), at(8192)], [4, 1, 1]);
    }

    #[test]
    fn remainder_before_any_size_leaves_class_0_alone_as_pytorch_does() {
        let mut expected = [8; 16];
        expected[0] = 0;
        assert_eq!(divisions("roundup_power2_divisions:[>:8]"), expected);
    }

    #[test]
    fn list_sizes_of_32_gib_and_more_set_the_last_class() {
        assert_eq!(divisions("roundup_power2_divisions:[65536:2]"), [2; 16]);
        let mut expected = [0; 16];
        expected[15] = 4;
        assert_eq!(
            divisions("roundup_power2_divisions:[1:0,1048576:4]"),
            expected
        );
    }

    #[test]
    fn list_sizes_must_be_powers_of_two_and_divisions_zero_or_powers_of_two() {
        assert_eq!(
            parse_err("roundup_power2_divisions:[300:2]").to_string(),
            "invalid allocator config: `300` is not a power of two; `roundup_power2_divisions` \
             takes a size in MiB that is a power of two, or `>`, before each `:` of a list"
        );
        assert_eq!(divisions("roundup_power2_divisions:[256:0,>:4]")[8], 0);
        assert!(matches!(
            parse_err("roundup_power2_divisions:[256:3]"),
            ConfigError::NotPowerOfTwo { value, .. } if value == "3"
        ));
        assert!(matches!(
            parse_err("roundup_power2_divisions:[abc:2]"),
            ConfigError::NotANumber { value, .. } if value == "abc"
        ));
    }

    #[test]
    fn second_remainder_in_a_list_is_rejected() {
        assert_eq!(
            parse_err("roundup_power2_divisions:[256:1, >:2, >:4]").to_string(),
            "invalid allocator config: the list `[256:1, >:2, >:4]` of \
             `roundup_power2_divisions` has two `>` entries; `>` may appear once, for the size \
             classes above the last size given"
        );
    }

    #[test]
    fn unclosed_list_is_rejected() {
        assert_eq!(
            parse_err("roundup_power2_divisions:[256:1,512:2 ").to_string(),
            "invalid allocator config: the list `[256:1,512:2` of `roundup_power2_divisions` \
             has no closing `]`"
        );
    }

    #[test]
    fn malformed_list_entries_are_rejected() {
        assert_eq!(
            parse_err("roundup_power2_divisions:[256]"),
            ConfigError::UnexpectedToken {
                expected: "`:`",
                after: Some("256".into()),
                found: Some("]".into()),
            }
        );
        assert_eq!(
            parse_err("roundup_power2_divisions:[256:1:2]").to_string(),
            "invalid allocator config: expected `,` or `]` after `1`, found `:`"
        );
        assert_eq!(
            parse_err("roundup_power2_divisions:[,256:1]").to_string(),
            "invalid allocator config: expected a size in MiB or `>` after `[`, found `,`"
        );
        assert!(matches!(
            parse_err("max_split_size_mb:[100]"),
            ConfigError::UnexpectedToken { .. }
        ));
    }

    #[test]
    fn trailing_commas_are_accepted_as_in_pytorch() {
        assert!(!parse_ok("expandable_segments:False,").expandable_segments());
        assert_eq!(divisions("roundup_power2_divisions:[256:2,]"), [2; 16]);
        assert_eq!(divisions("roundup_power2_divisions:[]"), [0; 16]);
    }

    #[test]
    fn whitespace_is_ignored_anywhere_as_pytorch_tokenizer_does() {
        let c = parse_ok(" max_split_size_mb : 1 00 ,\texpandable_segments:\nTrue\r\n");
        assert_eq!(c.max_split_size(), 100 * MIB_U);
        assert!(c.expandable_segments());
    }

    #[test]
    fn unknown_key_is_quoted_with_the_accepted_keys() {
        let error = parse_err("max_split_sise_mb:100");
        assert_eq!(
            error,
            ConfigError::UnknownKey {
                key: "max_split_sise_mb".into()
            }
        );
        assert_eq!(
            error.to_string(),
            "invalid allocator config: unknown key `max_split_sise_mb`; accepted keys: backend, \
             max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, \
             garbage_collection_threshold, expandable_segments, release_lock_on_cudamalloc, \
             per_process_memory_fraction, pinned_use_cuda_host_register, \
             pinned_num_register_threads, pinned_use_background_threads, \
             pinned_reserve_segment_size_mb"
        );
    }

    #[test]
    fn key_without_colon_is_rejected() {
        assert_eq!(
            parse_err("expandable_segments").to_string(),
            "invalid allocator config: expected `:` after `expandable_segments`, found the end \
             of the string"
        );
        assert_eq!(
            parse_err("expandable_segments,True").to_string(),
            "invalid allocator config: expected `:` after `expandable_segments`, found `,`"
        );
    }

    #[test]
    fn key_without_value_is_rejected() {
        assert_eq!(
            parse_err("max_split_size_mb:").to_string(),
            "invalid allocator config: expected a value after `max_split_size_mb:`, found the \
             end of the string"
        );
        assert_eq!(
            parse_err("max_split_size_mb:,expandable_segments:True"),
            ConfigError::UnexpectedToken {
                expected: "a value",
                after: Some("max_split_size_mb:".into()),
                found: Some(",".into()),
            }
        );
    }

    #[test]
    fn value_with_trailing_garbage_is_not_a_number() {
        assert_eq!(
            parse_err("max_split_size_mb:100abc").to_string(),
            "invalid allocator config: `100abc` is not a number; `max_split_size_mb` takes a \
             whole number of MiB, at least 20"
        );
        assert!(matches!(
            parse_err("max_split_size_mb:-5"),
            ConfigError::NotANumber { .. }
        ));
        assert!(matches!(
            parse_err("garbage_collection_threshold:half"),
            ConfigError::NotANumber { value, .. } if value == "half"
        ));
    }

    #[test]
    fn value_must_be_followed_by_a_comma() {
        assert_eq!(
            parse_err("max_split_size_mb:100:200").to_string(),
            "invalid allocator config: expected `,` after `100`, found `:`"
        );
    }

    #[test]
    fn stray_punctuation_where_a_key_belongs_is_rejected() {
        assert_eq!(
            parse_err(",expandable_segments:True").to_string(),
            "invalid allocator config: expected a key at the start, found `,`"
        );
        assert_eq!(
            parse_err("expandable_segments:True,,release_lock_on_cudamalloc:True"),
            ConfigError::UnexpectedToken {
                expected: "a key",
                after: Some(",".into()),
                found: Some(",".into()),
            }
        );
    }

    #[test]
    fn switches_take_exactly_true_or_false() {
        assert!(parse_ok("expandable_segments:True").expandable_segments());
        assert_eq!(
            parse_err("expandable_segments:true").to_string(),
            "invalid allocator config: `true` is not `True` or `False`, the values \
             `expandable_segments` takes"
        );
    }

    #[test]
    fn garbage_collection_threshold_is_strictly_between_0_and_1() {
        assert_eq!(
            parse_ok("garbage_collection_threshold:0.6").garbage_collection_threshold(),
            0.6
        );
        for bad in ["0", "1", "1.0", "1.2", "-0.5", "NaN", "inf"] {
            assert_eq!(
                parse_err(&format!("garbage_collection_threshold:{bad}")),
                ConfigError::OutOfRange {
                    key: "garbage_collection_threshold".into(),
                    value: bad.into(),
                    accepted: ACCEPTS_GC_THRESHOLD,
                },
                "threshold {bad} must be rejected"
            );
        }
    }

    #[test]
    fn per_process_memory_fraction_is_from_0_to_1_inclusive() {
        for (conf, expected) in [("0", 0.0), ("1", 1.0), ("0.75", 0.75)] {
            let c = parse_ok(&format!("per_process_memory_fraction:{conf}"));
            assert_eq!(c.per_process_memory_fraction(), Some(expected));
        }
        for bad in ["1.5", "-0.1", "nan"] {
            assert!(
                matches!(
                    parse_err(&format!("per_process_memory_fraction:{bad}")),
                    ConfigError::OutOfRange { value, .. } if value == bad
                ),
                "fraction {bad} must be rejected"
            );
        }
    }

    #[test]
    fn rocm_spellings_of_keys_are_accepted() {
        let c = parse_ok("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True");
        assert!(c.release_lock_on_cudamalloc() && c.pinned_use_cuda_host_register());
    }

    #[test]
    fn pinned_keys_set_the_host_cache_settings() {
        let c = parse_ok(
            "pinned_use_cuda_host_register:True,pinned_num_register_threads:8,\
             pinned_use_background_threads:True,pinned_reserve_segment_size_mb:64",
        );
        assert!(c.pinned_use_cuda_host_register());
        assert_eq!(c.pinned_num_register_threads(), 8);
        assert!(c.pinned_use_background_threads());
        assert_eq!(c.pinned_reserve_segment_size(), 64 * MIB_U);
    }

    #[test]
    fn register_threads_must_be_a_power_of_two_up_to_128() {
        assert_eq!(
            parse_ok("pinned_num_register_threads:128").pinned_num_register_threads(),
            128
        );
        assert!(matches!(
            parse_err("pinned_num_register_threads:6"),
            ConfigError::NotPowerOfTwo { value, .. } if value == "6"
        ));
        assert!(matches!(
            parse_err("pinned_num_register_threads:0"),
            ConfigError::NotPowerOfTwo { .. }
        ));
        assert_eq!(
            parse_err("pinned_num_register_threads:256").to_string(),
            "invalid allocator config: `256` is out of range for `pinned_num_register_threads`, \
             which takes a power of two from 1 to 128"
        );
    }

    #[test]
    fn pinned_reserve_segment_size_must_be_positive() {
        assert!(matches!(
            parse_err("pinned_reserve_segment_size_mb:0"),
            ConfigError::OutOfRange { value, .. } if value == "0"
        ));
    }

    #[test]
    fn native_backend_is_accepted_and_async_backends_are_refused() {
        assert_eq!(parse_ok("backend:native"), AllocatorConfig::default());
        assert_eq!(
            parse_err("backend:cudaMallocAsync").to_string(),
            "invalid allocator config: backend `cudaMallocAsync` is not available: blockpool is \
             the native caching allocator, so only `backend:native` is accepted"
        );
        assert_eq!(
            parse_err("backend:jemalloc"),
            ConfigError::UnknownBackend {
                backend: "jemalloc".into()
            }
        );
    }

    #[test]
    fn later_key_overrides_earlier_as_in_pytorch() {
        let c = parse_ok("max_split_size_mb:100,max_split_size_mb:200");
        assert_eq!(c.max_split_size(), 200 * MIB_U);
        // A second list updates the classes in place rather than starting over.
        let d = divisions("roundup_power2_divisions:[>:2],roundup_power2_divisions:[4:8]");
        assert_eq!(d, [8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
    }

    #[test]
    fn sizes_map_to_classes_by_power_of_two_from_1_mib() {
        let per_class: [usize; 16] = std::array::from_fn(|k| 1 << k);
        let c = AllocatorConfig::builder()
            .roundup_power2_divisions_per_class(per_class)
            .build();
        let c = c.unwrap_or_else(|e| panic!("valid per-class divisions: {e}"));
        let class = |size: usize| c.roundup_power2_divisions(size).trailing_zeros();
        assert_eq!(
            [class(0), class(1), class(512), class(MIB_U)],
            [0; 4],
            "sub-MiB is class 0"
        );
        assert_eq!([class(2 * MIB_U - 1), class(2 * MIB_U)], [0, 1]);
        assert_eq!([class(1200 * MIB_U), class(32 << 30)], [10, 15]);
        assert_eq!(
            [class(64 << 30), class(usize::MAX)],
            [15, 15],
            "the last class is open"
        );
    }

    #[test]
    fn from_env_prefers_blockpool_variable_then_pytorch_then_default() {
        let both = |name: &str| match name {
            ENV_VAR => Some("max_split_size_mb:100".to_owned()),
            PYTORCH_ENV_VAR => Some("max_split_size_mb:200".to_owned()),
            _ => None,
        };
        let from_both = AllocatorConfig::from_env_with(both);
        assert_eq!(from_both.map(|c| c.max_split_size()), Ok(100 * MIB_U));
        let pytorch_only =
            |name: &str| (name == PYTORCH_ENV_VAR).then(|| "max_split_size_mb:200".to_owned());
        let from_pytorch = AllocatorConfig::from_env_with(pytorch_only);
        assert_eq!(from_pytorch.map(|c| c.max_split_size()), Ok(200 * MIB_U));
        assert_eq!(
            AllocatorConfig::from_env_with(|_| None),
            Ok(AllocatorConfig::default())
        );
    }

    #[test]
    fn empty_blockpool_variable_shadows_the_pytorch_one() {
        let lookup = |name: &str| match name {
            ENV_VAR => Some(String::new()),
            _ => Some("max_split_sise_mb:1".to_owned()),
        };
        assert_eq!(
            AllocatorConfig::from_env_with(lookup),
            Ok(AllocatorConfig::default())
        );
    }

    #[test]
    fn env_error_names_the_variable() {
        let lookup = |name: &str| (name == ENV_VAR).then(|| "max_split_sise_mb:100".to_owned());
        let error = match AllocatorConfig::from_env_with(lookup) {
            Ok(c) => panic!("misspelt key should be rejected, got {c:?}"),
            Err(error) => error,
        };
        assert!(
            error.to_string().starts_with(
                "invalid BLOCKPOOL_ALLOC_CONF: unknown key `max_split_sise_mb`; accepted keys: \
                 backend, max_split_size_mb,"
            ),
            "got: {error}"
        );
        let pytorch =
            |name: &str| (name == PYTORCH_ENV_VAR).then(|| "backend:cudaMallocAsync".to_owned());
        let error = AllocatorConfig::from_env_with(pytorch)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "invalid PYTORCH_CUDA_ALLOC_CONF: backend `cudaMallocAsync` is not available: \
                 blockpool is the native caching allocator, so only `backend:native` is accepted"
            )
        );
    }

    #[test]
    fn builder_sets_every_key() {
        let built = AllocatorConfig::builder()
            .max_split_size_mb(256)
            .max_non_split_rounding_mb(64)
            .roundup_power2_divisions(4)
            .garbage_collection_threshold(0.8)
            .expandable_segments(true)
            .release_lock_on_cudamalloc(true)
            .per_process_memory_fraction(0.5)
            .pinned_use_cuda_host_register(true)
            .pinned_num_register_threads(16)
            .pinned_use_background_threads(true)
            .pinned_reserve_segment_size_mb(128)
            .build();
        let parsed = AllocatorConfig::parse(
            "max_split_size_mb:256,max_non_split_rounding_mb:64,roundup_power2_divisions:4,\
             garbage_collection_threshold:0.8,expandable_segments:True,\
             release_lock_on_cudamalloc:True,per_process_memory_fraction:0.5,\
             pinned_use_cuda_host_register:True,pinned_num_register_threads:16,\
             pinned_use_background_threads:True,pinned_reserve_segment_size_mb:128",
        );
        assert_eq!(built, parsed);
    }

    #[test]
    fn builder_applies_the_parser_checks_and_reports_the_first_error() {
        let error = AllocatorConfig::builder()
            .expandable_segments(true)
            .max_split_size_mb(10)
            .garbage_collection_threshold(1.5)
            .build();
        assert_eq!(
            error,
            Err(parse_err("max_split_size_mb:10")),
            "same error as the parser's"
        );
        let error = AllocatorConfig::builder()
            .roundup_power2_divisions_per_class([3; 16])
            .build();
        assert!(matches!(error, Err(ConfigError::NotPowerOfTwo { value, .. }) if value == "3"));
        let error = AllocatorConfig::builder()
            .pinned_num_register_threads(256)
            .build();
        assert!(matches!(error, Err(ConfigError::OutOfRange { .. })));
    }

    #[test]
    fn builder_split_size_in_bytes_must_be_whole_mib_or_unlimited() {
        let c = AllocatorConfig::builder()
            .max_split_size_bytes(64 * MIB_U)
            .build();
        assert_eq!(c.map(|c| c.max_split_size()), Ok(64 * MIB_U));
        let c = AllocatorConfig::builder()
            .max_split_size_bytes(usize::MAX)
            .build();
        assert_eq!(c, Ok(AllocatorConfig::default()));
        assert_eq!(
            AllocatorConfig::builder()
                .max_split_size_bytes(64 * MIB_U + 1)
                .build(),
            Err(ConfigError::NotWholeMebibytes {
                key: "max_split_size_mb",
                bytes: 64 * MIB_U + 1
            })
        );
    }

    #[test]
    fn builder_from_a_config_keeps_its_settings() {
        let base = parse_ok("max_split_size_mb:100");
        let c = AllocatorConfigBuilder::from(base)
            .expandable_segments(true)
            .build();
        assert_eq!(
            c,
            Ok(parse_ok("max_split_size_mb:100,expandable_segments:True"))
        );
    }

    #[test]
    fn display_writes_only_non_default_keys() {
        assert_eq!(AllocatorConfig::default().to_string(), "");
        let c = parse_ok("backend:native, expandable_segments:True, max_split_size_mb:128");
        assert_eq!(
            c.to_string(),
            "max_split_size_mb:128,expandable_segments:True"
        );
    }

    #[test]
    fn display_writes_divisions_in_the_shortest_form() {
        for conf in [
            "roundup_power2_divisions:[256:1,512:2,>:8]",
            "roundup_power2_divisions:8",
            "roundup_power2_divisions:[1:0,>:8]",
            "roundup_power2_divisions:[32768:8]",
            "roundup_power2_divisions:[1:4,2:0,>:4]",
        ] {
            assert_eq!(parse_ok(conf).to_string(), conf);
        }
        assert_eq!(
            parse_ok("roundup_power2_divisions:[>:8]").to_string(),
            "roundup_power2_divisions:[1:0,>:8]",
            "PyTorch's class-0 quirk is written out explicitly"
        );
    }

    #[test]
    fn from_str_is_parse() {
        let c: Result<AllocatorConfig, _> = "garbage_collection_threshold:0.5".parse();
        assert_eq!(
            c,
            AllocatorConfig::parse("garbage_collection_threshold:0.5")
        );
    }

    fn division_value() -> impl Strategy<Value = usize> {
        prop_oneof![
            4 => prop::sample::select(vec![0usize, 1, 2, 4, 8]),
            1 => (0..usize::BITS).prop_map(|e| 1usize << e),
        ]
    }

    fn valid_config() -> impl Strategy<Value = AllocatorConfig> {
        let divisions = prop_oneof![
            Just(None),
            (0..usize::BITS).prop_map(|e| Some([1usize << e; 16])),
            prop::array::uniform16(division_value()).prop_map(Some),
        ];
        let mib = prop_oneof![20u64..100_000, 20u64..=u64::MAX];
        (
            prop::option::of(mib.clone()),
            prop::option::of(mib),
            divisions,
            prop::option::of((0.0f64..1.0).prop_filter("threshold > 0", |t| *t > 0.0)),
            any::<(bool, bool, bool, bool)>(),
            prop::option::of(0.0f64..=1.0),
            prop::option::of((0u32..=7).prop_map(|e| 1usize << e)),
            prop::option::of(1u64..=u64::MAX),
        )
            .prop_map(
                |(split, rounding, divisions, gc, switches, fraction, threads, reserve)| {
                    let mut b = AllocatorConfig::builder()
                        .expandable_segments(switches.0)
                        .release_lock_on_cudamalloc(switches.1)
                        .pinned_use_cuda_host_register(switches.2)
                        .pinned_use_background_threads(switches.3);
                    if let Some(mb) = split {
                        b = b.max_split_size_mb(mb);
                    }
                    if let Some(mb) = rounding {
                        b = b.max_non_split_rounding_mb(mb);
                    }
                    if let Some(classes) = divisions {
                        b = b.roundup_power2_divisions_per_class(classes);
                    }
                    if let Some(t) = gc {
                        b = b.garbage_collection_threshold(t);
                    }
                    if let Some(f) = fraction {
                        b = b.per_process_memory_fraction(f);
                    }
                    if let Some(n) = threads {
                        b = b.pinned_num_register_threads(n);
                    }
                    if let Some(mb) = reserve {
                        b = b.pinned_reserve_segment_size_mb(mb);
                    }
                    b.build()
                        .unwrap_or_else(|e| panic!("strategy makes valid configs: {e}"))
                },
            )
    }

    /// Strings made of the config language's own pieces, to reach deep into the parser.
    fn token_soup() -> impl Strategy<Value = String> {
        const PIECES: &str =
            "max_split_size_mb|max_non_split_rounding_mb|roundup_power2_divisions|\
            garbage_collection_threshold|expandable_segments|per_process_memory_fraction|\
            pinned_num_register_threads|pinned_reserve_segment_size_mb|backend|native|\
            cudaMallocAsync|:|:|,|,|[|]|>| |0|1|3|20|256|0.5|-1|nan|True|False|\
            99999999999999999999999|é";
        let pieces = prop::sample::select(PIECES.split('|').collect::<Vec<_>>());
        prop::collection::vec(pieces, 0..24).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #[test]
        fn arbitrary_strings_never_panic(conf in any::<String>()) {
            let _ = AllocatorConfig::parse(&conf);
        }

        #[test]
        fn config_language_soup_never_panics_and_what_parses_round_trips(conf in token_soup()) {
            if let Ok(config) = AllocatorConfig::parse(&conf) {
                let written = config.to_string();
                prop_assert_eq!(AllocatorConfig::parse(&written), Ok(config), "wrote `{}`", written);
            }
        }

        #[test]
        fn display_then_parse_gives_the_same_config(config in valid_config()) {
            let written = config.to_string();
            prop_assert_eq!(AllocatorConfig::parse(&written), Ok(config), "wrote `{}`", written);
        }

        #[test]
        fn errors_quote_text_from_the_input(conf in token_soup()) {
            if let Err(error) = AllocatorConfig::parse(&conf) {
                let message = error.to_string();
                let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
                prop_assert!(!quoted.is_empty(), "`{}` gave an error quoting nothing: {}", conf, error);
                let first = quoted[0];
                let in_input = first.chars().filter(|c| !c.is_whitespace()).all(|c| conf.contains(c));
                prop_assert!(in_input, "`{}` quoted `{}`, not from the input: {}", conf, first, error);
            }
        }
    }
}
