//! Criterion benchmark on a real GPU: one cache-hit allocate + free through
//! `CachingAllocator<CudaBackend>`, against the driver's synchronous pair (`cuMemAlloc_v2` +
//! `cuMemFree_v2`) and its stream-ordered pair (`cuMemAllocAsync` + `cuMemFreeAsync`, default
//! memory pool with its release threshold raised so that it caches too), for 4 KiB, 1 MiB and
//! 64 MiB, all in one run. After criterion's groups it prints the ratios, measured again here
//! with a plain timer (median of batches), as `ratio` lines the GPU check script collects.
//!
//! Then one more table: 4 KiB cache-hit pairs on one thread while another thread allocates a
//! 64 MiB segment (`cuMemAlloc`), drops it and empties the cache (`cuMemFree`), over and over,
//! with `release_lock_on_cudamalloc` off and on, printed as `lock` lines.
//!
//! Every iteration batch ends with a stream synchronize (outside nothing is queued, so for the
//! synchronous pair and blockpool it returns at once), so the stream-ordered pair cannot hide
//! work in the stream. Without a usable GPU it says why and exits with status 0.
//!
//! Run with `cargo bench --bench cuda` on a machine with an NVIDIA GPU, or through
//! `scripts/gpu-check.sh`; see `benches/README.md`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use blockpool::cuda::cudarc::driver::{result, sys, CudaContext, CudaStream};
use blockpool::CudaBackend;
use blockpool::DeviceIndex;
use blockpool::{AllocatorConfig, CachingAllocator, StreamId};
use criterion::{black_box, BenchmarkId, Criterion, Throughput};

/// The sizes compared, with their labels.
const SIZES: [(&str, usize); 3] = [("4KiB", 4 << 10), ("1MiB", 1 << 20), ("64MiB", 64 << 20)];

/// Batches per method and size in the ratio table; the median is reported.
const RATIO_BATCHES: usize = 7;

/// Time one ratio batch aims at.
const RATIO_BATCH_TIME: Duration = Duration::from_millis(40);

/// What one benchmark iteration does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `allocate` + drop of the owning handle, a cache hit.
    Blockpool,
    /// `cuMemAlloc_v2` + `cuMemFree_v2`.
    DriverSync,
    /// `cuMemAllocAsync` + `cuMemFreeAsync` on the stream.
    DriverAsync,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Blockpool => "blockpool",
            Method::DriverSync => "cuMemAlloc+cuMemFree",
            Method::DriverAsync => "cuMemAllocAsync+cuMemFreeAsync",
        }
    }
}

struct Gpu {
    alloc: CachingAllocator<CudaBackend>,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    stream_id: StreamId,
    async_supported: bool,
}

/// Leaves with a one-line message and status 2 when the device fails mid-run.
fn fail(what: &str, code: sys::CUresult) -> ! {
    eprintln!("benches/cuda: {what} failed with {code:?}");
    std::process::exit(2)
}

impl Gpu {
    fn open() -> Result<Gpu, String> {
        let backend = CudaBackend::new().map_err(|e| e.to_string())?;
        let ctx = backend
            .context(DeviceIndex::new(0))
            .map_err(|e| e.to_string())?;
        let stream = ctx.new_stream().map_err(|e| format!("{:?}", e.0))?;
        ctx.bind_to_thread().map_err(|e| format!("{:?}", e.0))?;
        let async_supported = backend
            .properties(DeviceIndex::new(0))
            .map_err(|e| e.to_string())?
            .memory_pools_supported;
        if async_supported {
            raise_release_threshold(&ctx)?;
        }
        let stream_id = CudaBackend::stream_id(&stream);
        Ok(Gpu {
            alloc: CachingAllocator::new(backend, AllocatorConfig::default()),
            ctx,
            stream,
            stream_id,
            async_supported,
        })
    }

    /// `iters` pairs of `method` for `size` bytes, then a stream synchronize; the wall time.
    fn run(&self, method: Method, size: usize, iters: u64) -> Duration {
        let stream = self.stream.cu_stream();
        let start = Instant::now();
        for _ in 0..iters {
            match method {
                Method::Blockpool => match self.alloc.allocate(0, size, self.stream_id) {
                    Ok(block) => drop(black_box(block)),
                    Err(e) => {
                        eprintln!("benches/cuda: allocate failed: {e}");
                        std::process::exit(2)
                    }
                },
                Method::DriverSync => {
                    // SAFETY: the device's context is current on this thread (bound in `open`,
                    // and the backend binds the same one); the pointer is freed once, right
                    // away, and nothing used it.
                    let ptr = unsafe { result::malloc_sync(size) }
                        .unwrap_or_else(|e| fail("cuMemAlloc_v2", e.0));
                    // SAFETY: as above.
                    unsafe { result::free_sync(black_box(ptr)) }
                        .unwrap_or_else(|e| fail("cuMemFree_v2", e.0));
                }
                Method::DriverAsync => {
                    // SAFETY: `stream` is a live stream of the current context; the pointer is
                    // freed once, on the same stream, and nothing used it.
                    let ptr = unsafe { result::malloc_async(stream, size) }
                        .unwrap_or_else(|e| fail("cuMemAllocAsync", e.0));
                    // SAFETY: as above.
                    unsafe { result::free_async(black_box(ptr), stream) }
                        .unwrap_or_else(|e| fail("cuMemFreeAsync", e.0));
                }
            }
        }
        self.stream
            .synchronize()
            .unwrap_or_else(|e| fail("cuStreamSynchronize", e.0));
        start.elapsed()
    }

    fn methods(&self) -> Vec<Method> {
        let mut methods = vec![Method::Blockpool, Method::DriverSync];
        if self.async_supported {
            methods.push(Method::DriverAsync);
        }
        methods
    }
}

/// Lets the default memory pool keep freed memory (as blockpool does) instead of returning it
/// to the device at every synchronize, so `cuMemAllocAsync` is measured on cache hits too.
fn raise_release_threshold(ctx: &CudaContext) -> Result<(), String> {
    // SAFETY: `cu_device` is the context's device, from `cuDeviceGet`.
    let pool = unsafe { result::device::get_default_mem_pool(ctx.cu_device()) }
        .map_err(|e| format!("cuDeviceGetDefaultMemPool: {:?}", e.0))?;
    let mut threshold = u64::MAX;
    // SAFETY: the pool is the device's default pool; the release threshold is a u64 and
    // `threshold` is one, alive for the call.
    unsafe {
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .map_err(|e| format!("cuMemPoolSetAttribute: {:?}", e.0))
}

fn criterion_groups(gpu: &Gpu, c: &mut Criterion) {
    let mut group = c.benchmark_group("cuda_alloc_free_pair");
    group.throughput(Throughput::Elements(1));
    for (label, size) in SIZES {
        for method in gpu.methods() {
            gpu.run(method, size, 2); // warm every cache
            group.bench_with_input(BenchmarkId::new(method.name(), label), &size, |b, &size| {
                b.iter_custom(|iters| gpu.run(method, size, iters))
            });
        }
    }
    group.finish();
}

/// Median nanoseconds per pair of `method` for `size`, over [`RATIO_BATCHES`] batches.
fn median_ns(gpu: &Gpu, method: Method, size: usize) -> f64 {
    gpu.run(method, size, 2);
    // Size the batch from one pilot pair, at least 10 pairs.
    let pilot = gpu.run(method, size, 10).as_secs_f64() / 10.0;
    let iters = ((RATIO_BATCH_TIME.as_secs_f64() / pilot.max(1e-9)) as u64).clamp(10, 1_000_000);
    let mut samples: Vec<f64> = (0..RATIO_BATCHES)
        .map(|_| gpu.run(method, size, iters).as_secs_f64() * 1e9 / iters as f64)
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn ratio_table(gpu: &Gpu) {
    let name = gpu
        .alloc
        .backend()
        .device_name(DeviceIndex::new(0))
        .unwrap_or("unknown device")
        .to_owned();
    println!();
    println!(
        "allocate+free pair, median ns per pair on {name} (ordinal {}), this run:",
        gpu.ctx.ordinal()
    );
    println!(
        "{:<8} {:>12} {:>22} {:>32} {:>14} {:>14}",
        "size",
        "blockpool",
        "cuMemAlloc+cuMemFree",
        "cuMemAllocAsync+cuMemFreeAsync",
        "sync/blockpool",
        "async/blockpool"
    );
    for (label, size) in SIZES {
        let ours = median_ns(gpu, Method::Blockpool, size);
        let sync = median_ns(gpu, Method::DriverSync, size);
        let asynchronous = gpu
            .async_supported
            .then(|| median_ns(gpu, Method::DriverAsync, size));
        let async_text = asynchronous.map_or("unsupported".to_owned(), |ns| format!("{ns:.0}"));
        let async_ratio = asynchronous.map_or("-".to_owned(), |ns| format!("{:.1}x", ns / ours));
        println!(
            "{label:<8} {ours:>12.0} {sync:>22.0} {async_text:>32} {:>14} {async_ratio:>14}",
            format!("{:.1}x", sync / ours)
        );
        // One line per size for scripts: size, then ns and ratios.
        println!(
            "ratio size={label} blockpool_ns={ours:.1} sync_ns={sync:.1} async_ns={} sync_over_blockpool={:.2} async_over_blockpool={} targets=100x,2x",
            asynchronous.map_or("-".to_owned(), |ns| format!("{ns:.1}")),
            sync / ours,
            asynchronous.map_or("-".to_owned(), |ns| format!("{:.2}", ns / ours)),
        );
    }
}

/// The other thread's segment in [`lock_table`].
const CONTENDED_SEGMENT: usize = 64 << 20;

/// Median nanoseconds per 4 KiB cache-hit pair on `alloc` over [`RATIO_BATCHES`] batches.
fn median_pair_ns(alloc: &CachingAllocator<CudaBackend>, stream: StreamId) -> f64 {
    let pairs = |iters: u64| {
        let start = Instant::now();
        for _ in 0..iters {
            match alloc.allocate(0, black_box(4 << 10), stream) {
                Ok(block) => drop(black_box(block)),
                Err(e) => {
                    eprintln!("benches/cuda: allocate failed: {e}");
                    std::process::exit(2)
                }
            }
        }
        start.elapsed().as_secs_f64()
    };
    let pilot = pairs(100) / 100.0;
    let iters = ((RATIO_BATCH_TIME.as_secs_f64() / pilot.max(1e-9)) as u64).clamp(100, 10_000_000);
    let mut samples: Vec<f64> = (0..RATIO_BATCHES)
        .map(|_| pairs(iters) * 1e9 / iters as f64)
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Cache-hit pairs while another thread allocates and frees segments on the same device, with
/// the device lock held and released during `cuMemAlloc`.
fn lock_table() {
    println!();
    println!(
        "4 KiB cache-hit pair while another thread allocates {} MiB segments and empties the cache:",
        CONTENDED_SEGMENT >> 20
    );
    for release in [false, true] {
        let backend = match CudaBackend::new() {
            Ok(backend) => backend,
            Err(e) => {
                eprintln!("benches/cuda: a second backend failed: {e}");
                std::process::exit(2)
            }
        };
        let config = AllocatorConfig::builder()
            .release_lock_on_cudamalloc(release)
            .build()
            .unwrap_or_else(|e| panic!("a valid configuration: {e}"));
        let alloc = CachingAllocator::new(backend, config);
        // Kept for the whole run, so `empty_cache` never releases the pairs' small segment.
        let anchor = alloc.allocate(0, 4 << 10, StreamId::DEFAULT);
        let anchor = anchor.unwrap_or_else(|e| {
            eprintln!("benches/cuda: allocate failed: {e}");
            std::process::exit(2)
        });
        let stop = AtomicBool::new(false);
        let started = Instant::now();
        let (pair_ns, segments) = thread::scope(|s| {
            let other = s.spawn(|| {
                let mut segments = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(segment) = alloc.allocate(0, CONTENDED_SEGMENT, StreamId::DEFAULT) {
                        drop(segment);
                        segments += 1;
                    }
                    if alloc.empty_cache().is_err() {
                        break;
                    }
                }
                segments
            });
            let pair_ns = median_pair_ns(&alloc, StreamId::DEFAULT);
            stop.store(true, Ordering::Relaxed);
            (pair_ns, other.join().unwrap_or(0))
        });
        let per_second = segments as f64 / started.elapsed().as_secs_f64();
        let flag = if release { "on" } else { "off" };
        println!(
            "lock release_lock_on_cudamalloc={flag} pair_ns={pair_ns:.1} other_thread_segments_per_s={per_second:.0}"
        );
        drop(anchor);
    }
}

fn main() {
    let gpu = match Gpu::open() {
        Ok(gpu) => gpu,
        Err(why) => {
            eprintln!("benches/cuda: skipped, no usable NVIDIA GPU: {why}");
            return;
        }
    };
    let mut c = Criterion::default().configure_from_args();
    criterion_groups(&gpu, &mut c);
    c.final_summary();
    // `--list` and `--test` runs measure nothing more.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        return;
    }
    ratio_table(&gpu);
    lock_table();
}
