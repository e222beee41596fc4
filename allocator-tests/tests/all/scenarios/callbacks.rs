//! Free-memory callbacks: when they run, what they may do, and the cache search after them.

use super::*;
use blockpool::DeviceIndex;

#[test]
fn free_memory_callbacks_run_on_a_cache_miss_and_may_free_allocations() {
    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    let hoard: Arc<Mutex<Option<Allocation<SimBackend>>>> =
        Arc::new(Mutex::new(Some(alloc.allocate(0, 40 * MIB, S0).unwrap())));
    let calls = Arc::new(Mutex::new(0));
    {
        let (hoard, calls) = (Arc::clone(&hoard), Arc::clone(&calls));
        alloc.add_free_memory_callback(Box::new(move || {
            *calls.lock().unwrap() += 1;
            hoard.lock().unwrap().take().is_some()
        }));
    }
    let a = alloc
        .allocate(0, 40 * MIB, S0)
        .expect("the callback freed the hoard");
    assert_eq!(
        a.ptr(),
        BASE,
        "the freed block is found in the cache after the callbacks"
    );
    assert_eq!(*calls.lock().unwrap(), 1);
    assert_eq!(
        stat(&alloc, "num_device_alloc"),
        1,
        "no new segment was needed"
    );
    drop(a);
    let _b = alloc.allocate(0, 40 * MIB, S0).unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "a cache hit does not run the callbacks"
    );
    valid(&alloc, &sim);
}

#[test]
fn callbacks_may_register_callbacks_and_allocate_without_deadlock() {
    let (sim, alloc) = setup(64 * MIB, AllocatorConfig::default());
    let calls = Arc::new(Mutex::new(0));
    {
        let (inner, calls) = (alloc.clone(), Arc::clone(&calls));
        alloc.add_free_memory_callback(Box::new(move || {
            *calls.lock().unwrap() += 1;
            inner.add_free_memory_callback(Box::new(|| false));
            // An allocation from inside a callback does not run the callbacks again.
            drop(inner.allocate(0, 30 * MIB, S1).unwrap());
            false
        }));
    }
    let a = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(*calls.lock().unwrap(), 1);
    drop(a);
    valid(&alloc, &sim);
}

#[test]
fn after_callbacks_that_freed_nothing_the_cache_is_not_searched_again() {
    let (sim, alloc) = setup(1 << 30, AllocatorConfig::default());
    let a = alloc.allocate(0, 30 * MIB, S0).unwrap();
    a.record_stream(S1).unwrap();
    drop(a);
    {
        let sim = sim.clone();
        alloc.add_free_memory_callback(Box::new(move || {
            // The side stream finishes while the callbacks run; as in PyTorch, its deferred
            // free is only noticed at the next allocation.
            sim.complete_stream(DeviceIndex::new(0), S1).unwrap();
            false
        }));
    }
    let b = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(
        b.ptr(),
        BASE + (30 << 20),
        "a new 30 MiB segment after the first, as PyTorch would allocate"
    );
    assert_eq!(stat(&alloc, "num_device_alloc"), 2);
    let c = alloc.allocate(0, 30 * MIB, S0).unwrap();
    assert_eq!(
        c.ptr(),
        BASE,
        "the deferred block is reused at the next allocation"
    );
    drop((b, c));
    valid(&alloc, &sim);
}
