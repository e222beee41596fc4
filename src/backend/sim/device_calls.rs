//! The [`Backend`] trait for [`SimBackend`]: the device calls the allocator makes, each
//! counted, checked and subject to the injected faults.

use super::*;

/// Segment allocation fails, on top of out-of-memory, with:
/// - [`BackendError::Driver`] `CUDA_ERROR_INVALID_VALUE` for a 0-byte request, as `cuMemAlloc`
///   answers;
/// - [`BackendError::InjectedFault`] when a [`SimFault::AllocError`] fires.
///
/// Out-of-memory comes from the capacity, a [`SimFault`] limit or countdown, and also from a
/// full fake address range (1 TiB per device) or a failed host allocation.
impl Backend for SimBackend {
    type Event = SimEvent;

    fn name(&self) -> &'static str {
        "sim"
    }

    fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    fn mem_get_info(&self, device: DeviceIndex) -> Result<MemInfo, BackendError> {
        Ok(self.device(device)?.lock().mem_info())
    }

    fn alloc_segment(&self, device: DeviceIndex, size_bytes: usize) -> Result<u64, BackendError> {
        self.run_alloc_hook(device, size_bytes);
        let host_backed = self.inner.host_backed;
        self.device(device)?.lock().alloc(size_bytes, host_backed)
    }

    fn free_segment(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.lock().free(ptr, size_bytes)
    }

    fn record_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<SimEvent, BackendError> {
        let mut dev = self.device(device)?.lock();
        if dev.take_record_fault() {
            return Err(BackendError::InjectedFault {
                device,
                what: "event record",
            });
        }
        let ticket = dev.record(stream);
        Ok(SimEvent {
            device,
            stream,
            ticket,
        })
    }

    /// Work queued on `stream` after this call cannot complete before `event` has; an event
    /// of another simulated device is refused ([`BackendError::Unsupported`]).
    fn stream_wait_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
        event: &SimEvent,
    ) -> Result<(), BackendError> {
        if event.device != device {
            // Checked first, so that a bad device index is named as such.
            self.device(device)?;
            return Err(BackendError::Unsupported {
                device,
                what: "waiting on another simulated device's event",
            });
        }
        self.device(device)?
            .lock()
            .wait(stream, event.stream, event.ticket);
        Ok(())
    }

    fn query_event(&self, event: &SimEvent) -> Result<bool, BackendError> {
        let mut dev = self.device(event.device)?.lock();
        Ok(dev.query(event.stream, event.ticket))
    }

    /// Runs the stream's work up to `event` and returns; fails with
    /// [`BackendError::EventNeverCompletes`] instead of blocking forever when the stream hangs
    /// (or the event was never recorded on this backend).
    fn synchronize_event(&self, event: &SimEvent) -> Result<(), BackendError> {
        let mut dev = self.device(event.device)?.lock();
        dev.synchronize(event.stream, event.ticket)
    }

    fn release_event(&self, event: SimEvent) {
        if let Ok(dev) = self.device(event.device) {
            dev.lock().calls.events_released += 1;
        }
    }

    /// Real, zeroed host memory aligned to [`HOST_PAGE`] bytes (the simulated device copies
    /// nothing, so it is not actually page-locked).
    fn alloc_host(&self, size_bytes: usize) -> Result<u64, BackendError> {
        self.inner.host.lock().alloc(size_bytes)
    }

    fn free_host(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        self.inner.host.lock().free(ptr, size_bytes)
    }

    /// True for an existing device with fake addresses; false when host-backed (see
    /// [`SimBackend::reserve_address_range`](Backend::reserve_address_range)).
    fn supports_expandable_segments(&self, device: DeviceIndex) -> bool {
        !self.inner.host_backed && device < DeviceIndex::new(self.inner.devices.len())
    }

    /// A fake range aligned to [`MAPPING_GRANULARITY`], first fit from the device's reservation
    /// window (`0x1000_0000_0000_0000 + device * 2^52`, apart from its segments' window), never
    /// overlapping a segment or another range (2 MiB of unused space follow each). The size
    /// must be a non-zero multiple of the granularity. Host-backed devices refuse with
    /// [`BackendError::Unsupported`]: real bytes behind a range mapped chunk by chunk would
    /// need host virtual memory calls, which the simulator does not make.
    fn reserve_address_range(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
    ) -> Result<u64, BackendError> {
        let mut dev = self.device(device)?.lock();
        if self.inner.host_backed {
            dev.calls.failed_vmm_calls += 1;
            return Err(BackendError::Unsupported {
                device,
                what: "expandable segments in host-backed mode (build the SimBackend without \
                       host_backed to use them)",
            });
        }
        dev.reserve(size_bytes)
    }

    fn release_address_range(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?
            .lock()
            .release_reservation(ptr, size_bytes)
    }

    /// Mapped bytes count against the capacity and the injected limit, and each map counts
    /// down the injected allocation faults, exactly as a segment allocation does. Address and
    /// size must be multiples of [`MAPPING_GRANULARITY`] inside one reserved range, over
    /// nothing mapped.
    fn map_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.lock().map(ptr, size_bytes)
    }

    fn unmap_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        self.device(device)?.lock().unmap(ptr, size_bytes)
    }
}
