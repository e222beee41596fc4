//! Model-based property test: random operations against a `CachingAllocator` on two simulated
//! devices, with every invariant of DESIGN.md section 7 checked after every step (the pattern
//! of bumpalo's `quickchecks.rs`).
//!
//! The reference model knows only what a user of the allocator can know: the live allocations
//! (handles and raw pointers) with their streams and the other streams they were recorded on,
//! the events the allocator must record when such a block is freed and which of them have
//! completed, and the faults injected into the device. From that it predicts which error each
//! failing call must return, and which memory must not be handed out yet (a block freed with
//! events pending). Before each request it also works out, from the segments the allocator
//! shows, which cached block PyTorch's best fit picks (same stream and pool, smallest, lowest
//! address, oversize rules), and then checks the allocator took that block, or a new segment
//! of the right size when none fits, and rounded and split it as PyTorch does.
//!
//! The device capacities are small (256 and 192 MiB) so that out-of-memory, the release ladder
//! and memory fractions are exercised; faults (failed device allocations, hung streams, a
//! lower out-of-memory limit) are injected at random.
//! Statistics are read at random steps, which may reset their peaks or their accumulated
//! totals; right after an accumulated reset every total and counter must read 0, and the model
//! counts syncs, out-of-memory failures and device calls from there.
//!
//! Layout: `ops` the operations and their strategies, `state` what the reference model knows,
//! `harness` the state machine that runs each operation, `placement` PyTorch's rounding and
//! best fit, `checks` the checks after each step, `bad_pointers` raw pointers that must be
//! refused.

mod bad_pointers;
mod checks;
mod harness;
mod ops;
mod placement;
mod state;

use crate::support::proptest_config;
use blockpool::AllocatorConfig;
use proptest::prelude::*;
use proptest::sample::select;

use harness::Harness;
use ops::{op, CONFIGS};

const OPS_PER_CASE: usize = 200;
/// Cases per run unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 1000;

proptest! {
    #![proptest_config(proptest_config("proptest-regressions/model.txt", DEFAULT_CASES))]

    #[test]
    fn random_operations_keep_every_invariant(
        config in select(CONFIGS.to_vec()),
        ops in proptest::collection::vec(op(), OPS_PER_CASE),
    ) {
        let config = AllocatorConfig::parse(config)
            .unwrap_or_else(|e| panic!("model config {config:?} does not parse: {e}"));
        let mut harness = Harness::new(config);
        for (step, op) in ops.iter().enumerate() {
            harness.run(step, op);
        }
        harness.finish();
    }
}
