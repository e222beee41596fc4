//! Statistics: peak and accumulated resets, the `memory_summary` table.

use super::*;

#[test]
fn peak_and_accumulated_stats_reset_as_pytorch_does() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 4096, S0).unwrap();
    drop(alloc.allocate(0, 8192, S0).unwrap());
    assert_eq!(stat(&alloc, "allocated_bytes.all.peak"), 12288);
    alloc.reset_peak_memory_stats(0).unwrap();
    assert_eq!(stat(&alloc, "allocated_bytes.all.peak"), 4096);
    assert_eq!(stat(&alloc, "allocated_bytes.all.allocated"), 12288);
    alloc.reset_accumulated_memory_stats(0).unwrap();
    assert_eq!(stat(&alloc, "allocated_bytes.all.allocated"), 0);
    assert_eq!(stat(&alloc, "num_device_alloc"), 0);
    assert_eq!(
        stat(&alloc, "allocated_bytes.all.current"),
        4096,
        "current is kept"
    );
    drop(a);
    assert_eq!(stat(&alloc, "allocated_bytes.all.freed"), 4096);
}

#[test]
fn memory_summary_reports_the_device_table() {
    let (_sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let _a = alloc.allocate(0, 4096, S0).unwrap();
    let summary = alloc.memory_summary(0).unwrap();
    let line = summary
        .lines()
        .find(|l| l.starts_with("| Allocated memory"))
        .expect("an Allocated memory row");
    assert_eq!(
        line,
        "| Allocated memory      |   4096 B   |   4096 B   |   4096 B   |      0 B   |"
    );
    assert!(matches!(
        alloc.memory_summary(1),
        Err(Error::InvalidDevice { .. })
    ));
}
