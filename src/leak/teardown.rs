//! What the allocator says about allocations still live when it is dropped
//! ([`TeardownReport`]), as LeakSanitizer does at exit and gpu-allocator and Vulkan Memory
//! Allocator do at teardown: the [`LeakReport`], grouped by site and largest first, ending in
//! its summary line, through `tracing`.

use super::report::LeakReport;

/// Whether and how dropping the allocator reports allocations still live
/// ([`CachingAllocator::set_teardown_report`](crate::CachingAllocator::set_teardown_report)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TeardownReport {
    /// Say nothing.
    Off,
    /// The default: the report through `tracing` at warn level.
    #[default]
    Warn,
    /// The report through `tracing` at error level.
    Error,
}

impl TeardownReport {
    const ALL: [TeardownReport; 3] = [
        TeardownReport::Off,
        TeardownReport::Warn,
        TeardownReport::Error,
    ];

    /// Its index in declaration order, as the allocator keeps it in an atomic.
    pub(crate) const fn index(self) -> u8 {
        self as u8
    }

    /// The setting of index `index` ([`TeardownReport::index`]); out of range reads `Warn`.
    pub(crate) fn from_index(index: u8) -> TeardownReport {
        Self::ALL
            .get(usize::from(index))
            .copied()
            .unwrap_or_default()
    }

    /// Whether a subscriber would take the report, so that it is only built when it is read.
    pub(crate) fn is_heard(self) -> bool {
        match self {
            TeardownReport::Off => false,
            TeardownReport::Warn => tracing::enabled!(tracing::Level::WARN),
            TeardownReport::Error => tracing::enabled!(tracing::Level::ERROR),
        }
    }

    /// Emits `report` (when not empty) at this level.
    pub(crate) fn emit(self, report: &LeakReport) {
        if report.is_empty() {
            return;
        }
        let text = teardown_text(report);
        match self {
            TeardownReport::Off => {}
            TeardownReport::Warn => tracing::warn!("{text}"),
            TeardownReport::Error => tracing::error!("{text}"),
        }
    }
}

/// The teardown message: a heading, the report's lines, its summary. The plain form, without
/// ages, so that the message is the same on every run of a program on the simulated device.
pub(crate) fn teardown_text(report: &LeakReport) -> String {
    format!(
        "blockpool: {} still live when the allocator was dropped:\n{report}",
        super::report::plural(report.allocations(), "allocation")
    )
}
