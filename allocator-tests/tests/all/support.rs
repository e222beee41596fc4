//! Helpers several test modules share: statistics by key, the validity check after a scenario
//! step, and the property tests' configuration.

use blockpool::{CachingAllocator, SimBackend};
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};

/// The statistic `key` of device 0, as `torch.cuda.memory_stats()` names it.
pub fn stat(alloc: &CachingAllocator<SimBackend>, key: &str) -> i64 {
    let stats = alloc.memory_stats(0).expect("device 0 exists");
    stats
        .get(key)
        .unwrap_or_else(|| panic!("memory_stats has no key {key}"))
}

/// Invariants hold on device 0 and its reserved bytes are exactly what the simulated device
/// has handed out (segments and mapped memory).
pub fn valid(alloc: &CachingAllocator<SimBackend>, sim: &SimBackend) {
    if let Err(e) = alloc.check_invariants(0) {
        panic!("invariant broken: {e}");
    }
    assert_eq!(
        stat(alloc, "reserved_bytes.all.current") as usize,
        sim.allocated_bytes(0),
        "reserved bytes must equal what the device has handed out"
    );
}

/// A property test's configuration: failures persisted in the file `regressions`, and
/// `default_cases` cases unless `PROPTEST_CASES` says otherwise.
pub fn proptest_config(regressions: &'static str, default_cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        ..ProptestConfig::default()
    };
    // `ProptestConfig::default()` has read PROPTEST_CASES; only its absence gets our default.
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = default_cases;
    }
    config
}
