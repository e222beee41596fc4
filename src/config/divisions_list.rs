//! The list form of `roundup_power2_divisions`, `[size:divisions,...,>:divisions]`, which sets
//! the divisions of each size class with PyTorch's filling rules.

use super::checks::{class_divisions, ACCEPTS_LIST_DIVISIONS, ACCEPTS_LIST_SIZE};
use super::error::ConfigError;
use super::parse::parse_whole;
use super::settings::{AllocatorConfig, ROUNDUP_POWER2_INTERVALS};
use super::tokenize::{Cursor, Token};

impl AllocatorConfig {
    /// Parses the rest of `[size:divisions,...,>:divisions]`, its `[` (`open`) already read,
    /// with PyTorch's filling rules (see [`parse`](Self::parse)). Like PyTorch, it updates the
    /// classes in place, so a second list only changes what it names.
    pub(super) fn apply_divisions_list<'t, 'a>(
        &mut self,
        key_raw: &str,
        open: &'t Token<'a>,
        conf: &str,
        cursor: &mut Cursor<'t, 'a>,
    ) -> Result<&'t Token<'a>, ConfigError> {
        let inner = &cursor.tokens[cursor.pos..];
        let Some(close_at) = inner.iter().position(|t| t.punct == Some(']')) else {
            return Err(ConfigError::UnclosedList {
                key: key_raw.to_owned(),
                list: conf[open.start..].trim_end().to_owned(),
            });
        };
        let close = &inner[close_at];
        let list = &conf[open.start..close.start + 1];
        cursor.pos += close_at + 1;

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
                let index = (size_mb.ilog2() as usize).min(ROUNDUP_POWER2_INTERVALS - 1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::{divisions, parse_err, parse_ok, MIB_U};

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
}
