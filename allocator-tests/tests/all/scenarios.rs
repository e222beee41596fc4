//! Scripted scenarios with exact expected addresses and statistics.
//!
//! The simulated device hands out deterministic addresses (device 0 starts at `BASE`, segments
//! whose size is a multiple of 2 MiB start on 2 MiB boundaries, lowest free address first), so
//! every placement PyTorch's rules imply can be asserted exactly.

use crate::support::{stat, valid};
use blockpool::backend::{BackendError, SimFault};
use blockpool::introspect::BlockState;
use blockpool::{Allocation, AllocatorConfig, CachingAllocator, Error, SimBackend, StreamId};
use std::sync::{Arc, Mutex};

const BASE: u64 = 0x7f00_0000_0000;
const MIB: usize = 1 << 20;
const S0: StreamId = StreamId::DEFAULT;
const S1: StreamId = StreamId::from_raw(1);
const S2: StreamId = StreamId::from_raw(2);

fn setup(capacity: usize, config: AllocatorConfig) -> (SimBackend, CachingAllocator<SimBackend>) {
    let sim = SimBackend::new(1, capacity);
    let alloc = CachingAllocator::new(sim.clone(), config);
    (sim, alloc)
}

mod callbacks;
mod device_view;
mod errors;
mod ordered;
mod pools;
mod release;
mod stats;
mod streams;
