//! `DeviceBuffer` where cuBLAS takes a `CudaSlice`: cudarc's `Gemm` accepts any
//! `DevicePtr`/`DevicePtrMut`, so this also checks at compile time that the buffer fits.

use blockpool::cuda::DeviceBuffer;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};

use crate::gpu_allocator;
use blockpool::DeviceIndex;

#[test]
#[ignore = "needs an NVIDIA GPU and libcublas: run scripts/gpu-check.sh"]
fn buffers_go_to_cublas_gemm() {
    // SAFETY: only tries to open the library files.
    let present = unsafe { cudarc::cublas::sys::is_culib_present() };
    assert!(
        present,
        "libcublas is not installed: this test needs it (gpu-check.sh skips it then)"
    );
    let alloc = gpu_allocator();
    let stream = alloc
        .backend()
        .context(DeviceIndex::new(0))
        .unwrap()
        .new_stream()
        .unwrap();
    let blas = CudaBlas::new(stream.clone()).expect("cuBLAS starts");
    // Column-major: A is 2x3 [[1 3 5] [2 4 6]], B is 3x2 [[7 10] [8 11] [9 12]].
    let a =
        DeviceBuffer::from_host(&alloc, 0, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &stream).unwrap();
    let b =
        DeviceBuffer::from_host(&alloc, 0, &[7.0f32, 8.0, 9.0, 10.0, 11.0, 12.0], &stream).unwrap();
    let mut c = DeviceBuffer::<f32>::alloc_zeros(&alloc, 0, 4, &stream).unwrap();
    let config = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: 2,
        n: 2,
        k: 3,
        alpha: 1.0f32,
        lda: 2,
        ldb: 3,
        beta: 0.0f32,
        ldc: 2,
    };
    // SAFETY: the dimensions and leading dimensions match the buffers' lengths (6, 6, 4).
    unsafe { blas.gemm(config, &a, &b, &mut c) }.expect("gemm runs");
    assert_eq!(c.to_vec().unwrap(), [76.0, 100.0, 103.0, 136.0], "C = A B");
}
