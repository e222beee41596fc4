//! Lifetime tracking: what is still live, where it was allocated, and what should have been let
//! go.
//!
//! In GPU programs a leak is rarely a lost pointer; it is a buffer kept alive by something that
//! should have let it go. The allocator keeps a table of live allocations per device
//! ([`LeakTracking`] says how much it records), each with its *site*: the source line that
//! allocated it, with the annotation tags when context capture is on ([`site_label`]). On
//! that table:
//!
//! - leak scopes ([`CachingAllocator::leak_scope`](crate::CachingAllocator::leak_scope)) report
//!   what was allocated inside and is still live at their end ([`ScopeReport`]), and
//!   [`assert_no_leaks`](crate::testing::assert_no_leaks) fails a test with it;
//! - live snapshots ([`LiveSnapshot`]) group one device's live allocations by site, and
//!   [`LiveSnapshot::compare_to`] lists each site's change, largest first;
//! - dropping the allocator with allocations still live reports them ([`LeakReport`], through
//!   `tracing` as [`TeardownReport`] says), and
//!   [`CachingAllocator::shutdown`](crate::CachingAllocator::shutdown) returns the report;
//! - the step detector flags sites whose live memory grows step after step and sets apart
//!   persistent memory (weights, optimizer state); `memtrace leaks` and the viewer run the
//!   same analysis on trace files.
//!
//! | file | what lives there |
//! |---|---|
//! | `site.rs` | sites ([`site_label`]) and [`LeakTracking`] |
//! | `live.rs` | the per-device live table and [`LiveAllocation`] |
//! | `report.rs` | [`LeakReport`], [`LeakSite`], [`ScopeReport`] and their text |
//! | `snapshot.rs` | [`LiveSnapshot`] (per-site [`SiteTotal`]s of one device), [`SiteChange`] |
//! | `teardown.rs` | [`TeardownReport`] |
//! | `growth.rs` | [`SiteTotal`], [`site_totals`], [`StepDetector`] and its rules, [`GrowthSettings`], [`GrowthError`] |
//! | `findings.rs` | what the detector concludes: [`GrowingSite`], [`PersistentSite`], [`StepFindings`] and its text |
//! | `steps.rs` | a whole run at once with each site's series: [`analyze_steps`], [`StepAnalysis`] |

mod findings;
mod growth;
mod live;
mod report;
mod site;
mod snapshot;
mod steps;
mod teardown;

pub use findings::{GrowingSite, PersistentSite, StepFindings};
pub use growth::{site_totals, GrowthError, GrowthSettings, SiteTotal, StepDetector};
pub use live::LiveAllocation;
pub(crate) use live::{Details, LiveEntry, LiveTable, Origin};
pub use report::{LeakReport, LeakSite, ScopeReport};
pub use site::{site_label, LeakTracking};
pub use snapshot::{LiveSnapshot, SiteChange};
pub use steps::{analyze_steps, SiteSeries, StepAnalysis};
pub use teardown::TeardownReport;
