//! Behaviour of the simulated device: exact fake addresses, capacity, faults, virtual streams,
//! host-backed bytes and call counters.

use super::*;

const MIB: usize = 1 << 20;
const BASE: u64 = 0x7f00_0000_0000;
const S1: StreamId = StreamId::from_raw(1);
const S2: StreamId = StreamId::from_raw(2);

fn sim() -> SimBackend {
    SimBackend::new(1, 1 << 30)
}

mod faults;
mod host;
mod memory;
mod streams;
