//! The step detector: called once per iteration of a training or serving loop with each
//! allocation site's live totals, it flags the sites whose live memory grew for K consecutive
//! steps and sets apart the memory that is simply kept (weights, optimizer state).
//!
//! The input is only what is *live* at each step's end ([`SiteTotal`]: bytes and allocations
//! per site), never what the allocator caches, so memory a loop frees (on its own stream or
//! deferred on others by `record_stream`) never counts, however long the allocator keeps it.
//! The rules, exactly:
//!
//! - A step *grows* a site when, compared with the observation before, neither its live bytes
//!   nor its allocation count fell and at least one of them rose. A site absent at one
//!   observation and present at the next grew from zero; the first observation has nothing
//!   before it, so it is the baseline and grows nothing.
//! - A site is *growing* when the last `min_growth_steps` steps (K, default
//!   [`GrowthSettings::DEFAULT_MIN_GROWTH_STEPS`]) all grew it. One step that does not grow
//!   it ends the run, so a cache that warms up for fewer than K steps and then stays flat is
//!   never flagged, and one that warms up longer stops being flagged once it is flat.
//! - A site is *persistent* when it has had the same bytes and count at every observation from
//!   one of the first `warmup_steps + 1` observations (default: the first two, so state made
//!   lazily in the first step, such as Adam's moments, counts) up to the last, over two
//!   observations or more: memory allocated early and kept, not growing.
//!
//! The detector keeps a few numbers per site live at the last observation (no history), so a
//! loop can call it for millions of steps; [`analyze_steps`](super::steps::analyze_steps) runs
//! it over a whole recorded run and keeps the series too. Its input is any source of per-site
//! live totals: the allocator's live snapshot at the end of each iteration, or (as
//! `memtrace leaks` does) the blocks a trace file says were allocated at each step's end,
//! grouped with [`site_totals`]. A site label should not name the step itself (a tag such as
//! `step12` makes each step's allocations a site of their own, which never grows).

use super::findings::{GrowingSite, PersistentSite, StepFindings};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The live memory of one allocation site at one step: what the step detector reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SiteTotal {
    /// The site's label, the key steps are compared by.
    pub site: String,
    /// Bytes in its live allocations.
    pub bytes: u64,
    /// Its live allocations.
    pub count: u64,
}

impl SiteTotal {
    /// `count` allocations of `bytes` in all at `site`.
    pub fn new(site: impl Into<String>, bytes: u64, count: u64) -> SiteTotal {
        SiteTotal {
            site: site.into(),
            bytes,
            count,
        }
    }
}

/// Adds up `(site, bytes)` pairs, one per live allocation, into one [`SiteTotal`] per site,
/// most bytes first (ties by site): the grouping every leak report of blockpool shares, live or
/// from a file.
pub fn site_totals<S: AsRef<str>>(
    allocations: impl IntoIterator<Item = (S, u64)>,
) -> Vec<SiteTotal> {
    let mut by_site: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (site, bytes) in allocations {
        let site = site.as_ref();
        // Look up by &str first: one String per site, not per allocation.
        let entry = match by_site.get_mut(site) {
            Some(entry) => entry,
            None => by_site.entry(site.to_string()).or_default(),
        };
        entry.0 = entry.0.saturating_add(bytes);
        entry.1 = entry.1.saturating_add(1);
    }
    let mut totals: Vec<SiteTotal> = by_site
        .into_iter()
        .map(|(site, (bytes, count))| SiteTotal { site, bytes, count })
        .collect();
    totals.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
    totals
}

/// How the step detector judges growth and persistence (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GrowthSettings {
    /// K: consecutive growing steps that flag a site (at least 1).
    pub min_growth_steps: u32,
    /// Steps after the first observation by which memory must have reached its size to be
    /// persistent.
    pub warmup_steps: u32,
}

impl GrowthSettings {
    /// The default K: 3 steps. A leak of one buffer per step is flagged at the end of its
    /// third step after the baseline; a cache that fills in one or two steps is not.
    pub const DEFAULT_MIN_GROWTH_STEPS: u32 = 3;
    /// The default warm-up: 1 step, where lazily made state (optimizer moments, the
    /// gradients kept between steps) appears.
    pub const DEFAULT_WARMUP_STEPS: u32 = 1;

    /// The defaults with K = `min_growth_steps`.
    pub fn with_min_growth_steps(min_growth_steps: u32) -> GrowthSettings {
        GrowthSettings {
            min_growth_steps,
            ..GrowthSettings::default()
        }
    }
}

impl Default for GrowthSettings {
    fn default() -> GrowthSettings {
        GrowthSettings {
            min_growth_steps: GrowthSettings::DEFAULT_MIN_GROWTH_STEPS,
            warmup_steps: GrowthSettings::DEFAULT_WARMUP_STEPS,
        }
    }
}

/// Settings the step detector refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrowthError {
    /// K was 0: every site would be growing after any step.
    #[error("the step detector needs at least 1 consecutive growing step to flag a site (min_growth_steps is 0); the default is {}", GrowthSettings::DEFAULT_MIN_GROWTH_STEPS)]
    NoGrowthSteps,
}

/// Totals of one site at one observation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    bytes: u64,
    count: u64,
}

impl Totals {
    /// Whether going from `self` to `now` grows the site (module docs).
    fn grows_to(self, now: Totals) -> bool {
        now.bytes >= self.bytes && now.count >= self.count && now != self
    }
}

/// What the detector remembers of a site live at the last observation.
#[derive(Clone, Debug)]
struct SiteState {
    now: Totals,
    /// Consecutive growing steps ending at the last observation.
    streak: u64,
    /// Totals at the observation the run started from, and that observation's step.
    streak_from: (Totals, Arc<str>),
    /// The observation since which the totals have not changed (index and step).
    flat_since: (u64, Arc<str>),
}

/// Flags sites whose live memory grows step after step (module docs for the rules).
///
/// ```
/// use blockpool::leak::{SiteTotal, StepDetector};
///
/// let mut detector = StepDetector::new(Default::default())?;
/// for step in 0..5u64 {
///     let totals = vec![
///         SiteTotal { site: "weights".into(), bytes: 1 << 30, count: 10 },
///         // One 16 MiB buffer kept per step.
///         SiteTotal { site: "history.push".into(), bytes: (step + 1) << 24, count: step + 1 },
///     ];
///     let growing = detector.observe(format!("step {step}"), totals);
///     assert_eq!(growing.len(), usize::from(step >= 3), "flagged after 3 growing steps");
/// }
/// let findings = detector.findings();
/// assert_eq!(findings.growing[0].bytes_per_step, 16 << 20);
/// assert_eq!(findings.persistent[0].site, "weights");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct StepDetector {
    settings: GrowthSettings,
    observed: u64,
    first_step: Option<Arc<str>>,
    last_step: Option<Arc<str>>,
    /// The sites live at the last observation.
    sites: BTreeMap<String, SiteState>,
}

impl StepDetector {
    /// A detector with `settings`; K = 0 is refused.
    pub fn new(settings: GrowthSettings) -> Result<StepDetector, GrowthError> {
        if settings.min_growth_steps == 0 {
            return Err(GrowthError::NoGrowthSteps);
        }
        Ok(StepDetector {
            settings,
            observed: 0,
            first_step: None,
            last_step: None,
            sites: BTreeMap::new(),
        })
    }

    /// The settings it judges by.
    pub fn settings(&self) -> GrowthSettings {
        self.settings
    }

    /// Observations so far.
    pub fn steps_observed(&self) -> u64 {
        self.observed
    }

    /// Takes the live totals at the end of the step named `step` and returns the sites growing
    /// as of it, most bytes per step first. Sites listed more than once are added up; a site
    /// with no bytes and no allocations is absent.
    pub fn observe(
        &mut self,
        step: impl Into<String>,
        totals: impl IntoIterator<Item = SiteTotal>,
    ) -> Vec<GrowingSite> {
        let step: Arc<str> = Arc::from(step.into());
        let mut now: BTreeMap<String, Totals> = BTreeMap::new();
        for total in totals {
            if total.bytes == 0 && total.count == 0 {
                continue;
            }
            let entry = now.entry(total.site).or_default();
            entry.bytes = entry.bytes.saturating_add(total.bytes);
            entry.count = entry.count.saturating_add(total.count);
        }
        let index = self.observed;
        // A site that is gone fell to zero: no run, nothing kept.
        self.sites.retain(|site, _| now.contains_key(site));
        for (site, totals) in now {
            match self.sites.get_mut(&site) {
                Some(state) => state.advance(totals, index, &step, self.last_step.as_ref()),
                None => {
                    // New since the last observation: grown from zero, unless this is the
                    // baseline.
                    let (streak, from) = match &self.last_step {
                        Some(previous) => (1, Arc::clone(previous)),
                        None => (0, Arc::clone(&step)),
                    };
                    self.sites.insert(
                        site,
                        SiteState {
                            now: totals,
                            streak,
                            streak_from: (Totals::default(), from),
                            flat_since: (index, Arc::clone(&step)),
                        },
                    );
                }
            }
        }
        self.observed = self.observed.saturating_add(1);
        if self.first_step.is_none() {
            self.first_step = Some(Arc::clone(&step));
        }
        self.last_step = Some(step);
        self.growing()
    }

    /// The sites growing as of the last observation, most bytes per step first (ties: most
    /// allocations per step, then by site).
    pub fn growing(&self) -> Vec<GrowingSite> {
        let k = u64::from(self.settings.min_growth_steps);
        let mut growing: Vec<GrowingSite> = self
            .sites
            .iter()
            .filter(|(_, s)| s.streak >= k)
            .map(|(site, s)| {
                let (from, since) = &s.streak_from;
                let growth_bytes = s.now.bytes - from.bytes;
                let growth_count = s.now.count - from.count;
                GrowingSite {
                    site: site.clone(),
                    bytes: s.now.bytes,
                    count: s.now.count,
                    steps: s.streak,
                    since_step: since.to_string(),
                    growth_bytes,
                    growth_count,
                    bytes_per_step: growth_bytes / s.streak,
                    count_per_step: growth_count / s.streak,
                }
            })
            .collect();
        growing.sort_by(|a, b| {
            b.bytes_per_step
                .cmp(&a.bytes_per_step)
                .then_with(|| b.count_per_step.cmp(&a.count_per_step))
                .then_with(|| a.site.cmp(&b.site))
        });
        growing
    }

    /// The persistent sites as of the last observation, most bytes first (ties by site).
    pub fn persistent(&self) -> Vec<PersistentSite> {
        let last = self.observed.saturating_sub(1);
        let warmup = u64::from(self.settings.warmup_steps);
        let mut persistent: Vec<PersistentSite> = self
            .sites
            .iter()
            .filter(|(_, s)| s.flat_since.0 <= warmup && s.flat_since.0 < last)
            .map(|(site, s)| PersistentSite {
                site: site.clone(),
                bytes: s.now.bytes,
                count: s.now.count,
                since_step: s.flat_since.1.to_string(),
                steps: last - s.flat_since.0,
            })
            .collect();
        persistent.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
        persistent
    }

    /// Everything judged so far: the growing and the persistent sites.
    pub fn findings(&self) -> StepFindings {
        StepFindings {
            steps_observed: self.observed,
            first_step: self.first_step.as_deref().map(str::to_string),
            last_step: self.last_step.as_deref().map(str::to_string),
            settings: self.settings,
            growing: self.growing(),
            persistent: self.persistent(),
        }
    }
}

impl SiteState {
    /// Moves the state to `now`, observed at `index` in `step`, after `previous`.
    fn advance(&mut self, now: Totals, index: u64, step: &Arc<str>, previous: Option<&Arc<str>>) {
        if self.now.grows_to(now) {
            if self.streak == 0 {
                let from = previous.map_or_else(|| Arc::clone(step), Arc::clone);
                self.streak_from = (self.now, from);
            }
            self.streak = self.streak.saturating_add(1);
        } else {
            self.streak = 0;
        }
        if now != self.now {
            self.flat_since = (index, Arc::clone(step));
        }
        self.now = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    use SiteTotal as T;

    /// One step per size: `n` MiB in `n` allocations at `site`.
    fn sized(site: &str, sizes: &[u64]) -> Vec<Vec<SiteTotal>> {
        sizes
            .iter()
            .map(|&n| vec![T::new(site, n * MIB, n)])
            .collect()
    }

    fn detector() -> StepDetector {
        StepDetector::new(GrowthSettings::default()).expect("the defaults are valid")
    }

    /// Feeds `steps` (one list of totals per step, named `step N`) and returns how many sites
    /// were flagged after each.
    fn run(detector: &mut StepDetector, steps: &[Vec<SiteTotal>]) -> Vec<usize> {
        steps
            .iter()
            .enumerate()
            .map(|(i, totals)| detector.observe(format!("step {i}"), totals.clone()).len())
            .collect()
    }

    #[test]
    fn a_buffer_kept_per_step_is_flagged_after_k_growing_steps_with_its_growth() {
        let mut d = detector();
        let steps: Vec<Vec<SiteTotal>> = (1..=6)
            .map(|n| vec![T::new("train.rs:42", 16 * MIB * n, n)])
            .collect();
        assert_eq!(
            run(&mut d, &steps),
            [0, 0, 0, 1, 1, 1],
            "the first observation is the baseline; three growing steps after it flag"
        );
        let growing = d.growing();
        assert_eq!(
            growing,
            [GrowingSite {
                site: "train.rs:42".into(),
                bytes: 96 * MIB,
                count: 6,
                steps: 5,
                since_step: "step 0".into(),
                growth_bytes: 80 * MIB,
                growth_count: 5,
                bytes_per_step: 16 * MIB,
                count_per_step: 1,
            }]
        );
    }

    #[test]
    fn a_site_that_appears_after_the_baseline_grew_from_zero() {
        let mut d = detector();
        let steps = vec![
            vec![],
            vec![T::new("leak", MIB, 1)],
            vec![T::new("leak", 2 * MIB, 2)],
            vec![T::new("leak", 3 * MIB, 3)],
        ];
        assert_eq!(run(&mut d, &steps), [0, 0, 0, 1]);
        let growing = &d.growing()[0];
        assert_eq!(
            (
                growing.steps,
                growing.since_step.as_str(),
                growing.growth_bytes
            ),
            (3, "step 0", 3 * MIB),
            "grown from nothing at step 0"
        );
    }

    #[test]
    fn a_cache_that_warms_up_and_plateaus_is_never_flagged() {
        let mut d = detector();
        // Fills in two steps, then stays: fewer growing steps than K.
        let steps = sized("cache", &[0, 4, 8, 8, 8, 8, 8]);
        assert_eq!(run(&mut d, &steps), [0; 7]);
        assert!(
            d.persistent().is_empty(),
            "it reached its size after the warm-up"
        );
        // A longer warm-up is flagged while it grows and no longer once it is flat.
        let mut d = detector();
        let steps = sized("cache", &[1, 2, 3, 4, 5, 5, 5]);
        assert_eq!(run(&mut d, &steps), [0, 0, 0, 1, 1, 0, 0]);
    }

    #[test]
    fn memory_that_rises_and_falls_is_not_growing() {
        let mut d = detector();
        let steps = sized("activations", &[1, 2, 3, 2, 3, 4, 3, 4, 5]);
        assert_eq!(run(&mut d, &steps), [0; 9]);
    }

    #[test]
    fn more_allocations_of_the_same_bytes_is_growth_and_fewer_bytes_is_not() {
        let mut d = detector();
        let steps = vec![
            vec![T::new("a", 4 * MIB, 1), T::new("b", 4 * MIB, 4)],
            vec![T::new("a", 4 * MIB, 2), T::new("b", 5 * MIB, 3)],
            vec![T::new("a", 4 * MIB, 3), T::new("b", 6 * MIB, 2)],
            vec![T::new("a", 4 * MIB, 4), T::new("b", 7 * MIB, 1)],
        ];
        assert_eq!(run(&mut d, &steps), [0, 0, 0, 1]);
        let a = &d.growing()[0];
        assert_eq!(
            (a.site.as_str(), a.bytes_per_step, a.count_per_step),
            ("a", 0, 1),
            "count grew with bytes flat; b's count fell so it is not growing"
        );
    }

    #[test]
    fn weights_and_state_made_in_the_first_step_are_persistent_not_growing() {
        let mut d = detector();
        let steps = vec![
            vec![T::new("weights", 100 * MIB, 10)],
            vec![
                T::new("weights", 100 * MIB, 10),
                T::new("adam", 200 * MIB, 20),
            ],
            vec![
                T::new("weights", 100 * MIB, 10),
                T::new("adam", 200 * MIB, 20),
                T::new("late", MIB, 1),
            ],
            vec![
                T::new("weights", 100 * MIB, 10),
                T::new("adam", 200 * MIB, 20),
                T::new("late", MIB, 1),
            ],
        ];
        assert_eq!(run(&mut d, &steps), [0; 4]);
        assert_eq!(
            d.persistent(),
            [
                PersistentSite {
                    site: "adam".into(),
                    bytes: 200 * MIB,
                    count: 20,
                    since_step: "step 1".into(),
                    steps: 2,
                },
                PersistentSite {
                    site: "weights".into(),
                    bytes: 100 * MIB,
                    count: 10,
                    since_step: "step 0".into(),
                    steps: 3,
                },
            ],
            "`late` appeared after the warm-up step"
        );
    }

    #[test]
    fn one_observation_judges_nothing_and_gone_sites_are_forgotten() {
        let mut d = detector();
        d.observe("only", vec![T::new("x", MIB, 1)]);
        assert!(
            d.persistent().is_empty(),
            "one observation is not kept memory"
        );
        d.observe("next", vec![]);
        d.observe("again", vec![T::new("x", MIB, 1)]);
        let findings = d.findings();
        assert!(findings.persistent.is_empty(), "x left and came back");
        assert_eq!(
            (findings.steps_observed, findings.first_step.as_deref()),
            (3, Some("only"))
        );
    }

    #[test]
    fn duplicate_sites_add_up_and_empty_totals_are_absent() {
        let mut d = detector();
        d.observe(
            "a",
            vec![T::new("x", MIB, 1), T::new("x", MIB, 1), T::new("y", 0, 0)],
        );
        d.observe("b", vec![T::new("x", 2 * MIB, 2)]);
        assert_eq!(d.persistent()[0].bytes, 2 * MIB);
        assert_eq!(d.persistent().len(), 1, "y was never live");
    }

    #[test]
    fn k_of_zero_is_refused_with_the_default_named() {
        let err = StepDetector::new(GrowthSettings::with_min_growth_steps(0))
            .expect_err("K = 0 flags everything");
        assert_eq!(err, GrowthError::NoGrowthSteps);
        assert!(err.to_string().contains("the default is 3"), "{err}");
        let mut one = StepDetector::new(GrowthSettings::with_min_growth_steps(1)).expect("K = 1");
        one.observe("0", vec![]);
        assert_eq!(one.observe("1", vec![T::new("x", 1, 1)]).len(), 1);
    }

    #[test]
    fn site_totals_group_allocations_most_bytes_first() {
        let totals = site_totals([("b", 10), ("a", 5), ("b", 3), ("c", 13)]);
        assert_eq!(
            totals,
            [T::new("b", 13, 2), T::new("c", 13, 1), T::new("a", 5, 1)]
        );
    }
}
