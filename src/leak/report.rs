//! Leak reports: live allocations grouped by device and site, largest first, and the text they
//! print, in the style of LeakSanitizer (one line per site, then a summary line,
//! `N bytes in M allocations at K sites`). The same report serves leak scopes
//! ([`ScopeReport`]), the teardown report and [`assert_no_leaks`](crate::testing::assert_no_leaks).
//!
//! The text is deterministic on the simulated device: it names allocations by their number
//! (`oldest #3`), never by time; the alternate form (`{:#}`) adds the oldest one's age.

use super::live::LiveAllocation;
use crate::backend::{DeviceIndex, StreamId};
use crate::error::format_size;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Live allocations of one site on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakSite {
    /// Device of the memory.
    pub device: DeviceIndex,
    /// The site label ([`site_label`](super::site_label)).
    pub site: String,
    /// Number of live allocations.
    pub count: u64,
    /// Their block sizes, in bytes.
    pub bytes: u64,
    /// Bytes their callers asked for.
    pub requested_bytes: u64,
    /// Streams they were allocated on, in order.
    pub streams: Vec<StreamId>,
    /// Number (allocation id) of the oldest.
    pub oldest_id: u64,
    /// Age of the oldest, when its creation time was taken.
    pub oldest_age: Option<Duration>,
    /// Distinct names among them, in order.
    pub names: Vec<String>,
    /// How many came from the raw-pointer API rather than owning handles.
    pub raw: u64,
}

/// Live allocations grouped by site, largest first (module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeakReport {
    /// One row per device and site, by bytes (largest first), then site label and device.
    pub sites: Vec<LeakSite>,
}

impl LeakReport {
    /// Groups `allocations` by device and site.
    pub fn from_allocations(allocations: impl IntoIterator<Item = LiveAllocation>) -> Self {
        let mut groups: BTreeMap<(DeviceIndex, String), LeakSite> = BTreeMap::new();
        for a in allocations {
            let row = groups
                .entry((a.device, a.site.clone()))
                .or_insert_with(|| LeakSite {
                    device: a.device,
                    site: a.site.clone(),
                    count: 0,
                    bytes: 0,
                    requested_bytes: 0,
                    streams: Vec::new(),
                    oldest_id: a.id,
                    oldest_age: a.age,
                    names: Vec::new(),
                    raw: 0,
                });
            row.count += 1;
            row.bytes += a.size;
            row.requested_bytes += a.requested;
            if let Err(at) = row.streams.binary_search(&a.stream) {
                row.streams.insert(at, a.stream);
            }
            if a.id < row.oldest_id {
                row.oldest_id = a.id;
                row.oldest_age = a.age;
            }
            if let Some(name) = a.name {
                if let Err(at) = row.names.binary_search(&name) {
                    row.names.insert(at, name);
                }
            }
            row.raw += u64::from(a.raw);
        }
        let mut sites: Vec<LeakSite> = groups.into_values().collect();
        sites.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then_with(|| a.site.cmp(&b.site))
                .then(a.device.cmp(&b.device))
        });
        LeakReport { sites }
    }

    /// Whether nothing is live.
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// Live bytes over every site.
    pub fn bytes(&self) -> u64 {
        self.sites.iter().map(|s| s.bytes).sum()
    }

    /// Live allocations over every site.
    pub fn allocations(&self) -> u64 {
        self.sites.iter().map(|s| s.count).sum()
    }

    /// The summary line: `N bytes in M allocations at K sites`.
    pub fn summary(&self) -> String {
        format!(
            "{} bytes in {} at {}",
            self.bytes(),
            plural(self.allocations(), "allocation"),
            plural(self.sites.len() as u64, "site")
        )
    }
}

/// `1 site`, `2 sites`.
pub(crate) fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

impl fmt::Display for LeakSite {
    /// `4096 bytes in 1 allocation at src/a.rs:3:9 (device 0, stream 0x0, oldest #1)`, with
    /// the names and raw-pointer count when there are some; `{:#}` adds the oldest one's age.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes in {} at {} (device {}, ",
            self.bytes,
            plural(self.count, "allocation"),
            self.site,
            self.device
        )?;
        f.write_str(if self.streams.len() == 1 {
            "stream "
        } else {
            "streams "
        })?;
        for (i, stream) in self.streams.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            write!(f, "{sep}{:#x}", stream.raw())?;
        }
        write!(f, ", oldest #{}", self.oldest_id)?;
        if let (true, Some(age)) = (f.alternate(), self.oldest_age) {
            write!(f, " allocated {age:.1?} ago")?;
        }
        if self.raw > 0 {
            write!(f, ", {}", plural(self.raw, "raw pointer"))?;
        }
        if !self.names.is_empty() {
            f.write_str(", named ")?;
            for (i, name) in self.names.iter().enumerate() {
                let sep = if i > 0 { ", " } else { "" };
                write!(f, "{sep}{name:?}")?;
            }
        }
        f.write_str(")")
    }
}

impl fmt::Display for LeakReport {
    /// One line per site (indented by two spaces), then the summary line; `{:#}` passes on to
    /// the sites.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for site in &self.sites {
            if f.alternate() {
                writeln!(f, "  {site:#}")?;
            } else {
                writeln!(f, "  {site}")?;
            }
        }
        f.write_str(&self.summary())
    }
}

/// What a leak scope found at [`LeakScope::finish`](crate::LeakScope::finish): the allocations
/// made inside it that are still live, and its peak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeReport {
    /// The scope's name, as given to [`CachingAllocator::leak_scope`].
    ///
    /// [`CachingAllocator::leak_scope`]: crate::CachingAllocator::leak_scope
    pub name: String,
    /// Allocations made while the scope was open (on any thread) and live at its end.
    pub leaks: LeakReport,
    /// Per device (by index), the most live bytes above what was live when the scope opened;
    /// scopes opened inside this one count toward it.
    pub peak_bytes: Vec<u64>,
}

impl ScopeReport {
    /// Whether nothing allocated inside the scope is still live.
    pub fn is_clean(&self) -> bool {
        self.leaks.is_empty()
    }
}

impl fmt::Display for ScopeReport {
    /// `scope "step 12": peak 1.00 MiB on device 0`, then `nothing allocated inside is still
    /// live` or the leak report.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scope {:?}: peak ", self.name)?;
        let peaks: Vec<String> = self
            .peak_bytes
            .iter()
            .enumerate()
            .filter(|&(_, &p)| p > 0)
            .map(|(d, &p)| format!("{} on device {d}", format_size(p)))
            .collect();
        if peaks.is_empty() {
            f.write_str("0 bytes")?;
        } else {
            f.write_str(&peaks.join(", "))?;
        }
        if self.leaks.is_empty() {
            return f.write_str("; nothing allocated inside is still live");
        }
        f.write_str("; still live:\n")?;
        if f.alternate() {
            write!(f, "{:#}", self.leaks)
        } else {
            write!(f, "{}", self.leaks)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(device: DeviceIndex, id: u64, size: u64, site: &str, stream: u64) -> LiveAllocation {
        LiveAllocation {
            device,
            id,
            ptr: 0x1000 * id,
            size,
            requested: size - 1,
            stream: StreamId::from_raw(stream),
            site: site.into(),
            name: None,
            age: None,
            raw: false,
        }
    }

    #[test]
    fn groups_by_device_and_site_largest_first() {
        let mut named = live(DeviceIndex::new(0), 7, 512, "a.rs:1:1", 0);
        named.name = Some("kv".into());
        named.raw = true;
        let report = LeakReport::from_allocations([
            live(DeviceIndex::new(0), 5, 512, "a.rs:1:1", 1),
            named,
            live(DeviceIndex::new(0), 2, 4096, "b.rs:2:2", 0),
            live(DeviceIndex::new(1), 3, 512, "a.rs:1:1", 0),
        ]);
        assert_eq!(
            report.to_string(),
            "  4096 bytes in 1 allocation at b.rs:2:2 (device 0, stream 0x0, oldest #2)\n  \
             1024 bytes in 2 allocations at a.rs:1:1 (device 0, streams 0x0, 0x1, oldest #5, \
             1 raw pointer, named \"kv\")\n  \
             512 bytes in 1 allocation at a.rs:1:1 (device 1, stream 0x0, oldest #3)\n\
             5632 bytes in 4 allocations at 3 sites"
        );
        assert_eq!(report.sites[1].requested_bytes, 1022);
        assert_eq!(
            LeakReport::default().summary(),
            "0 bytes in 0 allocations at 0 sites"
        );
    }

    #[test]
    fn alternate_form_adds_the_oldest_age() {
        let mut a = live(DeviceIndex::new(0), 1, 512, "a.rs:1:1", 0);
        a.age = Some(Duration::from_millis(1500));
        let report = LeakReport::from_allocations([a]);
        assert!(
            format!("{report:#}").contains("oldest #1 allocated 1.5s ago)"),
            "{report:#}"
        );
        assert!(
            !report.to_string().contains("ago"),
            "the plain form has no times"
        );
    }
}
