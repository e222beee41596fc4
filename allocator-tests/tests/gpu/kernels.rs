//! Hand-written PTX for the tests, loaded with `cuModuleLoadData` (the driver JIT-compiles it
//! for the GPU at hand), so the GPU machine needs no NVRTC and no CUDA toolkit.

use std::sync::Arc;

use blockpool::cuda::DeviceBuffer;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

/// `axpy(float* y, const float* x, float a, unsigned n)`: `y[i] = a * x[i] + y[i]` for `i < n`.
/// `spin(unsigned long long* out, long long cycles)`: one thread busy-waits `cycles` clock
/// ticks, then writes how many it waited to `out[0]`.
const PTX: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry axpy(
    .param .u64 y_ptr,
    .param .u64 x_ptr,
    .param .f32 a,
    .param .u32 n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [y_ptr];
    ld.param.u64 %rd2, [x_ptr];
    ld.param.f32 %f1, [a];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra AXPY_DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f3, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f3;
AXPY_DONE:
    ret;
}

.visible .entry spin(
    .param .u64 out_ptr,
    .param .u64 cycles
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<7>;

    ld.param.u64 %rd1, [out_ptr];
    ld.param.u64 %rd2, [cycles];
    mov.u64 %rd3, %clock64;
SPIN_LOOP:
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.s64 %p1, %rd5, %rd2;
    @%p1 bra SPIN_LOOP;
    cvta.to.global.u64 %rd6, %rd1;
    st.global.u64 [%rd6], %rd5;
    ret;
}
"#;

/// The test kernels, loaded into `ctx`.
pub struct Kernels {
    /// `axpy(float* y, const float* x, float a, unsigned n)`.
    pub axpy: CudaFunction,
    /// `spin(unsigned long long* out, long long cycles)`, launched with one thread.
    pub spin: CudaFunction,
}

impl Kernels {
    /// Loads the PTX module into `ctx`; panics with the driver's answer if it refuses.
    pub fn load(ctx: &Arc<CudaContext>) -> Kernels {
        let module = ctx
            .load_module(Ptx::from_src(PTX))
            .unwrap_or_else(|e| panic!("the driver refused the test PTX: {e:?}"));
        let function = |name| {
            module
                .load_function(name)
                .unwrap_or_else(|e| panic!("no kernel {name} in the test PTX: {e:?}"))
        };
        Kernels {
            axpy: function("axpy"),
            spin: function("spin"),
        }
    }
}

impl Kernels {
    /// Queues `spin` on `stream`: one thread busy-waits `cycles` clock ticks (2,000,000,000 is
    /// about a second), then writes how many it waited to `out[0]`.
    pub fn spin_then_write(
        &self,
        stream: &Arc<CudaStream>,
        out: &mut DeviceBuffer<u64>,
        cycles: i64,
    ) {
        let mut launch = stream.launch_builder(&self.spin);
        launch.arg(out).arg(&cycles);
        let one_thread = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: spin takes (unsigned long long*, long long) and writes out[0] of a buffer of
        // at least one element, from one thread.
        unsafe { launch.launch(one_thread) }.unwrap();
    }
}
