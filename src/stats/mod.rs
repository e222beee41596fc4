//! Allocator statistics with the meaning and key names of `torch.cuda.memory_stats()`.
//!
//! The pool updates a [`DeviceStats`] as it allocates, frees, splits and releases; this module
//! holds that record and its two read-outs. [`DeviceStats::to_flat`] gives the 122 flat keys of
//! `torch.cuda.memory_stats()` (`allocated_bytes.all.current`, `num_ooms`, ...), sorted as PyTorch
//! sorts them, so scripts written against PyTorch read our numbers unchanged. [`memory_summary`]
//! prints the table of `torch.cuda.memory_summary()`, with the same rows, column widths and unit
//! rules, so two summaries can be compared line by line.

mod flat;
mod stat;
mod summary;
#[cfg(test)]
mod test_support;

pub use flat::MemoryStats;
pub use stat::{DeviceStats, Stat, StatArray, StatType};
pub use summary::memory_summary;
