//! Tests of the writer, one module per kind of evidence.
//!
//! * `exact`: byte-exact against bytes CPython 3.11's `pickle.dumps(obj, protocol=4)` gave,
//!   hard-coded as hex.
//! * `cpython`: byte-exact against `python3` run now, for values too large to hard-code.
//! * `snapshot`: a PyTorch-snapshot-shaped value loads under an unpickler that refuses every
//!   global, shared frames cost two bytes a reference, `write_to` streams.
//! * `roundtrip`: against the crate's reader, including a property test over random values
//!   with random sharing.
//!
//! Tests that run `python3` need it on `PATH` and fail, naming it, when it is missing; they do
//! not skip.

mod cpython;
mod exact;
mod roundtrip;
mod snapshot;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

use super::super::Value;

/// An `int`.
fn int(i: i64) -> Value {
    Value::Int(i)
}

/// A `str`, in its own `Arc`.
fn s(text: &str) -> Value {
    Value::Str(text.into())
}

/// A `bytes`, in its own `Arc`.
fn bytes(data: &[u8]) -> Value {
    Value::Bytes(data.into())
}

/// A `list`.
fn list(items: Vec<Value>) -> Value {
    Value::List(Arc::new(items))
}

/// A `tuple`.
fn tuple(items: Vec<Value>) -> Value {
    Value::Tuple(Arc::new(items))
}

/// A `dict`.
fn dict(pairs: Vec<(Value, Value)>) -> Value {
    Value::Dict(Arc::new(pairs))
}

/// A `set`.
fn set(items: Vec<Value>) -> Value {
    Value::Set(Arc::new(items))
}

/// An integer as a `BigInt` of 16 bytes, more than most need, so the writer must trim it.
fn big(i: i128) -> Value {
    Value::BigInt(i.to_le_bytes().to_vec().into())
}

/// Bytes from lowercase hex.
fn unhex(hex: &str) -> Vec<u8> {
    assert!(hex.len() % 2 == 0, "odd-length hex {hex:?}");
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("test hex is valid"))
        .collect()
}

/// Runs `python3 -c script` with `stdin`, returns its stdout; panics with its stderr when it
/// fails, and with a clear message when `python3` cannot be started.
fn python(script: &str, stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| {
            panic!("this test needs python3 on PATH to compare with CPython's pickle: {err}")
        });
    let mut child_stdin = child.stdin.take().expect("stdin was piped");
    let input = stdin.to_vec();
    // Feed stdin from another thread so a large output cannot deadlock against it.
    let feeder = std::thread::spawn(move || child_stdin.write_all(&input));
    let output = child.wait_with_output().expect("python3 ran");
    let fed = feeder.join().expect("stdin feeder did not panic");
    assert!(
        output.status.success(),
        "python3 failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    fed.expect("python3 read all of stdin");
    output.stdout
}

/// `pickle.dumps(eval(expr), protocol=4)` for each expression, from one `python3` run.
fn cpython_pickles(exprs: &[&str]) -> Vec<Vec<u8>> {
    let script = r#"
import pickle, struct, sys
for expr in sys.argv[1:]:
    data = pickle.dumps(eval(expr), protocol=4)
    sys.stdout.buffer.write(struct.pack("<Q", len(data)) + data)
"#;
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(exprs)
        .output();
    let output = output.unwrap_or_else(|err| {
        panic!("this test needs python3 on PATH to compare with CPython's pickle: {err}")
    });
    assert!(
        output.status.success(),
        "python3 failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut rest = output.stdout.as_slice();
    let mut pickles = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_at(8);
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let (pickle, tail) = tail.split_at(len);
        pickles.push(pickle.to_vec());
        rest = tail;
    }
    assert_eq!(
        pickles.len(),
        exprs.len(),
        "python3 returned one pickle per expression"
    );
    pickles
}

/// Where two byte strings first differ, for assertion messages.
fn first_difference(ours: &[u8], theirs: &[u8]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let window = |b: &[u8]| {
        let from = at.saturating_sub(8);
        b[from..(at + 8).min(b.len())]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    format!(
        "lengths {} (ours) and {} (CPython), first difference at byte {at}: ours ..{}.., CPython ..{}..",
        ours.len(),
        theirs.len(),
        window(ours),
        window(theirs)
    )
}
