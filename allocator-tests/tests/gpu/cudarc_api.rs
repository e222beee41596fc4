//! `DeviceBuffer` under cudarc's own safe API: copies and sets through blocks reused on one
//! stream and handed across streams (on a GPU and on the fake driver), and a panic inside
//! cudarc kept with its message (on the fake, which can make `cuEventCreate` fail).

use blockpool::cuda::DeviceBuffer;
use blockpool::{AllocatorConfig, BufferError, CachingAllocator, CudaBackend};

use crate::context::{assert_device_memory, fail_next, UNKNOWN};
use blockpool::DeviceIndex;

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn cudarc_copies_round_trip_through_reuse_across_streams() {
    let backend = crate::gpu_backend();
    let alloc = CachingAllocator::new(backend.clone(), AllocatorConfig::default());
    for device in 0..alloc.device_count() {
        let ctx = backend.context(DeviceIndex::new(device)).unwrap();
        let streams = [ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
        let mut addresses = std::collections::BTreeSet::new();
        for round in 0..12u32 {
            let (stream, other) = (
                &streams[round as usize % 2],
                &streams[1 - round as usize % 2],
            );
            let len = 1000 + (round as usize % 3) * 500;
            let mut buffer = DeviceBuffer::<u32>::alloc_zeros(&alloc, device, len, stream).unwrap();
            assert_device_memory(buffer.ptr(), len * 4, device);
            addresses.insert(buffer.ptr());
            assert_eq!(stream.clone_dtoh(&buffer).unwrap(), vec![0; len], "zeroed");
            let values: Vec<u32> = (0..len as u32).map(|i| i ^ (round << 20)).collect();
            stream.memcpy_htod(&values, &mut buffer).unwrap();
            let mut back = vec![0u32; len];
            stream.memcpy_dtoh(&buffer, &mut back).unwrap();
            assert_eq!(
                back, values,
                "device {device}, round {round}: the bytes written"
            );
            // Read on the other stream too, which defers the block's reuse to its event.
            assert_eq!(other.clone_dtoh(&buffer).unwrap(), values);
            stream.memset_zeros(&mut buffer).unwrap();
            assert_eq!(
                stream.clone_dtoh(&buffer).unwrap(),
                vec![0; len],
                "set to zero"
            );
            drop(buffer);
            for s in &streams {
                s.synchronize().unwrap();
            }
        }
        let stats = alloc.memory_stats(device).unwrap();
        assert_eq!(
            stats["num_device_alloc"], 2,
            "one small segment per stream: {stats:?}"
        );
        assert!(
            addresses.len() < 12,
            "blocks were reused across rounds: {addresses:?}"
        );
    }
    alloc.empty_cache().unwrap();
}

#[test]
#[ignore = "needs the fake driver: the_gpu_tests_pass_on_the_fake_driver runs it"]
fn on_fake_a_panic_inside_cudarc_keeps_what_failed_and_why() {
    let backend = CudaBackend::new().expect("the fake driver loads");
    let alloc = CachingAllocator::new(backend.clone(), AllocatorConfig::default());
    let ctx = backend.context(DeviceIndex::new(0)).unwrap();
    // A second stream turns cudarc's event tracking on: each slice then makes two events.
    let (stream, _tracking) = (ctx.new_stream().unwrap(), ctx.new_stream().unwrap());
    fail_next("cuEventCreate", UNKNOWN, 1);
    let error = DeviceBuffer::<u32>::alloc_zeros(&alloc, 0, 16, &stream).unwrap_err();
    match &error {
        BufferError::CudarcPanicked {
            device,
            operation,
            message,
        } if *device == DeviceIndex::new(0) => {
            assert!(operation.contains("upgrade_device_ptr"), "{operation}");
            assert!(
                message.contains("CUDA_ERROR_UNKNOWN"),
                "cudarc's message: {message}"
            );
        }
        other => panic!("expected the caught panic with its message, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.starts_with("cudarc panicked while wrapping the allocation as a CudaSlice"),
        "{text}"
    );
    let stats = alloc.memory_stats(0).unwrap();
    assert_eq!(
        stats["allocation.all.current"], 0,
        "the block went back: {stats:?}"
    );
    let buffer = DeviceBuffer::<u32>::alloc_zeros(&alloc, 0, 16, &stream).unwrap();
    assert_eq!(
        stream.clone_dtoh(&buffer).unwrap(),
        vec![0; 16],
        "usable afterwards"
    );
}
