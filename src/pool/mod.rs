#![forbid(unsafe_code)]
//! Pure bookkeeping of the caching allocator: sizes, blocks, free lists and one device's
//! allocator. No I/O, no locks, no `unsafe`; the device is reached only through the
//! [`Backend`](crate::backend::Backend) passed into each call.

mod adopt;
mod block;
mod device;
mod events;
mod expandable;
mod free_list;
mod invariants;
mod malloc;
mod observe;
mod ordered;
mod policy;
mod release;
mod segments;
pub mod sizing;
mod views;

pub use adopt::{AdoptBlock, AdoptError, AdoptSegment};
pub use block::{BlockId, BlockState};
pub use device::{AllocatedBlock, DeviceAllocator};
pub use free_list::PoolKind;
pub use invariants::InvariantViolation;
pub(crate) use observe::{LiveRecord, PoolEvent};
pub use release::MallocStep;
pub use views::{BlockView, SegmentView};
