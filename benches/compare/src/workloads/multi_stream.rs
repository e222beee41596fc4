//! A producer/consumer pipeline on three streams: the producer (stream 0) fills buffers the
//! consumers (streams 1 and 2, in turn) read, so each buffer is `record_stream`ed on its
//! consumer before the producer frees it; consumers allocate their outputs on their own
//! stream and free them a few rounds later. Every few rounds the device catches up with one
//! stream, which is when a caching allocator may reuse the buffers freed behind it.

use crate::ops::{OpsBuilder, Rng, Workload};
use std::collections::VecDeque;

/// Buffer sizes the producer cycles through, in bytes.
const INPUT_SIZES: [usize; 5] = [64 << 10, 1 << 20, 4 << 20, 16 << 20, 48 << 20];
/// Consumer outputs kept live before the oldest is freed.
const OUTPUTS_IN_FLIGHT: usize = 16;
/// Rounds between two completions of a stream.
const COMPLETE_EVERY: usize = 4;

/// `rounds` producer/consumer rounds.
pub fn build(rounds: usize, seed: u64) -> Workload {
    let mut rng = Rng::new(seed ^ 0x5EED_0001);
    let mut b = OpsBuilder::new();
    let mut outputs = VecDeque::new();
    for round in 0..rounds {
        let consumer = 1 + (round % 2) as u32;
        let size = INPUT_SIZES[rng.range(0, INPUT_SIZES.len() as u64 - 1) as usize];
        let input = b.alloc(size, 0);
        b.record_stream(input, consumer);
        let output = b.alloc(rng.range(512, 2 << 20) as usize, consumer);
        b.free(input);
        outputs.push_back(output);
        if outputs.len() > OUTPUTS_IN_FLIGHT {
            if let Some(oldest) = outputs.pop_front() {
                b.free(oldest);
            }
        }
        if round % COMPLETE_EVERY == COMPLETE_EVERY - 1 {
            b.complete_stream(1 + (round / COMPLETE_EVERY % 2) as u32);
        }
    }
    b.finish(format!("multi_stream/3_streams/{rounds}"), "multi_stream")
}
