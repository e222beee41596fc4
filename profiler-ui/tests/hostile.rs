//! memtrace on small hostile inputs: work that grows with the file's content, not with what it
//! names. The library's tests (tests/hostile_files.rs) bound memory per case; these run the
//! binary where a command's own loops matter.

mod common;

use common::{memtrace, scratch};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// A JSON Lines trace of `events` alloc/free pairs spread round-robin over `devices` devices.
fn spread_over_devices(name: &str, events: usize, devices: usize) -> String {
    let mut text = String::from("{\"blockpool_trace\":1}\n");
    for pair in 0..events / 2 {
        let device = pair % devices;
        let addr = 4096 * (1 + pair / devices);
        let t = 2 * pair;
        let _ = writeln!(
            text,
            "{{\"event\":\"alloc\",\"device\":{device},\"addr\":{addr},\"size\":512,\"time_us\":{t}}}\n\
             {{\"event\":\"free_completed\",\"device\":{device},\"addr\":{addr},\"size\":512,\"time_us\":{}}}",
            t + 1
        );
    }
    let path = scratch(name);
    std::fs::write(&path, text).expect("write the trace");
    path.to_string_lossy().into_owned()
}

/// How long `memtrace ARGS` takes; it must succeed.
fn timed(args: &[&str]) -> Duration {
    let began = Instant::now();
    let out = memtrace(args);
    let elapsed = began.elapsed();
    assert!(
        out.status.success(),
        "memtrace {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

#[test]
fn info_over_2000_devices_takes_about_as_long_as_over_one() {
    let one = spread_over_devices("one-device.jsonl", 200_000, 1);
    let many = spread_over_devices("many-devices.jsonl", 200_000, 2_000);
    let out = memtrace(&["info", &many]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("\ndevice ").count(),
        2_000,
        "every device is reported"
    );
    let (one, many) = (timed(&["info", &one]), timed(&["info", &many]));
    // Reading the file dominates; a loop of devices times events would be 2,000 times one.
    assert!(
        many < one * 4 + Duration::from_secs(1),
        "info over 2,000 devices took {many:?}, over one device {one:?}"
    );
}
