//! Integration tests of blockpool live in `tests/all/`; this library is empty.
