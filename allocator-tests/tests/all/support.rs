//! Helpers several test modules share: statistics by key, the validity check after a scenario
//! step, the property tests' configuration, and a seeded random number generator.

use blockpool::introspect::Introspect;
use blockpool::DeviceIndex;
use blockpool::{Allocation, CachingAllocator, SimBackend, StreamId};
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use std::ffi::OsStr;

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
    if let Err(e) = alloc.check_invariants(DeviceIndex::new(0)) {
        panic!("invariant broken: {e}");
    }
    assert_eq!(
        stat(alloc, "reserved_bytes.all.current") as usize,
        sim.allocated_bytes(DeviceIndex::new(0)),
        "reserved bytes must equal what the device has handed out"
    );
}

/// The address ranges of `handles`, sorted; panics (naming `step`) when two overlap.
pub fn disjoint_ranges<'a>(
    handles: impl Iterator<Item = &'a Allocation<SimBackend>>,
    step: usize,
) -> Vec<(u64, u64)> {
    let mut ranges: Vec<(u64, u64)> = handles
        .map(|h| (h.ptr(), h.ptr() + h.size() as u64))
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "step {step}: live {pair:x?} overlap"
        );
    }
    ranges
}

/// Checks that leak tracking (an observer of the pool's events) lists exactly the live
/// `handles` of device 0: the same pointers, block sizes and streams.
#[track_caller]
pub fn assert_tracked_exactly<'a>(
    alloc: &CachingAllocator<SimBackend>,
    handles: impl Iterator<Item = &'a Allocation<SimBackend>>,
    step: usize,
) {
    let mut tracked: Vec<(u64, u64, StreamId)> = alloc
        .live_allocations(0)
        .expect("live allocations of device 0")
        .iter()
        .map(|a| (a.ptr, a.size, a.stream))
        .collect();
    tracked.sort_unstable();
    let mut owned: Vec<(u64, u64, StreamId)> = handles
        .filter(|h| h.size() > 0)
        .map(|h| (h.ptr(), h.size() as u64, h.stream()))
        .collect();
    owned.sort_unstable();
    assert_eq!(
        tracked, owned,
        "step {step}: the live table differs from the live handles"
    );
}

/// A property test's configuration: failures persisted in the file `regressions`, and
/// `default_cases` cases unless `PROPTEST_CASES` says otherwise.
pub fn proptest_config(regressions: &'static str, default_cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: case_count(std::env::var_os("PROPTEST_CASES").as_deref(), default_cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(regressions))),
        // Proptest's other variables (PROPTEST_MAX_SHRINK_ITERS and the like) still apply.
        ..ProptestConfig::default()
    }
}

/// The cases to run when `PROPTEST_CASES` is `proptest_cases` (`None`: not set): its number,
/// or `default_cases` when it is not set. A value that is no number gets proptest's own
/// count, as proptest gives it (proptest warns about the value). The variable's value is an
/// argument so that tests need not set it: the property tests read it concurrently.
fn case_count(proptest_cases: Option<&OsStr>, default_cases: u32) -> u32 {
    match proptest_cases {
        None => default_cases,
        Some(value) => value
            .to_str()
            .and_then(|text| text.parse().ok())
            .unwrap_or(ProptestConfig::default().cases),
    }
}

#[test]
fn proptest_cases_sets_the_case_count_and_only_its_absence_gives_the_default() {
    assert_eq!(
        case_count(None, 7),
        7,
        "without PROPTEST_CASES a property test must run its own default count"
    );
    assert_eq!(
        case_count(Some(OsStr::new("12")), 7),
        12,
        "PROPTEST_CASES=12 must run 12 cases, not the test's default"
    );
    assert_eq!(
        case_count(Some(OsStr::new("1000000")), 7),
        1_000_000,
        "PROPTEST_CASES may ask for more cases than the default"
    );
    assert_eq!(
        case_count(Some(OsStr::new("many")), 7),
        ProptestConfig::default().cases,
        "a PROPTEST_CASES that is no number must leave proptest's count, as proptest does"
    );
}

#[test]
fn proptest_config_reads_proptest_cases_and_persists_failures_in_the_named_file() {
    // Reads the environment and never sets it, so it cannot race the property tests.
    let config = proptest_config("proptest-regressions/example.txt", 7);
    assert_eq!(
        config.cases,
        case_count(std::env::var_os("PROPTEST_CASES").as_deref(), 7),
        "the count must come from PROPTEST_CASES, or the default when it is unset"
    );
    let expected = FileFailurePersistence::Direct("proptest-regressions/example.txt");
    assert!(
        config
            .failure_persistence
            .as_deref()
            .is_some_and(|persistence| persistence.eq(&expected)),
        "failures must be persisted in the named file, got {:?}",
        config.failure_persistence
    );
}

/// xorshift64*: a deterministic sequence per seed, for threads that must repeat their choices
/// from run to run (no dependency, no shared state).
pub struct Rng(pub u64);

impl Rng {
    /// The next number of the sequence.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (from the high bits, the better half of xorshift64*'s).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() >> 32) as usize % n
    }
}
