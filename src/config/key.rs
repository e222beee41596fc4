//! The keys of the config syntax: their names as PyTorch spells them, and the ROCm spellings
//! PyTorch also accepts.

/// The keys, in the order [`AllocatorConfig`](super::AllocatorConfig)'s `Display` writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Key {
    Backend,
    MaxSplitSizeMb,
    MaxNonSplitRoundingMb,
    RoundupPower2Divisions,
    GarbageCollectionThreshold,
    ExpandableSegments,
    ReleaseLockOnCudamalloc,
    PerProcessMemoryFraction,
    StreamReuse,
    PinnedUseCudaHostRegister,
    PinnedNumRegisterThreads,
    PinnedUseBackgroundThreads,
    PinnedReserveSegmentSizeMb,
}

impl Key {
    pub(super) const ALL: [Key; 13] = [
        Key::Backend,
        Key::MaxSplitSizeMb,
        Key::MaxNonSplitRoundingMb,
        Key::RoundupPower2Divisions,
        Key::GarbageCollectionThreshold,
        Key::ExpandableSegments,
        Key::ReleaseLockOnCudamalloc,
        Key::PerProcessMemoryFraction,
        Key::StreamReuse,
        Key::PinnedUseCudaHostRegister,
        Key::PinnedNumRegisterThreads,
        Key::PinnedUseBackgroundThreads,
        Key::PinnedReserveSegmentSizeMb,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Backend => "backend",
            Key::MaxSplitSizeMb => "max_split_size_mb",
            Key::MaxNonSplitRoundingMb => "max_non_split_rounding_mb",
            Key::RoundupPower2Divisions => "roundup_power2_divisions",
            Key::GarbageCollectionThreshold => "garbage_collection_threshold",
            Key::ExpandableSegments => "expandable_segments",
            Key::ReleaseLockOnCudamalloc => "release_lock_on_cudamalloc",
            Key::PerProcessMemoryFraction => "per_process_memory_fraction",
            Key::StreamReuse => "stream_reuse",
            Key::PinnedUseCudaHostRegister => "pinned_use_cuda_host_register",
            Key::PinnedNumRegisterThreads => "pinned_num_register_threads",
            Key::PinnedUseBackgroundThreads => "pinned_use_background_threads",
            Key::PinnedReserveSegmentSizeMb => "pinned_reserve_segment_size_mb",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Key> {
        match name {
            // PyTorch accepts the ROCm spellings everywhere.
            "release_lock_on_hipmalloc" => Some(Key::ReleaseLockOnCudamalloc),
            "pinned_use_hip_host_register" => Some(Key::PinnedUseCudaHostRegister),
            _ => Key::ALL.into_iter().find(|key| key.name() == name),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::parse_ok;

    #[test]
    fn rocm_spellings_of_keys_are_accepted() {
        let c = parse_ok("release_lock_on_hipmalloc:True,pinned_use_hip_host_register:True");
        assert!(c.release_lock_on_cudamalloc() && c.pinned_use_cuda_host_register());
    }
}
