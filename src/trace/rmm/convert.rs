//! Conversion between [`Snapshot`](crate::trace::Snapshot) and RMM's CSV log (work in progress).
