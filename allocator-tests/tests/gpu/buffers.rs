//! `DeviceBuffer` where a `CudaSlice` goes: cudarc copies, kernel arguments, other streams.

use blockpool::cuda::{BufferError, DeviceBuffer};
use blockpool::CudaBackend;
use cudarc::driver::{LaunchConfig, PushKernelArg};

use crate::gpu_allocator;
use crate::kernels::Kernels;
use blockpool::DeviceIndex;

/// Device 0, which these tests use.
const D0: DeviceIndex = DeviceIndex::new(0);

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn buffers_round_trip_through_cudarc_copies() {
    let alloc = gpu_allocator();
    let stream = alloc.backend().context(D0).unwrap().new_stream().unwrap();
    const N: usize = 100_000;
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..N).map(|i| (N - i) as f32).collect();

    let x = DeviceBuffer::from_host(&alloc, D0, &xs, &stream).unwrap();
    let mut y = DeviceBuffer::<f32>::alloc_zeros(&alloc, D0, N, &stream).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![0.0; N], "alloc_zeros zeroes");
    stream.memcpy_htod(&ys, &mut y).unwrap(); // cudarc's own copy
    assert_eq!(
        stream.clone_dtoh(&x).unwrap(),
        xs,
        "clone_dtoh reads what was written"
    );
    let mut out = vec![0.0f32; N];
    stream.memcpy_dtoh(&y, &mut out).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(out, ys, "memcpy_dtoh reads what memcpy_htod wrote");

    let mut copy = DeviceBuffer::<f32>::alloc_zeros(&alloc, D0, N, &stream).unwrap();
    copy.copy_from_device(&y).unwrap();
    assert_eq!(copy.to_vec().unwrap(), ys, "device-to-device copy");
    assert_eq!(
        alloc.memory_stats(0).unwrap()["allocation.all.current"],
        3,
        "x, y and copy are live allocations of the pool"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn buffers_are_kernel_arguments() {
    let alloc = gpu_allocator();
    let ctx = alloc.backend().context(D0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let kernels = Kernels::load(&ctx);
    const N: usize = 100_000;
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..N).map(|i| (N - i) as f32).collect();
    let x = DeviceBuffer::from_host(&alloc, D0, &xs, &stream).unwrap();
    let mut y = DeviceBuffer::from_host(&alloc, D0, &ys, &stream).unwrap();

    let (a, n) = (2.0f32, N as u32);
    let mut launch = stream.launch_builder(&kernels.axpy);
    launch.arg(&mut y).arg(&x).arg(&a).arg(&n);
    // SAFETY: axpy takes (float*, const float*, float, unsigned) and touches elements < n of
    // buffers that hold n floats.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.unwrap();

    let mut out = vec![0.0f32; N];
    stream.memcpy_dtoh(&y, &mut out).unwrap();
    stream.synchronize().unwrap();
    let expected: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| 2.0 * x + y).collect();
    assert_eq!(out, expected, "y = 2x + y on the device");
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn a_block_used_on_another_stream_waits_for_its_event_before_reuse() {
    let alloc = gpu_allocator();
    let ctx = alloc.backend().context(D0).unwrap();
    let home = ctx.new_stream().unwrap();
    let other = ctx.new_stream().unwrap();
    let kernels = Kernels::load(&ctx);

    let mut buf = DeviceBuffer::<u64>::alloc_zeros(&alloc, D0, 1024, &home).unwrap();
    home.synchronize().unwrap();
    let ptr = buf.ptr();
    // Busy work on the other stream that writes the buffer at its end (about a second).
    kernels.spin_then_write(&other, &mut buf, 2_000_000_000);
    buf.record_stream(&other).unwrap();
    drop(buf);

    let while_busy = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&home))
        .unwrap();
    assert_ne!(
        while_busy.ptr(),
        ptr,
        "the block was handed out again while the other stream still used it"
    );
    drop(while_busy);
    other.synchronize().unwrap();
    let after = alloc
        .allocate(0, 8192, CudaBackend::stream_id(&home))
        .unwrap();
    assert_eq!(
        after.ptr(),
        ptr,
        "once the other stream finished, the block is reused"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn bad_input_is_refused_with_typed_errors() {
    let alloc = gpu_allocator();
    let ctx = alloc.backend().context(D0).unwrap();
    let stream = ctx.new_stream().unwrap();

    let err = DeviceBuffer::<f64>::alloc_zeros(&alloc, D0, usize::MAX / 4, &stream).unwrap_err();
    assert!(
        matches!(
            err,
            BufferError::SizeOverflow {
                element_bytes: 8,
                ..
            }
        ),
        "{err:?}"
    );

    let mut buf = DeviceBuffer::<f32>::alloc_zeros(&alloc, D0, 16, &stream).unwrap();
    let err = buf.copy_from_host(&[1.0; 17]).unwrap_err();
    assert!(
        matches!(
            err,
            BufferError::LengthMismatch {
                buffer_len: 16,
                other_len: 17,
                ..
            }
        ),
        "{err:?}"
    );
    let mut short = [0.0f32; 15];
    let err = buf.copy_to_host(&mut short).unwrap_err();
    assert!(
        matches!(
            err,
            BufferError::LengthMismatch {
                buffer_len: 16,
                other_len: 15,
                ..
            }
        ),
        "{err:?}"
    );
    let longer = DeviceBuffer::<f32>::alloc_zeros(&alloc, D0, 32, &stream).unwrap();
    let err = buf.copy_from_device(&longer).unwrap_err();
    assert!(matches!(err, BufferError::LengthMismatch { .. }), "{err:?}");

    // A device the stream is not of (and, on a one-GPU machine, that does not exist).
    let err = DeviceBuffer::<f32>::alloc_zeros(&alloc, 1, 16, &stream).unwrap_err();
    match alloc.device_count() {
        1 => assert!(
            matches!(
                err,
                BufferError::Backend(blockpool::backend::BackendError::InvalidDevice {
                    device,
                    ..
                }) if device == DeviceIndex::new(1)
            ),
            "{err:?}"
        ),
        _ => assert!(
            matches!(
                err,
                BufferError::WrongDevice {
                    buffer_device,
                    other_device,
                } if (buffer_device, other_device) == (DeviceIndex::new(1), D0)
            ),
            "{err:?}"
        ),
    }
    assert_eq!(
        buf.to_vec().unwrap(),
        vec![0.0; 16],
        "refused copies changed nothing"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: run scripts/gpu-check.sh"]
fn dropped_buffers_go_back_to_the_pool_on_their_stream() {
    let alloc = gpu_allocator();
    let stream = alloc.backend().context(D0).unwrap().new_stream().unwrap();
    let first = DeviceBuffer::<u8>::alloc_zeros(&alloc, D0, 1 << 20, &stream).unwrap();
    let ptr = first.ptr();
    drop(first);
    let second = DeviceBuffer::<u8>::from_host(&alloc, D0, &vec![7u8; 1 << 20], &stream).unwrap();
    assert_eq!(
        second.ptr(),
        ptr,
        "the same stream reuses the block at once"
    );
    assert_eq!(second.to_vec().unwrap(), vec![7u8; 1 << 20]);
    let default = alloc.backend().context(D0).unwrap().default_stream();
    let third = DeviceBuffer::<u8>::alloc_zeros(&alloc, D0, 1 << 20, &default).unwrap();
    drop(second);
    assert_ne!(
        third.ptr(),
        ptr,
        "another stream does not get the cached block"
    );
    assert_eq!(
        alloc.memory_stats(0).unwrap()["num_device_alloc"],
        2,
        "one small segment per stream"
    );
}
