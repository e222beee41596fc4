//! Integration tests of blockpool live in `tests/all/` and `tests/gpu/`; this library holds
//! what they and `memtrace`'s tests share: where the fixture files are.

pub mod fixtures;
