//! The bookkeeping invariants of DESIGN.md section 7, checked from scratch.
//!
//! Tests call [`DeviceAllocator::check_invariants`] after every operation: it walks every
//! segment, recomputes every statistic from the block states and compares.

use super::block::{BlockId, BlockState};
use super::device::DeviceAllocator;
use crate::backend::DeviceIndex;
use crate::backend::StreamId;
use crate::stats::{DeviceStats, Stat, StatArray};
use std::fmt;

/// A broken invariant, with what was expected and what was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation {
    /// Device checked.
    pub device: DeviceIndex,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}: {}", self.device, self.message)
    }
}

impl std::error::Error for InvariantViolation {}

#[derive(Default)]
struct Expected {
    allocation: [i64; 3],
    segment: [i64; 3],
    active: [i64; 3],
    inactive_split: [i64; 3],
    allocated_bytes: [i64; 3],
    reserved_bytes: [i64; 3],
    active_bytes: [i64; 3],
    inactive_split_bytes: [i64; 3],
    requested_bytes: [i64; 3],
    oversize_allocations: i64,
    oversize_segments: i64,
}

fn add(array: &mut [i64; 3], small: bool, amount: usize) {
    array[0] += amount as i64;
    array[if small { 1 } else { 2 }] += amount as i64;
}

impl<E> DeviceAllocator<E> {
    /// Checks that blocks tile their segments without overlap, that no two free neighbours (nor
    /// two unmapped ones) are left unmerged, that unmapped blocks are free whole units of
    /// expandable segments kept in their unmapped set and nowhere else, that reserved bytes are
    /// fixed segments plus mapped memory, that the free lists hold exactly the free blocks, that pending blocks
    /// wait on as many events as are queued, and that every current statistic equals what the
    /// block state implies.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |message: String| {
            Err(InvariantViolation {
                device: self.device,
                message,
            })
        };
        // Read from the settings, not the policy: the check is independent of the bookkeeping.
        let max_split = self.config().max_split_size();
        let mixed_streams = self.policy.streams_may_mix();
        let mut expected = Expected::default();
        let mut seen_blocks = 0usize;
        let mut free_blocks = [0usize; 2];
        let mut pending_event_count = 0usize;
        let mut reserved = 0usize;
        let mut mapped = 0usize;
        let mut unmapped_blocks = [0usize; 2];
        let mut previous_end = 0u64;

        for (addr, segment) in self.segments.iter() {
            if addr < previous_end {
                return fail(format!("segment {addr:#x} overlaps the segment before it"));
            }
            previous_end = addr + segment.size as u64;
            if !segment.expandable {
                reserved += segment.size;
            }
            let Some(head) = self.blocks.get(segment.head) else {
                return fail(format!("segment {addr:#x} has no head block"));
            };
            let (small, stream) = (head.small, head.stream);
            if head.prev.is_some() {
                return fail(format!("head block of segment {addr:#x} has a predecessor"));
            }
            if !segment.expandable {
                add(&mut expected.segment, small, 1);
                add(&mut expected.reserved_bytes, small, segment.size);
                if segment.size >= max_split {
                    expected.oversize_segments += 1;
                }
            }
            // Expandable segments stay out of the inactive-split statistics, as in PyTorch.
            let split = head.next.is_some() && !segment.expandable;
            let unit = super::expandable::unit(small) as u64;
            let mut prev_unmapped = false;
            let mut cursor = Some(segment.head);
            let mut prev: Option<BlockId> = None;
            let mut offset = addr;
            let mut prev_free: Option<StreamId> = None;
            while let Some(id) = cursor {
                let Some(block) = self.blocks.get(id) else {
                    return fail(format!("segment {addr:#x} links to a missing block"));
                };
                seen_blocks += 1;
                if block.addr != offset {
                    return fail(format!(
                        "block at {:#x} should start at {offset:#x}",
                        block.addr
                    ));
                }
                if block.prev != prev {
                    return fail(format!("block at {:#x} has a wrong back link", block.addr));
                }
                let stream_differs =
                    block.stream != stream && (segment.expandable || !mixed_streams);
                if block.small != small || stream_differs {
                    return fail(format!(
                        "block at {:#x} disagrees with its segment on pool or stream",
                        block.addr
                    ));
                }
                if block.size == 0 || block.size % super::sizing::MIN_BLOCK_SIZE != 0 {
                    return fail(format!(
                        "block at {:#x} has size {}",
                        block.addr, block.size
                    ));
                }
                if block.expandable != segment.expandable {
                    return fail(format!(
                        "block at {:#x} disagrees with its segment on being expandable",
                        block.addr
                    ));
                }
                if !block.mapped {
                    if !segment.expandable || block.state != BlockState::Free {
                        return fail(format!(
                            "unmapped block at {:#x} is {:?} in a {} segment",
                            block.addr,
                            block.state,
                            if segment.expandable {
                                "expandable"
                            } else {
                                "fixed"
                            }
                        ));
                    }
                    if prev_unmapped {
                        return fail(format!(
                            "unmapped block at {:#x} was not merged with its unmapped neighbour",
                            block.addr
                        ));
                    }
                    if (block.addr - addr) % unit != 0 || block.size as u64 % unit != 0 {
                        return fail(format!(
                            "unmapped block at {:#x} ({} bytes) is not whole {unit}-byte units",
                            block.addr, block.size
                        ));
                    }
                    let set = self.expandable.unmapped(small);
                    if set.get(&(stream, block.addr)) != Some(&id) {
                        return fail(format!(
                            "unmapped block at {:#x} is missing from its unmapped set",
                            block.addr
                        ));
                    }
                    unmapped_blocks[usize::from(small)] += 1;
                    prev_unmapped = true;
                    prev_free = None;
                    offset += block.size as u64;
                    prev = Some(id);
                    cursor = block.next;
                    continue;
                }
                prev_unmapped = false;
                if segment.expandable {
                    mapped += block.size;
                    add(&mut expected.reserved_bytes, small, block.size);
                }
                let is_free = block.state == BlockState::Free;
                if is_free && prev_free == Some(block.stream) {
                    return fail(format!(
                        "free block at {:#x} was not merged with its free neighbour",
                        block.addr
                    ));
                }
                match block.state {
                    BlockState::Allocated | BlockState::PendingFree => {
                        if block.state == BlockState::Allocated {
                            add(&mut expected.allocation, small, 1);
                            add(&mut expected.allocated_bytes, small, block.size);
                            if block.size >= max_split {
                                expected.oversize_allocations += 1;
                            }
                        } else {
                            if block.event_count == 0 {
                                return fail(format!(
                                    "block at {:#x} is pending free with no event to wait for",
                                    block.addr
                                ));
                            }
                            pending_event_count += block.event_count as usize;
                        }
                        add(&mut expected.active, small, 1);
                        add(&mut expected.active_bytes, small, block.size);
                        add(&mut expected.requested_bytes, small, block.requested);
                        if block.requested > block.size {
                            return fail(format!(
                                "block at {:#x} is smaller than its request",
                                block.addr
                            ));
                        }
                    }
                    BlockState::Free => {
                        free_blocks[usize::from(small)] += 1;
                        let list = if small { &self.small } else { &self.large };
                        if !list.contains(&Self::free_key(id, block)) {
                            return fail(format!(
                                "free block at {:#x} is missing from its free list",
                                block.addr
                            ));
                        }
                        if split {
                            add(&mut expected.inactive_split, small, 1);
                            add(&mut expected.inactive_split_bytes, small, block.size);
                        }
                    }
                }
                prev_free = is_free.then_some(block.stream);
                offset += block.size as u64;
                prev = Some(id);
                cursor = block.next;
            }
            if offset != addr + segment.size as u64 {
                return fail(format!(
                    "blocks of segment {addr:#x} cover {} of its {} bytes",
                    offset - addr,
                    segment.size
                ));
            }
        }

        if seen_blocks != self.blocks.len() {
            return fail(format!(
                "{} blocks exist but {seen_blocks} are in segments",
                self.blocks.len()
            ));
        }
        for (small, list) in [(false, &self.large), (true, &self.small)] {
            if list.len() != free_blocks[usize::from(small)] {
                return fail(format!(
                    "{} pool free list holds {} entries for {} free blocks",
                    if small { "small" } else { "large" },
                    list.len(),
                    free_blocks[usize::from(small)]
                ));
            }
        }
        for (small, set) in [(false, 0usize), (true, 1)] {
            let held = self.expandable.unmapped(small).len();
            if held != unmapped_blocks[set] {
                return fail(format!(
                    "{} pool unmapped set holds {held} entries for {} unmapped blocks",
                    if small { "small" } else { "large" },
                    unmapped_blocks[set]
                ));
            }
        }
        reserved += mapped;
        let queued = self.pending_events() + self.events.stranded();
        if queued != pending_event_count {
            return fail(format!(
                "{queued} events queued or stranded but pending blocks wait on {pending_event_count}"
            ));
        }
        if reserved != self.segments.reserved() {
            return fail(format!(
                "reserved is {} but fixed segments and mapped memory sum to {reserved}",
                self.segments.reserved()
            ));
        }
        compare_stats(self.stats(), &expected).or_else(fail)
    }
}

fn compare_stats(stats: &DeviceStats, expected: &Expected) -> Result<(), String> {
    let arrays: [(&str, &StatArray, &[i64; 3]); 9] = [
        ("allocation", &stats.allocation, &expected.allocation),
        ("segment", &stats.segment, &expected.segment),
        ("active", &stats.active, &expected.active),
        (
            "inactive_split",
            &stats.inactive_split,
            &expected.inactive_split,
        ),
        (
            "allocated_bytes",
            &stats.allocated_bytes,
            &expected.allocated_bytes,
        ),
        (
            "reserved_bytes",
            &stats.reserved_bytes,
            &expected.reserved_bytes,
        ),
        ("active_bytes", &stats.active_bytes, &expected.active_bytes),
        (
            "inactive_split_bytes",
            &stats.inactive_split_bytes,
            &expected.inactive_split_bytes,
        ),
        (
            "requested_bytes",
            &stats.requested_bytes,
            &expected.requested_bytes,
        ),
    ];
    for (name, actual, want) in arrays {
        let pools = ["all", "small_pool", "large_pool"]
            .iter()
            .zip(actual.iter());
        for ((pool, stat), &want) in pools.zip(want) {
            check_stat(&format!("{name}.{pool}"), stat, want)?;
        }
    }
    check_stat(
        "oversize_allocations",
        &stats.oversize_allocations,
        expected.oversize_allocations,
    )?;
    check_stat(
        "oversize_segments",
        &stats.oversize_segments,
        expected.oversize_segments,
    )
}

fn check_stat(name: &str, stat: &Stat, want: i64) -> Result<(), String> {
    if stat.current != want {
        return Err(format!(
            "{name}.current is {} but the blocks imply {want}",
            stat.current
        ));
    }
    if stat.peak < stat.current {
        return Err(format!(
            "{name} has peak {} below current {}",
            stat.peak, stat.current
        ));
    }
    Ok(())
}
