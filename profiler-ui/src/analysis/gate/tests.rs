//! The rule reader, every form and every error, and rules judged on hand-made reports.

use super::*;

const MIB: u64 = 1 << 20;

fn rule(text: &str) -> Rule {
    Rule::parse(text).unwrap_or_else(|e| panic!("{text:?} should read: {e}"))
}

#[test]
fn rules_read_every_metric_with_dash_or_underscore_in_any_case() {
    for (text, metric) in [
        ("peak_allocated:+5%", Metric::PeakAllocated),
        ("peak-allocated:+5%", Metric::PeakAllocated),
        ("peak_reserved:+5%", Metric::PeakReserved),
        ("Peak-Reserved:+5%", Metric::PeakReserved),
        ("site-growth:+5%", Metric::SiteGrowth),
        ("site_growth:+5%", Metric::SiteGrowth),
        ("  SITE_GROWTH : +5% ", Metric::SiteGrowth),
    ] {
        let read = rule(text);
        assert_eq!(read.metric, metric, "{text:?}");
        assert_eq!(read.limit, Limit::Percent(5.0), "{text:?}");
        assert_eq!(
            read.text,
            text.trim(),
            "the rule is kept as written, trimmed"
        );
    }
}

#[test]
fn limits_read_as_percentages_or_sizes_with_an_optional_plus() {
    for (text, limit) in [
        ("+5%", Limit::Percent(5.0)),
        ("5%", Limit::Percent(5.0)),
        ("+2.5%", Limit::Percent(2.5)),
        ("+0%", Limit::Percent(0.0)),
        ("+ 12.25 %", Limit::Percent(12.25)),
        ("+64MiB", Limit::Bytes(64 * MIB)),
        ("64MiB", Limit::Bytes(64 * MIB)),
        ("64M", Limit::Bytes(64 * MIB)),
        ("1.5G", Limit::Bytes(3 << 29)),
        ("+512 KiB", Limit::Bytes(512 << 10)),
        ("4096", Limit::Bytes(4096)),
        ("0", Limit::Bytes(0)),
    ] {
        assert_eq!(
            rule(&format!("peak_reserved:{text}")).limit,
            limit,
            "{text:?}"
        );
    }
}

#[test]
fn bad_rules_say_what_to_write_instead() {
    let error = |text: &str| Rule::parse(text).expect_err(text).to_string();
    let not_a_rule =
        "is not a rule: write METRIC:LIMIT, e.g. peak_reserved:+5% or site-growth:64MiB";
    for text in [
        "peak_reserved",
        "peak_reserved:",
        ":+5%",
        "peak_reserved:+",
        "",
        " : ",
    ] {
        assert_eq!(
            error(text),
            format!("`{}` {not_a_rule}", text.trim()),
            "{text:?}"
        );
    }
    assert_eq!(
        error("peak:+5%"),
        "`peak` is not a metric: use peak_allocated, peak_reserved or site-growth (`-` and `_` \
         alike)"
    );
    assert_eq!(
        Rule::parse("peak_reserved:-5%"),
        Err(RuleError::Shrink("-5%".into()))
    );
    assert_eq!(
        error("site-growth:-64MiB"),
        "`-64MiB` is a fall: a limit is the growth allowed from A to B, e.g. +5% or +64MiB"
    );
    for limit in ["+five%", "%", "+%", "1.2.3%", "1e3%", "inf%", "NaN%"] {
        assert_eq!(
            error(&format!("peak_allocated:{limit}")),
            format!(
                "`{limit}` is not a percentage: write a number of 0 or more before `%`, e.g. \
                 +5% or +2.5%"
            ),
            "{limit:?}"
        );
    }
    let huge = format!("{}%", "9".repeat(400));
    assert_eq!(
        Rule::parse(&format!("peak_allocated:{huge}")),
        Err(RuleError::NotAPercentage(huge)),
        "a percentage past f64 is refused, not infinite"
    );
    assert_eq!(
        error("peak_allocated:12 parsecs"),
        "`12 parsecs` is not a limit: give a percentage (+5%) or a size (+64MiB, 1.5G); as a \
         size: `12 parsecs` is not a byte count: use digits with an optional K, M, G or T \
         suffix (powers of 1024), e.g. 80G"
    );
    assert_eq!(
        error("peak_allocated:1.5"),
        "`1.5` is not a limit: give a percentage (+5%) or a size (+64MiB, 1.5G); as a size: \
         `1.5` is not a whole number of bytes; use a larger unit or fewer decimals"
    );
    assert_eq!(
        Rule::parse("peak_allocated:16777216T"),
        Err(RuleError::NotALimit {
            limit: "16777216T".into(),
            reason: "`16777216T` is more bytes than 2^64".into()
        })
    );
}

/// A report with the given peaks (allocated A, B; reserved A, B) and sites
/// `(name, peak_a, peak_b, end_a, end_b)`.
fn report(peaks: [u64; 4], sites: &[(&str, u64, u64, u64, u64)]) -> DiffReport {
    DiffReport {
        device_a: 0,
        device_b: 0,
        peak_a: peaks[0],
        peak_b: peaks[1],
        peak_reserved_a: peaks[2],
        peak_reserved_b: peaks[3],
        notes: Vec::new(),
        sites: sites
            .iter()
            .map(|&(site, peak_a, peak_b, end_a, end_b)| SiteDiff {
                site: site.into(),
                peak_a,
                peak_b,
                end_a,
                end_b,
            })
            .collect(),
    }
}

fn judged(text: &str, report: &DiffReport) -> Verdict {
    judge(&[rule(text)], report).rules.remove(0)
}

#[test]
fn peak_rules_fail_only_past_their_limit() {
    // Allocated 100 -> 105 MiB (+5 %), reserved 200 -> 240 MiB (+20 %).
    let r = report([100 * MIB, 105 * MIB, 200 * MIB, 240 * MIB], &[]);
    let exactly = judged("peak_allocated:+5%", &r);
    assert!(exactly.passed, "a growth of exactly the limit passes");
    assert_eq!(
        exactly,
        Verdict {
            rule: "peak_allocated:+5%".into(),
            metric: Metric::PeakAllocated,
            limit: Limit::Percent(5.0),
            passed: true,
            a_bytes: 100 * MIB,
            b_bytes: 105 * MIB,
            growth_bytes: 5 * MIB as i128,
            growth_percent: Some(5.0),
            site: None,
            at: None,
            sites_over: None,
        }
    );
    assert!(!judged("peak_allocated:+4.99%", &r).passed);
    assert!(
        judged("peak_allocated:5MiB", &r).passed,
        "5 MiB is within 5 MiB"
    );
    assert!(
        !judged("peak_allocated:5242879", &r).passed,
        "one byte short"
    );
    let reserved = judged("peak_reserved:+64MiB", &r);
    assert_eq!(
        (reserved.passed, reserved.a_bytes, reserved.b_bytes),
        (true, 200 * MIB, 240 * MIB)
    );
    assert_eq!(reserved.limit, Limit::Bytes(64 * MIB));
    assert!(!judged("peak_reserved:+19%", &r).passed);
    // A fall passes any limit, +0% included.
    let fell = report([100, 90, 100, 100], &[]);
    let verdict = judged("peak_allocated:+0%", &fell);
    assert_eq!(
        (verdict.passed, verdict.growth_bytes, verdict.growth_percent),
        (true, -10, Some(-10.0))
    );
    // Growth from nothing has no percentage and fails any percentage limit.
    let from_nothing = judged("peak_reserved:+1000%", &report([0, 0, 0, 1], &[]));
    assert_eq!(
        (from_nothing.passed, from_nothing.growth_percent),
        (false, None)
    );
    assert!(judged("peak_allocated:+0%", &report([0, 0, 0, 1], &[])).passed);
}

#[test]
fn site_growth_takes_the_larger_of_peak_and_end_and_names_the_worst_site() {
    let r = report(
        [0; 4],
        &[
            // Grew 4 MiB at the peak, 1 MiB at the end.
            ("a.py:1:f", 4 * MIB, 8 * MIB, MIB, 2 * MIB),
            // Grew 1 MiB at the peak, 6 MiB at the end: the largest growth in bytes.
            ("b.py:2:g", MIB, 2 * MIB, 2 * MIB, 8 * MIB),
            // New in B: unbounded as a percentage, 512 KiB in bytes.
            ("new", 0, 512 << 10, 0, 0),
            // Shrank.
            ("gone", 9 * MIB, 0, 9 * MIB, 0),
        ],
    );
    let bytes = judged("site-growth:2MiB", &r);
    assert_eq!(
        bytes,
        Verdict {
            rule: "site-growth:2MiB".into(),
            metric: Metric::SiteGrowth,
            limit: Limit::Bytes(2 * MIB),
            passed: false,
            a_bytes: 2 * MIB,
            b_bytes: 8 * MIB,
            growth_bytes: 6 * MIB as i128,
            growth_percent: Some(300.0),
            site: Some("b.py:2:g".into()),
            at: Some(SitePoint::End),
            sites_over: Some(2),
        }
    );
    assert!(
        judged("site-growth:6MiB", &r).passed,
        "6 MiB is within 6 MiB"
    );
    let percent = judged("site_growth:+500%", &r);
    assert_eq!(
        (
            percent.passed,
            percent.site.as_deref(),
            percent.at,
            percent.sites_over,
            percent.growth_percent
        ),
        (false, Some("new"), Some(SitePoint::Peak), Some(1), None),
        "a new site fails any percentage"
    );
    let none = judged("site-growth:0", &report([0; 4], &[]));
    assert_eq!(
        (none.passed, none.site, none.sites_over, none.growth_bytes),
        (true, None, Some(0), 0)
    );
}

#[test]
fn the_gate_fails_when_any_rule_fails_and_keeps_their_order() {
    let r = report([100, 110, 100, 100], &[]);
    let gate = judge(&[rule("peak_reserved:+0%"), rule("peak_allocated:+5%")], &r);
    assert!(!gate.passed);
    let order: Vec<(&str, bool)> = gate
        .rules
        .iter()
        .map(|v| (v.rule.as_str(), v.passed))
        .collect();
    assert_eq!(
        order,
        [("peak_reserved:+0%", true), ("peak_allocated:+5%", false)]
    );
    assert!(judge(&[], &r).passed, "no rule, nothing fails");
}

#[test]
fn verdicts_say_what_was_measured_against_the_limit() {
    let plain = |s: &str| s.to_string();
    let r = report(
        [100 * MIB, 110 * MIB, 200 * MIB, 150 * MIB],
        &[
            ("a|b", MIB, 3 * MIB, 0, 0),
            ("c", 2 * MIB, 3 * MIB, 0, 0),
            ("new", 0, 0, 0, MIB),
        ],
    );
    let said = |text: &str| judged(text, &r).describe(plain);
    assert_eq!(
        said("peak_allocated:+5%"),
        "peak allocated grew 10.00 % (100.00 MiB -> 110.00 MiB), more than 5 %"
    );
    assert_eq!(
        said("peak_allocated:64MiB"),
        "peak allocated grew 10.00 MiB (100.00 MiB -> 110.00 MiB), within 64.00 MiB"
    );
    assert_eq!(
        said("peak_reserved:+2.5%"),
        "peak reserved fell 25.00 % (200.00 MiB -> 150.00 MiB), within 2.5 %"
    );
    assert_eq!(
        said("peak_reserved:0"),
        "peak reserved fell 50.00 MiB (200.00 MiB -> 150.00 MiB), within 0 bytes"
    );
    assert_eq!(
        said("site-growth:512KiB"),
        "site a|b grew 2.00 MiB at the peak (1024.00 KiB -> 3.00 MiB), more than 512.00 KiB; \
         3 sites over the limit"
    );
    assert_eq!(
        said("site-growth:+10%"),
        "site new grew at the end from 0 bytes to 1024.00 KiB, more than 10 %; 3 sites over the limit"
    );
    assert_eq!(
        judged("site-growth:1MiB", &r).describe(|s| format!("`{s}`")),
        "site `a|b` grew 2.00 MiB at the peak (1024.00 KiB -> 3.00 MiB), more than 1024.00 KiB",
        "the site is written as asked"
    );
    let flat = report([5, 5, 5, 5], &[("x", 1, 1, 1, 1)]);
    assert_eq!(
        judged("peak_allocated:+0%", &flat).describe(plain),
        "peak allocated did not change (5 bytes), within 0 %"
    );
    assert_eq!(
        judged("site-growth:+0%", &flat).describe(plain),
        "no site grew, within 0 %"
    );
}
