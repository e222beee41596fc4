//! The operation streams every allocator replays: allocations into numbered slots, frees of
//! slots, and the stream events a multi-stream program adds. A [`Workload`] is built once and
//! replayed unchanged through each allocator, so every allocator sees the same sizes in the
//! same order; slots are resolved before timing, so no allocator pays for a map lookup.

use serde::Serialize;

/// One operation of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size_bytes` (at least 1) on `stream` and keep it in `slot`.
    Alloc {
        /// Where the allocation is kept until freed.
        slot: u32,
        /// Requested size in bytes.
        size_bytes: usize,
        /// The stream it is allocated on.
        stream: u32,
    },
    /// Free what `slot` holds.
    Free {
        /// The slot to empty.
        slot: u32,
    },
    /// What `slot` holds is used on `stream` too: its memory must not be reused before the
    /// work queued there by the time of its free has run (PyTorch's `record_stream`).
    RecordStream {
        /// The slot.
        slot: u32,
        /// The other stream.
        stream: u32,
    },
    /// The device finished all work queued on `stream` so far.
    CompleteStream {
        /// The stream.
        stream: u32,
    },
}

/// A named operation stream and what any allocator must hold at least to run it.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Name in the table, e.g. `random/max_64MiB/10000`.
    pub name: String,
    /// The family: `random`, `transformer`, `multi_stream` or `fixture`.
    pub family: &'static str,
    /// The operations, oldest first; every allocation is freed by the end.
    pub ops: Vec<Op>,
    /// Slots the operations use (highest slot + 1).
    pub slots: usize,
    /// Facts about the stream that do not depend on the allocator.
    pub shape: Shape,
}

/// Allocator-independent facts about a workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Operations in all (allocations, frees and stream events).
    pub ops: u64,
    /// Allocations.
    pub allocations: u64,
    /// Highest sum of requested bytes live at once: the floor any allocator's peak reserved
    /// is measured against.
    pub peak_live_bytes: u64,
    /// Streams used.
    pub streams: u32,
}

/// Builds a [`Workload`], handing out slots and keeping the stream consistent: a free names
/// a live slot, and [`OpsBuilder::finish`] frees whatever is still live.
#[derive(Debug, Default)]
pub struct OpsBuilder {
    ops: Vec<Op>,
    /// Requested bytes of each slot's allocation, 0 when the slot is empty.
    sizes: Vec<usize>,
    free_slots: Vec<u32>,
    live_bytes: u64,
    shape: Shape,
}

impl OpsBuilder {
    /// An empty stream.
    pub fn new() -> OpsBuilder {
        OpsBuilder::default()
    }

    /// Allocates `size_bytes` (0 becomes 1) on `stream` and returns its slot.
    pub fn alloc(&mut self, size_bytes: usize, stream: u32) -> u32 {
        let size_bytes = size_bytes.max(1);
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.sizes.push(0);
                (self.sizes.len() - 1) as u32
            }
        };
        self.sizes[slot as usize] = size_bytes;
        self.live_bytes += size_bytes as u64;
        self.shape.peak_live_bytes = self.shape.peak_live_bytes.max(self.live_bytes);
        self.shape.allocations += 1;
        self.shape.streams = self.shape.streams.max(stream + 1);
        self.ops.push(Op::Alloc {
            slot,
            size_bytes,
            stream,
        });
        slot
    }

    /// Frees `slot`; returns false (and records nothing) when it holds nothing.
    pub fn free(&mut self, slot: u32) -> bool {
        match self.sizes.get_mut(slot as usize) {
            Some(size) if *size > 0 => {
                self.live_bytes -= *size as u64;
                *size = 0;
                self.free_slots.push(slot);
                self.ops.push(Op::Free { slot });
                true
            }
            _ => false,
        }
    }

    /// Marks `slot` as used on `stream`; ignored when the slot holds nothing.
    pub fn record_stream(&mut self, slot: u32, stream: u32) {
        if self.sizes.get(slot as usize).is_some_and(|&size| size > 0) {
            self.shape.streams = self.shape.streams.max(stream + 1);
            self.ops.push(Op::RecordStream { slot, stream });
        }
    }

    /// The device completes the work queued on `stream`.
    pub fn complete_stream(&mut self, stream: u32) {
        self.ops.push(Op::CompleteStream { stream });
    }

    /// Slots live now, lowest first.
    pub fn live(&self) -> Vec<u32> {
        (0..self.sizes.len() as u32)
            .filter(|&slot| self.sizes[slot as usize] > 0)
            .collect()
    }

    /// Requested bytes live now.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Frees everything still live (lowest slot first) and names the stream.
    pub fn finish(mut self, name: impl Into<String>, family: &'static str) -> Workload {
        for slot in self.live() {
            self.free(slot);
        }
        let mut shape = self.shape;
        shape.ops = self.ops.len() as u64;
        shape.streams = shape.streams.max(1);
        Workload {
            name: name.into(),
            family,
            slots: self.sizes.len(),
            ops: self.ops,
            shape,
        }
    }
}

/// xorshift64*: a small seeded generator, so every run builds the same streams.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (0 is replaced: xorshift needs a non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[low, high]` (`high` >= `low`).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        let span = high.saturating_sub(low).saturating_add(1);
        low + self.next_u64() % span
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_frees_everything_and_tracks_the_live_peak() {
        let mut b = OpsBuilder::new();
        let x = b.alloc(100, 0);
        let y = b.alloc(50, 1);
        assert!(b.free(x));
        assert!(!b.free(x), "a second free of a slot is refused");
        let z = b.alloc(10, 0);
        assert_eq!(z, x, "a freed slot is reused");
        let w = b.finish("t", "test");
        assert_eq!(w.shape.peak_live_bytes, 150);
        assert_eq!(w.shape.allocations, 3);
        assert_eq!(w.shape.streams, 2);
        let allocs = w
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Alloc { .. }))
            .count();
        let frees = w
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Free { .. }))
            .count();
        assert_eq!(allocs, frees, "every allocation is freed by the end: {y}");
    }
}
