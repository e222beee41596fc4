//! What a PyTorch user on several GPUs relies on, checked on the fake driver: blockpool leaves
//! the calling thread's current CUDA context as it found it after every call (error paths
//! too), and every pointer it hands out, through the Rust API or the PyTorch plugin's C
//! functions, is device memory of the device asked for (the driver's pointer attributes say).
//!
//! The caller's context is null on some threads and, with two devices, the last device's
//! primary context on others, while blockpool works on device 0, so each switch it makes
//! would show. The tests run on a GPU (`scripts/gpu-check.sh run`) and on the fake driver;
//! the error paths, which need the fake's injected failures, on the fake only. cudarc's own calls (making a stream, `DeviceBuffer`'s copies) bind their
//! context as cudarc documents; they are made before the caller's context is set.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::sync::Arc;

use blockpool::host::HostCachingAllocator;
use blockpool::{AllocatorConfig, CachingAllocator, CudaBackend, StreamId};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::CudaStream;

use crate::MIB;
use blockpool::DeviceIndex;

/// The calling thread's current context (null: none).
fn current() -> sys::CUcontext {
    let mut context: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a backend was made before, so the library is loaded; `context` is writable.
    let code = unsafe { sys::cuCtxGetCurrent(&mut context) };
    assert_eq!(code, CUresult::CUDA_SUCCESS, "cuCtxGetCurrent");
    context
}

/// Makes `context` (a live context, or null) current on this thread.
fn set_current(context: sys::CUcontext) {
    // SAFETY: the library is loaded; `context` is null or a context the test keeps retained.
    let code = unsafe { sys::cuCtxSetCurrent(context) };
    assert_eq!(code, CUresult::CUDA_SUCCESS, "cuCtxSetCurrent");
}

/// Runs `call`, then checks that the thread's current context is still `caller`.
fn keeps<T>(caller: sys::CUcontext, what: &str, call: impl FnOnce() -> T) -> T {
    let result = call();
    let now = current();
    assert_eq!(
        now, caller,
        "{what} left another context current on the caller's thread"
    );
    result
}

/// Makes the next `times` calls of the driver function `call` fail with `code` (the fake's
/// `blockpoolFakeCudaFailNext`).
pub fn fail_next(call: &str, code: u32, times: u32) {
    // SAFETY: a backend was made before, so the library is loaded.
    let library = unsafe { sys::culib() };
    // SAFETY: the fake exports the symbol with this signature (`fake-libcuda/src/driver.rs`).
    let function = unsafe {
        library.get::<unsafe extern "C" fn(*const std::ffi::c_char, u32, u32) -> u32>(
            b"blockpoolFakeCudaFailNext",
        )
    }
    .expect("this test runs on the fake driver only");
    let name = CString::new(call).expect("no NUL in a function name");
    // SAFETY: `name` is NUL-terminated and outlives the call.
    assert_eq!(unsafe { function(name.as_ptr(), code, times) }, 0);
}

/// `CUDA_ERROR_UNKNOWN`: a driver failure that is not out of memory.
pub const UNKNOWN: u32 = 999;

/// The memory type (1 host, 2 device) and device ordinal the driver gives for `ptr`.
pub fn pointer_attributes(ptr: u64) -> (c_uint, c_int) {
    let mut memory_type: c_uint = 0;
    let mut ordinal: c_int = -1;
    // SAFETY: the library is loaded; each out-pointer is writable for the attribute's type
    // (`CUmemorytype` is 4 bytes, the ordinal an int).
    let codes = unsafe {
        [
            sys::cuPointerGetAttribute(
                (&mut memory_type as *mut c_uint).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            ),
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut c_int).cast::<c_void>(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr,
            ),
        ]
    };
    assert_eq!(
        codes,
        [CUresult::CUDA_SUCCESS; 2],
        "the driver does not know {ptr:#x}"
    );
    (memory_type, ordinal)
}

/// Checks that `[ptr, ptr + size)` is device memory of `device`, at both ends.
pub fn assert_device_memory(ptr: u64, size: usize, device: usize) {
    for at in [ptr, ptr + size as u64 - 1] {
        assert_eq!(
            pointer_attributes(at),
            (2, device as c_int),
            "{at:#x} (of {ptr:#x} + {size}) is not device memory of device {device}"
        );
    }
}

/// The caller's context on thread `t`: none on even threads, the last device's primary
/// context on odd ones when there are two devices.
fn caller_context(backend: &CudaBackend, t: usize) -> sys::CUcontext {
    let devices = blockpool::Backend::device_count(backend);
    if t % 2 == 1 && devices > 1 {
        backend
            .context(DeviceIndex::new(devices - 1))
            .unwrap()
            .cu_ctx()
    } else {
        std::ptr::null_mut()
    }
}

/// One thread's round of every kind of call on device 0, each checked to keep `caller`.
fn round(
    alloc: &CachingAllocator<CudaBackend>,
    expandable: &CachingAllocator<CudaBackend>,
    host: &HostCachingAllocator<CudaBackend>,
    other: &CudaStream,
    caller: sys::CUcontext,
    t: usize,
) {
    let other = CudaBackend::stream_id(other);
    let size = MIB + t * 4096;
    let ptr = keeps(caller, "malloc", || {
        alloc.malloc(0, size, StreamId::DEFAULT)
    })
    .unwrap();
    assert_device_memory(ptr, size, 0);
    keeps(caller, "record_stream", || {
        alloc.record_stream(0, ptr, other)
    })
    .unwrap();
    keeps(caller, "a free with an event to record", || {
        alloc.free(0, ptr)
    })
    .unwrap();
    let handle = keeps(caller, "allocate", || {
        alloc.allocate(0, 30 * MIB, StreamId::DEFAULT)
    })
    .unwrap();
    assert_device_memory(handle.ptr(), 30 * MIB, 0);
    keeps(caller, "dropping a handle", || drop(handle));
    keeps(caller, "mem_get_info", || alloc.mem_get_info(0)).unwrap();
    keeps(caller, "empty_cache", || alloc.empty_cache()).unwrap();
    let grown = keeps(caller, "an expandable segment's map", || {
        expandable.allocate(0, 24 * MIB, StreamId::DEFAULT)
    })
    .unwrap();
    assert_device_memory(grown.ptr(), 24 * MIB, 0);
    drop(grown);
    keeps(caller, "an expandable segment's unmap", || {
        expandable.empty_cache()
    })
    .unwrap();
    let pinned = keeps(caller, "pinned memory", || host.allocate(100_000)).unwrap();
    assert_eq!(
        pointer_attributes(pinned.ptr()).0,
        1,
        "pinned memory is host memory"
    );
    keeps(caller, "a pinned block's event", || {
        pinned.record_event(DeviceIndex::new(0), other)
    })
    .unwrap();
    drop(pinned);
    keeps(caller, "the pinned cache's empty_cache", || {
        host.empty_cache()
    })
    .unwrap();
    let too_big = keeps(caller, "an out-of-memory error", || {
        alloc.malloc(0, 1 << 40, StreamId::DEFAULT)
    });
    assert!(too_big.is_err(), "1 TiB fits no device");
}

/// The allocators `the_callers_context_survives_every_call` and the error paths use.
struct Allocators {
    backend: CudaBackend,
    alloc: Arc<CachingAllocator<CudaBackend>>,
    expandable: Arc<CachingAllocator<CudaBackend>>,
    host: Arc<HostCachingAllocator<CudaBackend>>,
}

/// A backend, made with no context current (checked to leave none), and its allocators.
fn allocators() -> Allocators {
    set_current(std::ptr::null_mut());
    let backend = keeps(std::ptr::null_mut(), "CudaBackend::new", CudaBackend::new)
        .unwrap_or_else(|e| panic!("{}: {e}", crate::NEEDS_GPU));
    let alloc = Arc::new(CachingAllocator::new(
        backend.clone(),
        AllocatorConfig::default(),
    ));
    let expandable = Arc::new(CachingAllocator::new(
        backend.clone(),
        AllocatorConfig::builder()
            .expandable_segments(true)
            .build()
            .unwrap(),
    ));
    assert!(blockpool::Backend::supports_expandable_segments(
        &backend,
        DeviceIndex::new(0)
    ));
    let host = Arc::new(HostCachingAllocator::new(backend.clone()));
    Allocators {
        backend,
        alloc,
        expandable,
        host,
    }
}

/// Drops the allocators and the backend on a thread whose context is `caller`, which must
/// survive it.
fn drop_all(all: Allocators, caller: sys::CUcontext) {
    set_current(caller);
    keeps(caller, "dropping the allocators and the backend", || {
        drop(all)
    });
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn the_callers_context_survives_every_call() {
    let all = allocators();
    let Allocators {
        backend,
        alloc,
        expandable,
        host,
    } = &all;
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (alloc, expandable, host) = (alloc.clone(), expandable.clone(), host.clone());
            let backend = backend.clone();
            std::thread::spawn(move || {
                let other = backend
                    .context(DeviceIndex::new(0))
                    .unwrap()
                    .new_stream()
                    .unwrap();
                let caller = caller_context(&backend, t);
                set_current(caller);
                for _ in 0..20 {
                    round(&alloc, &expandable, &host, &other, caller, t);
                }
                set_current(std::ptr::null_mut());
                other.synchronize().unwrap();
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("a thread's calls kept its context");
    }
    let caller = caller_context(backend, 1);
    drop_all(all, caller);
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_error_paths_keep_the_callers_context() {
    let all = allocators();
    let Allocators {
        backend,
        alloc,
        expandable,
        host,
    } = &all;
    // One at a time: an injected failure is the next call's, whichever thread makes it.
    let other = backend
        .context(DeviceIndex::new(0))
        .unwrap()
        .new_stream()
        .unwrap();
    let other_id = CudaBackend::stream_id(&other);
    for t in 0..2 {
        let caller = caller_context(backend, t);
        set_current(caller);
        fail_next("cuMemAlloc_v2", UNKNOWN, 1);
        let failed = keeps(caller, "a failed cuMemAlloc", || {
            alloc.malloc(0, 50 * MIB, StreamId::DEFAULT)
        });
        assert!(failed.is_err(), "the injected failure was not seen");
        let ptr = alloc.malloc(0, 4096, StreamId::DEFAULT).unwrap();
        alloc.record_stream(0, ptr, other_id).unwrap();
        fail_next("cuEventRecord", UNKNOWN, 1);
        let _ = keeps(caller, "a failed cuEventRecord", || alloc.free(0, ptr));
        fail_next("cuMemHostAlloc", UNKNOWN, 1);
        let failed = keeps(caller, "a failed cuMemHostAlloc", || host.allocate(1 << 22));
        assert!(failed.is_err(), "the injected failure was not seen");
        fail_next("cuMemMap", UNKNOWN, 1);
        let failed = keeps(caller, "a failed cuMemMap", || {
            expandable.allocate(0, 40 * MIB, StreamId::DEFAULT)
        });
        assert!(failed.is_err(), "the injected failure was not seen");
        keeps(caller, "empty_cache after failures", || alloc.empty_cache()).unwrap();
    }
    other.synchronize().unwrap();
    drop(other);
    let caller = caller_context(backend, 1);
    drop_all(all, caller);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn the_plugin_hands_out_device_memory_of_the_device_asked_for() {
    use blockpool_torch::{
        blockpool_device_count, blockpool_empty_cache, blockpool_free, blockpool_malloc,
    };
    // No BLOCKPOOL_BACKEND: `auto`, which is CUDA (the fake driver's, or the GPU's).
    let devices = blockpool_device_count();
    assert!(devices >= 1, "the plugin did not start on the fake driver");
    set_current(std::ptr::null_mut());
    let sizes = [1, 512, 4097, MIB, MIB + 1, 3 * MIB, 25 * MIB + 7];
    let mut live = Vec::new();
    for device in 0..devices {
        for &size in &sizes {
            let ptr = keeps(std::ptr::null_mut(), "blockpool_malloc", || {
                blockpool_malloc(size as isize, device, std::ptr::null_mut())
            });
            assert!(!ptr.is_null(), "{size} bytes on device {device}");
            assert_device_memory(ptr as u64, size, device as usize);
            live.push((ptr, size, device));
        }
    }
    for (ptr, size, device) in live {
        keeps(std::ptr::null_mut(), "blockpool_free", || {
            blockpool_free(ptr, size as isize, device, std::ptr::null_mut())
        });
    }
    // The plugin's allocator lives as long as the process: the next tests count the driver's
    // memory.
    let emptied = keeps(std::ptr::null_mut(), "blockpool_empty_cache", || {
        blockpool_empty_cache()
    });
    assert_eq!(emptied, 0, "blockpool_empty_cache");
}

/// A device's primary context is retained on its first use, not when the backend is made: a
/// process that uses one GPU of several (a rank under `torchrun`) holds a context, and its
/// memory, on that one only, as with PyTorch's own allocator. With one device, the first use
/// is device 0's.
#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_only_the_devices_used_get_a_context() {
    let retained = || crate::fake_driver::counts().retained_contexts;
    let backend = CudaBackend::new().expect("the fake driver loads");
    let last = blockpool::Backend::device_count(&backend) - 1;
    let before = retained();
    let alloc = CachingAllocator::new(backend.clone(), AllocatorConfig::default());
    assert_eq!(retained(), before, "making the allocator opens no device");
    let block = alloc.allocate(last, MIB, StreamId::DEFAULT).unwrap();
    assert_device_memory(block.ptr(), MIB, last);
    assert_eq!(retained(), before + 1, "the device used, and only it");
    drop(block);
    drop((alloc, backend));
    assert_eq!(retained(), before, "given back with the backend");
}

/// A block of device 0 used on a stream of device 1 (`record_stream`): its free records the
/// event in device 1's context, where that stream lives (the driver refuses an event of
/// another context), and the block waits for it before it is reused, as PyTorch's allocator
/// does under a guard of the stream's device.
#[test]
#[ignore = "needs the fake driver with two devices: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_block_used_on_another_devices_stream_waits_for_that_devices_event() {
    use crate::fake_driver::EventDelay;
    let backend = CudaBackend::new().expect("the fake driver loads");
    assert!(
        blockpool::Backend::device_count(&backend) >= 2,
        "two devices"
    );
    let alloc = CachingAllocator::new(backend.clone(), AllocatorConfig::default());
    let elsewhere = backend
        .context(DeviceIndex::new(1))
        .unwrap()
        .new_stream()
        .unwrap();
    set_current(std::ptr::null_mut());
    let block = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    let ptr = block.ptr();
    block
        .record_stream(CudaBackend::stream_id(&elsewhere))
        .unwrap();
    let delay = EventDelay::set(u32::MAX);
    keeps(std::ptr::null_mut(), "a free with device 1's event", || {
        block.free()
    })
    .expect("the event is recorded in the stream's context");
    let again = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    assert_ne!(
        again.ptr(),
        ptr,
        "reused before device 1's stream got past its event"
    );
    drop(delay);
    elsewhere.synchronize().unwrap();
    let third = alloc.allocate(0, MIB, StreamId::DEFAULT).unwrap();
    assert_eq!(third.ptr(), ptr, "reused once the event completed");
}
