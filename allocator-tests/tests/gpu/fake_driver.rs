//! The GPU tests without a GPU: this binary runs itself again with the fake driver library
//! (`fake-libcuda`) first in `LD_LIBRARY_PATH`, so the CUDA backend, `DeviceBuffer` and the
//! pinned cache go through cudarc and real driver calls, checked by a driver that answers with
//! the real codes. Kernels are what the fake cannot run: the two tests that launch one run on
//! real GPUs only (`scripts/gpu-check.sh`).
//!
//! The `on_fake` tests use the fake's knobs and counters, so they are ignored like the GPU
//! tests and run only in that second process. A third process runs on the fake built without
//! `cuMemCreate`: a driver too old for blockpool, which the probe and `CudaBackend::new` refuse
//! by name.

use blockpool::DeviceIndex;
use std::process::Command;

use blockpool::backend::BackendError;
use blockpool::cuda::DeviceBuffer;
use blockpool::introspect::Introspect;
use blockpool::CudaBackend;
use blockpool::{AllocatorConfig, Backend, CachingAllocator, Error, StreamId};
use fake_libcuda::FakeCudaCounts;

use crate::MIB;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

/// The tests that launch kernels (ours or cuBLAS's), which the fake driver cannot run.
const KERNEL_TESTS: [&str; 4] = [
    "buffers::buffers_are_kernel_arguments",
    "buffers::a_block_used_on_another_stream_waits_for_its_event_before_reuse",
    "ordered::a_stream_that_takes_a_block_waits_for_the_kernel_still_writing_it",
    "cublas::buffers_go_to_cublas_gemm",
];

#[test]
fn the_gpu_check_selftest_skips_every_kernel_test() {
    // `scripts/gpu-check.sh` runs this binary on the fake driver too, with its own skip list.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/gpu-check.sh");
    let script = std::fs::read_to_string(path).expect("scripts/gpu-check.sh");
    for name in KERNEL_TESTS {
        assert!(
            script.contains(&format!("--skip {name}")),
            "gpu-check.sh's selftest does not skip the kernel test {name}"
        );
    }
}

/// The tests that need two devices, skipped in the one-device run.
const TWO_DEVICE_TESTS: [&str; 2] = [
    "fake_driver::on_fake_two_devices_have_a_pool_each",
    "context::on_fake_a_block_used_on_another_devices_stream_waits_for_that_devices_event",
];

/// Ignored tests of this binary that are not kernel tests: 13 GPU tests and 12 `on_fake` ones.
const NON_KERNEL_TESTS: usize = 13 + 12;

#[test]
#[cfg(target_os = "linux")]
fn the_gpu_tests_pass_on_the_fake_driver() {
    // One device, then two (`bad_input_is_refused_with_typed_errors` takes the other branch).
    for devices in [1, 2] {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = Command::new(exe);
        command
            .args(["--ignored", "--test-threads=1", "--exact"])
            .env(
                fake_libcuda::LIBRARY_PATH_VARIABLE,
                fake_libcuda::library_path_with_fake(
                    std::env::var_os(fake_libcuda::LIBRARY_PATH_VARIABLE).as_deref(),
                ),
            )
            .env("BLOCKPOOL_FAKE_CUDA_MEMORY_MIB", "4096")
            .env("BLOCKPOOL_FAKE_CUDA_DEVICES", devices.to_string());
        for name in KERNEL_TESTS {
            command.args(["--skip", name]);
        }
        let mut expected = NON_KERNEL_TESTS;
        if devices == 1 {
            for name in TWO_DEVICE_TESTS {
                command.args(["--skip", name]);
            }
            expected -= TWO_DEVICE_TESTS.len();
        }
        let output = output_within(command, CHILD_DEADLINE);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "the GPU tests failed on the fake driver with {devices} device(s):\n{stdout}\n{stderr}"
        );
        let summary = format!("test result: ok. {expected} passed; 0 failed; 0 ignored");
        assert!(
            stdout.contains(&summary),
            "expected `{summary}` from the fake-driver run with {devices} device(s):\n{stdout}"
        );
    }
}

/// How long the fake-driver run may take: seconds normally; a deadlock fails the test instead
/// of hanging CI.
const CHILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs `command` to its end, killing it (and failing) past `deadline`.
fn output_within(mut command: Command, deadline: std::time::Duration) -> std::process::Output {
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the GPU tests again");
    // Drain the pipes on threads, so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stderr, &mut bytes).map(|_| bytes)
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the GPU tests") {
            break status;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the fake-driver run took over {deadline:?}: killed (a deadlock?)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: out.join().expect("stdout reader").expect("read stdout"),
        stderr: err.join().expect("stderr reader").expect("read stderr"),
    }
}

/// The fake driver's counters; panics when the loaded driver is not the fake.
pub fn counts() -> FakeCudaCounts {
    // SAFETY: a backend was created before every call, so the driver library is loaded and
    // `culib` returns it instead of panicking.
    let library = unsafe { cudarc::driver::sys::culib() };
    // SAFETY: the fake exports the symbol with this signature (`fake-libcuda/src/driver.rs`).
    let function = unsafe {
        library.get::<unsafe extern "C" fn(*mut FakeCudaCounts) -> u32>(fake_libcuda::COUNTS_SYMBOL)
    }
    .expect("this test runs on the fake driver only: the loaded libcuda has no counters");
    let mut counts = FakeCudaCounts::default();
    // SAFETY: `counts` is a live, writable struct of the layout the fake writes.
    let code = unsafe { function(&mut counts) };
    assert_eq!(code, 0, "the counters call failed");
    counts
}

/// A caching allocator over the fake driver, with the counters before it allocated.
fn fake_allocator() -> (CachingAllocator<CudaBackend>, FakeCudaCounts) {
    let backend = CudaBackend::new().expect("the fake driver loads");
    let before = counts();
    (
        CachingAllocator::new(backend, AllocatorConfig::default()),
        before,
    )
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_everything_goes_back_to_the_driver() {
    let (alloc, before) = fake_allocator();
    assert_eq!(
        alloc.backend().device_name(D0).unwrap(),
        "blockpool fake GPU 0"
    );
    {
        let ctx = alloc.backend().context(D0).unwrap();
        let (a, b) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
        let mut x = DeviceBuffer::<u32>::alloc_zeros(&alloc, D0, 1 << 16, &a).unwrap();
        x.copy_from_host(&vec![3; 1 << 16]).unwrap();
        x.record_stream(&b).unwrap();
        let big = alloc.allocate(0, 64 * MIB, StreamId::DEFAULT).unwrap();
        let during = counts();
        assert_eq!(during.device_allocs - before.device_allocs, 2, "{during:?}");
        assert_eq!(
            during.live_bytes - before.live_bytes,
            (2 + 64) as u64 * MIB as u64,
            "{during:?}"
        );
        drop((x, big));
        b.synchronize().unwrap();
    }
    alloc.empty_cache().unwrap();
    let after = counts();
    assert_eq!(
        after.live_allocations, before.live_allocations,
        "segments left: {after:?}"
    );
    assert_eq!(after.device_frees - before.device_frees, 2, "{after:?}");
    assert_eq!(
        after.live_streams, before.live_streams,
        "streams left: {after:?}"
    );
    assert_eq!(
        after.errors, before.errors,
        "a driver call failed: {after:?}"
    );
    let devices = alloc.device_count() as u64;
    drop(alloc);
    let end = counts();
    assert_eq!(
        end.live_reservations, before.live_reservations,
        "an address range is still reserved: {end:?}"
    );
    assert_eq!(
        end.live_events, before.live_events,
        "the event pool was not destroyed: {end:?}"
    );
    assert_eq!(
        end.retained_contexts, before.retained_contexts,
        "a primary context is still retained (devices open on first use: {devices}): {end:?}"
    );
    assert_eq!(end.errors, before.errors, "a driver call failed: {end:?}");
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_block_used_on_another_stream_waits_for_its_event() {
    let (alloc, before) = fake_allocator();
    let ctx = alloc.backend().context(D0).unwrap();
    let (home, other) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    let buf = DeviceBuffer::<u64>::alloc_zeros(&alloc, D0, 1024, &home).unwrap();
    home.synchronize().unwrap();
    let ptr = buf.ptr();
    let delay = EventDelay::set(u32::MAX); // the other stream is busy until synchronized
    buf.record_stream(&other).unwrap();
    drop(buf);
    let busy = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&home))
        .unwrap();
    assert_ne!(busy.ptr(), ptr, "handed out while the other stream used it");
    drop(busy);
    other.synchronize().unwrap();
    let after = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&home))
        .unwrap();
    assert_eq!(after.ptr(), ptr, "reused once the other stream finished");
    drop(delay);
    let counts = counts();
    assert_eq!(counts.errors, before.errors, "{counts:?}");
    assert_eq!(
        counts.device_allocs - before.device_allocs,
        1,
        "one small segment"
    );
}

/// An event delay for the fake driver, back to 0 when dropped (also when a test fails, so
/// the tests after it in the same process are not delayed).
/// The fake's event delay while it lives (`set_event_delay`), 0 again when dropped.
pub struct EventDelay;

impl EventDelay {
    /// Holds every event recorded from now on not-ready for `queries` queries, until dropped.
    pub fn set(queries: u32) -> EventDelay {
        set_event_delay(queries);
        EventDelay
    }
}

impl Drop for EventDelay {
    fn drop(&mut self) {
        set_event_delay(0);
    }
}

/// How many times each recorded event answers not-ready before completing.
fn set_event_delay(queries: u32) {
    // SAFETY: as in `counts`: the library is loaded.
    let library = unsafe { cudarc::driver::sys::culib() };
    // SAFETY: the fake exports the symbol with this signature.
    let function = unsafe {
        library.get::<unsafe extern "C" fn(u32) -> u32>(b"blockpoolFakeCudaSetEventDelay")
    }
    .expect("this test runs on the fake driver only");
    // SAFETY: takes a plain integer.
    let code = unsafe { function(queries) };
    assert_eq!(code, 0, "setting the event delay failed");
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_driver_out_of_memory_releases_the_cache_and_retries() {
    let (alloc, before) = fake_allocator();
    // The fake device has 4 GiB: 3 GiB cached, then 3.5 GiB asked for.
    let cached = alloc.allocate(0, 3072 * MIB, StreamId::DEFAULT).unwrap();
    drop(cached);
    let big = alloc.allocate(0, 3584 * MIB, StreamId::DEFAULT).unwrap();
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(stats["num_alloc_retries"], 1, "{stats:?}");
    assert_eq!(
        stats["num_device_free"], 1,
        "the cached 3 GiB went back: {stats:?}"
    );
    // Now the driver itself has no room and nothing is cached: a typed OOM with the numbers.
    let err = alloc
        .allocate(0, 1024 * MIB, StreamId::DEFAULT)
        .unwrap_err();
    let blockpool::Error::OutOfMemory(oom) = &err else {
        panic!("expected an out-of-memory error, got {err:?}");
    };
    let message = err.to_string();
    // What the driver's cuMemGetInfo says is free: 4 GiB less 3.5 GiB and what earlier tests
    // of this process left stranded.
    let free = blockpool::error::format_size((512 * MIB) as u64 - before.live_bytes);
    for part in [
        "tried to allocate 1024.00 MiB",
        &format!("total capacity of 4.00 GiB of which {free} is free"),
        "3.50 GiB is allocated by blockpool",
    ] {
        assert!(message.contains(part), "`{part}` not in: {message}");
    }
    assert_eq!(oom.device, D0);
    assert_eq!(alloc.memory_stats(0).unwrap()["num_ooms"], 1);
    alloc.check_invariants(D0).unwrap();
    drop(big);
    alloc.empty_cache().unwrap();
    let after = counts();
    assert_eq!(after.live_allocations, before.live_allocations, "{after:?}");
    assert_eq!(
        after.errors - before.errors,
        3,
        "the driver refused 3.5 GiB once (then the cache went back), and 1 GiB twice (before \
         and after freeing the cache, which was empty)"
    );

    // No address space left is out of memory too (retryable), not a hard driver error.
    let backend = alloc.backend();
    let huge = usize::MAX - usize::MAX % (2 * MIB);
    let err = backend.reserve_address_range(D0, huge).unwrap_err();
    assert!(
        matches!(err, BackendError::OutOfMemory { device, .. } if device == D0),
        "{err:?}"
    );
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_pinned_cache_reuses_host_memory_after_its_event() {
    use blockpool::host::HostCachingAllocator;
    let backend = CudaBackend::new().expect("the fake driver loads");
    let host = HostCachingAllocator::new(backend.clone());
    let ctx = backend.context(D0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let id = CudaBackend::stream_id(&stream);
    let before = counts();
    let block = host.allocate(100_000).unwrap();
    let ptr = block.ptr();
    block.record_event(D0, id).unwrap();
    let delay = EventDelay::set(u32::MAX);
    drop(block);
    let again = host.allocate(100_000).unwrap();
    assert_ne!(again.ptr(), ptr, "reused before the copy's event completed");
    drop(delay);
    stream.synchronize().unwrap();
    // `again` is still held: only the first block, its event now complete, can serve this.
    let third = host.allocate(100_000).unwrap();
    assert_eq!(
        third.ptr(),
        ptr,
        "the first block is reused once its event completed"
    );
    assert_eq!(host.stats().num_host_alloc, 2, "a cached block is reused");
    drop((again, third));
    host.empty_cache().unwrap();
    let after = counts();
    assert_eq!(after.live_host_allocations, before.live_host_allocations);
    assert_eq!(after.errors, before.errors, "{after:?}");
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_destroyed_stream_is_a_typed_driver_error() {
    let (alloc, before) = fake_allocator();
    let gone = alloc.backend().context(D0).unwrap().new_stream().unwrap();
    let gone_id = CudaBackend::stream_id(&gone);
    drop(gone); // cudarc destroys the stream
    let block = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    block.record_stream(gone_id).unwrap();
    // Freeing records an event on every stream that used the block: the driver refuses.
    let err = block.free().unwrap_err();
    match &err {
        Error::Backend(BackendError::Driver { code, name, .. }) => {
            assert_eq!(
                (*code, name.as_str()),
                (400, "CUDA_ERROR_INVALID_HANDLE"),
                "{err}"
            );
        }
        other => panic!("expected the driver's error, got {other:?}"),
    }
    // The allocator stays valid; the block stays out of reach (a stream may still use it).
    alloc.check_invariants(D0).unwrap();
    let next = alloc.allocate(0, 4096, StreamId::DEFAULT).unwrap();
    assert_ne!(next.ptr(), 0);
    let after = counts();
    assert_eq!(
        after.errors - before.errors,
        1,
        "exactly the one refusal: {after:?}"
    );
}

#[test]
#[ignore = "needs the fake driver with two devices: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_two_devices_have_a_pool_each() {
    let (alloc, before) = fake_allocator();
    assert_eq!(alloc.device_count(), 2);
    let streams: Vec<_> = (0..2)
        .map(|d| {
            alloc
                .backend()
                .context(DeviceIndex::new(d))
                .unwrap()
                .new_stream()
                .unwrap()
        })
        .collect();
    let free_before: Vec<usize> = (0..2)
        .map(|d| alloc.mem_get_info(d).unwrap().free_bytes)
        .collect();
    // Interleaved, so the backend switches the current context at every call.
    let mut buffers = Vec::new();
    for round in 0..3u32 {
        for (device, stream) in streams.iter().enumerate() {
            let values = vec![round * 10 + device as u32; 1000 * (device + 1)];
            buffers.push(DeviceBuffer::from_host(&alloc, device, &values, stream).unwrap());
        }
    }
    for (i, buffer) in buffers.iter().enumerate() {
        let (round, device) = (i as u32 / 2, i % 2);
        assert_eq!(
            buffer.to_vec().unwrap(),
            vec![round * 10 + device as u32; 1000 * (device + 1)]
        );
    }
    for (device, free_before) in free_before.into_iter().enumerate() {
        let stats = alloc.memory_stats(device).unwrap();
        assert_eq!(
            stats["allocation.all.current"], 3,
            "device {device}: {stats:?}"
        );
        assert_eq!(
            stats["num_device_alloc"], 1,
            "one small segment on device {device}"
        );
        let free = alloc.mem_get_info(device).unwrap().free_bytes;
        assert_eq!(
            free_before - free,
            2 * MIB,
            "cuMemGetInfo in device {device}'s context sees its own segment"
        );
    }
    let wrong = DeviceBuffer::<u32>::alloc_zeros(&alloc, 1, 16, &streams[0]).unwrap_err();
    assert!(
        matches!(
            wrong,
            blockpool::BufferError::WrongDevice {
                buffer_device,
                other_device,
            } if (buffer_device, other_device) == (DeviceIndex::new(1), D0)
        ),
        "{wrong:?}"
    );
    drop(buffers);
    alloc.empty_cache().unwrap();
    let after = counts();
    assert_eq!(after.live_allocations, before.live_allocations, "{after:?}");
    assert_eq!(after.errors, before.errors, "{after:?}");
}

/// Set in the process that runs on the fake built without [`fake_libcuda::MISSING_SYMBOL`].
const WITHOUT_SYMBOL_RUN: &str = "BLOCKPOOL_TEST_DRIVER_WITHOUT_SYMBOL";

/// Not ignored: it runs itself again on the library without `cuMemCreate` (the check needs a
/// process that loaded that library), where the branch below does the checking.
#[test]
#[cfg(target_os = "linux")]
fn a_driver_without_a_symbol_blockpool_calls_is_refused_by_name() {
    if std::env::var_os(WITHOUT_SYMBOL_RUN).is_some() {
        refused_by_name_on_the_library_without_a_symbol();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args(["--exact", "--test-threads=1"])
        .arg("fake_driver::a_driver_without_a_symbol_blockpool_calls_is_refused_by_name")
        .env(
            fake_libcuda::LIBRARY_PATH_VARIABLE,
            fake_libcuda::library_path_with(
                fake_libcuda::LIBRARY_WITHOUT_SYMBOL_DIR,
                std::env::var_os(fake_libcuda::LIBRARY_PATH_VARIABLE).as_deref(),
            ),
        )
        .env(WITHOUT_SYMBOL_RUN, "1");
    let output = output_within(command, CHILD_DEADLINE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "the run on the library without {}:\n{stdout}\n{}",
        fake_libcuda::MISSING_SYMBOL,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The probe, `CudaBackend::new` and the default allocator on the library without
/// `cuMemCreate`: each says which function is missing, and none of them started the driver.
fn refused_by_name_on_the_library_without_a_symbol() {
    use blockpool::cuda::Diagnosis;
    let report = blockpool::cuda::probe();
    assert!(report.driver.library_found, "{report:?}");
    assert_eq!(
        report.diagnosis,
        Some(Diagnosis::DriverSymbolMissing {
            symbol: fake_libcuda::MISSING_SYMBOL
        }),
        "{report:?}"
    );
    let err = CudaBackend::new().expect_err("a driver without cuMemCreate is refused");
    match &err {
        BackendError::Driver {
            device,
            code: 36,
            name,
            message,
        } if *device == D0 => {
            assert_eq!(name, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER");
            assert!(
                message.contains("has no `cuMemCreate`") && message.contains("update the driver"),
                "the message names the function and says what to do: {message}"
            );
        }
        other => panic!("expected a driver-too-old error, got {other:?}"),
    }
    // The fake answers NOT_INITIALIZED until `cuInit`: neither asked the driver anything.
    // SAFETY: the probe found the library, so `culib` returns it instead of panicking.
    let library = unsafe { cudarc::driver::sys::culib() };
    // SAFETY: the fake exports the symbol with this signature (`fake-libcuda/src/driver.rs`).
    let function = unsafe {
        library.get::<unsafe extern "C" fn(*mut FakeCudaCounts) -> u32>(fake_libcuda::COUNTS_SYMBOL)
    }
    .expect("the fake without cuMemCreate still has its counters");
    let mut counts = FakeCudaCounts::default();
    // SAFETY: `counts` is a live, writable struct of the layout the fake writes.
    let code = unsafe { function(&mut counts) };
    assert_eq!(
        code, 3,
        "cuInit was called: CUDA_ERROR_NOT_INITIALIZED expected"
    );
    let forced = blockpool::global::default_backend_for(Some("cuda"))
        .err()
        .map(|e| e.to_string());
    assert!(
        forced
            .as_deref()
            .is_some_and(|e| e.contains("has no `cuMemCreate`")),
        "BLOCKPOOL_BACKEND=cuda names the missing function: {forced:?}"
    );
}
