//! What the step detector concludes: the sites growing step after step, with their growth per
//! step, and the persistent sites (memory allocated early and kept), with the text that reports
//! them.
//!
//! The text is deterministic (sites in a fixed order, sizes as [`format_size`] prints them), so
//! tests compare it exactly.

use super::growth::GrowthSettings;
use crate::error::format_size;
use serde::Serialize;
use std::fmt;

/// A site whose live memory grew for at least K consecutive steps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrowingSite {
    /// The site's label.
    pub site: String,
    /// Its live bytes at the last observation.
    pub bytes: u64,
    /// Its live allocations at the last observation.
    pub count: u64,
    /// Consecutive growing steps up to the last observation (K or more).
    pub steps: u64,
    /// The step the run of growth started from (its totals are the run's baseline).
    pub since_step: String,
    /// Bytes gained over the run.
    pub growth_bytes: u64,
    /// Allocations gained over the run.
    pub growth_count: u64,
    /// `growth_bytes / steps`, rounded down: the growth per step.
    pub bytes_per_step: u64,
    /// `growth_count / steps`, rounded down.
    pub count_per_step: u64,
}

/// A site with the same live bytes and count at every step since one of the first steps:
/// weights, optimizer state, buffers kept between steps. Kept, not growing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PersistentSite {
    /// The site's label.
    pub site: String,
    /// Its live bytes.
    pub bytes: u64,
    /// Its live allocations.
    pub count: u64,
    /// The step since which it has not changed.
    pub since_step: String,
    /// Steps observed since then, unchanged.
    pub steps: u64,
}

/// The growing and persistent sites as of the last step
/// ([`StepDetector::findings`](super::growth::StepDetector::findings)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepFindings {
    /// Steps observed (the first is the baseline).
    pub steps_observed: u64,
    /// The first step's name, when any was observed.
    pub first_step: Option<String>,
    /// The last step's name, when any was observed.
    pub last_step: Option<String>,
    /// The rules it was judged by.
    pub settings: GrowthSettings,
    /// Growing sites, most bytes per step first.
    pub growing: Vec<GrowingSite>,
    /// Persistent sites, most bytes first.
    pub persistent: Vec<PersistentSite>,
}

impl StepFindings {
    /// Whether no site is growing.
    pub fn is_clean(&self) -> bool {
        self.growing.is_empty()
    }

    /// Bytes in the persistent sites.
    pub fn persistent_bytes(&self) -> u64 {
        self.persistent
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.bytes))
    }
}

/// `N allocation(s)`.
fn allocations(count: u64) -> String {
    format!("{count} allocation{}", if count == 1 { "" } else { "s" })
}

impl fmt::Display for StepFindings {
    /// One line for the steps, then one per growing site, then the persistent ones:
    ///
    /// ```text
    /// 5 steps observed (step 0 .. step 4); a site is growing after 3 consecutive growing steps
    /// growing: 1 site
    ///   +16.00 MiB and +1 allocation per step for 4 steps since step 0, now 80.00 MiB in 5 allocations: train.rs:42
    /// persistent (unchanged since one of the first 2 steps): 2.00 GiB in 1 site
    ///   2.00 GiB in 10 allocations since step 0: weights
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.settings.min_growth_steps;
        match (&self.first_step, &self.last_step) {
            (Some(first), Some(last)) => write!(
                f,
                "{} step{} observed ({first} .. {last})",
                self.steps_observed,
                if self.steps_observed == 1 { "" } else { "s" }
            )?,
            _ => write!(f, "no steps observed")?,
        }
        writeln!(
            f,
            "; a site is growing after {k} consecutive growing step{}",
            if k == 1 { "" } else { "s" }
        )?;
        if self.growing.is_empty() {
            writeln!(f, "growing: none")?;
        } else {
            let n = self.growing.len();
            writeln!(f, "growing: {n} site{}", if n == 1 { "" } else { "s" })?;
        }
        for g in &self.growing {
            writeln!(
                f,
                "  +{} and +{} per step for {} steps since {}, now {} in {}: {}",
                format_size(g.bytes_per_step),
                allocations(g.count_per_step),
                g.steps,
                g.since_step,
                format_size(g.bytes),
                allocations(g.count),
                g.site
            )?;
        }
        let n = self.persistent.len();
        write!(
            f,
            "persistent (unchanged since one of the first {} steps): ",
            u64::from(self.settings.warmup_steps) + 1
        )?;
        if n == 0 {
            return writeln!(f, "none");
        }
        writeln!(
            f,
            "{} in {n} site{}",
            format_size(self.persistent_bytes()),
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.persistent {
            writeln!(
                f,
                "  {} in {} since {}: {}",
                format_size(p.bytes),
                allocations(p.count),
                p.since_step,
                p.site
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::leak::{SiteTotal, StepDetector};

    #[test]
    fn the_report_names_each_growing_and_persistent_site_exactly() {
        let mut d = StepDetector::new(Default::default()).expect("defaults");
        for n in 0..5u64 {
            d.observe(
                format!("step {n}"),
                vec![
                    SiteTotal::new("weights", 2 << 30, 10),
                    SiteTotal::new("train.rs:42", (n + 1) << 24, n + 1),
                    SiteTotal::new("scratch", (n % 2) << 20, n % 2),
                ],
            );
        }
        assert_eq!(
            d.findings().to_string(),
            "5 steps observed (step 0 .. step 4); a site is growing after 3 consecutive \
             growing steps\n\
             growing: 1 site\n  \
             +16.00 MiB and +1 allocation per step for 4 steps since step 0, now 80.00 MiB in 5 \
             allocations: train.rs:42\n\
             persistent (unchanged since one of the first 2 steps): 2.00 GiB in 1 site\n  \
             2.00 GiB in 10 allocations since step 0: weights\n"
        );
    }

    #[test]
    fn a_clean_run_says_none() {
        let mut d = StepDetector::new(Default::default()).expect("defaults");
        assert_eq!(
            d.findings().to_string(),
            "no steps observed; a site is growing after 3 consecutive growing steps\n\
             growing: none\npersistent (unchanged since one of the first 2 steps): none\n"
        );
        d.observe("warm-up", vec![SiteTotal::new("cache", 1 << 20, 1)]);
        let findings = d.findings();
        assert!(findings.is_clean());
        assert!(
            findings
                .to_string()
                .starts_with("1 step observed (warm-up .. warm-up)"),
            "{findings}"
        );
    }
}
