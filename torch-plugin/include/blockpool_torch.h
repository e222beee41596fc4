/*
 * blockpool_torch.h: the C interface of blockpool's PyTorch plugin (libblockpool_torch.so).
 *
 * The first two functions are what PyTorch's CUDAPluggableAllocator loads:
 *
 *     import torch
 *     alloc = torch.cuda.memory.CUDAPluggableAllocator(
 *         "libblockpool_torch.so", "blockpool_malloc", "blockpool_free")
 *     torch.cuda.memory.change_current_allocator(alloc)
 *
 * The rest give back what PyTorch loses with a pluggable allocator (statistics, summary,
 * empty_cache, memory fraction, record_stream, history and snapshots, the out-of-memory
 * message) and add blockpool's leak scopes and step detector.
 *
 * Conventions
 * - One allocator per process, made on the first call of any function here, with one pool
 *   per device. The backend is chosen by BLOCKPOOL_BACKEND: unset, "auto" or "cuda" (the GPUs,
 *   through the driver; without a usable driver there is no allocator: every call fails,
 *   blockpool_malloc returns NULL, and blockpool_last_error and the log give the diagnosis and
 *   the fix, never simulated addresses), or "sim" (the simulated device, for tests that never
 *   touch the memory: BLOCKPOOL_SIM_DEVICES devices of BLOCKPOOL_SIM_CAPACITY bytes, default 1
 *   device of 80 GiB, said in the log when the allocator is made). BLOCKPOOL_ALLOC_CONF
 *   (falling back to PYTORCH_CUDA_ALLOC_CONF) configures it in PyTorch's syntax.
 * - Streams are PyTorch's cudaStream_t values, passed as they are; NULL is the default stream.
 * - Every function is thread-safe and never lets a panic cross into C: a panic is caught,
 *   logged, and turned into NULL or BLOCKPOOL_ERR_PANIC.
 * - Functions returning int return 0 (BLOCKPOOL_OK) on success and a negative
 *   BLOCKPOOL_ERR_* code on failure; blockpool_last_error() then says why, in words.
 * - Functions that produce text (JSON or a table) write it into a caller buffer, snprintf
 *   style: they return the text's length in bytes (not counting the terminating NUL) whether
 *   or not it fit; when buf_len > 0 they write at most buf_len - 1 bytes and a NUL. Call once
 *   with (NULL, 0) to learn the length. A negative return is a BLOCKPOOL_ERR_* code.
 * - Log lines (null, unknown and double-freed pointers; caught panics) go to standard error
 *   through the `tracing` crate's default subscriber when none is set, prefixed "blockpool:".
 */
#ifndef BLOCKPOOL_TORCH_H
#define BLOCKPOOL_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#define BLOCKPOOL_OK 0
#define BLOCKPOOL_ERR_INVALID_ARGUMENT (-1) /* a bad value: NULL path, fraction outside [0, 1], ... */
#define BLOCKPOOL_ERR_NO_SUCH_DEVICE (-2)   /* device index outside 0 .. device count - 1 */
#define BLOCKPOOL_ERR_BACKEND (-3)          /* the backend could not start (no driver, ...) */
#define BLOCKPOOL_ERR_OUT_OF_MEMORY (-4)    /* see blockpool_last_oom_message() */
#define BLOCKPOOL_ERR_IO (-5)               /* a file could not be written */
#define BLOCKPOOL_ERR_UNKNOWN_POINTER (-6)  /* not a live pointer of this allocator */
#define BLOCKPOOL_ERR_UNKNOWN_HANDLE (-7)   /* a leak scope or step detector id not live */
#define BLOCKPOOL_ERR_PANIC (-8)            /* a bug in blockpool, caught and logged */

/* ---- What CUDAPluggableAllocator loads (PyTorch >= 2.1) ---------------------------- */

/* Allocates size bytes on device for use on stream. Returns NULL on failure (out of memory:
 * blockpool_last_oom_message() has PyTorch-style text; other errors: blockpool_last_error()).
 * size 0 returns NULL without error, as PyTorch expects. */
void *blockpool_malloc(ssize_t size, int device, void *stream);

/* Frees ptr (from blockpool_malloc). NULL is ignored; an unknown or already freed pointer is
 * logged and changes nothing. size, device and stream are what PyTorch passes; the pointer
 * map is what decides. */
void blockpool_free(void *ptr, ssize_t size, int device, void *stream);

/* PyTorch 2.0's free had no device argument: load this one as the free function there. */
void blockpool_free_v0(void *ptr, ssize_t size, void *stream);

/* ---- Statistics (torch.cuda.memory_stats and friends) ------------------------------ */

/* torch.cuda.memory_stats(device) as one JSON object with the same flat keys
 * ("allocated_bytes.all.current", "num_ooms", ...), integers only. */
ssize_t blockpool_memory_stats_json(int device, char *buf, size_t buf_len);

int blockpool_reset_peak_memory_stats(int device);
int blockpool_reset_accumulated_memory_stats(int device);

/* torch.cuda.memory_summary(device, abbreviated): PyTorch's table. */
ssize_t blockpool_memory_summary(int device, int abbreviated, char *buf, size_t buf_len);

/* torch.cuda.empty_cache(): every device. */
int blockpool_empty_cache(void);

/* torch.cuda.set_per_process_memory_fraction(fraction, device), 0 <= fraction <= 1. */
int blockpool_set_memory_fraction(double fraction, int device);

/* The fraction in force on device into *fraction, or -1.0 when none is set. */
int blockpool_get_memory_fraction(int device, double *fraction);

/* Tensor.record_stream(stream): ptr (any pointer from blockpool_malloc) is also used on
 * stream, so its reuse waits for the work queued there. */
int blockpool_record_stream(void *ptr, void *stream);

/* Number of devices the allocator manages. */
int blockpool_device_count(void);

/* ---- History, snapshots, out of memory --------------------------------------------- */

/* torch.cuda.memory._record_memory_history: enabled 0 stops recording (the ring is kept for
 * the next dump); otherwise keep the last max_entries events per device (0: PyTorch's
 * default, 100000) with context: 0 none, 1 annotation tags (blockpool_annotate_push),
 * 2 tags and native backtraces. */
int blockpool_record_memory_history(int enabled, size_t max_entries, int context);

/* torch.cuda.memory._dump_snapshot(path): PyTorch's snapshot pickle (memory_viz and
 * `memtrace` open it). "{rank}" in path is replaced by the RANK environment variable (0 when
 * unset). */
int blockpool_dump_snapshot(const char *path);

/* The message of the last out-of-memory failure in this process (any thread), laid out as
 * PyTorch's ("out of memory: tried to allocate 12.00 MiB. Device 0 has a total capacity of
 * ... of which ... is free. ... allocated by blockpool, and ... reserved by blockpool but
 * unallocated. If reserved but unallocated memory is large try setting max_split_size_mb or
 * expandable_segments:True ..."); length 0 when there has been none. */
ssize_t blockpool_last_oom_message(char *buf, size_t buf_len);

/* Why the last failing call on this thread failed; length 0 when none has. */
ssize_t blockpool_last_error(char *buf, size_t buf_len);

/* Tags for the sites of allocations made on this thread (a stack, as blockpool::annotate). */
int blockpool_annotate_push(const char *tag);
int blockpool_annotate_pop(void);

/* ---- Leaks ------------------------------------------------------------------------- */

/* Starts a leak scope; returns its id (> 0), or 0 on failure (blockpool_last_error). */
uint64_t blockpool_leak_scope_begin(const char *name);

/* Ends scope `id` (the first call) and writes its report as JSON: what was allocated inside
 * it and is still alive, by device and site, with the scope's peak. Later calls write the
 * same report until blockpool_leak_scope_free(id). */
ssize_t blockpool_leak_scope_finish(uint64_t id, char *buf, size_t buf_len);
int blockpool_leak_scope_free(uint64_t id);

/* A step detector (blockpool::leak::StepDetector): a site is growing when its live bytes or
 * count rose in each of the last growth_steps steps (0: the default, 3). Returns its id (> 0)
 * or 0 on failure. */
uint64_t blockpool_step_detector_new(size_t growth_steps);

/* Observes the live allocations of device at the end of training step `step` and writes the
 * detector's findings so far as JSON (growing sites with growth per step, persistent ones).
 * The same step as the last one observed gives the same findings without observing again,
 * so asking for the length with (NULL, 0) first still observes once. */
ssize_t blockpool_step_detector_observe(uint64_t id, uint64_t step, int device, char *buf,
                                        size_t buf_len);
int blockpool_step_detector_free(uint64_t id);

/* Live allocations now, grouped by site, as JSON (a LeakReport), e.g. at shutdown. */
ssize_t blockpool_leak_report_json(char *buf, size_t buf_len);

#ifdef __cplusplus
}
#endif

#endif /* BLOCKPOOL_TORCH_H */
