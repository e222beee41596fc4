//! RMM's `random_allocations` benchmark shape: 73% allocations of a size uniform in
//! `[1, max]`, otherwise the free of a uniformly chosen live allocation. As RMM caps the bytes
//! in use (`max_usage`), an allocation that would take live bytes past [`LIVE_CAP_BYTES`]
//! becomes a free instead: without a cap, 10^5 operations of up to 256 MiB would keep
//! several TiB live.

use crate::ops::{OpsBuilder, Rng, Workload};

/// The most requested bytes live at once.
pub const LIVE_CAP_BYTES: u64 = 16 << 30;

/// Percent of operations that allocate (when a live allocation exists to free otherwise).
const ALLOCATE_PERCENT: u64 = 73;

/// `ops` operations (then the frees of what is left) with sizes up to `max_bytes`.
pub fn build(max_bytes: usize, ops: usize, seed: u64) -> Workload {
    let mut rng = Rng::new(seed ^ (max_bytes as u64).rotate_left(17) ^ ops as u64);
    let mut b = OpsBuilder::new();
    let mut live: Vec<u32> = Vec::new();
    for _ in 0..ops {
        let size = rng.range(1, max_bytes.max(1) as u64);
        let allocate = live.is_empty()
            || (rng.percent(ALLOCATE_PERCENT) && b.live_bytes() + size <= LIVE_CAP_BYTES);
        if allocate {
            live.push(b.alloc(size as usize, 0));
        } else {
            let index = rng.range(0, live.len() as u64 - 1) as usize;
            b.free(live.swap_remove(index));
        }
    }
    let name = format!("random/max_{}MiB/{}", max_bytes >> 20, ops);
    b.finish(name, "random")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;

    #[test]
    fn same_seed_same_stream_and_roughly_73_percent_allocations() {
        let a = build(1 << 20, 10_000, 7);
        let b = build(1 << 20, 10_000, 7);
        assert_eq!(a.ops, b.ops, "a workload is a pure function of its seed");
        let allocs = a.ops[..10_000]
            .iter()
            .filter(|op| matches!(op, Op::Alloc { .. }))
            .count();
        assert!((7_000..7_600).contains(&allocs), "{allocs} allocations");
        assert!(a.shape.peak_live_bytes <= LIVE_CAP_BYTES);
    }
}
