//! [`LeakScope`]: a stretch of a program whose allocations should all be gone by its end
//! (`let scope = alloc.leak_scope("step 12"); ...; let report = scope.finish();`).
//!
//! A scope notes, per device, the last allocation id handed out and the live bytes when it
//! opens. At [`LeakScope::finish`] the allocations numbered after that mark that are still
//! live are its leaks, grouped by site ([`ScopeReport`]), and its peak is the most live bytes
//! above the mark while it was open. Scopes see the whole allocator, not one thread: an
//! allocation another thread makes meanwhile belongs to the scope too. Scopes may nest and
//! overlap; every open scope's peak is raised by every allocation, so a parent's peak covers
//! its children's.

use super::caching::CachingAllocator;
use super::leaks::describe;
use crate::backend::Backend;
use crate::backend::DeviceIndex;
use crate::leak::{LeakReport, ScopeReport};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers scopes process-wide, so that each device's table can tell them apart.
static NEXT_SCOPE: AtomicU64 = AtomicU64::new(1);

/// Where a scope started on one device.
#[derive(Clone, Copy, Debug)]
struct Mark {
    /// The last allocation id handed out when the scope opened.
    last_id: u64,
    /// Live bytes when the scope opened.
    live_bytes: u64,
}

/// An open leak scope, from [`CachingAllocator::leak_scope`] (module docs). Dropping it
/// without [`finish`](Self::finish) closes it and reports nothing.
///
/// ```
/// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
///
/// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
/// let mut kept = Vec::new();
/// let scope = alloc.leak_scope("step 12");
/// let activation = alloc.allocate(0, 8 << 20, StreamId::DEFAULT)?;
/// kept.push(alloc.allocate(0, 1 << 20, StreamId::DEFAULT)?); // kept past the step: a leak
/// drop(activation);
/// let report = scope.finish();
/// assert_eq!(report.peak_bytes, [9 << 20]);
/// assert_eq!(report.leaks.summary(), "1048576 bytes in 1 allocation at 1 site");
/// assert!(report.to_string().starts_with("scope \"step 12\": peak 9.00 MiB on device 0"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LeakScope<'a, B: Backend> {
    alloc: &'a CachingAllocator<B>,
    name: String,
    id: u64,
    marks: Vec<Mark>,
    open: bool,
}

impl<B: Backend> CachingAllocator<B> {
    /// Opens a leak scope named `name` over every device (see [`LeakScope`]). It sees only
    /// what leak tracking records ([`set_leak_tracking`](Self::set_leak_tracking)).
    pub fn leak_scope(&self, name: &str) -> LeakScope<'_, B> {
        let id = NEXT_SCOPE.fetch_add(1, Ordering::Relaxed);
        let marks = self
            .shared
            .devices
            .iter()
            .map(|device| {
                let mut dev = device.lock();
                let live_bytes = dev.open_leak_scope(id);
                Mark {
                    last_id: dev.next_alloc_id,
                    live_bytes,
                }
            })
            .collect();
        LeakScope {
            alloc: self,
            name: name.to_owned(),
            id,
            marks,
            open: true,
        }
    }
}

impl<B: Backend> LeakScope<'_, B> {
    /// The scope's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Closes the scope: what was allocated inside and is still live, grouped by site, and
    /// the scope's peak per device.
    pub fn finish(mut self) -> ScopeReport {
        self.open = false;
        let mut inside = Vec::new();
        let mut peak_bytes = Vec::with_capacity(self.marks.len());
        for (device, (mark, state)) in self
            .marks
            .iter()
            .zip(self.alloc.shared.devices.iter())
            .enumerate()
        {
            let mut dev = state.lock();
            let peak = dev
                .observers
                .live_mut()
                .close_scope(self.id)
                .unwrap_or(mark.live_bytes);
            let entries = dev.live_records(|e| e.alloc_id > mark.last_id);
            drop(dev);
            peak_bytes.push(peak.saturating_sub(mark.live_bytes));
            inside.extend(describe(
                &self.alloc.shared.contexts,
                DeviceIndex::new(device),
                entries,
            ));
        }
        ScopeReport {
            name: std::mem::take(&mut self.name),
            leaks: LeakReport::from_allocations(inside),
            peak_bytes,
        }
    }
}

impl<B: Backend> Drop for LeakScope<'_, B> {
    fn drop(&mut self) {
        if self.open {
            for device in self.alloc.shared.devices.iter() {
                device.lock().observers.live_mut().close_scope(self.id);
            }
        }
    }
}

impl<B: Backend> fmt::Debug for LeakScope<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeakScope")
            .field("name", &self.name)
            .field("open", &self.open)
            .finish()
    }
}
