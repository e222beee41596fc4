//! The workloads of the comparison, one file per family; each builds a [`Workload`] from a
//! seed or a file, before any allocator runs.
//!
//! [`Workload`]: crate::ops::Workload

pub mod fixture;
pub mod multi_stream;
pub mod random;
pub mod stream_per_call;
pub mod transformer;
