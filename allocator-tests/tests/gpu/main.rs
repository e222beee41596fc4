//! Tests on a real NVIDIA GPU: the CUDA backend under the caching allocator, `DeviceBuffer`
//! through cudarc, and pinned host memory.
//!
//! Every test is `#[ignore]`d: they need a GPU and fail (they never pass silently) without
//! one. `scripts/gpu-check.sh build` compiles this binary, `scripts/gpu-check.sh run` runs it on
//! the GPU machine with `--ignored --test-threads=1`.

mod buffers;
mod context;
mod cublas;
mod cudarc_api;
mod fake_driver;
mod kernels;
mod memory;
mod ordered;

use blockpool::CudaBackend;
use blockpool::{AllocatorConfig, CachingAllocator};

/// The reason every test here is ignored by default.
pub const NEEDS_GPU: &str = "needs an NVIDIA GPU: run scripts/gpu-check.sh";

/// A caching allocator over every GPU; panics with the backend's diagnosis when there is none.
pub fn gpu_allocator() -> CachingAllocator<CudaBackend> {
    gpu_allocator_with(AllocatorConfig::default())
}

/// The same with `config`.
pub fn gpu_allocator_with(config: AllocatorConfig) -> CachingAllocator<CudaBackend> {
    CachingAllocator::new(gpu_backend(), config)
}

/// The CUDA backend; panics with its diagnosis when there is no GPU.
pub fn gpu_backend() -> CudaBackend {
    CudaBackend::new()
        .unwrap_or_else(|e| panic!("this test needs an NVIDIA GPU and CUDA says: {e}"))
}

/// Bytes in a mebibyte.
pub const MIB: usize = 1 << 20;
