//! Allocator state at any event of a trace (work in progress).
