//! [`DefaultBackend`]: the backend chosen at run time, CUDA or simulated, as one type the
//! process-wide allocator can be generic over. Every call delegates to the chosen backend.

use std::fmt;

use crate::backend::{Backend, BackendError, DeviceIndex, MemInfo, SimBackend, SimEvent, StreamId};
#[cfg(feature = "cuda")]
use crate::cuda::{CudaBackend, CudaBackendEvent};

/// The backend of the default allocator: real GPUs through CUDA, or the simulated device.
#[derive(Clone)]
#[non_exhaustive]
pub enum DefaultBackend {
    /// Every CUDA device of this process.
    #[cfg(feature = "cuda")]
    Cuda(CudaBackend),
    /// The simulated device (fake addresses, no memory behind them).
    Sim(SimBackend),
}

/// An event recorded by a [`DefaultBackend`], of the same kind as the backend.
#[derive(Debug)]
#[non_exhaustive]
pub enum DefaultEvent {
    /// Recorded by [`DefaultBackend::Cuda`].
    #[cfg(feature = "cuda")]
    Cuda(CudaBackendEvent),
    /// Recorded by [`DefaultBackend::Sim`].
    Sim(SimEvent),
}

impl DefaultBackend {
    /// Whether this is the CUDA backend.
    pub fn is_cuda(&self) -> bool {
        !matches!(self, DefaultBackend::Sim(_))
    }
}

impl fmt::Debug for DefaultBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefaultBackend")
            .field("kind", &self.name())
            .field("devices", &self.device_count())
            .finish()
    }
}

/// The error for an event recorded by a backend of the other kind. Only reachable by calling
/// [`Backend`] methods directly with events from two different default backends; the
/// allocator never mixes them.
#[cfg(feature = "cuda")]
fn foreign_event(backend: &DefaultBackend, event: &DefaultEvent) -> BackendError {
    let (device, event_backend) = match event {
        DefaultEvent::Cuda(event) => (event.device(), "cuda"),
        DefaultEvent::Sim(event) => (event.device(), "sim"),
    };
    BackendError::ForeignEvent {
        device,
        event_backend,
        backend: backend.name(),
    }
}

/// Calls `$method($args)` on whichever backend `$self` holds.
macro_rules! forward {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match $self {
            #[cfg(feature = "cuda")]
            DefaultBackend::Cuda(cuda) => cuda.$method($($arg),*),
            DefaultBackend::Sim(sim) => sim.$method($($arg),*),
        }
    };
}

impl Backend for DefaultBackend {
    type Event = DefaultEvent;

    fn name(&self) -> &'static str {
        forward!(self, name())
    }

    fn device_count(&self) -> usize {
        forward!(self, device_count())
    }

    fn mem_get_info(&self, device: DeviceIndex) -> Result<MemInfo, BackendError> {
        forward!(self, mem_get_info(device))
    }

    fn alloc_segment(&self, device: DeviceIndex, size_bytes: usize) -> Result<u64, BackendError> {
        forward!(self, alloc_segment(device, size_bytes))
    }

    fn free_segment(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        forward!(self, free_segment(device, ptr, size_bytes))
    }

    fn record_event(
        &self,
        device: DeviceIndex,
        stream: StreamId,
    ) -> Result<DefaultEvent, BackendError> {
        match self {
            #[cfg(feature = "cuda")]
            DefaultBackend::Cuda(cuda) => cuda.record_event(device, stream).map(DefaultEvent::Cuda),
            DefaultBackend::Sim(sim) => sim.record_event(device, stream).map(DefaultEvent::Sim),
        }
    }

    fn query_event(&self, event: &DefaultEvent) -> Result<bool, BackendError> {
        match (self, event) {
            #[cfg(feature = "cuda")]
            (DefaultBackend::Cuda(cuda), DefaultEvent::Cuda(event)) => cuda.query_event(event),
            (DefaultBackend::Sim(sim), DefaultEvent::Sim(event)) => sim.query_event(event),
            #[cfg(feature = "cuda")]
            _ => Err(foreign_event(self, event)),
        }
    }

    fn synchronize_event(&self, event: &DefaultEvent) -> Result<(), BackendError> {
        match (self, event) {
            #[cfg(feature = "cuda")]
            (DefaultBackend::Cuda(cuda), DefaultEvent::Cuda(event)) => {
                cuda.synchronize_event(event)
            }
            (DefaultBackend::Sim(sim), DefaultEvent::Sim(event)) => sim.synchronize_event(event),
            #[cfg(feature = "cuda")]
            _ => Err(foreign_event(self, event)),
        }
    }

    fn release_event(&self, event: DefaultEvent) {
        match (self, event) {
            #[cfg(feature = "cuda")]
            (DefaultBackend::Cuda(cuda), DefaultEvent::Cuda(event)) => cuda.release_event(event),
            (DefaultBackend::Sim(sim), DefaultEvent::Sim(event)) => sim.release_event(event),
            // An event of the other kind belongs to no pool here. Dropping it is all that can be
            // done; a CUDA event dropped this way stays allocated in its driver context until
            // the context goes, which only this misuse can cause.
            #[cfg(feature = "cuda")]
            _ => {}
        }
    }

    fn alloc_host(&self, size_bytes: usize) -> Result<u64, BackendError> {
        forward!(self, alloc_host(size_bytes))
    }

    fn free_host(&self, ptr: u64, size_bytes: usize) -> Result<(), BackendError> {
        forward!(self, free_host(ptr, size_bytes))
    }

    fn supports_expandable_segments(&self, device: DeviceIndex) -> bool {
        forward!(self, supports_expandable_segments(device))
    }

    fn reserve_address_range(
        &self,
        device: DeviceIndex,
        size_bytes: usize,
    ) -> Result<u64, BackendError> {
        forward!(self, reserve_address_range(device, size_bytes))
    }

    fn release_address_range(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        forward!(self, release_address_range(device, ptr, size_bytes))
    }

    fn map_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        forward!(self, map_memory(device, ptr, size_bytes))
    }

    fn unmap_memory(
        &self,
        device: DeviceIndex,
        ptr: u64,
        size_bytes: usize,
    ) -> Result<(), BackendError> {
        forward!(self, unmap_memory(device, ptr, size_bytes))
    }
}
