//! `memtrace diff` as a CI job runs it: `--fail-if` rules and their exit statuses, the failed
//! rules on standard error, the `gate` in JSON, and the Markdown report, on a pair of traces
//! made here with exact sizes.

mod common;

use common::{memtrace, scratch, stderr, stdout};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const MIB: u64 = 1 << 20;

/// One allocation of a made trace: its site (one tag), its size, its segment's size (the
/// allocation first in it, the rest free), and whether it is freed at the end.
struct Block {
    site: &'static str,
    size: u64,
    segment: u64,
    freed: bool,
}

const fn block(site: &'static str, size: u64, segment: u64, freed: bool) -> Block {
    Block {
        site,
        size,
        segment,
        freed,
    }
}

/// A JSON Lines trace on device 0: every block's segment and allocation in order, then the
/// frees. Peaks: allocated, the sum of the sizes; reserved, the sum of the segments.
fn trace(blocks: &[Block]) -> String {
    let mut lines = vec![r#"{"blockpool_trace":1}"#.to_string()];
    let addr = |i: usize| (1u64 << 32) + (i as u64) * (1 << 30);
    for (i, b) in blocks.iter().enumerate() {
        let tags = json!([b.site]);
        lines.push(format!(
            r#"{{"context":{},"tags":{tags},"frames":[]}}"#,
            i + 1
        ));
    }
    let mut events: Vec<String> = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let (addr, context) = (addr(i), i + 1);
        events.push(format!(
            r#"{{"event":"segment_alloc","device":0,"addr":{addr},"size":{}}}"#,
            b.segment
        ));
        events.push(format!(
            r#"{{"event":"alloc","device":0,"addr":{addr},"size":{0},"requested":{0},"context":{context}}}"#,
            b.size
        ));
    }
    for (i, b) in blocks.iter().enumerate().filter(|(_, b)| b.freed) {
        for action in ["free_requested", "free_completed"] {
            events.push(format!(
                r#"{{"event":"{action}","device":0,"addr":{},"size":{1},"requested":{1},"context":{2}}}"#,
                addr(i),
                b.size,
                i + 1
            ));
        }
    }
    let event_count = events.len();
    // Times 1, 2, ...: the closing brace gives way to the event's time.
    lines.extend(
        events
            .into_iter()
            .enumerate()
            .map(|(t, event)| format!("{},\"time_us\":{}}}", &event[..event.len() - 1], t + 1)),
    );
    for (i, b) in blocks.iter().enumerate() {
        let (addr, context) = (addr(i), i + 1);
        let mut parts = vec![if b.freed {
            json!([addr, b.size, 0, "inactive", 0])
        } else {
            json!([addr, b.size, b.size, "active_allocated", context])
        }];
        if b.segment > b.size {
            parts.push(json!([addr + b.size, b.segment - b.size, 0, "inactive", 0]));
        }
        let pool = if b.segment <= 2 * MIB {
            "small"
        } else {
            "large"
        };
        lines.push(
            json!({"segment": addr, "device": 0, "size": b.segment, "pool": pool, "blocks": parts})
                .to_string(),
        );
    }
    lines.push(format!(
        r#"{{"end":{{"events":{event_count},"segments":{}}}}}"#,
        blocks.len()
    ));
    lines.join("\n") + "\n"
}

/// The two traces' paths, written once for every test of this file. A: allocated peak 16 MiB, reserved 16 MiB. B: allocated peak 20 MiB (+25 %), reserved
/// 22 MiB (+37.5 %). Sites: `weights` unchanged; `act` 6 -> 8 MiB at the peak, freed by the
/// end; `cache` 2 -> 3 MiB at the peak and the end; `new|site` only in B, 1 MiB.
fn pair() -> (String, String) {
    static PAIR: OnceLock<(String, String)> = OnceLock::new();
    PAIR.get_or_init(write_pair).clone()
}

fn write_pair() -> (String, String) {
    let a = trace(&[
        block("weights", 8 * MIB, 8 * MIB, false),
        block("act", 6 * MIB, 6 * MIB, true),
        block("cache", 2 * MIB, 2 * MIB, false),
    ]);
    let b = trace(&[
        block("weights", 8 * MIB, 8 * MIB, false),
        block("act", 8 * MIB, 8 * MIB, true),
        block("cache", 3 * MIB, 4 * MIB, false),
        block("new|site", MIB, 2 * MIB, false),
    ]);
    let (path_a, path_b) = (scratch("gate-base.jsonl"), scratch("gate-new.jsonl"));
    std::fs::write(&path_a, a).expect("written");
    std::fs::write(&path_b, b).expect("written");
    let name = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    (name(&path_a), name(&path_b))
}

/// Runs `memtrace diff BASE NEW` with `args` after the two files.
fn diff(args: &[&str]) -> Output {
    let (a, b) = pair();
    memtrace(&[&["diff", a.as_str(), b.as_str()], args].concat())
}

#[test]
fn rules_within_their_limits_exit_0_and_leave_the_report_as_it_was() {
    let plain = diff(&[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let output = diff(&[
        "--fail-if",
        "peak_allocated:+25%",
        "--fail-if",
        "peak-reserved:6MiB",
        "--fail-if",
        "site-growth:2MiB",
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "growths of exactly the limit pass: {}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), "");
    assert_eq!(
        stdout(&output),
        stdout(&plain),
        "rules do not change the report"
    );
    assert_eq!(
        stdout(&plain),
        "allocated peak: 16.00 MiB -> 20.00 MiB (+4.00 MiB)\n\
         reserved peak: 16.00 MiB -> 22.00 MiB (+6.00 MiB)\n     \
         peak A      peak B       change         end A       end B       change   site\n   \
         6.00 MiB    8.00 MiB    +2.00 MiB       0 bytes     0 bytes            0   act\n   \
         2.00 MiB    3.00 MiB +1024.00 KiB      2.00 MiB    3.00 MiB +1024.00 KiB   cache\n    \
         0 bytes 1024.00 KiB +1024.00 KiB       0 bytes 1024.00 KiB +1024.00 KiB   new|site\n\
         1 site unchanged\n"
    );
}

#[test]
fn failing_rules_exit_1_each_on_one_line_after_the_report() {
    let output = diff(&[
        "--fail-if",
        "peak_reserved:+5%",
        "--fail-if",
        "peak_allocated:+25%",
        "--fail-if",
        "site-growth:1.5MiB",
        "--fail-if",
        "site_growth:+40%",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        stderr(&output),
        "memtrace: --fail-if peak_reserved:+5%: peak reserved grew 37.50 % (16.00 MiB -> \
         22.00 MiB), more than 5 %\n\
         memtrace: --fail-if site-growth:1.5MiB: site act grew 2.00 MiB at the peak (6.00 MiB \
         -> 8.00 MiB), more than 1.50 MiB\n\
         memtrace: --fail-if site_growth:+40%: site new|site grew at the peak from 0 bytes to \
         1024.00 KiB, more than 40 %; 2 sites over the limit\n"
    );
    assert!(
        stdout(&output).starts_with("allocated peak: 16.00 MiB -> 20.00 MiB"),
        "the report is printed still: {}",
        stdout(&output)
    );
    let one = diff(&["--fail-if", "peak_allocated:+24.99%"]);
    assert_eq!(one.status.code(), Some(1));
    assert_eq!(
        stderr(&one),
        "memtrace: --fail-if peak_allocated:+24.99%: peak allocated grew 25.00 % (16.00 MiB -> \
         20.00 MiB), more than 24.99 %\n"
    );
}

#[test]
fn malformed_rules_are_bad_input_with_exit_2() {
    let cases = [
        (
            "peak:+5%",
            "`peak` is not a metric: use peak_allocated, peak_reserved or site-growth (`-` and \
             `_` alike)",
        ),
        (
            "peak_reserved",
            "`peak_reserved` is not a rule: write METRIC:LIMIT, e.g. peak_reserved:+5% or \
             site-growth:64MiB",
        ),
        (
            "peak_reserved:-5%",
            "`-5%` is a fall: a limit is the growth allowed from A to B, e.g. +5% or +64MiB",
        ),
        (
            "site-growth:lots%",
            "`lots%` is not a percentage: write a number of 0 or more before `%`, e.g. +5% or \
             +2.5%",
        ),
        (
            "site-growth:64 parsecs",
            "`64 parsecs` is not a limit: give a percentage (+5%) or a size (+64MiB, 1.5G); as \
             a size: `64 parsecs` is not a byte count: use digits with an optional K, M, G or T \
             suffix (powers of 1024), e.g. 80G",
        ),
    ];
    for (rule, message) in cases {
        let output = diff(&["--fail-if", rule]);
        assert_eq!(output.status.code(), Some(2), "{rule}: {}", stderr(&output));
        assert_eq!(
            stderr(&output),
            format!(
                "memtrace: invalid value '{rule}' for '--fail-if <RULE>': {message} (see \
                 memtrace --help)\n"
            )
        );
        assert_eq!(stdout(&output), "", "{rule}: nothing is compared");
    }
    let both = diff(&["--json", "--markdown"]);
    assert_eq!(both.status.code(), Some(2));
    assert!(
        stderr(&both)
            .starts_with("memtrace: the argument '--json' cannot be used with '--markdown'"),
        "{}",
        stderr(&both)
    );
}

#[test]
fn json_lists_every_rule_with_what_it_measured() {
    let output = diff(&[
        "--json",
        "--fail-if",
        "peak_reserved:+5%",
        "--fail-if",
        "site-growth:2MiB",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        (&report["peak_a"], &report["peak_b"]),
        (&json!(16 * MIB), &json!(20 * MIB))
    );
    assert_eq!(
        (&report["peak_reserved_a"], &report["peak_reserved_b"]),
        (&json!(16 * MIB), &json!(22 * MIB))
    );
    assert_eq!(
        report["gate"],
        json!({
            "passed": false,
            "rules": [
                {
                    "rule": "peak_reserved:+5%", "metric": "peak_reserved",
                    "limit_bytes": null, "limit_percent": 5.0, "passed": false,
                    "a_bytes": 16 * MIB, "b_bytes": 22 * MIB, "growth_bytes": 6 * MIB,
                    "growth_percent": 37.5, "site": null, "at": null, "sites_over": null
                },
                {
                    "rule": "site-growth:2MiB", "metric": "site_growth",
                    "limit_bytes": 2 * MIB, "limit_percent": null, "passed": true,
                    "a_bytes": 6 * MIB, "b_bytes": 8 * MIB, "growth_bytes": 2 * MIB,
                    "growth_percent": 2.0 / 6.0 * 100.0, "site": "act", "at": "peak", "sites_over": 0
                }
            ]
        })
    );
    let plain: Value = serde_json::from_slice(&diff(&["--json"]).stdout).expect("JSON");
    assert_eq!(plain.get("gate"), None, "no rules, no gate");
}

const MARKDOWN: &str = "\
| | A | B | change |
|---|---:|---:|---:|
| allocated peak | 16.00 MiB | 20.00 MiB | +4.00 MiB (+25.00 %) |
| reserved peak | 16.00 MiB | 22.00 MiB | +6.00 MiB (+37.50 %) |

| site | peak A | peak B | change | end A | end B | change |
|---|---:|---:|---:|---:|---:|---:|
| `act` | 6.00 MiB | 8.00 MiB | +2.00 MiB | 0 bytes | 0 bytes | 0 |
| `cache` | 2.00 MiB | 3.00 MiB | +1024.00 KiB | 2.00 MiB | 3.00 MiB | +1024.00 KiB |
| `new\\|site` | 0 bytes | 1024.00 KiB | +1024.00 KiB | 0 bytes | 1024.00 KiB | +1024.00 KiB |

1 site unchanged.
";

#[test]
fn markdown_shows_the_gate_the_peaks_and_the_changed_sites() {
    let (a, b) = pair();
    let heading = format!("### memtrace diff: `{a}` -> `{b}`\n\n");
    let output = diff(&["--markdown"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), format!("{heading}{MARKDOWN}"));
    let gated = diff(&[
        "--markdown",
        "--fail-if",
        "peak_allocated:+25%",
        "--fail-if",
        "site-growth:+40%",
    ]);
    assert_eq!(gated.status.code(), Some(1));
    assert_eq!(
        stdout(&gated),
        format!(
            "{heading}**Gate: failed** (1 of 2 rules)\n\n\
             - passed `peak_allocated:+25%`: peak allocated grew 25.00 % (16.00 MiB -> \
             20.00 MiB), within 25 %\n\
             - **failed** `site-growth:+40%`: site `new|site` grew at the peak from 0 bytes to \
             1024.00 KiB, more than 40 %; 2 sites over the limit\n\n{MARKDOWN}"
        )
    );
}

#[test]
fn limit_caps_the_sites_listed_and_counts_the_rest() {
    let output = diff(&["--markdown", "--limit", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let page = stdout(&output);
    assert!(
        page.ends_with(
            "|---|---:|---:|---:|---:|---:|---:|\n\
             | `act` | 6.00 MiB | 8.00 MiB | +2.00 MiB | 0 bytes | 0 bytes | 0 |\n\n\
             2 more changed sites not listed (`--limit`); 1 site unchanged.\n"
        ),
        "{page}"
    );
    let none = diff(&["--markdown", "--limit", "0"]);
    assert!(
        stdout(&none).ends_with(
            "+6.00 MiB (+37.50 %) |\n\n3 more changed sites not listed (`--limit`); 1 site \
             unchanged.\n"
        ),
        "{}",
        stdout(&none)
    );
    let text = stdout(&diff(&["--limit", "2"]));
    assert!(
        text.ends_with("   cache\n1 more changed site (--limit)\n1 site unchanged\n"),
        "{text}"
    );
    let (a, _) = pair();
    let same = memtrace(&["diff", &a, &a, "--markdown"]);
    assert!(
        stdout(&same).ends_with(
            "| reserved peak | 16.00 MiB | 16.00 MiB | 0 |\n\nNo site changed; 3 sites \
             unchanged.\n"
        ),
        "{}",
        stdout(&same)
    );
}

#[test]
fn a_closed_stdout_does_not_pass_a_failing_gate() {
    let (a, b) = pair();
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtrace"))
        .args(["diff", &a, &b, "--fail-if", "peak_reserved:+5%"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("memtrace runs");
    // Close our end before memtrace has read the traces and written its report.
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("memtrace exits");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).starts_with("memtrace: --fail-if peak_reserved:+5%: peak reserved grew"),
        "{}",
        stderr(&output)
    );
}
