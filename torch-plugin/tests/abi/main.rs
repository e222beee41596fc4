//! The C interface of libblockpool_torch, called as C calls it, through the rlib, on the
//! simulated device (`BLOCKPOOL_BACKEND=sim`, 2 devices of 1 GiB). The allocator is one per
//! process, so every test of it lives in this one binary and runs under `support::session`,
//! which serializes them and starts each from a clean allocator.

mod history;
mod leaks;
mod memory;
mod outputs;
mod stats;
mod support;
