//! Leak tracking on the [`CachingAllocator`]: what each allocation call gathers for its
//! device's live table (`Shared::details`), named allocations
//! ([`CachingAllocator::allocate_named`]), the settings ([`CachingAllocator::set_leak_tracking`],
//! [`CachingAllocator::set_teardown_report`]), reading the tables back (flat, grouped into a
//! [`LiveSnapshot`] or a [`LeakReport`]), and the teardown report made when the last
//! `CachingAllocator` value is dropped or [`CachingAllocator::shutdown`] is called.
//!
//! Handles hold the allocator's shared state, so the state outlives the last
//! `CachingAllocator` while handles (or handles passed to `mem::forget`) remain. "Dropping the
//! allocator" is therefore dropping the last `CachingAllocator` value: at that moment whatever
//! is still live is reported, whether it will be freed later by a handle still in use or
//! never.

use super::caching::{CachingAllocator, Shared};
use super::handle::Allocation;
use super::history::{coarse_now_ns, now_ns};
use crate::backend::{Backend, DeviceIndex, StreamId};
use crate::error::Result;
use crate::event::{ContextId, ContextTable, EventStamp};
use crate::leak::{
    site_label, Details, LeakReport, LeakTracking, LiveAllocation, LiveSnapshot, TeardownReport,
};
use crate::pool::LiveRecord;
use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl<B: Backend> Shared<B> {
    /// The details leak tracking gathers for a call named `name` (stamped `stamp` for
    /// history) before the device lock is taken, if any: at [`LeakTracking::Sites`] only a
    /// name, so an unnamed call is one load and gathers nothing. Whether the call is recorded
    /// at all is read under the lock ([`Shared::tracks`]).
    #[inline(always)]
    pub(super) fn details(
        &self,
        name: Option<&Arc<str>>,
        stamp: Option<EventStamp>,
    ) -> Option<Box<Details>> {
        const OFF: u8 = LeakTracking::Off.index();
        const SITES: u8 = LeakTracking::Sites.index();
        let level = self.leak_tracking.load(Ordering::Relaxed);
        if (level == SITES && name.is_none()) || level == OFF {
            return None;
        }
        let level = LeakTracking::from_index(level);
        Some(Box::new(self.gather_details(name, stamp, level)))
    }

    /// Whether allocations are recorded in the live tables now. Read under the device lock,
    /// so that no allocation is recorded in a table [`CachingAllocator::set_leak_tracking`]
    /// emptied when it turned tracking off (`leak::live` module docs).
    #[inline(always)]
    pub(super) fn tracks(&self) -> bool {
        self.leak_tracking.load(Ordering::Relaxed) != LeakTracking::Off.index()
    }

    /// [`Shared::details`] of a named call, or of any call with context capture: the name,
    /// and with context capture the clock and the thread's tags (and the call stack for
    /// [`LeakTracking::Backtraces`]), reusing the history stamp's context when it has one
    /// that is enough.
    #[inline(never)]
    fn gather_details(
        &self,
        name: Option<&Arc<str>>,
        stamp: Option<EventStamp>,
        level: LeakTracking,
    ) -> Details {
        let name = name.cloned();
        if level < LeakTracking::Context {
            return Details {
                name,
                ..Details::default()
            };
        }
        let frames = level >= LeakTracking::Backtraces;
        let context = match stamp {
            Some(s) if s.context != ContextId::NONE && !frames => s.context,
            _ => self.contexts.current(frames),
        };
        // A history stamp has read the clock already (microseconds since recording began);
        // otherwise the coarse clock: an age is read in milliseconds at the finest, and the
        // precise clock would be most of what context capture costs.
        let created_ns = match stamp {
            Some(s) => self
                .recording_since_ns
                .load(Ordering::Relaxed)
                .saturating_add(s.time_us.saturating_mul(1000)),
            None => coarse_now_ns(),
        };
        Details {
            // 0 means "not taken"; the first nanosecond after the clock base reads 1.
            created_ns: created_ns.max(1),
            context,
            name,
        }
    }

    /// The live entries of `device`, copied under its lock.
    pub(super) fn live_entries(&self, device: DeviceIndex) -> Result<Vec<LiveRecord>> {
        Ok(self.lock(device)?.live_records(|_| true))
    }
}

/// Turns the entries of `device` into [`LiveAllocation`]s (labels, ages), outside any lock;
/// each distinct (location, context) is labelled once.
pub(super) fn describe(
    contexts: &ContextTable,
    device: DeviceIndex,
    records: Vec<LiveRecord>,
) -> Vec<LiveAllocation> {
    let now = now_ns();
    let mut labels: HashMap<(*const Location<'static>, ContextId), String> = HashMap::new();
    records
        .into_iter()
        .map(|record| {
            let e = record.entry;
            let site = labels
                .entry((e.site as *const _, e.context))
                .or_insert_with(|| {
                    let context = contexts.get(e.context);
                    site_label(e.site, context.as_ref())
                })
                .clone();
            LiveAllocation {
                device,
                id: e.alloc_id,
                ptr: record.addr,
                size: e.size,
                requested: record.requested,
                stream: record.stream,
                site,
                name: e.name.map(|n| n.to_string()),
                age: (e.created_ns != 0)
                    .then(|| Duration::from_nanos(now.saturating_sub(e.created_ns))),
                raw: e.raw,
            }
        })
        .collect()
}

impl<B: Backend> CachingAllocator<B> {
    /// [`allocate`](Self::allocate), giving the allocation a name that leak reports and
    /// [`live_allocations`](Self::live_allocations) show (as Vulkan Memory Allocator and
    /// gpu-allocator name theirs); [`Allocation::set_name`] renames it.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let mut cache = alloc.allocate_named(0, 1 << 20, StreamId::DEFAULT, "kv-cache")?;
    /// assert_eq!(cache.name(), Some("kv-cache"));
    /// cache.set_name("kv-cache layer 0");
    /// assert_eq!(alloc.live_allocations(0)?[0].name.as_deref(), Some("kv-cache layer 0"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn allocate_named(
        &self,
        device: impl Into<DeviceIndex>,
        size_bytes: usize,
        stream: StreamId,
        name: &str,
    ) -> Result<Allocation<B>> {
        let device = device.into();
        self.allocate_at(
            device,
            size_bytes,
            stream,
            Some(Arc::from(name)),
            Location::caller(),
        )
    }

    /// Sets how much the live tables record ([`LeakTracking`]; default
    /// [`LeakTracking::Sites`]). It applies to allocations made from now on; turning it
    /// [`Off`](LeakTracking::Off) forgets every live allocation recorded so far, so scopes,
    /// snapshots and the teardown report only see allocations made while it is on.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    /// use blockpool::leak::LeakTracking;
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let a = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// assert_eq!(alloc.live_allocations(0)?.len(), 1, "tracked by default");
    /// alloc.set_leak_tracking(LeakTracking::Off);
    /// let b = alloc.allocate(0, 4096, StreamId::DEFAULT)?;
    /// assert!(alloc.live_allocations(0)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_leak_tracking(&self, tracking: LeakTracking) {
        self.shared
            .leak_tracking
            .store(tracking.index(), Ordering::Relaxed);
        if tracking == LeakTracking::Off {
            // After the store: an allocation that takes a device's lock after it was emptied
            // reads `Off` there (`Shared::tracks`) and is not recorded.
            for device in self.shared.devices.iter() {
                device.lock().observers.live_mut().clear();
            }
        }
    }

    /// How much the live tables record ([`set_leak_tracking`](Self::set_leak_tracking)).
    pub fn leak_tracking(&self) -> LeakTracking {
        LeakTracking::from_index(self.shared.leak_tracking.load(Ordering::Relaxed))
    }

    /// Sets what dropping the last `CachingAllocator` value says about allocations still live
    /// ([`TeardownReport`]; default [`TeardownReport::Warn`]).
    pub fn set_teardown_report(&self, report: TeardownReport) {
        self.shared
            .teardown
            .store(report.index(), Ordering::Relaxed);
    }

    /// What dropping the last `CachingAllocator` value says
    /// ([`set_teardown_report`](Self::set_teardown_report)).
    pub fn teardown_report(&self) -> TeardownReport {
        TeardownReport::from_index(self.shared.teardown.load(Ordering::Relaxed))
    }

    /// Every live allocation of `device` that leak tracking recorded (owning handles and raw
    /// pointers), by allocation id: a flat list, as RMM's tracking adaptor gives. A handle
    /// whose free waits for other streams is not live once dropped; cached memory never is.
    pub fn live_allocations(&self, device: impl Into<DeviceIndex>) -> Result<Vec<LiveAllocation>> {
        let device = device.into();
        let mut live = describe(
            &self.shared.contexts,
            device,
            self.shared.live_entries(device)?,
        );
        live.sort_by_key(|a| a.id);
        Ok(live)
    }

    /// `device`'s live allocations grouped by site ([`LiveSnapshot`]); two of them, taken
    /// before and after a step, give each site's growth with
    /// [`LiveSnapshot::compare_to`].
    pub fn live_snapshot(&self, device: impl Into<DeviceIndex>) -> Result<LiveSnapshot> {
        let device = device.into();
        Ok(LiveSnapshot::from_allocations(
            device,
            describe(
                &self.shared.contexts,
                device,
                self.shared.live_entries(device)?,
            ),
        ))
    }

    /// Every device's live allocations grouped by site, largest first: the report dropping
    /// the allocator gives, now.
    pub fn leak_report(&self) -> LeakReport {
        let mut all = Vec::new();
        for device in (0..self.device_count()).map(DeviceIndex::new) {
            // Every index below the count is a device: `live_entries` cannot fail here.
            if let Ok(entries) = self.shared.live_entries(device) {
                all.extend(describe(&self.shared.contexts, device, entries));
            }
        }
        LeakReport::from_allocations(all)
    }

    /// Ends this allocator value and returns the report of what is still live, for code that
    /// wants to fail on it rather than have it logged: after this call no teardown report is
    /// logged by any clone (the caller has it). Other clones and live handles keep working;
    /// cached memory goes back to the device when the last of them is gone, as on drop.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let weights = alloc.allocate_named(0, 3 << 20, StreamId::DEFAULT, "weights")?;
    /// drop(alloc.allocate(0, 4096, StreamId::DEFAULT)?);
    /// let report = alloc.shutdown();
    /// assert_eq!((report.bytes(), report.allocations()), (3 << 20, 1));
    /// assert_eq!(report.summary(), "3145728 bytes in 1 allocation at 1 site");
    /// assert_eq!(report.sites[0].names, ["weights"]);
    /// # drop(weights);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shutdown(self) -> LeakReport {
        let report = self.leak_report();
        self.set_teardown_report(TeardownReport::Off);
        report
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    /// The last `CachingAllocator` value reports what is still live, as
    /// [`set_teardown_report`](CachingAllocator::set_teardown_report) says (module docs).
    fn drop(&mut self) {
        if self.shared.owners.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let level = self.teardown_report();
        if level.is_heard() {
            level.emit(&self.leak_report());
        }
    }
}
