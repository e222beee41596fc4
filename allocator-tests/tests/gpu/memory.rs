//! The CUDA backend under the caching allocator: real segments are allocated, cached, reused
//! and returned; out-of-memory under a memory fraction recovers; pinned memory round-trips;
//! threads share a device whose lock is released while `cuMemAlloc` runs.

use std::thread;

use blockpool::cuda::DeviceBuffer;
use blockpool::introspect::Introspect;
use blockpool::CudaBackend;
use blockpool::{AllocatorConfig, Backend, StreamId};

use crate::{gpu_allocator, gpu_allocator_with, gpu_backend, MIB};
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn backend_reports_the_device_and_its_memory() {
    let backend = gpu_backend();
    assert!(backend.device_count() >= 1);
    let name = backend.device_name(D0).unwrap();
    let (major, minor) = backend.compute_capability(D0).unwrap();
    let info = backend.mem_get_info(D0).unwrap();
    println!(
        "device 0: {name}, compute capability {major}.{minor}, {} MiB total, {} MiB free, driver {}",
        info.total_bytes / MIB,
        info.free_bytes / MIB,
        backend.driver_version()
    );
    assert!(!name.is_empty(), "the device has a name");
    assert!(
        major >= 3,
        "compute capability {major}.{minor} is not a CUDA GPU's"
    );
    assert_eq!(info.total_bytes, backend.total_memory_bytes(D0).unwrap());
    assert!(info.free_bytes <= info.total_bytes);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn freed_blocks_are_reused_without_a_device_call() {
    let alloc = gpu_allocator();
    let a = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    let ptr = a.ptr();
    assert_ne!(ptr, 0, "real device memory has an address");
    assert_eq!(ptr % 512, 0, "blocks are 512-byte aligned");
    assert_eq!(alloc.backend().segment_count(D0).unwrap(), 1);
    assert_eq!(
        alloc.backend().allocated_bytes(D0).unwrap(),
        2 * MIB,
        "one small segment"
    );
    drop(a);
    let b = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    assert_eq!(b.ptr(), ptr, "the cached block is handed out again");
    let big = alloc.allocate(0, 64 * MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(alloc.backend().segment_count(D0).unwrap(), 2);
    drop((b, big));
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(
        stats["num_device_alloc"], 2,
        "only two cuMemAlloc calls: {stats:?}"
    );
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.backend().segment_count(D0).unwrap(), 0);
    assert_eq!(alloc.backend().allocated_bytes(D0).unwrap(), 0);
    alloc.check_invariants(D0).unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn empty_cache_returns_memory_to_the_driver() {
    let alloc = gpu_allocator();
    const SIZE: usize = 512 * MIB;
    // Let the context's own lazy allocations happen first.
    drop(alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap());
    alloc.empty_cache().unwrap();
    let before = alloc.mem_get_info(0).unwrap().free_bytes;
    drop(alloc.allocate(0, SIZE, StreamId::DEFAULT).unwrap());
    let cached = alloc.mem_get_info(0).unwrap().free_bytes;
    assert!(
        cached + SIZE <= before + 16 * MIB,
        "the freed block stays cached: free went from {before} to {cached}"
    );
    alloc.empty_cache().unwrap();
    let after = alloc.mem_get_info(0).unwrap().free_bytes;
    assert!(
        after >= cached + SIZE - 16 * MIB,
        "empty_cache gave {SIZE} bytes back: free went from {cached} to {after}"
    );
    assert_eq!(
        alloc.memory_stats(0).unwrap()["reserved_bytes.all.current"],
        0
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn out_of_memory_under_a_memory_fraction_recovers() {
    let alloc = gpu_allocator();
    let total = alloc.mem_get_info(0).unwrap().total_bytes;
    // A cap of 1 GiB.
    alloc
        .set_per_process_memory_fraction((1024 * MIB) as f64 / total as f64, D0)
        .unwrap();
    let a = alloc.allocate(0, 600 * MIB, StreamId::DEFAULT).unwrap();
    let err = alloc.allocate(0, 600 * MIB, StreamId::DEFAULT).unwrap_err();
    assert!(
        matches!(err, blockpool::Error::OutOfMemory(_)),
        "two 600 MiB blocks do not fit under 1 GiB: {err:?}"
    );
    println!("refused as expected: {err}");
    assert_eq!(alloc.memory_stats(0).unwrap()["num_ooms"], 1);
    drop(a);
    // The cached 600 MiB segment cannot serve 800 MiB: it is released and the request retried.
    let b = alloc.allocate(0, 800 * MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(b.size(), 800 * MIB);
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(
        stats["num_device_free"], 1,
        "the cached segment went back: {stats:?}"
    );
    assert_eq!(alloc.backend().allocated_bytes(D0).unwrap(), 800 * MIB);
    drop(b);
    alloc.empty_cache().unwrap();
    alloc.check_invariants(D0).unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn pinned_host_memory_round_trips_through_the_device() {
    let alloc = gpu_allocator();
    let backend = alloc.backend();
    let stream = backend.context(D0).unwrap().new_stream().unwrap();
    const LEN: usize = 1 << 20;
    let bytes = LEN * std::mem::size_of::<u32>();
    let src_ptr = backend.alloc_host(bytes).unwrap();
    let dst_ptr = backend.alloc_host(bytes).unwrap();
    assert_eq!(backend.host_allocated_bytes(), 2 * bytes);
    {
        // SAFETY: each pointer is `bytes` of live pinned memory from `alloc_host`, suitably
        // aligned for u32 (page-aligned), used only through these two slices, which end
        // before the memory is freed below.
        let (src, dst) = unsafe {
            (
                std::slice::from_raw_parts_mut(src_ptr as *mut u32, LEN),
                std::slice::from_raw_parts_mut(dst_ptr as *mut u32, LEN),
            )
        };
        for (i, x) in src.iter_mut().enumerate() {
            *x = (i as u32).wrapping_mul(2_654_435_761);
        }
        dst.fill(0);
        let mut buf = DeviceBuffer::<u32>::alloc_zeros(&alloc, D0, LEN, &stream).unwrap();
        stream.memcpy_htod(&*src, &mut buf).unwrap();
        stream.memcpy_dtoh(&buf, dst).unwrap();
        stream.synchronize().unwrap();
        assert!(src == dst, "the pinned copy came back different");
    }
    backend.free_host(src_ptr, bytes).unwrap();
    backend.free_host(dst_ptr, bytes).unwrap();
    assert_eq!(backend.host_allocated_bytes(), 0);
    let err = backend.free_host(src_ptr, bytes).unwrap_err();
    assert!(
        matches!(
            err,
            blockpool::backend::BackendError::UnknownHostAllocation { .. }
        ),
        "a double free is refused, typed: {err:?}"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn expandable_segments_grow_in_place_on_the_driver_s_virtual_memory() {
    let config = AllocatorConfig::builder()
        .expandable_segments(true)
        .build()
        .unwrap();
    let alloc = gpu_allocator_with(config);
    assert!(
        alloc.backend().supports_expandable_segments(D0),
        "every GPU since Pascal supports virtual memory management"
    );
    let free_before = alloc.mem_get_info(0).unwrap().free_bytes;
    let stream = alloc.backend().context(D0).unwrap().new_stream().unwrap();
    let id = CudaBackend::stream_id(&stream);

    let a = alloc.allocate(0, 30 * MIB, id).unwrap();
    // 30 MiB of u32s, across the boundary of two mapped 20 MiB units.
    let values: Vec<u32> = (0..(30 * MIB / 4) as u32).collect();
    let b = DeviceBuffer::from_host(&alloc, D0, &values, &stream).unwrap();
    assert_eq!(
        b.ptr(),
        a.ptr() + (30 * MIB) as u64,
        "one segment, grown in place"
    );
    assert_eq!(
        b.to_vec().unwrap(),
        values,
        "written and read across mapped units"
    );
    assert_eq!(
        alloc.backend().segment_count(D0).unwrap(),
        0,
        "no cuMemAlloc"
    );
    assert_eq!(
        alloc.backend().mapped_bytes(D0).unwrap(),
        60 * MIB,
        "three 20 MiB units"
    );
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(stats["reserved_bytes.all.current"], (60 * MIB) as i64);
    let free_during = alloc.mem_get_info(0).unwrap().free_bytes;
    assert!(
        free_before - free_during >= 60 * MIB,
        "the driver sees the mapped memory: free went from {free_before} to {free_during}"
    );

    drop((a, b));
    alloc.empty_cache().unwrap();
    assert_eq!(
        alloc.backend().mapped_bytes(D0).unwrap(),
        0,
        "every unit unmapped"
    );
    assert_eq!(
        alloc.memory_stats(0).unwrap()["reserved_bytes.all.current"],
        0
    );
    let free_after = alloc.mem_get_info(0).unwrap().free_bytes;
    assert!(
        free_after + 16 * MIB >= free_before,
        "the memory went back: free {free_before} before, {free_after} after"
    );
    alloc.check_invariants(D0).unwrap();
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn threads_share_a_device_whose_lock_is_released_during_cu_mem_alloc() {
    let config = AllocatorConfig::parse("release_lock_on_cudamalloc:True").unwrap();
    let alloc = gpu_allocator_with(config);
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 30;
    // u32 elements: 4 KB (small pool), 1.2 MB (a share of a 20 MiB segment), 12 MiB (a
    // segment of its own).
    const LENS: [usize; 3] = [1000, 300_000, 3 << 20];
    thread::scope(|s| {
        for t in 0..THREADS {
            let alloc = &alloc;
            s.spawn(move || {
                let stream = alloc.backend().context(D0).unwrap().new_stream().unwrap();
                let check = |tag: u32, buf: &DeviceBuffer<u32>| {
                    let back = buf.to_vec().unwrap();
                    assert!(
                        back.iter().all(|&x| x == tag),
                        "thread {t}: buffer {tag} was overwritten: another thread held its memory"
                    );
                };
                let mut held = Vec::new();
                for round in 0..ROUNDS {
                    let tag = t * 1000 + round;
                    let data = vec![tag; LENS[round as usize % LENS.len()]];
                    held.push((
                        tag,
                        DeviceBuffer::from_host(alloc, D0, &data, &stream).unwrap(),
                    ));
                    if held.len() > 3 {
                        let (tag, buf) = held.remove(0);
                        check(tag, &buf);
                    }
                }
                for (tag, buf) in &held {
                    check(*tag, buf);
                }
            });
        }
    });
    alloc.check_invariants(D0).unwrap();
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(stats["allocation.all.current"], 0, "{stats:?}");
    assert_eq!(
        stats["allocation.all.allocated"],
        i64::from(THREADS * ROUNDS),
        "{stats:?}"
    );
    assert!(
        stats["num_device_alloc"] >= i64::from(THREADS),
        "each thread's stream needed segments of its own: {stats:?}"
    );
    alloc.empty_cache().unwrap();
    assert_eq!(alloc.backend().allocated_bytes(D0).unwrap(), 0);
}
