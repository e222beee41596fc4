//! # blockpool-torch
//!
//! blockpool as PyTorch's CUDA allocator: `libblockpool_torch.so`, a shared library with the
//! C interface of `include/blockpool_torch.h`. Its first two functions are what PyTorch's
//! `CUDAPluggableAllocator` loads; the others give back what PyTorch loses when it swaps
//! allocators (`memory_stats`, `memory_summary`, `empty_cache`, the memory fraction,
//! `record_stream`, `_record_memory_history` and `_dump_snapshot`, the out-of-memory message)
//! and add blockpool's leak scopes and step detector. The header is the contract; this crate
//! implements it over one [`blockpool::CachingAllocator`] per process.
//!
//! ## Turning it on in PyTorch
//!
//! Before the first CUDA allocation of the process:
//!
//! ```python
//! import torch
//! alloc = torch.cuda.memory.CUDAPluggableAllocator("libblockpool_torch.so", "blockpool_malloc", "blockpool_free")
//! torch.cuda.memory.change_current_allocator(alloc)
//! ```
//!
//! PyTorch 2.0's free function had no device argument: there, load `"blockpool_free_v0"` as
//! the free function instead (PyTorch 2.1 added the device; both find a pointer's device in
//! the allocator's pointer map, so either is correct wherever its signature matches).
//!
//! ## Choosing the device
//!
//! The allocator is made on the first call that needs it (every function but the two message
//! functions, the annotation stack and a zero-byte `blockpool_malloc`), from the environment:
//!
//! | variable | values | meaning |
//! |---|---|---|
//! | `BLOCKPOOL_BACKEND` | `auto` (or unset), `cuda`, `sim` | `auto` and `cuda`: the GPUs through the driver; without a usable driver every call fails (`blockpool_malloc` returns NULL) and `blockpool_last_error` and the log say why and what to do; `sim`: the simulated device (fake addresses, no memory behind them: for tests that never touch the memory), said in the log at warn level when the allocator is made |
//! | `BLOCKPOOL_SIM_DEVICES` | 1 to 1024 (default 1) | simulated devices |
//! | `BLOCKPOOL_SIM_CAPACITY` | bytes, or with `K`/`M`/`G`/`T` (powers of 1024; default `80G`) | capacity of each simulated device |
//! | `BLOCKPOOL_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF` | PyTorch's syntax | the allocator's settings (`max_split_size_mb:128,expandable_segments:True`) |
//! | `BLOCKPOOL_LOG` | `off`, `error`, `warn` (default), `info`, `debug`, `trace` | what goes to standard error when the host set no `tracing` subscriber |
//! | `RANK` | a non-negative integer (default 0) | fills in `{rank}` in a snapshot path |
//!
//! A variable that cannot be read, `cuda` without a usable driver, or a driver that is usable
//! but whose devices cannot be opened, makes every call fail with `BLOCKPOOL_ERR_BACKEND` and
//! the reason in `blockpool_last_error` (never a panic: the driver is probed before any call).
//!
//! ## Conventions (the header's, and how they are kept)
//!
//! - **No panic crosses into C.** Every exported body runs inside `catch_unwind`; a panic is
//!   logged at error level and becomes NULL, 0 or `BLOCKPOOL_ERR_PANIC`, with the message in
//!   `blockpool_last_error`. No panic hook is installed.
//! - **Errors.** `int` functions return 0 or a negative `BLOCKPOOL_ERR_*` code ([`Error::code`]);
//!   `blockpool_last_error` gives this thread's last failure in words; an out-of-memory also
//!   sets the process-wide `blockpool_last_oom_message` (a request larger than the device,
//!   which PyTorch also reports as out of memory, included).
//! - **Text** (JSON, the summary) is written `snprintf` style ([`copy_text`]).
//! - **Pointers.** `blockpool_free(NULL)` does nothing (logged at debug level: PyTorch frees
//!   NULL for empty tensors); an unknown or already freed pointer is logged at warn level and
//!   changes nothing. Streams are `cudaStream_t` handle values, NULL the default stream.
//! - **Logs** go to the host's `tracing` subscriber, or when it has none to standard error,
//!   one line each, prefixed `blockpool:`.
//!
//! ## Leak sites
//!
//! A leak report groups live allocations by *site*. For Rust callers a site is the source
//! line of the allocating call (`#[track_caller]`); through C every allocation is made on the
//! same line of this crate, so the plugin turns on context capture
//! ([`blockpool::LeakTracking::Context`]): a site is then the thread's annotation tags
//! followed by that line, `forward/layer3 @ torch-plugin/src/memory.rs:<line>:<column>`, and
//! `blockpool_annotate_push("forward")` is what tells PyTorch's allocations apart. The cost is
//! one clock read per allocation (the tag stack's id is cached per thread until it changes).
//! Without tags every allocation has one site, and the step detector still sees the total
//! grow. Tag phases (`forward`), not step numbers: a tag naming the step makes each step's
//! allocations a new site.
//!
//! ## JSON
//!
//! `blockpool_memory_stats_json` writes the 122 keys of `torch.cuda.memory_stats()`, sorted,
//! every value an integer (`max_split_size` is -1 when unlimited, as in PyTorch). A leak
//! report ([`leak_report_to_json`]) is `{"sites": [{"device", "site", "count", "bytes",
//! "requested_bytes", "streams", "oldest_id", "names", "raw"}], "bytes", "count", "summary"}`;
//! a scope's report ([`scope_report_to_json`]) `{"name", "peak_bytes": [per device], "clean",
//! "leaks": <leak report>}`; a detector's findings are [`blockpool::leak::StepFindings`] as
//! serde writes it, steps named by their number in decimal.
//!
//! A text can change between the `(NULL, 0)` call and the next one when other threads
//! allocate meanwhile (statistics, the leak report): a return value of `buf_len` or more
//! means it did not fit, and the call can be made again with more room. Two outputs never
//! change by being read: a finished scope's report, and a step detector's findings when the
//! same step is given again (it is observed once).
//!
//! ## History
//!
//! `blockpool_record_memory_history(0, ..)` stops recording and keeps what was recorded:
//! dumps made while it stays off write the state and events as they were when it stopped
//! (the library clears a device's history when recording stops, so the plugin snapshots it
//! first). `blockpool_dump_snapshot` writes PyTorch's pickle whatever the file name, which
//! `torch.cuda._memory_viz`, pytorch.org/memory_viz and `memtrace` open.
//!
//! ## Files
//!
//! | file | what lives there |
//! |---|---|
//! | `global.rs` | the process's allocator and the choice of backend from the environment |
//! | `memory.rs` | `blockpool_malloc`, `blockpool_free`, `blockpool_free_v0`, `blockpool_record_stream` |
//! | `stats.rs` | statistics JSON, resets, summary, `empty_cache`, memory fraction, device count |
//! | `history.rs` | history recording, `dump_snapshot`, annotation tags |
//! | `leaks.rs` | leak scopes, step detectors, the leak report |
//! | `messages.rs` | `blockpool_last_oom_message`, `blockpool_last_error` |
//! | `boundary.rs` | `catch_unwind` around every body, and what each kind of function returns |
//! | `error.rs` | [`Error`], the `BLOCKPOOL_ERR_*` codes, the remembered messages |
//! | `text.rs` | `snprintf`-style output, C string input |
//! | `log.rs` | the standard-error log used when the host set none |

mod boundary;
mod error;
mod global;
mod history;
mod leaks;
mod log;
mod memory;
mod messages;
mod stats;
mod text;

pub use error::{
    Error, BLOCKPOOL_ERR_BACKEND, BLOCKPOOL_ERR_INVALID_ARGUMENT, BLOCKPOOL_ERR_IO,
    BLOCKPOOL_ERR_NO_SUCH_DEVICE, BLOCKPOOL_ERR_OUT_OF_MEMORY, BLOCKPOOL_ERR_PANIC,
    BLOCKPOOL_ERR_UNKNOWN_HANDLE, BLOCKPOOL_ERR_UNKNOWN_POINTER, BLOCKPOOL_OK,
};
pub use global::{
    allocator, new_allocator_with, parse_byte_size, StartupError, BACKEND_ENV_VAR,
    DEFAULT_SIM_CAPACITY, DEFAULT_SIM_DEVICES, MAX_SIM_DEVICES, SIM_CAPACITY_ENV_VAR,
    SIM_DEVICES_ENV_VAR,
};
pub use history::{
    blockpool_annotate_pop, blockpool_annotate_push, blockpool_dump_snapshot,
    blockpool_record_memory_history, DEFAULT_MAX_ENTRIES, RANK_ENV_VAR,
};
pub use leaks::{
    blockpool_leak_report_json, blockpool_leak_scope_begin, blockpool_leak_scope_finish,
    blockpool_leak_scope_free, blockpool_step_detector_free, blockpool_step_detector_new,
    blockpool_step_detector_observe, leak_report_to_json, scope_report_to_json,
};
pub use log::LOG_ENV_VAR;
pub use memory::{blockpool_free, blockpool_free_v0, blockpool_malloc, blockpool_record_stream};
pub use messages::{blockpool_last_error, blockpool_last_oom_message};
pub use stats::{
    blockpool_device_count, blockpool_empty_cache, blockpool_get_memory_fraction,
    blockpool_memory_stats_json, blockpool_memory_summary,
    blockpool_reset_accumulated_memory_stats, blockpool_reset_peak_memory_stats,
    blockpool_set_memory_fraction,
};
pub use text::copy_text;
