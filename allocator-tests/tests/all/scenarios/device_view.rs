//! The per-device view: the same answers as the index-taking methods, the index checked once,
//! and `empty_cache` of one device leaving the others alone.

use super::*;
use blockpool::DeviceIndex;
use blockpool::HistorySettings;

fn two_devices() -> CachingAllocator<SimBackend> {
    CachingAllocator::new(SimBackend::new(2, 1 << 30), AllocatorConfig::default())
}

#[test]
fn a_bad_index_is_refused_once_when_the_view_is_made() {
    let alloc = two_devices();
    assert_eq!(
        alloc.device(2).map(|dev| dev.index()),
        Err(Error::InvalidDevice {
            device: DeviceIndex::new(2),
            device_count: 2
        })
    );
    let indices: Vec<usize> = alloc.devices().map(|dev| dev.index().get()).collect();
    assert_eq!(indices, [0, 1], "devices() yields every device in order");
}

#[test]
fn view_answers_as_the_index_taking_methods() {
    let alloc = two_devices();
    alloc
        .record_memory_history(HistorySettings::default())
        .unwrap();
    let dev = alloc.device(1).unwrap();
    let a = dev.allocate(3 * MIB, S0).unwrap();
    assert_eq!(
        a.device(),
        DeviceIndex::new(1),
        "the view allocates on its own device"
    );
    drop(dev.allocate(4096, S1).unwrap());

    let stats = dev.stats();
    assert_eq!(stats.allocated_bytes.all.current, 3 * MIB as i64);
    assert_eq!(stats.allocated_bytes.large_pool.current, 3 * MIB as i64);
    assert_eq!(stats.allocated_bytes.small_pool.peak, 4096);
    assert_eq!(Ok(&stats), alloc.device_stats(1).as_ref(), "typed stats");
    assert_eq!(Ok(dev.memory_stats()), alloc.memory_stats(1), "flat stats");
    assert_eq!(
        dev.memory_stats()["allocated_bytes.large_pool.current"],
        stats.allocated_bytes.large_pool.current,
        "flat keys name the typed fields"
    );
    assert_eq!(Ok(dev.memory_summary()), alloc.memory_summary(1));
    assert_eq!(Ok(dev.history()), alloc.history(1));
    assert_eq!(
        dev.history().len(),
        6,
        "segment_alloc and alloc twice, then free_requested and free_completed"
    );
    assert!(alloc.history(0).unwrap().is_empty(), "device 0 did nothing");
    assert_eq!(dev.mem_get_info().ok(), alloc.mem_get_info(1).ok());
    assert_eq!(
        alloc.device_stats(0).unwrap().allocation.all.allocated,
        0,
        "device 0 did nothing"
    );

    dev.reset_peak_memory_stats();
    assert_eq!(dev.stats().allocated_bytes.small_pool.peak, 0);
    dev.reset_accumulated_memory_stats();
    assert_eq!(dev.stats().num_device_alloc, 0);
    assert_eq!(dev.stats().allocated_bytes.all.current, 3 * MIB as i64);
    drop(a);
}

#[test]
fn raw_pointers_through_a_view_are_checked_against_its_device() {
    let alloc = two_devices();
    let (zero, one) = (alloc.device(0).unwrap(), alloc.device(1).unwrap());
    let p = zero.malloc(4096, S0).unwrap();
    let wrong = Err(Error::WrongDevice {
        ptr: p,
        given: DeviceIndex::new(1),
        actual: DeviceIndex::new(0),
    });
    assert_eq!(one.free(p), wrong);
    assert_eq!(one.record_stream(p, S1), wrong);
    zero.record_stream(p, S1).unwrap();
    zero.free(p).unwrap();
    assert_eq!(
        zero.free(p),
        Err(Error::DoubleFree {
            device: DeviceIndex::new(0),
            ptr: p
        })
    );
    assert_eq!(zero.free(0), Ok(()), "freeing null does nothing");
}

#[test]
fn empty_cache_of_one_device_leaves_the_others() {
    let alloc = two_devices();
    for dev in alloc.devices() {
        drop(dev.allocate(4096, S0).unwrap());
    }
    alloc.device(1).unwrap().empty_cache().unwrap();
    let reserved = |d: usize| alloc.device(d).unwrap().stats().reserved_bytes.all.current;
    assert_eq!(reserved(0), 2 * MIB as i64, "device 0 keeps its cache");
    assert_eq!(reserved(1), 0, "device 1 gave its segment back");
    alloc.empty_cache().unwrap();
    assert_eq!(reserved(0), 0, "empty_cache() empties every device");
}

#[test]
fn memory_fraction_through_a_view_caps_its_device() {
    let alloc = two_devices();
    let dev = alloc.device(1).unwrap();
    assert_eq!(
        dev.set_per_process_memory_fraction(1.5),
        Err(Error::InvalidMemoryFraction { fraction: 1.5 })
    );
    dev.set_per_process_memory_fraction(0.5).unwrap();
    assert!(
        dev.allocate(600 * MIB, S0).is_err(),
        "600 MiB is over half of 1 GiB"
    );
    let other = alloc.device(0).unwrap().allocate(600 * MIB, S0);
    assert!(other.is_ok(), "device 0 is not capped");
}
