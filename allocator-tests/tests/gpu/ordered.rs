//! The stream-ordered policy (`stream_reuse:ordered`) on the CUDA backend: a stream that takes
//! memory cached for another waits, on the device, for the work still using it.
//!
//! The kernel test is the one that would read corrupted data without the wait: a kernel on
//! the first stream writes the buffer after about a second, the buffer goes back to the cache
//! at once, the second stream takes it and zeroes it; the zeros must land after the kernel's
//! write. The `on_fake` tests check the same order through the fake driver's event delay.

use blockpool::config::StreamReuse;
use blockpool::cuda::DeviceBuffer;
use blockpool::{AllocatorConfig, Backend, CachingAllocator, CudaBackend};
use cudarc::driver::CudaStream;
use std::sync::Arc;

use crate::fake_driver::{counts, EventDelay};
use crate::kernels::Kernels;
use crate::{gpu_allocator_with, gpu_backend};
use blockpool::DeviceIndex;

fn ordered() -> AllocatorConfig {
    AllocatorConfig::builder()
        .stream_reuse(StreamReuse::Ordered)
        .build()
        .expect("a valid configuration")
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn a_stream_that_takes_a_block_waits_for_the_kernel_still_writing_it() {
    let alloc = gpu_allocator_with(ordered());
    let ctx = alloc.backend().context(DeviceIndex::new(0)).unwrap();
    let (home, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let kernels = Kernels::load(&ctx);

    let mut buf = DeviceBuffer::<u64>::alloc_zeros(&alloc, 0, 1024, &home).unwrap();
    let ptr = buf.ptr();
    // About a second of busy work on `home`, then a non-zero write to buf[0].
    kernels.spin_then_write(&home, &mut buf, 2_000_000_000);
    drop(buf); // cached on `home` while the kernel still runs

    let taken = DeviceBuffer::<u64>::alloc_zeros(&alloc, 0, 1024, &other).unwrap();
    assert_eq!(
        taken.ptr(),
        ptr,
        "`other` takes the block cached for `home`"
    );
    home.synchronize().unwrap();
    let mut out = vec![u64::MAX; 1024];
    other.memcpy_dtoh(&taken, &mut out).unwrap();
    other.synchronize().unwrap();
    assert_eq!(
        out[0], 0,
        "the kernel's late write landed after `other` zeroed the memory it took: no wait"
    );
}

/// Records an event on `waiting` and checks that it stays pending until `other` is
/// synchronized: `waiting`'s later work waits for `other`'s.
fn assert_waits_for(
    alloc: &CachingAllocator<CudaBackend>,
    waiting: &Arc<CudaStream>,
    other: &Arc<CudaStream>,
) {
    let backend = alloc.backend();
    let probe = backend
        .record_event(DeviceIndex::new(0), CudaBackend::stream_id(waiting))
        .unwrap();
    assert!(
        !backend.query_event(&probe).unwrap(),
        "the stream's later work does not wait for the other's"
    );
    other.synchronize().unwrap();
    assert!(backend.query_event(&probe).unwrap());
    backend.release_event(probe);
}

/// A caching allocator under the ordered policy over the fake driver.
fn fake_ordered() -> CachingAllocator<CudaBackend> {
    CachingAllocator::new(gpu_backend(), ordered())
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_stream_that_takes_a_block_waits_for_the_stream_that_freed_it() {
    let alloc = fake_ordered();
    let before = counts();
    let ctx = alloc.backend().context(DeviceIndex::new(0)).unwrap();
    let (home, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::<u64>::alloc_zeros(&alloc, 0, 1024, &home).unwrap();
    home.synchronize().unwrap();
    let ptr = buf.ptr();
    let delay = EventDelay::set(u32::MAX); // `home`'s work stays pending until synchronized
    drop(buf);
    let taken = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&other))
        .unwrap();
    assert_eq!(
        taken.ptr(),
        ptr,
        "`other` takes the block cached for `home`"
    );
    drop(delay); // events recorded from now on complete at once, unless they wait
    assert_waits_for(&alloc, &other, &home);
    let after = counts();
    assert_eq!(
        after.errors, before.errors,
        "a driver call failed: {after:?}"
    );
    assert_eq!(after.device_allocs - before.device_allocs, 1, "one segment");
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_record_stream_free_is_reused_behind_a_wait_not_after_completion() {
    let alloc = fake_ordered();
    let before = counts();
    let ctx = alloc.backend().context(DeviceIndex::new(0)).unwrap();
    let (home, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::<u64>::alloc_zeros(&alloc, 0, 1024, &home).unwrap();
    home.synchronize().unwrap();
    let ptr = buf.ptr();
    let delay = EventDelay::set(u32::MAX); // `other` is busy until synchronized
    buf.record_stream(&other).unwrap();
    drop(buf);
    let again = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&home))
        .unwrap();
    assert_eq!(
        again.ptr(),
        ptr,
        "reused at once on its own stream (the compatible policy waits for `other`)"
    );
    drop(delay);
    assert_waits_for(&alloc, &home, &other);
    let after = counts();
    assert_eq!(
        after.errors, before.errors,
        "a driver call failed: {after:?}"
    );
}
