//! Compressed trace files that decompress to far more than real traces do (gzip bombs of
//! valid content): each format is read only up to its decompression limit
//! (`ImportLimits::max_decompressed_bytes`), refused there with an error that names the limit
//! and the variable that raises it, in memory that does not grow with what was decompressed;
//! and a file of blank lines is read at the speed of decompression.
#![cfg(feature = "trace-files")]

mod common;

use blockpool::trace::file::{load_trace_with, LoadedTrace, TraceFileError};
use blockpool::trace::ImportLimits;
use common::{gzip, measure, write_file, MIB, SERIAL};

/// `head`, then `member` decompressed `times` times: gzip members concatenate, so a file of
/// `times` copies of one small member decompresses to `times` times its content.
fn bomb(head: &[u8], member: &[u8], times: usize) -> Vec<u8> {
    let mut bytes = gzip(head);
    let member = gzip(member);
    for _ in 0..times {
        bytes.extend_from_slice(&member);
    }
    bytes
}

/// Limits of 10 times the file's size, at least 1 MiB.
fn tight() -> ImportLimits {
    let mut limits = ImportLimits::default();
    limits.max_decompression_ratio = 10;
    limits.min_decompressed_bytes = MIB as u64;
    limits
}

fn malformed(result: Result<LoadedTrace, TraceFileError>) -> String {
    match result {
        Err(TraceFileError::Malformed { message, .. }) => message,
        Err(other) => panic!("expected a malformed-file error, got {other}"),
        Ok(_) => panic!("the bomb was read whole"),
    }
}

#[test]
fn every_format_is_cut_at_its_decompression_limit_naming_the_variable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 64 MiB each, in well under 1 MiB of gzip.
    let jsonl = bomb(b"{\"blockpool_trace\":1}\n", &vec![b'\n'; MIB], 64);
    let rmm_row =
        b"1,15:47:02.841961,allocate,0x1000,4096,0\n1,15:47:02.841977,free,0x1000,4096,0\n";
    let rmm = bomb(
        b"Thread,Time,Action,Pointer,Size,Stream\n",
        &rmm_row.repeat(MIB / rmm_row.len()),
        64,
    );
    // PROTO 4, then None pushed and popped again and again.
    let pickle = bomb(b"\x80\x04", &b"N0".repeat(MIB / 2), 64);
    for (name, bytes) in [
        ("bomb.jsonl.gz", jsonl),
        ("bomb.csv.gz", rmm),
        ("bomb.pickle.gz", pickle),
    ] {
        assert!(bytes.len() < MIB, "{name}: {} bytes", bytes.len());
        let path = write_file(name, &bytes);
        let cost = measure(|| load_trace_with(&path, &tight()));
        let message = malformed(cost.result);
        let limit = tight().max_decompressed_bytes(bytes.len() as u64);
        assert!(
            message.contains(&format!(
                "its {} compressed bytes decompress to more than {limit} bytes, the limit for \
                 a compressed trace (10 times its size, at least 1048576 bytes)",
                bytes.len()
            )) && message
                .contains("raise the ratio with BLOCKPOOL_MAX_DECOMPRESSION_RATIO=<ratio>"),
            "{name}: {message}"
        );
        assert!(
            cost.peak_bytes < 16 * MIB,
            "{name}: refusing took {} MiB at peak",
            cost.peak_bytes / MIB
        );
    }
}

#[test]
fn a_raised_ratio_reads_the_file_and_blank_lines_are_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 32 MiB of blank lines, then one event: line 2 + 32 Mi.
    let mut jsonl = bomb(b"{\"blockpool_trace\":1}\n", &vec![b'\n'; MIB], 32);
    jsonl.extend_from_slice(&gzip(
        b"{\"event\":\"alloc\",\"device\":0,\"addr\":4096,\"size\":512,\"time_us\":1}\n\n \n",
    ));
    let path = write_file("blank-then-event.jsonl.gz", &jsonl);
    let mut limits = tight();
    limits.max_decompression_ratio = 1_000_000;
    let cost = measure(|| load_trace_with(&path, &limits));
    let trace = cost.result.expect("under a raised ratio it loads");
    assert_eq!(trace.snapshot.events.len(), 1);
    assert!(
        cost.peak_bytes < 16 * MIB,
        "{} MiB at peak",
        cost.peak_bytes / MIB
    );
    // A malformed line after the blank ones is numbered as an editor numbers it.
    let mut bad = bomb(b"{\"blockpool_trace\":1}\n", &vec![b'\n'; 1000], 3);
    bad.extend_from_slice(&gzip(b"{not json\n"));
    let path = write_file("blank-then-bad.jsonl.gz", &bad);
    let message = malformed(load_trace_with(&path, &limits));
    assert!(message.starts_with("line 3002: "), "{message}");
}

#[test]
fn a_few_kilobytes_of_gzip_pushing_millions_of_values_are_refused_in_proportion() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // PROTO 4, an empty list, then MARK, 1 Mi `None`s, APPENDS, 8 times: 8 Mi values.
    let mut member = vec![b'('];
    member.extend(std::iter::repeat_n(b'N', MIB));
    member.push(b'e');
    let bytes = bomb(b"\x80\x04]", &member, 8);
    assert!(bytes.len() < 32 * 1024, "{} bytes", bytes.len());
    let path = write_file("nones.pickle.gz", &bytes);
    let mut limits = ImportLimits::default();
    limits.min_values = 1 << 20;
    let cost = measure(|| load_trace_with(&path, &limits));
    let message = malformed(cost.result);
    let limit = limits.max_pickle_values(bytes.len() as u64);
    assert!(
        message.starts_with(&format!(
            "its {} bytes push more than {limit} values by byte ",
            bytes.len()
        )) && message.contains("(100 values per byte of the file, at least 1048576)")
            && message.contains("raise it with BLOCKPOOL_MAX_VALUES_PER_BYTE=<values>"),
        "{message}"
    );
    assert!(
        cost.peak_bytes < 64 * MIB,
        "refusing took {} MiB at peak",
        cost.peak_bytes / MIB
    );
    // Raised, the same file reads as far as its content allows (a list is no snapshot).
    limits.max_values_per_byte = 10_000;
    let message = malformed(load_trace_with(&path, &limits));
    assert!(!message.contains("values per byte"), "{message}");
}

#[test]
fn the_default_ratio_lets_real_compression_through() {
    // The most compressed real snapshot seen compresses 35 times; JSON Lines traces less
    // than 50 times. The default leaves room for both, beyond its 1 GiB floor.
    let limits = ImportLimits::default();
    assert!(limits.max_decompression_ratio >= 100);
    assert_eq!(limits.max_decompressed_bytes(100 << 20), 20_000 << 20);
    assert_eq!(limits.max_decompressed_bytes(0), 1 << 30);
    assert_eq!(limits.max_pickle_values(1 << 20), 100 << 20);
    assert_eq!(limits.max_pickle_values(1000), 16 << 20);
}
