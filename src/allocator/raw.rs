//! The raw-pointer API of the [`CachingAllocator`], for C callers (the PyTorch plugin): an
//! allocation is a device address, kept with its device and block in the shared `raw` map
//! (a sharded `DashMap`) until [`CachingAllocator::free`] takes it out, and a pointer that is
//! not live is explained (unknown, freed already, or another device's).
//!
//! Lock order: a device's lock, then the map; nothing holds a map entry while it locks a
//! device. `malloc` inserts after its block is allocated and `free` removes before its block is
//! freed, so under the device lock an entry always names the live block at its address.

use super::caching::{CachingAllocator, Shared};
use crate::backend::{Backend, DeviceIndex, StreamId};
use crate::error::{Error, Result};
use crate::event::ContextLevel;
use crate::leak::Origin;
use crate::pool::BlockState;
use std::panic::Location;

impl<B: Backend> CachingAllocator<B> {
    /// Raw allocation for C callers: returns the device address (0 for a zero-byte request).
    /// Free it with [`CachingAllocator::free`]. It is tracked as a handle is, its site the
    /// caller's source location ([`live_allocations`](Self::live_allocations) marks it `raw`).
    #[track_caller]
    pub fn malloc(
        &self,
        device: impl Into<DeviceIndex>,
        size_bytes: usize,
        stream: StreamId,
    ) -> Result<u64> {
        let device = device.into();
        if size_bytes == 0 {
            self.shared.check_device(device)?;
            return Ok(0);
        }
        let stamp = self.shared.recording_stamp(ContextLevel::State);
        let details = self.shared.details(None, stamp);
        let origin = Origin {
            site: Location::caller(),
            raw: true,
            details,
        };
        let block = self
            .shared
            .malloc(device, size_bytes, stream, stamp, origin)?;
        self.shared.raw.insert(block.addr, (device, block.id));
        Ok(block.addr)
    }

    /// Frees a pointer returned by [`CachingAllocator::malloc`] on `device`. Freeing 0 does
    /// nothing. Unknown pointers, double frees and the wrong device are errors that change
    /// nothing.
    pub fn free(&self, device: impl Into<DeviceIndex>, ptr: u64) -> Result<()> {
        let device = device.into();
        self.shared.check_device(device)?;
        if ptr == 0 {
            return Ok(());
        }
        match self
            .shared
            .raw
            .remove_if(&ptr, |_, &(owner, _)| owner == device)
        {
            Some((_, (_, id))) => self.shared.free(device, id),
            None => Err(self.shared.explain_bad_pointer(device, ptr)),
        }
    }

    /// Marks the raw allocation `ptr` on `device` as used on `stream`: its memory will not be
    /// reused before the work queued on `stream` by the time it is freed has completed.
    pub fn record_stream(
        &self,
        device: impl Into<DeviceIndex>,
        ptr: u64,
        stream: StreamId,
    ) -> Result<()> {
        let device = device.into();
        self.shared.check_device(device)?;
        if ptr == 0 {
            return Ok(());
        }
        // The device first, then the map: `free` takes a pointer out of the map before it
        // locks the device to free the block, so an entry read under the device lock names the
        // block live at `ptr` now. Read before the lock, it could name a block freed (and its
        // slot given to another allocation) while this call waited.
        let mut state = self.lock_device(device)?;
        let entry = self.shared.raw.get(&ptr).map(|e| *e.value());
        if let Some((_, id)) = entry.filter(|&(owner, _)| owner == device) {
            return state.record_stream(id, stream);
        }
        drop(state);
        Err(match self.shared.explain_bad_pointer(device, ptr) {
            Error::DoubleFree { device, ptr } => Error::UseAfterFree { device, ptr },
            other => other,
        })
    }
}

impl<B: Backend> Shared<B> {
    /// Why `ptr` is not a live raw allocation of `device`.
    fn explain_bad_pointer(&self, device: DeviceIndex, ptr: u64) -> Error {
        if let Some(actual) = self.raw.get(&ptr).map(|entry| entry.value().0) {
            return if actual == device {
                // Not live when the call looked, live again now: another thread freed it and
                // got the address back from `malloc` meanwhile, so the caller's was freed.
                Error::DoubleFree { device, ptr }
            } else {
                Error::WrongDevice {
                    ptr,
                    given: device,
                    actual,
                }
            };
        }
        for (d, dev) in self.devices.iter().enumerate() {
            let d = DeviceIndex::new(d);
            let Some((_, state)) = dev.lock().block_at(ptr) else {
                continue;
            };
            if d != device {
                return Error::WrongDevice {
                    ptr,
                    given: device,
                    actual: d,
                };
            }
            if state != BlockState::Allocated {
                return Error::DoubleFree { device, ptr };
            }
        }
        Error::UnknownPointer { device, ptr }
    }
}
