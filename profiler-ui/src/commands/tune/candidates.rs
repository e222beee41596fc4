//! The settings `memtrace tune` tries: the recording's own, then each PyTorch setting that
//! changes how memory is cached, one or two at a time on top of the recording's, blockpool's
//! stream-ordered policy when the recording used several streams, then any the user adds with
//! `--try`.

use blockpool::config::{AllocatorConfigBuilder, StreamReuse};
use blockpool::AllocatorConfig;

/// `max_split_size_mb` values tried: from just above the large-block size to a large model's
/// layer.
const MAX_SPLIT_SIZES_MB: [u64; 4] = [64, 128, 256, 512];

/// `roundup_power2_divisions` values tried.
const DIVISIONS: [usize; 3] = [2, 4, 8];

/// `garbage_collection_threshold` values tried, where the device's memory is known.
const GC_THRESHOLDS: [f64; 2] = [0.6, 0.8];

/// One set of settings to replay under.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The settings.
    pub config: AllocatorConfig,
    /// What it changes from the recording's settings, in config syntax (`recorded` for the
    /// recording's own).
    pub change: String,
    /// The recording's own settings.
    pub baseline: bool,
}

/// The candidates for a recording made under `recorded`: the recording's first, then the
/// grid, then `extra` (`--try`), without repeats. `capacity_known` adds the garbage-collection
/// thresholds, which act only under a memory limit; `streams` above 1 adds
/// `stream_reuse:ordered`, alone and with `roundup_power2_divisions:4`.
pub fn grid(
    recorded: &AllocatorConfig,
    capacity_known: bool,
    streams: usize,
    extra: &[AllocatorConfig],
) -> Vec<Candidate> {
    let mut changes: Vec<(String, AllocatorConfigBuilder)> = Vec::new();
    let from = || AllocatorConfigBuilder::from(recorded.clone());
    let expandable = !recorded.expandable_segments();
    changes.push((
        format!(
            "expandable_segments:{}",
            if expandable { "True" } else { "False" }
        ),
        from().expandable_segments(expandable),
    ));
    for mb in MAX_SPLIT_SIZES_MB {
        changes.push((
            format!("max_split_size_mb:{mb}"),
            from().max_split_size_mb(mb),
        ));
    }
    for divisions in DIVISIONS {
        changes.push((
            format!("roundup_power2_divisions:{divisions}"),
            from().roundup_power2_divisions(divisions),
        ));
    }
    changes.push((
        format!(
            "expandable_segments:{},roundup_power2_divisions:4",
            title(expandable)
        ),
        from()
            .expandable_segments(expandable)
            .roundup_power2_divisions(4),
    ));
    if streams > 1 && recorded.stream_reuse() != StreamReuse::Ordered {
        changes.push((
            "stream_reuse:ordered".to_string(),
            from().stream_reuse(StreamReuse::Ordered),
        ));
        changes.push((
            "stream_reuse:ordered,roundup_power2_divisions:4".to_string(),
            from()
                .stream_reuse(StreamReuse::Ordered)
                .roundup_power2_divisions(4),
        ));
    }
    if capacity_known {
        for threshold in GC_THRESHOLDS {
            // PyTorch collects only under a memory fraction; 1.0 is the whole device.
            let fraction = recorded.per_process_memory_fraction().unwrap_or(1.0);
            changes.push((
                format!(
                    "garbage_collection_threshold:{threshold},max_split_size_mb:256{}",
                    if recorded.per_process_memory_fraction().is_none() {
                        ",per_process_memory_fraction:1.0"
                    } else {
                        ""
                    }
                ),
                from()
                    .garbage_collection_threshold(threshold)
                    .max_split_size_mb(256)
                    .per_process_memory_fraction(fraction),
            ));
        }
    }
    let mut candidates = vec![Candidate {
        config: recorded.clone(),
        change: "recorded".to_string(),
        baseline: true,
    }];
    let built = changes
        .into_iter()
        .filter_map(|(change, builder)| Some((change, builder.build().ok()?)));
    let added = extra
        .iter()
        .map(|config| (format!("--try {config}"), config.clone()));
    for (change, config) in built.chain(added) {
        // A change the recording already has (max_split_size_mb:256 in its settings) is the
        // recording's replay again.
        if candidates.iter().all(|c| c.config != config) {
            candidates.push(Candidate {
                config,
                change,
                baseline: false,
            });
        }
    }
    candidates
}

/// `True` or `False`, as PyTorch's settings spell them.
fn title(on: bool) -> &'static str {
    if on {
        "True"
    } else {
        "False"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(candidates: &[Candidate]) -> Vec<&str> {
        candidates.iter().map(|c| c.change.as_str()).collect()
    }

    #[test]
    fn the_grid_changes_the_recorded_settings_one_setting_at_a_time() {
        let recorded = AllocatorConfig::default();
        let candidates = grid(&recorded, false, 1, &[]);
        assert_eq!(
            changes(&candidates),
            [
                "recorded",
                "expandable_segments:True",
                "max_split_size_mb:64",
                "max_split_size_mb:128",
                "max_split_size_mb:256",
                "max_split_size_mb:512",
                "roundup_power2_divisions:2",
                "roundup_power2_divisions:4",
                "roundup_power2_divisions:8",
                "expandable_segments:True,roundup_power2_divisions:4",
            ]
        );
        assert!(candidates[0].baseline && candidates.iter().skip(1).all(|c| !c.baseline));
        assert_eq!(
            candidates[9].config.to_string(),
            "roundup_power2_divisions:4,expandable_segments:True"
        );
    }

    #[test]
    fn settings_the_recording_has_are_kept_and_not_tried_twice() {
        let recorded = AllocatorConfig::parse("expandable_segments:True,max_split_size_mb:256")
            .expect("valid");
        let extra = [AllocatorConfig::parse("max_split_size_mb:1024").expect("valid")];
        let candidates = grid(&recorded, true, 1, &extra);
        let listed = changes(&candidates);
        assert_eq!(listed[1], "expandable_segments:False");
        assert!(!listed.contains(&"max_split_size_mb:256"), "{listed:?}");
        assert_eq!(
            listed[listed.len() - 3..],
            [
                "garbage_collection_threshold:0.6,max_split_size_mb:256,\
                 per_process_memory_fraction:1.0",
                "garbage_collection_threshold:0.8,max_split_size_mb:256,\
                 per_process_memory_fraction:1.0",
                "--try max_split_size_mb:1024",
            ]
        );
        // Every candidate keeps what it does not change.
        let gc = &candidates[candidates.len() - 2].config;
        assert!(gc.expandable_segments());
        assert_eq!(gc.per_process_memory_fraction(), Some(1.0));
        assert_eq!(gc.garbage_collection_threshold(), 0.8);
    }

    #[test]
    fn a_try_equal_to_a_candidate_is_not_replayed_twice() {
        let extra = [AllocatorConfig::parse("expandable_segments:True").expect("valid")];
        let candidates = grid(&AllocatorConfig::default(), false, 1, &extra);
        assert_eq!(candidates.len(), 10);
    }
}
