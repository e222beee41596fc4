//! The plugin's 16-thread phase over the C interface on the simulated device, in a process
//! that first made the history-settings and leak-handle misuse calls its tests make (all
//! refused), beside the same phase in a process that made none.
//!
//! Each variant runs in a process of its own (this binary runs itself again), so the one that
//! made the misuse calls cannot share state with the other. Two more variants leave history
//! recording on after the misuse (tags, then tags and call stacks): the one state those calls
//! can leave behind that costs the phase time. Prints one line per variant: seconds for the
//! phase, and nanoseconds per operation.
//!
//! ```sh
//! cargo bench -p blockpool-torch --bench misuse_phase            # 16 threads x 20,000 rounds
//! cargo bench -p blockpool-torch --bench misuse_phase -- 100000  # 16 x 1e5 (the issue's)
//! ```

use std::ffi::c_void;
use std::process::Command;
use std::time::Instant;

use blockpool_torch::*;

const THREADS: usize = 16;
const SIZES: [isize; 4] = [512, 4096, 100_000, 1 << 20];
/// The variants that leave history recording on after the misuse calls, with the context
/// level `blockpool_record_memory_history` was given (2: native call stacks).
const HISTORY_VARIANTS: [(&str, i32); 2] = [("+ history tags", 1), ("+ history stacks", 2)];
/// Set in the child process: the variant to run.
const VARIANT_VAR: &str = "BLOCKPOOL_BENCH_MISUSE_VARIANT";

/// The history-settings and leak-handle misuse of the plugin's tests (`tests/abi`), each call
/// checked to be refused as it should.
fn misuse() {
    assert_eq!(
        blockpool_record_memory_history(1, 0, 3),
        BLOCKPOOL_ERR_INVALID_ARGUMENT
    );
    assert_eq!(blockpool_record_memory_history(0, 0, 3), BLOCKPOOL_OK);
    assert_eq!(
        blockpool_record_memory_history(1, 0, -1),
        BLOCKPOOL_ERR_INVALID_ARGUMENT
    );
    // SAFETY: NULL is refused before it is read.
    assert_eq!(unsafe { blockpool_leak_scope_begin(std::ptr::null()) }, 0);
    let detector = blockpool_step_detector_new(0);
    assert!(detector > 0);
    // SAFETY: a NULL buffer with 0 only asks for the length.
    let wrong = unsafe { blockpool_leak_scope_finish(detector, std::ptr::null_mut(), 0) };
    assert_eq!(wrong, BLOCKPOOL_ERR_UNKNOWN_HANDLE as isize);
    assert_eq!(
        blockpool_leak_scope_free(detector),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(blockpool_step_detector_free(detector), BLOCKPOOL_OK);
    assert_eq!(
        blockpool_step_detector_free(detector),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(
        blockpool_leak_scope_free(12345),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    // SAFETY: a NULL buffer with 0 only asks for the length.
    let unknown = unsafe { blockpool_step_detector_observe(999, 0, 0, std::ptr::null_mut(), 0) };
    assert_eq!(unknown, BLOCKPOOL_ERR_UNKNOWN_HANDLE as isize);
    // The rest of the history and handle functions given bad arguments.
    assert_eq!(
        blockpool_step_detector_new(usize::MAX),
        0,
        "too many growth steps"
    );
    let detector = blockpool_step_detector_new(2);
    // SAFETY: as above; device 7 does not exist.
    let bad_device =
        unsafe { blockpool_step_detector_observe(detector, 1, 7, std::ptr::null_mut(), 0) };
    assert!(bad_device < 0);
    // SAFETY: as above; device -1 is refused.
    let negative =
        unsafe { blockpool_step_detector_observe(detector, 1, -1, std::ptr::null_mut(), 0) };
    assert!(negative < 0);
    assert_eq!(blockpool_step_detector_free(detector), BLOCKPOOL_OK);
    // SAFETY: NULL is refused before it is read.
    let null_path = unsafe { blockpool_dump_snapshot(std::ptr::null()) };
    assert_eq!(null_path, BLOCKPOOL_ERR_INVALID_ARGUMENT);
    // SAFETY: a NUL-terminated path in a folder that does not exist.
    let unwritable = unsafe { blockpool_dump_snapshot(c"/nonexistent/dir/x.pickle".as_ptr()) };
    assert_eq!(unwritable, BLOCKPOOL_ERR_IO);
    // SAFETY: NULL is refused before it is read.
    let null_tag = unsafe { blockpool_annotate_push(std::ptr::null()) };
    assert_eq!(null_tag, BLOCKPOOL_ERR_INVALID_ARGUMENT);
    assert_eq!(blockpool_annotate_pop(), BLOCKPOOL_ERR_INVALID_ARGUMENT);
    // A scope finished with a buffer too small, then again, then freed twice.
    // SAFETY: a NUL-terminated name.
    let scope = unsafe { blockpool_leak_scope_begin(c"misuse".as_ptr()) };
    assert!(scope > 0);
    let mut small = [0 as std::ffi::c_char; 4];
    // SAFETY: `small` is a live buffer of 4 bytes.
    let length = unsafe { blockpool_leak_scope_finish(scope, small.as_mut_ptr(), small.len()) };
    assert!(length > 4);
    // SAFETY: as above.
    let again = unsafe { blockpool_leak_scope_finish(scope, small.as_mut_ptr(), small.len()) };
    assert_eq!(again, length);
    assert_eq!(
        blockpool_step_detector_free(scope),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    assert_eq!(blockpool_leak_scope_free(scope), BLOCKPOOL_OK);
    assert_eq!(
        blockpool_leak_scope_free(scope),
        BLOCKPOOL_ERR_UNKNOWN_HANDLE
    );
    // SAFETY: a NULL buffer with 0 only asks for the length.
    assert!(unsafe { blockpool_leak_report_json(std::ptr::null_mut(), 0) } > 0);
}

/// Every other function of the interface given bad arguments, and an out-of-memory, each
/// refused as it should be.
fn misuse_everything_else() {
    assert!(blockpool_malloc(-1, 0, std::ptr::null_mut()).is_null());
    assert!(blockpool_malloc(16, 99, std::ptr::null_mut()).is_null());
    assert!(blockpool_malloc(16, -1, std::ptr::null_mut()).is_null());
    assert!(
        blockpool_malloc(1 << 50, 0, std::ptr::null_mut()).is_null(),
        "out of memory"
    );
    blockpool_free(0xdead_0000 as *mut c_void, 16, 0, std::ptr::null_mut());
    blockpool_free(0xdead_0000 as *mut c_void, 16, 99, std::ptr::null_mut());
    blockpool_free_v0(0xdead_0000 as *mut c_void, 16, std::ptr::null_mut());
    let ptr = blockpool_malloc(4096, 0, std::ptr::null_mut());
    blockpool_free(ptr, 4096, 0, std::ptr::null_mut());
    blockpool_free(ptr, 4096, 0, std::ptr::null_mut());
    assert_eq!(
        blockpool_record_stream(0xdead_0000 as *mut c_void, std::ptr::null_mut()),
        BLOCKPOOL_ERR_UNKNOWN_POINTER
    );
    // SAFETY: NULL buffers with 0 only ask for the length.
    unsafe {
        assert!(blockpool_memory_stats_json(99, std::ptr::null_mut(), 0) < 0);
        assert!(blockpool_memory_summary(-1, 0, std::ptr::null_mut(), 0) < 0);
        assert!(blockpool_get_memory_fraction(99, std::ptr::null_mut()) < 0);
    }
    assert!(blockpool_reset_peak_memory_stats(99) < 0);
    assert!(blockpool_reset_accumulated_memory_stats(-1) < 0);
    assert!(blockpool_set_memory_fraction(2.0, 0) < 0);
    assert!(blockpool_set_memory_fraction(f64::NAN, 0) < 0);
    assert!(blockpool_set_memory_fraction(0.5, 99) < 0);
    assert_eq!(blockpool_empty_cache(), BLOCKPOOL_OK);
}

/// 16 threads, each on a stream of its own, allocating the four sizes and freeing them,
/// `rounds` times; the seconds it took.
fn phase(rounds: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            scope.spawn(move || {
                let stream = (t + 1) as *mut c_void;
                for _ in 0..rounds {
                    let mut ptrs = [std::ptr::null_mut(); SIZES.len()];
                    for (ptr, &size) in ptrs.iter_mut().zip(&SIZES) {
                        *ptr = blockpool_malloc(size, 0, stream);
                        assert!(!ptr.is_null());
                    }
                    for (ptr, &size) in ptrs.iter().zip(&SIZES).rev() {
                        blockpool_free(*ptr, size, 0, stream);
                    }
                }
            });
        }
    });
    start.elapsed().as_secs_f64()
}

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000);
    if let Ok(variant) = std::env::var(VARIANT_VAR) {
        assert_eq!(blockpool_device_count(), 1, "the simulated device");
        if variant != "no misuse" {
            misuse();
        }
        if variant == "after all misuse" {
            misuse_everything_else();
        }
        // Recording left on by a valid call among the checks (a refused call keeps the
        // setting before it, as PyTorch's does).
        if let Some(context) = HISTORY_VARIANTS
            .iter()
            .find_map(|&(name, context)| (name == variant).then_some(context))
        {
            assert_eq!(blockpool_record_memory_history(1, 0, context), BLOCKPOOL_OK);
        }
        let seconds = phase(rounds);
        let ops = (THREADS * rounds * SIZES.len() * 2) as f64;
        println!(
            "{variant:>18}: {THREADS} threads x {rounds} rounds: {seconds:.3} s, {:.0} ns per operation",
            seconds * 1e9 / ops
        );
        return;
    }
    let exe = std::env::current_exe().expect("this binary");
    let variants = ["no misuse", "after misuse", "after all misuse"];
    for variant in variants
        .into_iter()
        .chain(HISTORY_VARIANTS.map(|(name, _)| name))
    {
        let status = Command::new(&exe)
            .arg(rounds.to_string())
            .env(VARIANT_VAR, variant)
            .env("BLOCKPOOL_BACKEND", "sim")
            .env("BLOCKPOOL_SIM_CAPACITY", "8G")
            .env("BLOCKPOOL_LOG", "off")
            .status()
            .expect("run the variant");
        assert!(status.success(), "{variant} failed");
    }
}
