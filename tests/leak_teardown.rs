//! The teardown report: dropping the last `CachingAllocator` value with allocations still live
//! logs them through `tracing` (warn by default, error or nothing as configured), once, in the
//! report's exact text; clones and handles that outlive it change nothing, and `shutdown`
//! hands the report over instead of logging it.
//!
//! One test in its own binary: it installs a thread-local `tracing` subscriber, and no other
//! test may log meanwhile.

use blockpool::leak::TeardownReport;
use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
use std::fmt;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Keeps the level and message of every event.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(Level, String)>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Captured {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, message.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Captured {
    fn take(&self) -> Vec<(Level, String)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn new_allocator() -> CachingAllocator<SimBackend> {
    CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default())
}

#[test]
fn dropping_the_last_allocator_reports_what_is_live() {
    let captured = Captured::default();
    tracing::subscriber::with_default(captured.clone(), || {
        // Warn, the default: a forgotten buffer and a raw pointer, two sites.
        let alloc = new_allocator();
        let line = line!() + 1;
        std::mem::forget(alloc.allocate(0, 3 << 20, StreamId::DEFAULT).unwrap());
        let _raw = alloc.malloc(0, 4096, StreamId::from_raw(1)).unwrap();
        let clone = alloc.clone();
        drop(alloc);
        assert!(
            captured.take().is_empty(),
            "a clone is still there: no report yet"
        );
        drop(clone);
        let file = file!();
        assert_eq!(
            captured.take(),
            [(
                Level::WARN,
                format!(
                    "blockpool: 2 allocations still live when the allocator was dropped:\n  \
                     3145728 bytes in 1 allocation at {file}:{line}:32 (device 0, stream 0x0, \
                     oldest #1)\n  \
                     4096 bytes in 1 allocation at {file}:{}:26 (device 0, stream 0x1, \
                     oldest #2, 1 raw pointer)\n\
                     3149824 bytes in 2 allocations at 2 sites",
                    line + 1
                )
            )]
        );

        // Error level; a handle that outlives the allocator is reported, then frees cleanly.
        let alloc = new_allocator();
        alloc.set_teardown_report(TeardownReport::Error);
        let kept = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
        drop(alloc);
        let events = captured.take();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, Level::ERROR);
        assert!(
            events[0]
                .1
                .ends_with("4096 bytes in 1 allocation at 1 site"),
            "{}",
            events[0].1
        );
        drop(kept);
        assert!(
            captured.take().is_empty(),
            "freeing after teardown logs nothing"
        );

        // Off, and nothing live: silent.
        let alloc = new_allocator();
        alloc.set_teardown_report(TeardownReport::Off);
        let kept = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
        drop(alloc);
        drop(kept);
        drop(new_allocator());
        assert!(captured.take().is_empty(), "off, or clean: no report");

        // shutdown hands the report over; no clone logs it afterwards.
        let alloc = new_allocator();
        let clone = alloc.clone();
        let kept = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
        let report = alloc.shutdown();
        assert_eq!(report.summary(), "4096 bytes in 1 allocation at 1 site");
        drop(clone);
        drop(kept);
        assert!(
            captured.take().is_empty(),
            "the caller has the report: nothing logged"
        );
    });
}
