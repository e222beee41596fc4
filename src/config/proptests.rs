//! Property tests across the parser, [`Display`](std::fmt::Display) and the error messages:
//! no input panics, what parses is written back to the same config, and every error quotes
//! text that is in the input.

use proptest::prelude::*;

use super::{AllocatorConfig, ConfigError, StreamReuse};

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
        any::<(bool, bool, bool, bool, bool)>(),
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
                    .pinned_use_background_threads(switches.3)
                    .stream_reuse(if switches.4 {
                        StreamReuse::Ordered
                    } else {
                        StreamReuse::Compatible
                    });
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
    const PIECES: &str = "max_split_size_mb|max_non_split_rounding_mb|roundup_power2_divisions|\
        garbage_collection_threshold|expandable_segments|per_process_memory_fraction|\
        pinned_num_register_threads|pinned_reserve_segment_size_mb|backend|native|\
        stream_reuse|ordered|compatible|\
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
    fn token_soup_never_panics_and_what_parses_round_trips(conf in token_soup()) {
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
    fn errors_quote_the_offending_text_verbatim(conf in token_soup()) {
        if let Err(error) = AllocatorConfig::parse(&conf) {
            let offending = match &error {
                ConfigError::UnknownKey { key: text }
                | ConfigError::NotANumber { value: text, .. }
                | ConfigError::NotABool { value: text, .. }
                | ConfigError::UnknownChoice { value: text, .. }
                | ConfigError::OutOfRange { value: text, .. }
                | ConfigError::NotPowerOfTwo { value: text, .. }
                | ConfigError::UnclosedList { list: text, .. }
                | ConfigError::DuplicateRemainder { list: text, .. }
                | ConfigError::UnknownBackend { backend: text }
                | ConfigError::UnsupportedBackend { backend: text }
                | ConfigError::UnexpectedToken { found: Some(text), .. }
                | ConfigError::UnexpectedToken { after: Some(text), found: None, .. } => {
                    text.clone()
                }
                other => return Err(TestCaseError::fail(format!("unexpected {other:?}"))),
            };
            // `after` of a missing value is the key with the `:` that followed it.
            let offending = match offending.len() {
                1 => offending.as_str(),
                _ => offending.trim_end_matches(':'),
            };
            prop_assert!(conf.contains(offending), "`{}` is not in `{}`", offending, conf);
            let quoted = format!("`{offending}");
            prop_assert!(error.to_string().contains(&quoted), "{} does not quote it", error);
        }
    }
}
