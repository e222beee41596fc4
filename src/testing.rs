//! Helpers for the tests of programs that use blockpool.
//!
//! [`assert_no_leaks`] runs a piece of code inside a [leak scope](crate::LeakScope) and fails
//! the test, listing the sites, when something it allocated is still live at its end.

use crate::backend::Backend;
use crate::CachingAllocator;

/// Runs `body` inside a leak scope of `alloc` and returns its value; panics (it is a test
/// helper) with the scope's report when anything `body` allocated is still live at its end.
///
/// ```
/// use blockpool::{testing::assert_no_leaks, AllocatorConfig, CachingAllocator, SimBackend, StreamId};
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// let total = assert_no_leaks(&alloc, || {
///     let a = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
///     a.size()
/// });
/// assert_eq!(total, 4096);
///
/// let mut kept = Vec::new();
/// let leaked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
///     assert_no_leaks(&alloc, || kept.push(alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap()))
/// }));
/// let message = leaked.unwrap_err().downcast::<String>().unwrap();
/// assert!(message.contains("4096 bytes in 1 allocation at 1 site"), "{message}");
/// ```
#[track_caller]
pub fn assert_no_leaks<B: Backend, T>(alloc: &CachingAllocator<B>, body: impl FnOnce() -> T) -> T {
    let caller = std::panic::Location::caller();
    let scope = alloc.leak_scope(&format!("assert_no_leaks at {caller}"));
    let value = body();
    let report = scope.finish();
    if !report.is_clean() {
        panic!(
            "assert_no_leaks at {caller}: allocations made inside are still live:\n{}",
            report.leaks
        );
    }
    value
}
