//! Protocol 5, the default of Python 3.14's pickle and so of `torch.cuda.memory._dump_snapshot`
//! there (memory_viz's own reader fails on it, pytorch#183842): a snapshot pickled with
//! protocol 5 carries the same opcodes after `PROTO 5`, and must read as the same snapshot,
//! through the file loader memtrace uses as well as from bytes.

use blockpool::trace::file::load_trace;
use blockpool::trace::pytorch::load_pytorch_snapshot_as_snapshot;

use crate::fixtures::{project_snapshot_names, pytorch_snapshot_bytes};

#[test]
fn every_project_snapshot_reads_the_same_as_protocol_5() {
    let dir = std::env::temp_dir().join(format!("blockpool-protocol5-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let mut checked = 0;
    for name in project_snapshot_names() {
        let four = pytorch_snapshot_bytes(&name);
        assert_eq!(four.get(..2), Some(&[0x80, 4][..]), "{name} is protocol 4");
        let mut five = four.clone();
        five[1] = 5;
        let expected =
            load_pytorch_snapshot_as_snapshot(&four).unwrap_or_else(|e| panic!("{name}: {e}"));
        let from_bytes = load_pytorch_snapshot_as_snapshot(&five)
            .unwrap_or_else(|e| panic!("{name} as protocol 5: {e}"));
        assert_eq!(from_bytes, expected, "{name}");
        let path = dir.join(&name);
        std::fs::write(&path, &five).expect("written");
        let from_file = load_trace(&path).unwrap_or_else(|e| panic!("{name} as protocol 5: {e}"));
        assert_eq!(from_file.snapshot, expected, "{name} through load_trace");
        checked += 1;
    }
    assert!(checked >= 8, "{checked} snapshots checked");
    let _ = std::fs::remove_dir_all(&dir);
}
