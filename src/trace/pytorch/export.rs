//! Conversion between [`Snapshot`](crate::trace::Snapshot) and PyTorch's snapshot schema (work in progress).
