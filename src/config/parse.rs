//! The parser of config strings ([`AllocatorConfig::parse`] and its [`FromStr`] impl): the
//! `key:value` loop, and the readers that turn a value token into a number or a switch. The
//! list form of `roundup_power2_divisions` is in `divisions_list.rs`.

use std::num::IntErrorKind;
use std::str::FromStr;

use super::checks::{
    check_backend, gc_threshold, memory_fraction, register_threads, reserve_segment_size,
    split_size_from_mb, uniform_divisions, ACCEPTS_DIVISIONS, ACCEPTS_FRACTION,
    ACCEPTS_GC_THRESHOLD, ACCEPTS_SPLIT_MB, ACCEPTS_THREADS,
};
use super::error::ConfigError;
use super::key::Key;
use super::settings::{AllocatorConfig, ROUNDUP_POWER2_INTERVALS};
use super::stream_reuse::StreamReuse;
use super::tokenize::{tokenize, Cursor, Token};

impl AllocatorConfig {
    /// Parses a config string: `key:value` pairs separated by commas, as PyTorch reads
    /// `PYTORCH_CUDA_ALLOC_CONF`. The empty string is the default config.
    ///
    /// | key | value |
    /// |---|---|
    /// | `max_split_size_mb` | MiB, at least 20; larger than `usize::MAX` bytes saturates |
    /// | `max_non_split_rounding_mb` | MiB, at least 20 (default 20) |
    /// | `roundup_power2_divisions` | a power of two for all size classes, or `[256:1,>:8]` |
    /// | `garbage_collection_threshold` | strictly between 0 and 1 |
    /// | `expandable_segments`, `release_lock_on_cudamalloc` | `True` or `False` |
    /// | `per_process_memory_fraction` | from 0 to 1 |
    /// | `stream_reuse` | `compatible` (default) or `ordered` ([`StreamReuse`]; blockpool's own key) |
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

    /// Parses the value of `key` (its name as written: `key_raw`), the `:` already read.
    /// Returns the last token of the value, for error messages about what follows it.
    fn apply<'t, 'a>(
        &mut self,
        key: Key,
        key_raw: &str,
        conf: &str,
        cursor: &mut Cursor<'t, 'a>,
    ) -> Result<&'t Token<'a>, ConfigError> {
        if key == Key::RoundupPower2Divisions {
            if let Some(open) = cursor.peek().filter(|t| t.punct == Some('[')) {
                cursor.pos += 1;
                return self.apply_divisions_list(key_raw, open, conf, cursor);
            }
        }
        let value = cursor.word("a value", &format!("{key_raw}:"))?;
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
            Key::StreamReuse => self.stream_reuse = StreamReuse::parse(key_raw, value)?,
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
}

impl FromStr for AllocatorConfig {
    type Err = ConfigError;

    fn from_str(conf: &str) -> Result<Self, ConfigError> {
        Self::parse(conf)
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
pub(super) fn parse_whole(
    key: &str,
    value: &Token<'_>,
    accepted: &'static str,
) -> Result<u64, ConfigError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{divisions, parse_err, parse_ok, MIB_U};

    #[test]
    fn empty_or_blank_string_is_the_default_config() {
        assert_eq!(parse_ok(""), AllocatorConfig::default());
        assert_eq!(parse_ok(" \t\n"), AllocatorConfig::default());
    }

    #[test]
    fn max_split_size_mb_is_stored_in_bytes() {
        assert_eq!(
            parse_ok("max_split_size_mb:100").max_split_size(),
            100 * MIB_U
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
    fn trailing_commas_are_accepted_as_in_pytorch() {
        assert!(!parse_ok("expandable_segments:False,").expandable_segments());
        let mut expected = [0; 16];
        expected[..=8].fill(2);
        assert_eq!(divisions("roundup_power2_divisions:[256:2,]"), expected);
        assert_eq!(divisions("roundup_power2_divisions:[]"), [0; 16]);
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
             per_process_memory_fraction, stream_reuse, pinned_use_cuda_host_register, \
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
    fn later_key_overrides_earlier_as_in_pytorch() {
        let c = parse_ok("max_split_size_mb:100,max_split_size_mb:200");
        assert_eq!(c.max_split_size(), 200 * MIB_U);
        // A second list updates the classes in place rather than starting over.
        let d = divisions("roundup_power2_divisions:[>:2],roundup_power2_divisions:[4:8]");
        assert_eq!(d, [8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);
    }

    #[test]
    fn from_str_is_parse() {
        let c: Result<AllocatorConfig, _> = "garbage_collection_threshold:0.5".parse();
        assert_eq!(
            c,
            AllocatorConfig::parse("garbage_collection_threshold:0.5")
        );
    }
}
