//! Every PyTorch fixture through every format and back, exactly; and fixture bytes mutated at
//! random through the whole import path (pickle reader, snapshot import, validation, state
//! rebuild, every writer): never a panic, a typed error or a valid result.

use crate::fixtures::{external_snapshot_names, project_snapshot_names, pytorch_snapshot_bytes};
use blockpool::trace::pytorch::{load_pytorch_snapshot_as_snapshot, write_pytorch_snapshot};
use blockpool::trace::{jsonl, perfetto, rmm, Snapshot};
use proptest::prelude::*;

fn through_jsonl(snapshot: &Snapshot) -> Snapshot {
    let mut bytes = Vec::new();
    jsonl::write_snapshot(snapshot, &mut bytes).expect("writes");
    let (again, report) = jsonl::read_snapshot(bytes.as_slice()).expect("reads back");
    assert!(report.complete, "a written file ends with its end line");
    again
}

fn through_pickle(snapshot: &Snapshot) -> Snapshot {
    let mut bytes = Vec::new();
    write_pytorch_snapshot(snapshot, &mut bytes).expect("writes");
    load_pytorch_snapshot_as_snapshot(&bytes).expect("reads back")
}

#[test]
fn every_project_fixture_survives_jsonl_then_pickle_exactly() {
    let names = project_snapshot_names();
    assert_eq!(names.len(), 8, "{names:?}");
    check_round_trips(&names);
}

#[test]
#[ignore = "external suite: needs BLOCKPOOL_FIXTURES=../shared/fixtures (see README, Tests)"]
fn external_fixtures_survive_jsonl_then_pickle_exactly() {
    check_round_trips(&external_snapshot_names());
}

/// Each snapshot named goes through JSON Lines and pickle, both ways round, and comes back
/// exactly.
fn check_round_trips(names: &[String]) {
    for name in names {
        let original = load_pytorch_snapshot_as_snapshot(&pytorch_snapshot_bytes(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        original
            .validate()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let via_jsonl = through_jsonl(&original);
        assert_eq!(via_jsonl, original, "{name}: fixture -> JSONL -> ours");
        let via_both = through_pickle(&via_jsonl);
        assert_eq!(
            via_both, original,
            "{name}: fixture -> JSONL -> pickle -> ours"
        );
        // And the other way round.
        assert_eq!(
            through_jsonl(&through_pickle(&original)),
            original,
            "{name}"
        );
    }
}

/// Every path a file's content takes through `memtrace info`/`convert`: nothing may panic.
fn exercise(bytes: &[u8]) {
    let Ok(snapshot) = load_pytorch_snapshot_as_snapshot(bytes) else {
        return;
    };
    if snapshot.validate().is_err() {
        return;
    }
    for device in snapshot.devices() {
        let events = snapshot.device_events(device).count();
        let _ = snapshot.state_at(device, 0);
        let _ = snapshot.state_at(device, events / 2);
        let _ = perfetto::memory_timeline(&snapshot, device);
        let _ = perfetto::annotation_intervals(&snapshot, device);
    }
    let mut sink = Vec::new();
    let _ = jsonl::write_snapshot(&snapshot, &mut sink);
    let _ = write_pytorch_snapshot(&snapshot, std::io::sink());
    let _ = perfetto::write_perfetto(&snapshot, std::io::sink());
    let _ = rmm::write_rmm_csv(&rmm::snapshot_to_rmm(&snapshot), std::io::sink());
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..9))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Remove { at, len }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn apply(bytes: &mut Vec<u8>, mutation: &Mutation) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    match mutation {
        Mutation::Flip { at, bit } => bytes[at % n] ^= 1 << bit,
        Mutation::Set { at, byte } => bytes[at % n] = *byte,
        Mutation::Insert { at, bytes: new } => {
            let at = at % (n + 1);
            bytes.splice(at..at, new.iter().copied());
        }
        Mutation::Remove { at, len } => {
            let at = at % n;
            bytes.drain(at..(at + len).min(n));
        }
        Mutation::Truncate { at } => bytes.truncate(at % n),
    }
}

/// Small fixtures, one of each schema: the mutations reach every part of a file.
const SMALL_FIXTURES: [&str; 5] = [
    "made_empty_snapshot.pickle",
    "made_expandable_two_devices.pickle",
    "Yiyi_LLM-inference_oom_snapshot.pickle",
    "made_segment_list.pickle",
    "made_four_device_traces_without_times.pickle",
];

/// The small fixtures' bytes, read once.
fn small_fixtures() -> &'static [Vec<u8>] {
    static FIXTURES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    FIXTURES.get_or_init(|| {
        SMALL_FIXTURES
            .iter()
            .map(|name| pytorch_snapshot_bytes(name))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn mutated_fixtures_never_panic_anywhere_in_the_pipeline(
        file in 0..SMALL_FIXTURES.len(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let mut bytes = small_fixtures()[file].clone();
        for m in &mutations {
            apply(&mut bytes, m);
        }
        exercise(&bytes);
    }

    #[test]
    fn mutated_jsonl_never_panics_anywhere_in_the_pipeline(
        file in 0..SMALL_FIXTURES.len(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let snapshot = load_pytorch_snapshot_as_snapshot(&small_fixtures()[file]).expect("loads");
        let mut bytes = Vec::new();
        jsonl::write_snapshot(&snapshot, &mut bytes).expect("writes");
        for m in &mutations {
            apply(&mut bytes, m);
        }
        if let Ok((snapshot, _)) = jsonl::read_snapshot(bytes.as_slice()) {
            let mut pickle = Vec::new();
            if write_pytorch_snapshot(&snapshot, &mut pickle).is_ok() {
                exercise(&pickle);
            }
        }
    }
}
