//! Live snapshots ([`LiveSnapshot`]: one device's live allocations grouped by site) and their
//! difference ([`LiveSnapshot::compare_to`]), which is what Python's `tracemalloc` gives for
//! host memory (`Snapshot.compare_to`), here for device memory: take one before a step and one
//! after, and the sites that grew come first.

#[cfg(doc)]
use super::growth::StepDetector;
use super::growth::{site_totals, SiteTotal};
use super::live::LiveAllocation;
use crate::backend::DeviceIndex;
use crate::error::format_size;
use std::collections::BTreeMap;
use std::fmt;

/// One device's live allocations grouped by site, from
/// [`CachingAllocator::live_snapshot`](crate::CachingAllocator::live_snapshot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSnapshot {
    /// The device.
    pub device: DeviceIndex,
    /// One row per site, by bytes (largest first), then by label.
    pub sites: Vec<SiteTotal>,
}

impl LiveSnapshot {
    /// Groups `allocations` of `device` by site (allocations of other devices are skipped),
    /// with [`site_totals`]: the grouping the step detector and `memtrace leaks` use.
    pub fn from_allocations(
        device: DeviceIndex,
        allocations: impl IntoIterator<Item = LiveAllocation>,
    ) -> Self {
        let sites = site_totals(
            allocations
                .into_iter()
                .filter(|a| a.device == device)
                .map(|a| (a.site, a.size)),
        );
        LiveSnapshot { device, sites }
    }

    /// Live bytes over every site.
    pub fn bytes(&self) -> u64 {
        self.sites.iter().map(|s| s.bytes).sum()
    }

    /// Live allocations over every site.
    pub fn count(&self) -> u64 {
        self.sites.iter().map(|s| s.count).sum()
    }

    /// The per-site totals, largest first: what [`StepDetector::observe`] takes once per
    /// step.
    pub fn site_totals(&self) -> impl Iterator<Item = SiteTotal> + '_ {
        self.sites.iter().cloned()
    }

    /// Each site's change from `older` to this snapshot, largest change first (by the size of
    /// the change in bytes, then in count, then by label), as `tracemalloc`'s `compare_to`:
    /// every site of either snapshot is listed, unchanged ones last, gone ones with 0 now.
    ///
    /// ```
    /// use blockpool::{AllocatorConfig, CachingAllocator, SimBackend, StreamId};
    ///
    /// let alloc = CachingAllocator::new(SimBackend::new(1, 1 << 30), AllocatorConfig::default());
    /// let mut kept = Vec::new();
    /// let before = alloc.live_snapshot(0)?;
    /// for _ in 0..3 {
    ///     kept.push(alloc.allocate(0, 1 << 20, StreamId::DEFAULT)?);
    /// }
    /// let after = alloc.live_snapshot(0)?;
    /// let changes = after.compare_to(&before);
    /// assert_eq!((changes[0].bytes_diff, changes[0].count_diff), (3 << 20, 3));
    /// assert_eq!(changes[0].site, kept[0].site_label(), "the line that allocated");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compare_to(&self, older: &LiveSnapshot) -> Vec<SiteChange> {
        let mut changes: BTreeMap<&str, SiteChange> = BTreeMap::new();
        for old in &older.sites {
            changes.insert(
                &old.site,
                SiteChange {
                    site: old.site.clone(),
                    bytes: 0,
                    count: 0,
                    bytes_diff: -signed(old.bytes),
                    count_diff: -signed(old.count),
                },
            );
        }
        for new in &self.sites {
            let change = changes.entry(&new.site).or_insert_with(|| SiteChange {
                site: new.site.clone(),
                bytes: 0,
                count: 0,
                bytes_diff: 0,
                count_diff: 0,
            });
            change.bytes = new.bytes;
            change.count = new.count;
            change.bytes_diff += signed(new.bytes);
            change.count_diff += signed(new.count);
        }
        let mut changes: Vec<SiteChange> = changes.into_values().collect();
        changes.sort_by(|a, b| {
            b.bytes_diff
                .unsigned_abs()
                .cmp(&a.bytes_diff.unsigned_abs())
                .then(
                    b.count_diff
                        .unsigned_abs()
                        .cmp(&a.count_diff.unsigned_abs()),
                )
                .then_with(|| a.site.cmp(&b.site))
        });
        changes
    }
}

/// Byte and allocation counts fit in `i64` on any device there is; saturate rather than wrap.
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl fmt::Display for LiveSnapshot {
    /// `device 0: N bytes in M allocations`, then one line per site.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device {}: {} bytes in {}",
            self.device,
            self.bytes(),
            super::report::plural(self.count(), "allocation")
        )?;
        for site in &self.sites {
            write!(
                f,
                "\n  {}: size={}, count={}",
                site.site,
                format_size(site.bytes),
                site.count
            )?;
        }
        Ok(())
    }
}

/// One site's change between two snapshots ([`LiveSnapshot::compare_to`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteChange {
    /// The site label.
    pub site: String,
    /// Live bytes in the newer snapshot.
    pub bytes: u64,
    /// Live allocations in the newer snapshot.
    pub count: u64,
    /// Newer minus older live bytes.
    pub bytes_diff: i64,
    /// Newer minus older live allocations.
    pub count_diff: i64,
}

impl fmt::Display for SiteChange {
    /// As `tracemalloc`'s `StatisticDiff`: `src/a.rs:3:9: size=3.00 MiB (+3.00 MiB), count=3
    /// (+3)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.bytes_diff < 0 { '-' } else { '+' };
        write!(
            f,
            "{}: size={} ({sign}{}), count={} ({:+})",
            self.site,
            format_size(self.bytes),
            format_size(self.bytes_diff.unsigned_abs()),
            self.count,
            self.count_diff
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::StreamId;

    fn live(device: DeviceIndex, size: u64, site: &str) -> LiveAllocation {
        LiveAllocation {
            device,
            id: 1,
            ptr: 0,
            size,
            requested: size,
            stream: StreamId::DEFAULT,
            site: site.into(),
            name: None,
            age: None,
            raw: false,
        }
    }

    #[test]
    fn compare_lists_every_site_largest_change_first() {
        let older = LiveSnapshot::from_allocations(
            DeviceIndex::new(0),
            [
                live(DeviceIndex::new(0), 1024, "kept"),
                live(DeviceIndex::new(0), 4096, "gone"),
                live(DeviceIndex::new(0), 512, "grew"),
            ],
        );
        let newer = LiveSnapshot::from_allocations(
            DeviceIndex::new(0),
            [
                live(DeviceIndex::new(0), 1024, "kept"),
                live(DeviceIndex::new(0), 512, "grew"),
                live(DeviceIndex::new(0), 8192, "grew"),
                live(DeviceIndex::new(0), 2048, "new"),
                live(DeviceIndex::new(1), 1 << 30, "other device"),
            ],
        );
        assert_eq!((newer.bytes(), newer.count()), (11776, 4));
        let totals: Vec<(String, u64, u64)> = newer
            .site_totals()
            .map(|t| (t.site, t.bytes, t.count))
            .collect();
        assert_eq!(
            totals,
            [
                ("grew".to_string(), 8704, 2),
                ("new".to_string(), 2048, 1),
                ("kept".to_string(), 1024, 1)
            ],
            "one total per site of this device, largest first"
        );
        let text: Vec<String> = newer
            .compare_to(&older)
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(
            text,
            [
                "grew: size=8.50 KiB (+8.00 KiB), count=2 (+1)",
                "gone: size=0 bytes (-4.00 KiB), count=0 (-1)",
                "new: size=2.00 KiB (+2.00 KiB), count=1 (+1)",
                "kept: size=1024 bytes (+0 bytes), count=1 (+0)",
            ]
        );
        assert_eq!(
            newer.to_string(),
            "device 0: 11776 bytes in 4 allocations\n  grew: size=8.50 KiB, count=2\n  \
             new: size=2.00 KiB, count=1\n  kept: size=1024 bytes, count=1"
        );
    }
}
