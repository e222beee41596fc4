//! `memtrace convert ... OUT.parquet`: the dataset's folders and tables, read back with the
//! parquet crate and checked with exact values against what memtrace says of the same file;
//! folders and rank series as partitions; and the refusals, which leave nothing behind.
//! (`scripts/check-parquet.sh` runs the README's SQL on a dataset in DuckDB.)

mod common;

use arrow_array::{Array, RecordBatch, StringArray, UInt32Array, UInt64Array};
use common::{fixture, memtrace, scratch, stderr, stdout};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;
use std::path::{Path, PathBuf};

const NOT_HANMIN: &str = "notHanmin_assignment2-systems_memory_snapshot.pickle";
const BCRAFTON: &str = "bcrafton_assignment2-systems_memory_snapshot.pickle";
const TWO_DEVICES: &str = "made_expandable_two_devices.pickle";

/// Every batch of `table` in partition `rank`.
fn read(dataset: &Path, table: &str, rank: u32) -> Vec<RecordBatch> {
    let path = dataset
        .join(table)
        .join(format!("rank={rank}"))
        .join("part-0.parquet");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a Parquet file")
        .build()
        .expect("a reader")
        .map(|batch| batch.expect("a batch"))
        .collect()
}

/// The values of `column` in every batch, null as `None`, read with `value`.
fn values<A: Array + 'static, T>(
    batches: &[RecordBatch],
    column: &str,
    value: impl Fn(&A, usize) -> T,
) -> Vec<Option<T>> {
    batches
        .iter()
        .flat_map(|b| {
            let array = b.column_by_name(column).expect(column);
            let array = array.as_any().downcast_ref::<A>().expect("its type");
            (0..array.len())
                .map(|i| array.is_valid(i).then(|| value(array, i)))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn u64s(batches: &[RecordBatch], column: &str) -> Vec<Option<u64>> {
    values(batches, column, UInt64Array::value)
}

fn u32s(batches: &[RecordBatch], column: &str) -> Vec<Option<u32>> {
    values(batches, column, UInt32Array::value)
}

fn texts(batches: &[RecordBatch], column: &str) -> Vec<String> {
    values(batches, column, |a: &StringArray, i| a.value(i).to_owned())
        .into_iter()
        .map(|text| text.expect("not null"))
        .collect()
}

fn convert(input: &str, output: &Path) -> String {
    let result = memtrace(&["convert", input, output.to_str().unwrap()]);
    assert!(result.status.success(), "{}", stderr(&result));
    stdout(&result)
}

fn json(args: &[&str]) -> Value {
    let output = memtrace(args);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// A fresh folder in the scratch folder.
fn folder(name: &str) -> PathBuf {
    let dir = scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

#[test]
fn a_snapshot_becomes_rank_0_with_the_peaks_and_sites_memtrace_reports() {
    let dir = folder("one");
    let dataset = dir.join("one.parquet");
    let file = fixture(NOT_HANMIN);
    let said = convert(&file, &dataset);
    assert!(
        said.starts_with(&format!(
            "wrote {} (Parquet dataset): 1 rank, 19,468 events\n",
            dataset.display()
        )),
        "{said}"
    );
    assert!(said.contains("\n  events: 19,468 rows\n"), "{said}");

    let events = read(&dataset, "events", 0);
    assert_eq!(
        u64s(&events, "position"),
        (1..=19_468).map(Some).collect::<Vec<_>>()
    );
    // The 4 annotations the import inserted from external_annotations have no number.
    let numbers = u64s(&events, "number");
    assert_eq!(numbers.iter().filter(|n| n.is_none()).count(), 4);
    assert_eq!(numbers.iter().flatten().max(), Some(&19_463));

    let summary = json(&["summary", &file, "--json"]);
    let device = &summary["devices"][0];
    let peak = |column| u64s(&events, column).into_iter().flatten().max();
    assert_eq!(
        peak("device_allocated"),
        device["peak_allocated"]["bytes"].as_u64()
    );
    assert_eq!(peak("device_allocated"), Some(23_165_567_488));
    let devices = read(&dataset, "devices", 0);
    // The reserved peak is before the first event.
    assert_eq!(
        u64s(&devices, "start_reserved"),
        vec![device["peak_reserved"]["bytes"].as_u64()]
    );
    assert_eq!(u64s(&devices, "events"), vec![Some(19_468)]);

    // The allocations alive at the allocated peak, by site, are `memtrace top --peak`'s.
    let peak_position = u64s(&events, "device_allocated")
        .iter()
        .position(|a| *a == peak("device_allocated"))
        .expect("the peak") as u64
        + 1;
    let allocations = read(&dataset, "allocations", 0);
    let (sizes, sites) = (u64s(&allocations, "size"), texts(&allocations, "site"));
    let (born, freed) = (
        u64s(&allocations, "allocated_at"),
        u64s(&allocations, "freed_at"),
    );
    let mut by_site: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for i in 0..sizes.len() {
        let alive =
            born[i].unwrap_or(0) <= peak_position && freed[i].is_none_or(|f| f > peak_position);
        if alive {
            let entry = by_site.entry(&sites[i]).or_default();
            entry.0 += sizes[i].expect("a size");
            entry.1 += 1;
        }
    }
    let top = json(&["top", &file, "--peak", "--limit", "100000", "--json"]);
    let expected: std::collections::BTreeMap<&str, (u64, u64)> = top["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .map(|s| {
            (
                s["label"].as_str().expect("label"),
                (s["bytes"].as_u64().unwrap(), s["blocks"].as_u64().unwrap()),
            )
        })
        .collect();
    assert_eq!(by_site, expected);
    assert_eq!(
        by_site["<allocated before _record_memory_history was enabled>"],
        (3_990_901_760, 328)
    );

    // Contexts, stacks and frames join: every stack row names a frame and a context.
    let frames = read(&dataset, "frames", 0);
    let frame_count = u32s(&frames, "frame").len() as u32;
    let stacks = read(&dataset, "stacks", 0);
    assert!(u32s(&stacks, "frame")
        .iter()
        .all(|f| f.is_some_and(|f| f < frame_count)));
    let contexts = read(&dataset, "contexts", 0);
    let frames_per_context: u64 = u32s(&contexts, "frames")
        .iter()
        .map(|n| u64::from(n.expect("a count")))
        .sum();
    assert_eq!(frames_per_context, u32s(&stacks, "frame").len() as u64);
    let source = read(&dataset, "source", 0);
    assert_eq!(texts(&source, "path"), vec![file]);
    assert_eq!(texts(&source, "format"), vec!["pytorch"]);
    let settings = read(&dataset, "settings", 0);
    assert!(texts(&settings, "key").contains(&"PYTORCH_CUDA_ALLOC_CONF".to_owned()));
}

#[test]
fn a_rank_series_keeps_its_ranks_and_a_folder_is_numbered_in_name_order() {
    let ranks = folder("series");
    std::fs::copy(fixture(NOT_HANMIN), ranks.join("run-7.pickle")).expect("copy");
    std::fs::copy(fixture(TWO_DEVICES), ranks.join("run-3.pickle")).expect("copy");
    let dataset = folder("series-out").join("ranks.parquet");
    let pattern = ranks.join("run-{rank}.pickle");
    let said = convert(pattern.to_str().unwrap(), &dataset);
    assert!(said.contains("2 ranks, 19,"), "{said}");
    let mut partitions: Vec<String> = std::fs::read_dir(dataset.join("events"))
        .expect("events")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    partitions.sort();
    assert_eq!(partitions, ["rank=3", "rank=7"]);
    // The two-device file's devices, each with its events.
    assert_eq!(
        u32s(&read(&dataset, "devices", 3), "device"),
        [Some(0), Some(1)]
    );

    // Not a rank series: numbered in name order, and `source` says which is which.
    let files = folder("named");
    std::fs::copy(fixture(BCRAFTON), files.join("b.pickle")).expect("copy");
    std::fs::copy(fixture(TWO_DEVICES), files.join("a.pickle")).expect("copy");
    let dataset = folder("named-out").join("files.parquet");
    convert(files.to_str().unwrap(), &dataset);
    let source = |rank| texts(&read(&dataset, "source", rank), "path");
    assert!(source(0)[0].ends_with("a.pickle"), "{:?}", source(0));
    assert!(source(1)[0].ends_with("b.pickle"), "{:?}", source(1));
}

#[test]
fn refusals_say_why_and_leave_nothing_behind() {
    let dir = folder("refusals");
    let file = fixture(TWO_DEVICES);

    // An existing output is never written into.
    let taken = dir.join("taken.parquet");
    std::fs::create_dir_all(&taken).expect("folder");
    std::fs::write(taken.join("keep.txt"), "mine").expect("file");
    let result = memtrace(&["convert", &file, taken.to_str().unwrap()]);
    assert_eq!(result.status.code(), Some(2));
    assert!(
        stderr(&result).contains("exists; remove it or choose another name"),
        "{}",
        stderr(&result)
    );
    assert_eq!(
        std::fs::read_to_string(taken.join("keep.txt")).unwrap(),
        "mine"
    );

    // A folder with a bad file: no dataset, and no partial one beside it.
    let mixed = folder("mixed");
    std::fs::copy(&file, mixed.join("rank-0.pickle")).expect("copy");
    std::fs::write(mixed.join("rank-1.pickle"), b"\x80\x04not a pickle").expect("file");
    let out = dir.join("mixed.parquet");
    let result = memtrace(&["convert", mixed.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(result.status.code(), Some(2));
    assert!(
        stderr(&result).contains("rank-1.pickle"),
        "{}",
        stderr(&result)
    );
    assert!(!out.exists());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // Several files go only to Parquet.
    let result = memtrace(&[
        "convert",
        mixed.to_str().unwrap(),
        dir.join("all.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(result.status.code(), Some(2));
    assert!(
        stderr(&result).contains("converts only to a Parquet dataset"),
        "{}",
        stderr(&result)
    );

    // `--to parquet` names the format whatever the output's name.
    let named = dir.join("dataset");
    let result = memtrace(&["convert", &file, named.to_str().unwrap(), "--to", "parquet"]);
    assert!(result.status.success(), "{}", stderr(&result));
    assert!(named.join("events/rank=0/part-0.parquet").is_file());
}
