//! The CI gate of `memtrace diff`: rules (`--fail-if METRIC:LIMIT`) and each rule judged on a
//! [`DiffReport`], B against A.
//!
//! A rule names a metric and the growth allowed from A to B: `peak_reserved:+5%` (relative to
//! A), `peak_allocated:+64MiB` or `site-growth:64MiB` (absolute, any size [`parse_bytes`]
//! reads). A rule fails when the growth is *more* than its limit, so `+0%` fails on any growth.
//! `site-growth` measures each site at the allocated peak and at the end of each trace and
//! takes the larger growth of the two; as a percentage, of that site's bytes in A, so a site
//! that is new in B (0 bytes in A) fails any percentage limit. Every rule is judged, and the
//! verdicts keep what was measured so that a report can say why.

use super::diff::{percent_change, DiffReport, SiteDiff};
use crate::format::{format_size, parse_bytes};
use serde::ser::{SerializeMap as _, Serializer};
use serde::Serialize;
use std::cmp::Ordering;

/// What a rule measures, B against A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// The allocated peak of each trace's device.
    PeakAllocated,
    /// The reserved peak (bytes in segments) of each trace's device.
    PeakReserved,
    /// Any one site's live bytes, at the allocated peak or at the end, whichever grew more.
    SiteGrowth,
}

impl Metric {
    /// Reads a metric's name, `-` and `_` alike and in any case: `peak_reserved`,
    /// `site-growth`.
    fn parse(text: &str) -> Option<Metric> {
        match text.to_ascii_lowercase().replace('-', "_").as_str() {
            "peak_allocated" => Some(Metric::PeakAllocated),
            "peak_reserved" => Some(Metric::PeakReserved),
            "site_growth" => Some(Metric::SiteGrowth),
            _ => None,
        }
    }
}

/// The growth a rule allows from A to B; in JSON, `limit_bytes` and `limit_percent`, the one
/// it is not null.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// At most this many bytes more.
    Bytes(u64),
    /// At most this many percent of A's bytes more (0 or more, finite).
    Percent(f64),
}

impl Limit {
    /// Reads `+5%`, `2.5%`, `+64MiB`, `1.5G` or `4096` (the `+` optional); `text` is trimmed
    /// and not empty.
    fn parse(text: &str) -> Result<Limit, RuleError> {
        if text.starts_with('-') {
            return Err(RuleError::Shrink(text.to_string()));
        }
        let body = text.strip_prefix('+').unwrap_or(text).trim_start();
        if let Some(number) = body.strip_suffix('%') {
            let number = number.trim_end();
            let digits =
                !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == '.');
            return match number.parse::<f64>() {
                Ok(percent) if digits && percent.is_finite() => Ok(Limit::Percent(percent)),
                _ => Err(RuleError::NotAPercentage(text.to_string())),
            };
        }
        parse_bytes(body)
            .map(Limit::Bytes)
            .map_err(|reason| RuleError::NotALimit {
                limit: text.to_string(),
                reason,
            })
    }

    /// The limit as a report says it: `5 %`, `64.00 MiB`.
    fn describe(self) -> String {
        match self {
            Limit::Bytes(bytes) => format_size(bytes),
            Limit::Percent(percent) => format!("{percent} %"),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (bytes, percent) = match *self {
            Limit::Bytes(bytes) => (Some(bytes), None),
            Limit::Percent(percent) => (None, Some(percent)),
        };
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("limit_bytes", &bytes)?;
        map.serialize_entry("limit_percent", &percent)?;
        map.end()
    }
}

/// One `--fail-if` rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The rule as it was written (trimmed), for reports.
    pub text: String,
    /// What it measures.
    pub metric: Metric,
    /// The growth it allows.
    pub limit: Limit,
}

/// Why a `--fail-if` rule cannot be read; each message says what to write instead.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// No `:`, or nothing on one side of it.
    #[error(
        "`{0}` is not a rule: write METRIC:LIMIT, e.g. peak_reserved:+5% or site-growth:64MiB"
    )]
    NotARule(String),
    /// A metric this gate does not know.
    #[error(
        "`{0}` is not a metric: use peak_allocated, peak_reserved or site-growth (`-` and `_` \
         alike)"
    )]
    UnknownMetric(String),
    /// A negative limit.
    #[error("`{0}` is a fall: a limit is the growth allowed from A to B, e.g. +5% or +64MiB")]
    Shrink(String),
    /// A `%` after something that is not a number of 0 or more.
    #[error(
        "`{0}` is not a percentage: write a number of 0 or more before `%`, e.g. +5% or +2.5%"
    )]
    NotAPercentage(String),
    /// Neither a percentage nor a size.
    #[error("`{limit}` is not a limit: give a percentage (+5%) or a size (+64MiB, 1.5G); as a size: {reason}")]
    NotALimit {
        /// The limit as written.
        limit: String,
        /// Why it is not a size.
        reason: String,
    },
}

impl Rule {
    /// Reads `METRIC:LIMIT`: `peak_allocated`, `peak_reserved` or `site-growth` (`-` and `_`
    /// alike), then a percentage (`+5%`) or a size (`+64MiB`, `64MiB`), the `+` optional.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let text = text.trim();
        let (metric, limit) = text
            .split_once(':')
            .map(|(m, l)| (m.trim(), l.trim()))
            .filter(|(m, l)| !m.is_empty() && !l.is_empty() && *l != "+")
            .ok_or_else(|| RuleError::NotARule(text.to_string()))?;
        let metric =
            Metric::parse(metric).ok_or_else(|| RuleError::UnknownMetric(metric.into()))?;
        Ok(Rule {
            text: text.to_string(),
            metric,
            limit: Limit::parse(limit)?,
        })
    }
}

/// Where a site's growth was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SitePoint {
    /// At each trace's allocated peak.
    Peak,
    /// At the end of each trace.
    End,
}

/// A rule judged: what it measured, against what, and whether it passed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// The rule as written.
    pub rule: String,
    /// What it measures.
    pub metric: Metric,
    /// The growth allowed.
    #[serde(flatten)]
    pub limit: Limit,
    /// Whether the growth was within the limit.
    pub passed: bool,
    /// A's bytes: its peak, or the measured site's bytes.
    pub a_bytes: u64,
    /// B's bytes, likewise.
    pub b_bytes: u64,
    /// `b_bytes - a_bytes`.
    pub growth_bytes: i128,
    /// The growth in percent of `a_bytes`; `None` when it grew from 0 bytes.
    pub growth_percent: Option<f64>,
    /// For `site-growth`: the site that grew most in the limit's unit (`None` when neither
    /// trace has a site).
    pub site: Option<String>,
    /// For `site-growth`: where that site grew most.
    pub at: Option<SitePoint>,
    /// For `site-growth`: how many sites grew more than the limit.
    pub sites_over: Option<usize>,
}

/// Every rule judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateReport {
    /// Whether every rule passed.
    pub passed: bool,
    /// The verdicts, in the order of the rules.
    pub rules: Vec<Verdict>,
}

/// Judges every rule on `report`.
pub fn judge(rules: &[Rule], report: &DiffReport) -> GateReport {
    let rules: Vec<Verdict> = rules.iter().map(|rule| verdict(rule, report)).collect();
    GateReport {
        passed: rules.iter().all(|v| v.passed),
        rules,
    }
}

/// Bytes in A and in B.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Growth {
    a: u64,
    b: u64,
}

impl Growth {
    fn bytes(self) -> i128 {
        self.b as i128 - self.a as i128
    }

    /// The growth in the limit's unit, growth from 0 bytes as an unbounded percentage.
    fn measure(self, limit: Limit) -> f64 {
        match limit {
            Limit::Bytes(_) => self.bytes() as f64,
            Limit::Percent(_) => percent_change(self.a, self.b).unwrap_or(f64::INFINITY),
        }
    }

    /// Whether it grew more than `limit` allows; a byte limit is compared exactly.
    fn exceeds(self, limit: Limit) -> bool {
        match limit {
            Limit::Bytes(most) => self.bytes() > i128::from(most),
            Limit::Percent(most) => self.measure(limit) > most,
        }
    }

    /// Orders two growths by `limit`'s measure, then by bytes.
    fn compare(self, other: Growth, limit: Limit) -> Ordering {
        self.measure(limit)
            .total_cmp(&other.measure(limit))
            .then(self.bytes().cmp(&other.bytes()))
    }
}

/// A site's larger growth, at the peak or at the end (the peak on a tie).
fn site_growth(site: &SiteDiff, limit: Limit) -> (Growth, SitePoint) {
    let peak = Growth {
        a: site.peak_a,
        b: site.peak_b,
    };
    let end = Growth {
        a: site.end_a,
        b: site.end_b,
    };
    if end.compare(peak, limit) == Ordering::Greater {
        (end, SitePoint::End)
    } else {
        (peak, SitePoint::Peak)
    }
}

/// Judges one rule.
fn verdict(rule: &Rule, report: &DiffReport) -> Verdict {
    let limit = rule.limit;
    let peak = |a, b| (Growth { a, b }, None, None, None);
    let (growth, site, at, sites_over) = match rule.metric {
        Metric::PeakAllocated => peak(report.peak_a, report.peak_b),
        Metric::PeakReserved => peak(report.peak_reserved_a, report.peak_reserved_b),
        Metric::SiteGrowth => {
            let mut worst: Option<(Growth, SitePoint, &SiteDiff)> = None;
            let mut over = 0;
            for site in &report.sites {
                let (growth, at) = site_growth(site, limit);
                over += usize::from(growth.exceeds(limit));
                // The first of equals: the report lists the largest change first.
                let larger = match worst {
                    Some((w, _, _)) => growth.compare(w, limit) == Ordering::Greater,
                    None => true,
                };
                if larger {
                    worst = Some((growth, at, site));
                }
            }
            match worst {
                Some((growth, at, site)) => (growth, Some(site.site.clone()), Some(at), Some(over)),
                None => (Growth::default(), None, None, Some(0)),
            }
        }
    };
    Verdict {
        rule: rule.text.clone(),
        metric: rule.metric,
        limit,
        passed: !growth.exceeds(limit),
        a_bytes: growth.a,
        b_bytes: growth.b,
        growth_bytes: growth.bytes(),
        growth_percent: percent_change(growth.a, growth.b),
        site,
        at,
        sites_over,
    }
}

impl Verdict {
    /// What was measured against the limit, in words, the site written by `site`:
    /// `peak reserved grew 7.31 % (1.20 GiB -> 1.29 GiB), more than 5 %`, or `site x grew
    /// 2.00 MiB at the end (0 bytes -> 2.00 MiB), within 64.00 MiB`.
    pub fn describe(&self, site: impl Fn(&str) -> String) -> String {
        let limit = self.limit;
        let judged = if self.passed { "within" } else { "more than" };
        let (a, b) = (format_size(self.a_bytes), format_size(self.b_bytes));
        let subject = match (self.metric, &self.site) {
            (Metric::PeakAllocated, _) => "peak allocated".to_string(),
            (Metric::PeakReserved, _) => "peak reserved".to_string(),
            (Metric::SiteGrowth, Some(name)) if self.growth_bytes > 0 => {
                format!("site {}", site(name))
            }
            (Metric::SiteGrowth, _) => {
                return format!("no site grew, {judged} {}", limit.describe())
            }
        };
        let at = match self.at {
            Some(SitePoint::Peak) => " at the peak",
            Some(SitePoint::End) => " at the end",
            None => "",
        };
        let verb = if self.growth_bytes > 0 {
            "grew"
        } else {
            "fell"
        };
        let change = match (limit, self.growth_percent) {
            _ if self.growth_bytes == 0 => format!("did not change{at} ({a})"),
            (Limit::Percent(_), None) => format!("grew{at} from 0 bytes to {b}"),
            (Limit::Percent(_), Some(percent)) => {
                format!("{verb} {:.2} %{at} ({a} -> {b})", percent.abs())
            }
            (Limit::Bytes(_), _) => {
                let bytes = self.growth_bytes.unsigned_abs().min(u64::MAX.into()) as u64;
                format!("{verb} {}{at} ({a} -> {b})", format_size(bytes))
            }
        };
        let others = match self.sites_over {
            Some(over) if over > 1 => format!("; {over} sites over the limit"),
            _ => String::new(),
        };
        format!("{subject} {change}, {judged} {}{others}", limit.describe())
    }
}

#[cfg(test)]
mod tests;
