//! Raw pointers the allocator must refuse: which live or freed pointer a `BadPointer` step
//! picks, and the error the model predicts for it.

use blockpool::introspect::BlockState;
use blockpool::Error;
use proptest::sample::Index;

use super::harness::Harness;
use super::ops::{BadPointer, RawCall, DEVICES, STREAMS};
use super::placement::block_at;
use super::state::{Live, Owner};
use blockpool::DeviceIndex;

/// Below every simulated device's address range: never a block.
const BOGUS_PTR: u64 = 0x1234_5600;

impl Harness {
    pub(super) fn bad_pointer(
        &mut self,
        call: RawCall,
        bad: BadPointer,
        device: usize,
        which: Index,
    ) {
        let pick = |filter: &dyn Fn(&Live) -> bool| {
            let candidates: Vec<&Live> = self.live.iter().filter(|l| filter(l)).collect();
            (!candidates.is_empty()).then(|| candidates[which.index(candidates.len())])
        };
        let (device, ptr) = match bad {
            BadPointer::Unknown => (device, BOGUS_PTR),
            BadPointer::Interior => match pick(&|l| l.size > 512) {
                Some(l) => (l.device, l.ptr + 512),
                None => return,
            },
            BadPointer::AlreadyFreed => {
                let freed = &self.devices[device].freed_raw;
                if freed.is_empty() {
                    return;
                }
                let ptr = freed[which.index(freed.len())];
                if self
                    .live
                    .iter()
                    .any(|l| l.ptr == ptr && matches!(l.owner, Owner::Raw))
                {
                    return; // handed out again as a raw pointer: freeing it would be valid
                }
                (device, ptr)
            }
            BadPointer::WrongDevice => match pick(&|l| matches!(l.owner, Owner::Raw) && l.ptr != 0)
            {
                Some(l) => ((l.device + 1) % DEVICES, l.ptr),
                None => return,
            },
            BadPointer::HandleOwned => {
                match pick(&|l| matches!(l.owner, Owner::Handle(_)) && l.ptr != 0) {
                    Some(l) => (device, l.ptr),
                    None => return,
                }
            }
            BadPointer::InvalidDevice => match pick(&|l| l.ptr != 0) {
                Some(l) => (DEVICES, l.ptr),
                None => return,
            },
        };
        let want = match (self.expected_bad_pointer_error(device, ptr), call) {
            (Error::DoubleFree { device, ptr }, RawCall::RecordStream(_)) => {
                Error::UseAfterFree { device, ptr }
            }
            (want, _) => want,
        };
        let result = match call {
            RawCall::Free => self.alloc.free(device, ptr),
            RawCall::RecordStream(s) => self.alloc.record_stream(device, ptr, STREAMS[s]),
        };
        self.observe();
        assert_eq!(
            result,
            Err(want),
            "{}: a bad pointer must be refused with the right error",
            self.context
        );
    }

    /// The error for `ptr` named with `device`, when it is not a live raw pointer of `device`.
    fn expected_bad_pointer_error(&self, device: usize, ptr: u64) -> Error {
        if device >= DEVICES {
            return Error::InvalidDevice {
                device: DeviceIndex::new(device),
                device_count: DEVICES,
            };
        }
        let live_raw = self
            .live
            .iter()
            .find(|l| l.ptr == ptr && matches!(l.owner, Owner::Raw));
        if let Some(l) = live_raw {
            assert_ne!(
                l.device, device,
                "{}: the model picked a valid pointer",
                self.context
            );
            return Error::WrongDevice {
                ptr,
                given: DeviceIndex::new(device),
                actual: DeviceIndex::new(l.device),
            };
        }
        for d in 0..DEVICES {
            let segments = self.segments(d);
            match block_at(&segments, ptr) {
                Some(_) if d != device => {
                    return Error::WrongDevice {
                        ptr,
                        given: DeviceIndex::new(device),
                        actual: DeviceIndex::new(d),
                    }
                }
                // Freed and still a block of its own: a double free.
                Some((_, b)) if b.state != BlockState::Allocated => {
                    return Error::DoubleFree {
                        device: DeviceIndex::new(device),
                        ptr,
                    }
                }
                _ => {}
            }
        }
        Error::UnknownPointer {
            device: DeviceIndex::new(device),
            ptr,
        }
    }
}
