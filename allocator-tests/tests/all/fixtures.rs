//! Where the fixtures live: the library's `fixtures` module, shared with memtrace's tests.

pub use allocator_tests::fixtures::*;
