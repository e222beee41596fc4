//! (e) the system allocator: `Vec::<u8>::with_capacity(size)` and its drop, i.e. glibc's
//! `malloc`/`free` of the same sizes, memory untouched. It has no device, no streams and no
//! reserved-bytes figure: it is the floor for what bookkeeping costs.

use super::{Counters, Instance, Replay, Subject};
use crate::ops::{Op, Workload};
use std::time::Instant;

/// The system allocator.
#[derive(Debug, Default)]
pub struct System;

impl Subject for System {
    fn key(&self) -> &str {
        "e"
    }

    fn describe(&self) -> String {
        "system allocator (glibc malloc/free of the same sizes, memory untouched)".to_string()
    }

    fn instance(&self, _devices: usize) -> anyhow::Result<Box<dyn Instance>> {
        Ok(Box::new(System))
    }
}

impl Instance for System {
    fn replay(&self, workload: &Workload, _device: usize) -> anyhow::Result<Replay> {
        let mut slots: Vec<Option<Vec<u8>>> = Vec::new();
        slots.resize_with(workload.slots, || None);
        let mut failed = 0;
        let start = Instant::now();
        for op in &workload.ops {
            match *op {
                Op::Alloc {
                    slot, size_bytes, ..
                } => {
                    let mut buffer = Vec::new();
                    // try_reserve_exact: a refused request is counted, never an abort.
                    match buffer.try_reserve_exact(size_bytes) {
                        Ok(()) => slots[slot as usize] = Some(buffer),
                        Err(_) => failed += 1,
                    }
                }
                Op::Free { slot } => drop(slots[slot as usize].take()),
                Op::RecordStream { .. } | Op::CompleteStream { .. } => {}
            }
        }
        let elapsed = start.elapsed();
        Ok(Replay {
            elapsed,
            failed_allocations: failed,
        })
    }

    fn counters(&self, _device: usize) -> Counters {
        Counters::default()
    }
}
