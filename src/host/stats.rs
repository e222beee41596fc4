//! [`HostStats`], the statistics of `torch.cuda.host_memory_stats()`, with their resets and
//! the flat read-out under PyTorch's key names.

use crate::stats::Stat;
use std::collections::BTreeMap;

use super::pool::HOST_BUCKETS;

/// Statistics of a [`HostCachingAllocator`](super::HostCachingAllocator), as PyTorch's
/// `HostStats`.
///
/// Differences from PyTorch: the `active_*` peaks are exact (PyTorch adds up per-bucket peaks,
/// an over-estimate), and the `host_alloc_time` / `host_free_time` duration statistics are not
/// kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStats {
    /// Pinned blocks the cache owns, in use and cached (count): grows when the backend pins a
    /// new block, shrinks when a cached block is given back.
    pub allocations: Stat,
    /// Bytes of those blocks (their rounded sizes).
    pub allocated_bytes: Stat,
    /// Blocks handed out: increases at every allocation (new or from the cache), decreases when
    /// the block becomes reusable (at free, or once its events have completed).
    pub active_requests: Stat,
    /// Bytes of handed-out blocks (their rounded sizes).
    pub active_bytes: Stat,
    /// Blocks pinned by the backend since the last accumulated reset
    /// (`allocations.allocated`).
    pub num_host_alloc: i64,
    /// Blocks given back to the backend since the last accumulated reset
    /// (`allocations.freed`).
    pub num_host_free: i64,
    /// Blocks pinned per bucket since the last accumulated reset: index `i` counts blocks of
    /// `2^i` bytes ([`HOST_BUCKETS`] entries).
    pub bucket_allocation: Vec<i64>,
}

impl Default for HostStats {
    fn default() -> Self {
        HostStats {
            allocations: Stat::default(),
            allocated_bytes: Stat::default(),
            active_requests: Stat::default(),
            active_bytes: Stat::default(),
            num_host_alloc: 0,
            num_host_free: 0,
            bucket_allocation: vec![0; HOST_BUCKETS],
        }
    }
}

impl HostStats {
    /// Sets every peak to its current value (`torch.cuda.reset_peak_host_memory_stats`).
    pub fn reset_peak(&mut self) {
        for stat in self.stats_mut() {
            stat.reset_peak();
        }
    }

    /// Zeroes the accumulated totals and counters
    /// (`torch.cuda.reset_accumulated_host_memory_stats`); current values and peaks stay.
    pub fn reset_accumulated(&mut self) {
        for stat in self.stats_mut() {
            stat.reset_accumulated();
        }
        self.num_host_alloc = 0;
        self.num_host_free = 0;
        self.bucket_allocation.iter_mut().for_each(|n| *n = 0);
    }

    /// The flat statistics of `torch.cuda.host_memory_stats()`, sorted by key:
    /// `{active_bytes, active_requests, allocated_bytes, allocations}.{allocated, current,
    /// freed, peak}`, `num_host_alloc` and `num_host_free` (18 keys; no timing keys).
    ///
    /// ```
    /// use blockpool::host::HostStats;
    ///
    /// let mut stats = HostStats::default();
    /// stats.num_host_alloc = 3;
    /// let flat = stats.to_flat();
    /// assert_eq!(flat.len(), 18);
    /// assert_eq!(flat["num_host_alloc"], 3);
    /// assert_eq!(flat["active_bytes.current"], 0);
    /// ```
    pub fn to_flat(&self) -> BTreeMap<String, i64> {
        let named = [
            ("allocations", &self.allocations),
            ("allocated_bytes", &self.allocated_bytes),
            ("active_requests", &self.active_requests),
            ("active_bytes", &self.active_bytes),
        ];
        let mut flat = BTreeMap::new();
        for (name, stat) in named {
            let parts = [
                ("current", stat.current),
                ("peak", stat.peak),
                ("allocated", stat.allocated),
                ("freed", stat.freed),
            ];
            for (part, value) in parts {
                flat.insert(format!("{name}.{part}"), value);
            }
        }
        flat.insert("num_host_alloc".to_owned(), self.num_host_alloc);
        flat.insert("num_host_free".to_owned(), self.num_host_free);
        flat
    }

    fn stats_mut(&mut self) -> [&mut Stat; 4] {
        [
            &mut self.allocations,
            &mut self.allocated_bytes,
            &mut self.active_requests,
            &mut self.active_bytes,
        ]
    }
}
