//! vLLM's pattern of a new stream for every call (vllm-project/vllm#52951): each step makes
//! `calls` calls, each on a stream never used before; a call allocates its working buffers on
//! its stream and frees them before it returns, and leaves one output on the default stream
//! that the step frees when it ends. A caching allocator that keeps each stream's cache to
//! itself reserves new memory for every call and never reuses it; one that reuses memory
//! across streams stays flat after the first step.

use crate::ops::{OpsBuilder, Rng, Workload};

/// Working buffers a call allocates: sizes drawn from these ranges, in bytes.
const BUFFERS: [(u64, u64); 3] = [(1 << 20, 32 << 20), (64 << 10, 4 << 20), (512, 256 << 10)];
/// Size of the output each call leaves on the default stream, in bytes.
const OUTPUT: usize = 256 << 10;

/// `steps` steps of `calls` calls, each call on a new stream.
pub fn build(steps: usize, calls: usize, seed: u64) -> Workload {
    let mut rng = Rng::new(seed ^ 0x5EED_0002);
    let mut b = OpsBuilder::new();
    let mut next_stream: u32 = 1;
    for _ in 0..steps {
        let mut outputs = Vec::with_capacity(calls);
        for _ in 0..calls {
            let stream = next_stream;
            next_stream = next_stream.wrapping_add(1).max(1);
            let buffers: Vec<u32> = BUFFERS
                .iter()
                .map(|&(low, high)| b.alloc(rng.range(low, high) as usize, stream))
                .collect();
            outputs.push(b.alloc(OUTPUT, 0));
            for slot in buffers.into_iter().rev() {
                b.free(slot);
            }
        }
        for slot in outputs {
            b.free(slot);
        }
    }
    b.finish(
        format!("stream_per_call/{steps}x{calls}"),
        "stream_per_call",
    )
}
