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
//!   [`CachingAllocator::shutdown`](crate::CachingAllocator::shutdown) returns the report.
//!
//! `site.rs` holds sites and [`LeakTracking`], `live.rs` the table, `report.rs` the grouped
//! reports, `snapshot.rs` snapshots and their difference, `teardown.rs` the teardown setting.

mod live;
mod report;
mod site;
mod snapshot;
mod teardown;

pub use live::LiveAllocation;
pub(crate) use live::{LiveEntry, LiveTable};
pub use report::{LeakReport, LeakSite, ScopeReport};
pub use site::{site_label, LeakTracking};
pub use snapshot::{LiveSite, LiveSnapshot, SiteChange};
pub use teardown::TeardownReport;
