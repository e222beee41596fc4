//! A whole recorded run through the step detector: every step's site totals at once (as
//! `memtrace leaks` and the viewer read them from a trace file), the detector's findings, and
//! the series of live bytes and allocations of each site it names, step by step.
//!
//! Files and live handles share the rules: this runs the same [`StepDetector`] a training loop
//! calls, so a trace and the program that wrote it agree on what grows.

use super::findings::StepFindings;
use super::growth::{GrowthError, GrowthSettings, SiteTotal, StepDetector};
use serde::Serialize;
use std::collections::HashMap;

/// One site's live memory at each observed step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteSeries {
    /// The site's label.
    pub site: String,
    /// Live bytes at each step, in [`StepAnalysis::steps`] order (0 where it had none).
    pub bytes: Vec<u64>,
    /// Live allocations at each step.
    pub counts: Vec<u64>,
}

/// [`analyze_steps`]'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepAnalysis {
    /// The steps observed, in order (the first is the baseline).
    pub steps: Vec<String>,
    /// What the detector concluded at the last step.
    pub findings: StepFindings,
    /// The series of each growing site, in [`StepFindings::growing`] order.
    pub growing: Vec<SiteSeries>,
    /// The series of each persistent site, in [`StepFindings::persistent`] order.
    pub persistent: Vec<SiteSeries>,
}

/// Runs a [`StepDetector`] with `settings` over `steps` (each a name and its site totals, in
/// order) and keeps the series of the sites it finds.
///
/// ```
/// use blockpool::leak::{analyze_steps, SiteTotal};
///
/// let steps = (0..4u64).map(|n| {
///     let cache = SiteTotal { site: "cache".into(), bytes: n << 20, count: n };
///     (format!("step{n}"), vec![cache])
/// });
/// let analysis = analyze_steps(steps, Default::default())?;
/// assert_eq!(analysis.findings.growing[0].bytes_per_step, 1 << 20);
/// assert_eq!(analysis.growing[0].bytes, [0, 1 << 20, 2 << 20, 3 << 20]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn analyze_steps<S: Into<String>>(
    steps: impl IntoIterator<Item = (S, Vec<SiteTotal>)>,
    settings: GrowthSettings,
) -> Result<StepAnalysis, GrowthError> {
    let mut detector = StepDetector::new(settings)?;
    let mut names = Vec::new();
    let mut history: Vec<Vec<SiteTotal>> = Vec::new();
    for (name, totals) in steps {
        let name: String = name.into();
        detector.observe(name.clone(), totals.iter().cloned());
        names.push(name);
        history.push(totals);
    }
    let findings = detector.findings();
    let series = |sites: Vec<&str>| -> Vec<SiteSeries> {
        let wanted: HashMap<&str, usize> = sites.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let mut series: Vec<SiteSeries> = sites
            .iter()
            .map(|site| SiteSeries {
                site: site.to_string(),
                bytes: vec![0; history.len()],
                counts: vec![0; history.len()],
            })
            .collect();
        for (step, totals) in history.iter().enumerate() {
            for total in totals {
                if let Some(&i) = wanted.get(total.site.as_str()) {
                    let s = &mut series[i];
                    s.bytes[step] = s.bytes[step].saturating_add(total.bytes);
                    s.counts[step] = s.counts[step].saturating_add(total.count);
                }
            }
        }
        series
    };
    let growing = series(findings.growing.iter().map(|g| g.site.as_str()).collect());
    let persistent = series(
        findings
            .persistent
            .iter()
            .map(|p| p.site.as_str())
            .collect(),
    );
    Ok(StepAnalysis {
        steps: names,
        growing,
        persistent,
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_series_follow_the_sites_the_detector_names() {
        let steps = vec![
            ("before", vec![SiteTotal::new("weights", 8 * MIB, 2)]),
            (
                "s0",
                vec![
                    SiteTotal::new("weights", 8 * MIB, 2),
                    SiteTotal::new("leak", MIB, 1),
                ],
            ),
            (
                "s1",
                vec![
                    SiteTotal::new("weights", 8 * MIB, 2),
                    SiteTotal::new("leak", MIB, 1),
                    SiteTotal::new("leak", MIB, 1),
                ],
            ),
            (
                "s2",
                vec![
                    SiteTotal::new("weights", 8 * MIB, 2),
                    SiteTotal::new("leak", 3 * MIB, 3),
                ],
            ),
        ];
        let analysis = analyze_steps(steps, GrowthSettings::default()).expect("valid settings");
        assert_eq!(analysis.steps, ["before", "s0", "s1", "s2"]);
        assert_eq!(
            analysis.growing,
            [SiteSeries {
                site: "leak".into(),
                bytes: vec![0, MIB, 2 * MIB, 3 * MIB],
                counts: vec![0, 1, 2, 3],
            }],
            "duplicates of a site in one step add up, as the detector adds them"
        );
        assert_eq!(analysis.findings.growing[0].since_step, "before");
        assert_eq!(analysis.persistent[0].bytes, vec![8 * MIB; 4]);
        assert_eq!(analysis.findings.persistent[0].since_step, "before");
    }

    /// Whether going from `(b0, c0)` to `(b1, c1)` grows a site (the detector's rule).
    fn grows(b0: u64, c0: u64, b1: u64, c1: u64) -> bool {
        b1 >= b0 && c1 >= c0 && (b1, c1) != (b0, c0)
    }

    proptest::proptest! {
        /// On any run of three sites, the findings are exactly what the rules say of the
        /// series: growing iff the last K steps all grew, persistent iff flat and present from
        /// one of the first two steps, never both.
        #[test]
        fn findings_follow_the_rules_on_any_run(
            run in proptest::collection::vec(
                proptest::collection::vec((0u64..4, 0u64..4), 3),
                1..12,
            ),
            k in 1u32..5,
        ) {
            let sites = ["a", "b", "c"];
            let steps = run.iter().enumerate().map(|(i, step)| {
                let totals = step
                    .iter()
                    .zip(sites)
                    .map(|(&(bytes, count), site)| SiteTotal::new(site, bytes * MIB, count))
                    .collect();
                (format!("s{i}"), totals)
            });
            let analysis = analyze_steps(steps, GrowthSettings::with_min_growth_steps(k))
                .expect("k >= 1");
            let last = run.len() - 1;
            for (s, site) in sites.iter().enumerate() {
                let series: Vec<(u64, u64)> =
                    run.iter().map(|step| (step[s].0 * MIB, step[s].1)).collect();
                let k = k as usize;
                let growing = last >= k
                    && series[last - k..]
                        .windows(2)
                        .all(|w| grows(w[0].0, w[0].1, w[1].0, w[1].1));
                let flagged = analysis.findings.growing.iter().any(|g| g.site == *site);
                proptest::prop_assert_eq!(flagged, growing, "{} in {:?}", site, series);
                let now = series[last];
                let flat_from = (0..=last)
                    .rev()
                    .take_while(|&i| series[i] == now)
                    .last()
                    .unwrap_or(last);
                let kept = now != (0, 0) && flat_from <= 1 && flat_from < last;
                let persistent = analysis.findings.persistent.iter().any(|p| p.site == *site);
                proptest::prop_assert_eq!(persistent, kept, "{} in {:?}", site, series);
                proptest::prop_assert!(!(flagged && persistent));
            }
        }
    }

    #[test]
    fn bad_settings_are_refused_before_any_step() {
        let steps: Vec<(String, Vec<SiteTotal>)> = Vec::new();
        assert_eq!(
            analyze_steps(steps, GrowthSettings::with_min_growth_steps(0)),
            Err(GrowthError::NoGrowthSteps)
        );
    }
}
