//! Loading large traces: JSON Lines and PyTorch pickles (work in progress).

use criterion::{criterion_group, criterion_main, Criterion};

fn trace_load(_c: &mut Criterion) {}

criterion_group!(benches, trace_load);
criterion_main!(benches);
