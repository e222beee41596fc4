//! Criterion benchmarks of the caching allocator (being written).
fn main() {}
