//! `memtrace plan` as a user runs it: exact reports on a three-stage chain computed by hand
//! (the one `blockpool::checkpoint`'s planner tests use), the example chain's reports equal to
//! what the library's planners give, and every bad file or option refused with exit status 2
//! and one line naming the file and the JSON path, never a panic.

mod common;

use blockpool::checkpoint::{
    Budget, ChainCosts, Plan, Planner, Revolve, Sqrt, StageCost, StoreAll, Uniform,
};
use blockpool::AllocatorConfig;
use common::{memtrace, scratch, stderr, stdout};
use serde_json::Value;
use std::process::Output;

/// The hand chain: x_0 = 1 KiB; per stage (output, forward workspace, backward workspace) in
/// KiB and (forward, backward) times: (2, 16, 32; 1, 10), (4, 8, 64; 2, 20), (8, 0, 1 B; 4, 40).
/// Sizes are written every way the format allows.
const HAND: &str = r#"{
  "time_unit": "us",
  "input_bytes": "1K",
  "stages": [
    {"name": "a", "output_bytes": "2K", "forward_time": 1, "backward_time": 10,
     "forward_workspace_bytes": "16K", "backward_workspace_bytes": "32 KiB"},
    {"name": "b", "output_bytes": 4096, "forward_time": 2, "backward_time": 20,
     "forward_workspace_bytes": "8KiB", "backward_workspace_bytes": "0.0625M"},
    {"name": "c", "output_bytes": 8192, "forward_time": 4, "backward_time": 40,
     "backward_workspace_bytes": 1}
  ]
}"#;

fn write(name: &str, text: &str) -> String {
    let path = scratch(name);
    std::fs::write(&path, text).expect("scratch file");
    path.to_string_lossy().into_owned()
}

fn example_chain() -> String {
    format!("{}/../examples/chain.json", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `memtrace plan ARGS --json`, expecting success.
fn plan_json(args: &[&str]) -> Value {
    let mut args = [&["plan"], args, &["--json"]].concat();
    args.retain(|a| !a.is_empty());
    let output = memtrace(&args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{args:?}: {}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("plan --json prints JSON")
}

/// Asserts exit status 2 and one line on stderr, `memtrace: ` then `message`.
fn assert_refused(output: &Output, message: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end(), format!("memtrace: {message}"));
    assert_eq!(stdout(output), "", "nothing on stdout");
}

/// Like [`assert_refused`] for a message whose end (serde's position) is not pinned.
fn assert_refused_starting(output: &Output, start: &str) {
    let err = stderr(output);
    assert_eq!(output.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.starts_with(&format!("memtrace: {start}")),
        "{err:?} should start with {start:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn revolve_on_the_hand_chain_is_exact_text() {
    let hand = write("hand.json", HAND);
    let output = memtrace(&["plan", &hand, "--slots", "1", "--schedule"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // One slot: x_0 only; F0 F1 to reach x_2, B2 (the loss), then F0 again for B1.
    // Forward calls 3 (store-all 2); time 1 + 2 + 1 forwards + 4 (the loss's forward)
    // + 10 + 20 + 40 = 78 (store-all 77); the peak is B1's: x_0 1 + x_1 2 + g_2 4 + g_1 2
    // + workspace 64 = 73 KiB under both.
    let expected = format!(
        "\
chain    {hand}: 3 stages, input 1024 bytes, times in us
planner  revolve, 1 slot
kept     x_0 (1 of 3 stage inputs)
         inputs of a

                 revolve  store-all  ratio
forward calls          3          2   1.50
peak           73.00 KiB  73.00 KiB   1.00
peak bytes        74,752     74,752
time (us)             78         77   1.01
snapshots              1          3

peak at operation 6 of 9: B1, stage 1's backward step

schedule (F forward, S store, D drop, B backward step)
  F0 F1 D1 B2 D2 F0 B1 D1 B0
"
    );
    assert_eq!(stdout(&output), expected);
}

#[test]
fn a_budget_at_store_alls_peak_plans_store_all_and_json_has_every_field() {
    let hand = write("hand-budget.json", HAND);
    let report = plan_json(&[&hand, "--budget", "73K", "--schedule"]);
    let store_all = serde_json::json!({
        "kept": [0, 1, 2],
        "forward_calls": 2,
        "forward_calls_per_stage": [1, 1, 0],
        "peak_bytes": 74_752,
        "peak_op": 6,
        "peak_operation": "B1",
        "total_time": 77,
        "max_snapshots": 3,
        "operations": 9
    });
    let expected = serde_json::json!({
        "file": hand,
        "stages": 3,
        "time_unit": "us",
        "input_bytes": 1024,
        "planner": {"name": "budget", "budget_bytes": 74_752, "slots": null, "segments": null},
        "plan": store_all,
        "store_all": store_all,
        "ratios": {"forward_calls": 1.0, "peak_bytes": 1.0, "total_time": 1.0},
        "budget": {"bytes": 74_752, "fits": true, "spare_bytes": 0, "over_bytes": 0},
        "schedule": ["F0", "S1", "F1", "S2", "B2", "D2", "B1", "D1", "B0"]
    });
    assert_eq!(report, expected);
}

#[test]
fn a_budget_below_the_minimum_says_the_minimum_in_bytes_and_units() {
    let hand = write("hand-small.json", HAND);
    assert_refused(
        &memtrace(&["plan", &hand, "--budget", "72.5K"]),
        &format!(
            "--budget 72.50 KiB (74,240 bytes) is below what any plan of {hand} needs: give at \
             least 74,752 bytes (73.00 KiB)"
        ),
    );
}

#[test]
fn a_budget_given_to_another_planner_checks_its_plan() {
    let hand = write("hand-check.json", HAND);
    let report = plan_json(&[&hand, "--planner", "sqrt", "--budget", "70K"]);
    assert_eq!(report["planner"]["segments"], 2, "ceil(sqrt(3))");
    assert_eq!(
        report["budget"],
        serde_json::json!({"bytes": 71_680, "fits": false, "spare_bytes": 0, "over_bytes": 3072})
    );
    let text = stdout(&memtrace(&[
        "plan",
        &hand,
        "--planner",
        "sqrt",
        "--budget",
        "70K",
    ]));
    assert!(
        text.ends_with(
            "budget   70.00 KiB (71,680 bytes): the plan needs 3.00 KiB (3,072 bytes) more\n"
        ),
        "{text}"
    );
}

/// The example chain's costs, as `examples/chain.json` writes them.
fn example_costs() -> ChainCosts {
    const MIB: usize = 1 << 20;
    let mut stages = vec![StageCost {
        output_bytes: 48 * MIB,
        forward_workspace_bytes: 0,
        backward_workspace_bytes: 0,
        forward_time: 150,
        backward_time: 310,
    }];
    stages.extend((0..24).map(|_| StageCost {
        output_bytes: 48 * MIB,
        forward_workspace_bytes: 96 * MIB,
        backward_workspace_bytes: 240 * MIB,
        forward_time: 910,
        backward_time: 1930,
    }));
    stages.push(StageCost {
        output_bytes: 96 * MIB,
        forward_workspace_bytes: 192 * MIB,
        backward_workspace_bytes: 288 * MIB,
        forward_time: 2130,
        backward_time: 4350,
    });
    ChainCosts::new(256 << 10, stages, &AllocatorConfig::default()).expect("a valid chain")
}

/// Asserts that `figures` (a report's `plan` or `store_all`) are `plan`'s.
fn assert_figures(figures: &Value, plan: &Plan, what: &str) {
    let expected = serde_json::json!({
        "kept": plan.kept(),
        "forward_calls": plan.forward_calls(),
        "forward_calls_per_stage": plan.forward_calls_per_stage(),
        "peak_bytes": plan.peak_bytes(),
        "peak_op": plan.peak_op(),
        "peak_operation": plan.schedule()[plan.peak_op()].to_string(),
        "total_time": plan.total_time(),
        "max_snapshots": plan.max_snapshots(),
        "operations": plan.schedule().len(),
    });
    assert_eq!(figures, &expected, "{what}");
}

#[test]
fn the_example_chain_plans_as_the_library_plans_it() {
    let file = example_chain();
    let chain = example_costs();
    let store_all = StoreAll.plan(&chain).unwrap();
    let cases: [(&[&str], Box<dyn Planner>); 6] = [
        (&["--planner", "store-all"], Box::new(StoreAll)),
        (&["--slots", "4"], Box::new(Revolve { slots: 4 })),
        (&["--budget", "700M"], Box::new(Budget { bytes: 700 << 20 })),
        (&["--budget", "1G"], Box::new(Budget { bytes: 1 << 30 })),
        (&["--planner", "sqrt"], Box::new(Sqrt)),
        (
            &["--planner", "uniform", "--segments", "4"],
            Box::new(Uniform::pytorch(4)),
        ),
    ];
    for (args, planner) in cases {
        let plan = planner.plan(&chain).unwrap();
        let report = plan_json(&[&[file.as_str()], args].concat());
        let what = format!("{args:?}");
        assert_eq!(report["stages"], 26, "{what}");
        assert_eq!(report["input_bytes"], 256 << 10, "{what}");
        assert_eq!(report["planner"]["name"], planner.name(), "{what}");
        assert_figures(&report["plan"], &plan, &what);
        assert_figures(&report["store_all"], &store_all, &what);
        let ratio = |a: f64, b: f64| Value::from(a / b);
        assert_eq!(
            report["ratios"]["peak_bytes"],
            ratio(plan.peak_bytes() as f64, store_all.peak_bytes() as f64),
            "{what}"
        );
        assert_eq!(
            report["ratios"]["total_time"],
            ratio(plan.total_time() as f64, store_all.total_time() as f64),
            "{what}"
        );
        assert!(
            plan.peak_bytes() <= store_all.peak_bytes(),
            "{what}: no plan holds more than store-all here"
        );
    }
    // The figures the README shows.
    let budget = plan_json(&[&file, "--budget", "700M"]);
    assert_eq!(budget["plan"]["peak_bytes"], 704_905_216);
    assert_eq!(budget["plan"]["total_time"], 92_540);
    assert_eq!(budget["plan"]["forward_calls"], 45);
    assert_eq!(budget["store_all"]["peak_bytes"], 1_711_538_176);
    assert_eq!(budget["store_all"]["total_time"], 75_100);
    let revolve = plan_json(&[&file, "--slots", "4"]);
    assert_eq!(revolve["plan"]["forward_calls"], 57);
    assert_eq!(revolve["plan"]["peak_bytes"], 654_573_568);
    assert_eq!(revolve["plan"]["total_time"], 103_460);
}

#[test]
fn bad_chain_files_name_the_file_and_the_json_path() {
    let stage = r#"{"output_bytes": 512, "forward_time": 1, "backward_time": 2}"#;
    let cases = [
        (
            "missing",
            format!(
                r#"{{"input_bytes": 0, "stages": [{stage}, {{"output_bytes": 1, "forward_time": 1}}]}}"#
            ),
            "stages[1]: missing field `backward_time`",
        ),
        (
            "negative",
            format!(
                r#"{{"input_bytes": 0, "stages": [{stage}, {{"output_bytes": -5, "forward_time": 1, "backward_time": 1}}]}}"#
            ),
            "stages[1].output_bytes: -5 is negative: a byte count is 0 or more",
        ),
        (
            "unknown",
            r#"{"input_bytes": 0, "stages": [{"output_bytes": 1, "forward_time": 1, "backward_time": 1, "output_byte": 3}]}"#.to_owned(),
            "stages[0].output_byte: unknown field `output_byte`, expected one of `name`, \
             `output_bytes`,",
        ),
        (
            "fraction",
            r#"{"input_bytes": 0, "stages": [{"output_bytes": 1, "forward_time": 0.5, "backward_time": 1}]}"#.to_owned(),
            "stages[0].forward_time: 0.5 is not a whole number below 2^53",
        ),
        (
            "units",
            format!(r#"{{"input_bytes": "3 furlongs", "stages": [{stage}]}}"#),
            "input_bytes: `3 furlongs` is not a byte count",
        ),
        (
            "toplevel",
            format!(r#"{{"input_bytes": 0, "stages": [{stage}], "time_units": "us"}}"#),
            "time_units: unknown field `time_units`, expected one of `time_unit`, `input_bytes`, \
             `stages`",
        ),
        (
            "syntax",
            format!(r#"{{"input_bytes": 0, "stages": [{stage}"#),
            "EOF while parsing",
        ),
        ("notjson", "PK\u{3}\u{4}".to_owned(), "expected value"),
    ];
    for (name, json, message) in cases {
        let path = write(&format!("bad-{name}.json"), &json);
        assert_refused_starting(
            &memtrace(&["plan", &path, "--slots", "2"]),
            &format!("{path}: {message}"),
        );
    }
    let unknown = write(
        "bad-unknown2.json",
        r#"{"input_bytes": 0, "stages": [{"output_bytes": 1, "forward_time": 1, "backward_time": 1, "output_byte": 3}]}"#,
    );
    let err = stderr(&memtrace(&["plan", &unknown, "--slots", "2"]));
    assert!(
        err.contains("unknown field `output_byte`, expected one of"),
        "{err}"
    );
    let empty = write("bad-empty.json", r#"{"input_bytes": 0, "stages": []}"#);
    assert_refused(
        &memtrace(&["plan", &empty, "--slots", "2"]),
        &format!("{empty}: stages: the chain has no stages; give at least one"),
    );
    let absent = scratch("absent.json");
    assert_refused_starting(
        &memtrace(&["plan", absent.to_str().unwrap(), "--slots", "2"]),
        &format!("cannot read the chain file {}: ", absent.display()),
    );
    let segments = write(
        "seg.json",
        &format!(r#"{{"input_bytes": 0, "stages": [{stage}, {stage}]}}"#),
    );
    assert_refused(
        &memtrace(&["plan", &segments, "--planner", "uniform", "--segments", "3"]),
        &format!(
            "{segments}: Uniform needs between 1 and 2 segments for a chain of 2 stages; got 3"
        ),
    );
}

#[test]
fn hostile_sizes_are_refused_before_the_work_they_would_cause() {
    let stage = r#"{"output_bytes":"1M","forward_time":1,"backward_time":2}"#;
    let chain = |stages: usize| {
        format!(
            r#"{{"input_bytes": "1M", "stages": [{}]}}"#,
            vec![stage; stages].join(",")
        )
    };
    let long = write("long.json", &chain(100_001));
    assert_refused_starting(
        &memtrace(&["plan", &long, "--planner", "store-all"]),
        &format!("{long}: stages: more than 100000 stages (the most `memtrace plan` reads)"),
    );
    let most = write("most.json", &chain(100_000));
    assert_refused(
        &memtrace(&["plan", &most, "--slots", "1"]),
        &format!(
            "{most}: revolve with 1 slot needs 4,999,950,000 forward calls for 100,000 stages, \
             more than the 2,000,000 a plan may make here; give --slots 5 or more"
        ),
    );
    assert_refused(
        &memtrace(&["plan", &most, "--budget", "1T"]),
        &format!(
            "{most}: 100,000 stages; the budget planner plans at most 2,048: use --slots N \
             (revolve) or --planner uniform --segments N"
        ),
    );
    let report = plan_json(&[&most, "--slots", "5"]);
    assert_eq!(
        report["plan"]["forward_calls"],
        Revolve::forward_calls(100_000, 5).unwrap()
    );
    let huge = scratch("huge.json");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len((64 << 20) + 1).unwrap();
    assert_refused(
        &memtrace(&["plan", huge.to_str().unwrap(), "--slots", "2"]),
        &format!(
            "{}: the chain file is larger than 64 MiB, the most `memtrace plan` reads",
            huge.display()
        ),
    );
    let overflow = write(
        "overflow.json",
        r#"{"input_bytes": 0, "stages": [{"output_bytes": 9223372036854775807, "forward_time": 1, "backward_time": 1}]}"#,
    );
    assert_refused(
        &memtrace(&["plan", &overflow, "--planner", "store-all"]),
        &format!(
            "{overflow}: the chain's byte counts overflow when added up; check the declared sizes"
        ),
    );
}

#[test]
fn options_that_do_not_name_one_planner_are_refused_before_the_file_is_read() {
    let absent = "no-such-chain.json";
    let cases: [(&[&str], &str); 7] = [
        (&[], "give --budget BYTES (the budget planner), --slots N (revolve) or --planner NAME (see memtrace plan --help)"),
        (&["--budget", "1G", "--slots", "2"], "--budget and --slots select different planners (budget, revolve); give one, or name the planner with --planner (a budget then checks its plan)"),
        (&["--planner", "uniform", "--slots", "2", "--segments", "2"], "--slots is for the revolve planner, not uniform; drop it or give --planner revolve"),
        (&["--slots", "2", "--segments", "2"], "--segments is for the uniform planner, not revolve; drop it or give --planner uniform"),
        (&["--planner", "uniform"], "the uniform planner needs --segments N"),
        (&["--planner", "revolve", "--budget", "1G"], "the revolve planner needs --slots N, the snapshots it may hold"),
        (&["--planner", "budget"], "the budget planner needs --budget BYTES (e.g. --budget 78.5G)"),
    ];
    for (args, message) in cases {
        let args = [&["plan", absent], args].concat();
        assert_refused(&memtrace(&args), message);
    }
    // Values clap reads: one line, exit 2.
    for (args, mentions) in [
        (
            &["plan", absent, "--slots", "0"][..],
            "`0` is not a whole number of 1 or more",
        ),
        (
            &["plan", absent, "--budget=-1"][..],
            "`-1` is not a byte count",
        ),
        (
            &["plan", absent, "--budget", "12 parsecs"][..],
            "is not a byte count",
        ),
        (&["plan", absent, "--planner", "chen"][..], "chen"),
    ] {
        let output = memtrace(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(mentions), "{args:?}: {err}");
    }
}

#[test]
fn help_documents_the_chain_format_and_the_limits() {
    let output = memtrace(&["plan", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = stdout(&output);
    for needle in [
        "Chain file: JSON",
        "output_bytes",
        "forward_workspace_bytes",
        "backward_workspace_bytes",
        "time_unit",
        "\"64MiB\"",
        "at most 100000 stages",
        "examples/chain.json",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
    let top = stdout(&memtrace(&["--help"]));
    assert!(top.contains("plan "), "the command list names plan:\n{top}");
}

#[test]
fn the_example_chain_file_reads() {
    let report = plan_json(&[&example_chain(), "--planner", "store-all"]);
    assert_eq!(report["time_unit"], "us");
    assert_eq!(report["plan"]["forward_calls"], 25);
}
