//! Frame lines as real files write them: any integer reads, and one that is no line number
//! (PyTorch's 2^64 - 1 for C++ frames, -1, wider ints) is the unknown line.

use std::sync::Arc;

use super::interop_tests::{dict, int, list, s};
use super::{load_pytorch_snapshot_as_snapshot, snapshot_from_pytorch_value};
use crate::trace::pickle::Value;

/// A snapshot of one `alloc` trace entry with `frames`.
fn pytorch_file_with_frames(frames: Value) -> Value {
    let entry = dict(vec![
        ("action", s("alloc")),
        ("addr", int(4096)),
        ("size", int(512)),
        ("stream", int(0)),
        ("time_us", int(1)),
        ("frames", frames),
    ]);
    dict(vec![
        ("segments", list(Vec::new())),
        ("device_traces", list(vec![list(vec![entry])])),
    ])
}

/// A PyTorch nightly writes C++ frames without a line as 2^64 - 1 (a `LONG1` in the pickle);
/// other writers -1. Neither refuses the file: both are the unknown line, 0, shown as `?`.
#[test]
fn frames_without_a_line_read_as_unknown_instead_of_refusing_the_file() {
    let frame = |name: &str, line: Value| {
        dict(vec![("name", s(name)), ("filename", s("")), ("line", line)])
    };
    let u64_max = Value::BigInt(Arc::from(
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0][..],
    ));
    let wider = Value::BigInt(Arc::from(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 1][..]));
    let frames = list(vec![
        frame("c10::cuda::CUDACachingAllocator::malloc", u64_max),
        frame("at::empty", int(-1)),
        frame("at::native::huge", wider),
        frame("forward", int(4_294_967_296)),
        frame("step", int(7)),
    ]);
    let bytes = crate::trace::pickle::write(&pytorch_file_with_frames(frames));
    let snapshot = load_pytorch_snapshot_as_snapshot(&bytes).expect("the file reads");
    let lines: Vec<(String, u32, String)> = snapshot
        .contexts
        .iter()
        .next()
        .expect("the frames' context")
        .1
        .frames
        .iter()
        .map(|f| (f.name.to_string(), f.line, f.line_text().to_string()))
        .collect();
    assert_eq!(
        lines,
        [
            (
                "c10::cuda::CUDACachingAllocator::malloc".to_owned(),
                0,
                "?".to_owned()
            ),
            ("at::empty".to_owned(), 0, "?".to_owned()),
            ("at::native::huge".to_owned(), 0, "?".to_owned()),
            ("forward".to_owned(), 0, "?".to_owned()),
            ("step".to_owned(), 7, "7".to_owned()),
        ]
    );
    let line = list(vec![dict(vec![
        ("name", s("f")),
        ("filename", s("a.py")),
        ("line", s("12")),
    ])]);
    let error = snapshot_from_pytorch_value(&pytorch_file_with_frames(line)).unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with(".line: expected an int, found str"),
        "a line that is no int at all is still refused: {error}"
    );
}
