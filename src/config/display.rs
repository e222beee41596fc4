//! Writing a config back in the parser's syntax, so that parsing what is written gives the
//! same config.

use std::fmt;

use super::key::Key;
use super::settings::{AllocatorConfig, MIB, ROUNDUP_POWER2_INTERVALS};

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
        if self.stream_reuse != default.stream_reuse {
            key(f, Key::StreamReuse)?;
            f.write_str(self.stream_reuse.name())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::parse_ok;

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
            "roundup_power2_divisions:[16384:0,>:8]",
            "roundup_power2_divisions:[1:4,2:0,>:4]",
        ] {
            assert_eq!(parse_ok(conf).to_string(), conf);
        }
        let same_everywhere = parse_ok("roundup_power2_divisions:[32768:8]");
        assert_eq!(same_everywhere.to_string(), "roundup_power2_divisions:8");
        assert_eq!(
            parse_ok("roundup_power2_divisions:[>:8]").to_string(),
            "roundup_power2_divisions:[1:0,>:8]",
            "PyTorch's class-0 quirk is written out explicitly"
        );
    }
}
