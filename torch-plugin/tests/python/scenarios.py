"""Programs that test_library.py runs, each in a fresh process, over the real library.

`python3 scenarios.py NAME [ARGS]` runs one over the simulated device (the caller sets
BLOCKPOOL_BACKEND=sim and BLOCKPOOL_TORCH_LIB) and prints its findings as one line of JSON
on standard output; the test asserts on them. A process per scenario because the library
keeps one allocator per process: exact statistics need one no other test has used.

The C functions are called through ctypes exactly as declared in _lib.SIGNATURES (the raw
``cdll``), the rest through the package.
"""

import json
import random
import sys
import threading

import support  # noqa: F401  (puts the package on sys.path)

import blockpool_torch
from blockpool_torch import _lib

KIB = 1 << 10
MIB = 1 << 20

# Every statistic a scenario reports, whatever it checks.
STAT_KEYS = (
    "active.all.current",
    "active_bytes.all.current",
    "allocated_bytes.all.allocated",
    "allocated_bytes.all.current",
    "allocated_bytes.all.freed",
    "allocated_bytes.all.peak",
    "allocated_bytes.large_pool.current",
    "allocated_bytes.small_pool.current",
    "allocation.all.allocated",
    "allocation.all.current",
    "allocation.all.freed",
    "allocation.all.peak",
    "inactive_split.all.current",
    "inactive_split_bytes.all.current",
    "inactive_split_bytes.large_pool.current",
    "inactive_split_bytes.small_pool.current",
    "num_device_alloc",
    "num_device_free",
    "num_ooms",
    "requested_bytes.all.current",
    "reserved_bytes.all.current",
    "reserved_bytes.all.freed",
    "reserved_bytes.all.peak",
    "reserved_bytes.large_pool.current",
    "reserved_bytes.small_pool.current",
    "segment.all.current",
)


def stats(device=0):
    every = blockpool_torch.memory_stats(device)
    return {key: every[key] for key in STAT_KEYS}


def threads(workers="8", rounds="400"):
    """Workers allocate and free at once, each holding up to 4 blocks; every block handed
    out is checked against every other live one for overlap, under one lock."""
    workers, rounds = int(workers), int(rounds)
    library = _lib.get()
    malloc, free = library.cdll.blockpool_malloc, library.cdll.blockpool_free
    sizes = (512, 1000, 4 * KIB, 100 * KIB, MIB, 3 * MIB, 12 * MIB)
    live = {}  # ptr -> size, every thread's
    lock = threading.Lock()
    problems = []
    counts = {"malloc": 0, "free": 0}

    def worker(seed):
        rng = random.Random(seed)
        mine = []
        for _ in range(rounds):
            if len(mine) < 4 and (not mine or rng.random() < 0.6):
                size = rng.choice(sizes)
                ptr = malloc(size, 0, None)
                with lock:
                    counts["malloc"] += 1
                    if not ptr:
                        problems.append(f"NULL for {size} bytes")
                        continue
                    for other, other_size in live.items():
                        if ptr < other + other_size and other < ptr + size:
                            problems.append(f"{ptr:#x}+{size} overlaps {other:#x}+{other_size}")
                    live[ptr] = size
                mine.append((ptr, size))
            else:
                ptr, size = mine.pop(rng.randrange(len(mine)))
                with lock:
                    del live[ptr]
                    counts["free"] += 1
                free(ptr, size, 0, None)
        for ptr, size in mine:
            with lock:
                del live[ptr]
                counts["free"] += 1
            free(ptr, size, 0, None)

    pool = [threading.Thread(target=worker, args=(seed,)) for seed in range(workers)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return {"problems": problems[:10], "counts": counts, "stats": stats()}


def exact_stats():
    """A small block and a large one, freed one by one, then empty_cache and the resets:
    the statistics after each step, and what the package's functions say."""
    cdll = _lib.get().cdll
    steps = {}
    steps["zero_size_is_null"] = cdll.blockpool_malloc(0, 0, None) is None
    small = cdll.blockpool_malloc(1000, 0, None)
    large = cdll.blockpool_malloc(5 * MIB, 0, None)
    steps["both"] = stats()
    steps["functions"] = [
        blockpool_torch.memory_allocated(),
        blockpool_torch.max_memory_allocated(),
        blockpool_torch.memory_reserved(),
        blockpool_torch.max_memory_reserved(),
    ]
    steps["summary_head"] = blockpool_torch.memory_summary().splitlines()[1]
    steps["abbreviated_lines"] = len(blockpool_torch.memory_summary(abbreviated=True).splitlines())
    steps["full_lines"] = len(blockpool_torch.memory_summary().splitlines())
    cdll.blockpool_free(small, 1000, 0, None)
    steps["small_freed"] = stats()
    cdll.blockpool_free(large, 5 * MIB, 0, None)
    steps["large_freed"] = stats()
    blockpool_torch.empty_cache()
    steps["emptied"] = stats()
    blockpool_torch.reset_peak_memory_stats()
    steps["peaks_reset"] = stats()
    blockpool_torch.reset_accumulated_memory_stats()
    steps["accumulated_reset"] = stats()
    steps["keys"] = len(blockpool_torch.memory_stats())
    steps["sorted"] = list(blockpool_torch.memory_stats()) == sorted(blockpool_torch.memory_stats())
    steps["all_ints"] = all(type(v) is int for v in blockpool_torch.memory_stats().values())
    return steps


def bad_pointers():
    """A double free, an unknown pointer, NULL, the v0 free of a freed pointer and
    record_stream of an unknown pointer: logged or refused, nothing changed."""
    cdll = _lib.get().cdll
    ptr = cdll.blockpool_malloc(4096, 0, None)
    cdll.blockpool_free(ptr, 4096, 0, None)
    after_free = stats()
    cdll.blockpool_free(ptr, 4096, 0, None)
    cdll.blockpool_free(0xDEAD0000, 4096, 0, None)
    cdll.blockpool_free(None, 4096, 0, None)
    cdll.blockpool_free_v0(ptr, 4096, None)
    record = cdll.blockpool_record_stream(0xDEAD0000, None)
    error = _lib.get().last_error()
    # Stderr is written by the library's own logger; flush it before the JSON.
    sys.stderr.flush()
    return {
        "ptr": ptr,
        "after_free": after_free,
        "after_bad": stats(),
        "record_stream_code": record,
        "record_stream_error": error,
    }


def snapshot(directory):
    """History on, two tagged allocations, both freed, the cache emptied, a snapshot per
    the package ("{rank}" by RANK) and one per the C function alone."""
    cdll = _lib.get().cdll
    blockpool_torch.record_memory_history("all", context="all", stacks="python")
    with blockpool_torch.annotate("layer1"):
        small = cdll.blockpool_malloc(1000, 0, None)
        large = cdll.blockpool_malloc(5 * MIB, 0, None)
    cdll.blockpool_free(small, 1000, 0, None)
    cdll.blockpool_free(large, 5 * MIB, 0, None)
    blockpool_torch.empty_cache()
    written = blockpool_torch.dump_snapshot(directory + "/run-{rank}.pickle")
    _lib.get().dump_snapshot(directory + "/c-{rank}.pickle")
    return {"written": written, "small": small, "large": large}


def out_of_memory():
    """On a 64 MiB device: a request the device can never hold, one that does not fit now
    (inside oom_errors(), without torch), one over a memory fraction, and bad fractions."""
    cdll = _lib.get().cdll
    result = {"before": blockpool_torch.last_oom_message()}
    result["never_fits_ptr"] = cdll.blockpool_malloc(1 << 30, 0, None)
    result["never_fits"] = blockpool_torch.last_oom_message()
    held = cdll.blockpool_malloc(40 * MIB, 0, None)
    result["held"] = held is not None
    try:
        with blockpool_torch.oom_errors():
            if cdll.blockpool_malloc(40 * MIB, 0, None) is None:
                raise RuntimeError(
                    "The tensor has a non-zero number of elements, but its data is not allocated yet."
                )
    except Exception as error:
        result["raised"] = [type(error).__name__, str(error), type(error.__cause__).__name__]
    cdll.blockpool_free(held, 40 * MIB, 0, None)
    # The fraction caps new segments; a cached block is reused whatever it says (PyTorch's
    # rule), so the cache is emptied first.
    blockpool_torch.empty_cache()
    blockpool_torch.set_per_process_memory_fraction(0.5)
    result["fraction"] = blockpool_torch.get_per_process_memory_fraction()
    result["over_fraction_ptr"] = cdll.blockpool_malloc(40 * MIB, 0, None)
    result["over_fraction"] = blockpool_torch.last_oom_message()
    result["under_fraction"] = cdll.blockpool_malloc(20 * MIB, 0, None) is not None
    result["num_ooms"] = blockpool_torch.memory_stats()["num_ooms"]
    try:
        blockpool_torch.set_per_process_memory_fraction(1.5)
    except ValueError as error:
        result["bad_fraction"] = str(error)
    code = cdll.blockpool_set_memory_fraction(1.5, 0)
    result["bad_fraction_c"] = [code, _lib.get().last_error()]
    return result


def leaks():
    """A leak scope keeping one of two tagged blocks; a step detector over a loop that keeps
    1 MiB per step beside weights allocated once."""
    cdll = _lib.get().cdll
    with blockpool_torch.annotate("weights"):
        weights = cdll.blockpool_malloc(8 * MIB, 0, None)
    with blockpool_torch.leak_scope("eval") as scope:
        with blockpool_torch.annotate("eval.cache"):
            kept = cdll.blockpool_malloc(1000, 0, None)
            dropped = cdll.blockpool_malloc(3000, 0, None)
        cdll.blockpool_free(dropped, 3000, 0, None)
    findings = []
    with blockpool_torch.StepDetector(growth_steps=3) as detector:
        for step in range(6):
            with blockpool_torch.annotate("history.push"):
                cdll.blockpool_malloc(MIB, 0, None)
            transient = cdll.blockpool_malloc(2 * MIB, 0, None)
            cdll.blockpool_free(transient, 2 * MIB, 0, None)
            findings.append(detector.observe(step))
        repeated = detector.observe(5)
    return {
        "repeated": repeated,
        "scope": scope.report,
        "findings": findings,
        "report": blockpool_torch.leak_report(),
        "weights": weights is not None,
        "kept": kept is not None,
    }


def devices():
    """Two simulated devices: allocations land on the one asked for; a third is refused."""
    cdll = _lib.get().cdll
    ptr = cdll.blockpool_malloc(4096, 1, None)
    result = {
        "count": blockpool_torch.device_count(),
        "device0": blockpool_torch.memory_allocated(0),
        "device1": blockpool_torch.memory_allocated("cuda:1"),
    }
    try:
        blockpool_torch.memory_stats(2)
    except blockpool_torch.NoSuchDeviceError as error:
        result["device2"] = [error.code, str(error)]
    cdll.blockpool_free(ptr, 4096, 1, None)
    result["device1_after"] = blockpool_torch.memory_allocated(1)
    return result


if __name__ == "__main__":
    name, *arguments = sys.argv[1:]
    print(json.dumps(globals()[name](*arguments)))
