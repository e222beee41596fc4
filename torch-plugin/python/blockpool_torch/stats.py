"""What torch.cuda answers about its allocator, answered by blockpool.

With a pluggable allocator, torch.cuda.memory_stats() and everything built on it
(memory_allocated, max_memory_allocated, memory_reserved, memory_summary, reset_peak_memory_
stats) fail with "CUDAPluggableAllocator does not yet support ...", and empty_cache,
set_per_process_memory_fraction and Tensor.record_stream silently do nothing. These functions
have torch.cuda's names, arguments and return types, and reach blockpool's allocator directly.

``device`` is read as torch.cuda reads it: None for the current device, an int, "cuda:1" or a
torch.device. Without torch (or before CUDA is initialized) the current device is 0.
"""

import collections
import json
from typing import Any, Optional

from . import _lib, _torch

Device = Any


def memory_stats(device: Device = None) -> "collections.OrderedDict[str, int]":
    """torch.cuda.memory_stats(device): the allocator's statistics with PyTorch's flat keys
    ("allocated_bytes.all.current", "num_ooms", ...), sorted by key, all integers."""
    text = _lib.get().memory_stats_json(_torch.device_index(device))
    stats = json.loads(text)
    if not isinstance(stats, dict):
        raise ValueError(f"blockpool_memory_stats_json gave {type(stats).__name__}, not an object")
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device: Device = None) -> int:
    """Bytes in blocks handed out and not yet freed (torch.cuda.memory_allocated)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Device = None) -> int:
    """Peak of memory_allocated() since the start or reset_peak_memory_stats()."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Device = None) -> int:
    """Bytes in segments the allocator holds from the device (torch.cuda.memory_reserved)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Device = None) -> int:
    """Peak of memory_reserved() since the start or reset_peak_memory_stats()."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Device = None) -> None:
    """Sets every "peak" statistic to its current value (torch.cuda.reset_peak_memory_stats)."""
    _lib.get().reset_peak_memory_stats(_torch.device_index(device))


def reset_accumulated_memory_stats(device: Device = None) -> None:
    """Zeroes the "allocated"/"freed" totals and the event counters such as num_ooms
    (torch.cuda.reset_accumulated_memory_stats)."""
    _lib.get().reset_accumulated_memory_stats(_torch.device_index(device))


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """torch.cuda.memory_summary(device, abbreviated): PyTorch's table of the statistics."""
    return _lib.get().memory_summary(_torch.device_index(device), bool(abbreviated))


def empty_cache() -> None:
    """Returns every wholly free cached segment, on every device, to the driver
    (torch.cuda.empty_cache)."""
    _lib.get().empty_cache()


def set_per_process_memory_fraction(fraction: float, device: Device = None) -> None:
    """Caps what the allocator may reserve on ``device`` at ``fraction`` of its memory; going
    over is an out-of-memory error (torch.cuda.set_per_process_memory_fraction)."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _lib.get().set_memory_fraction(fraction, _torch.device_index(device))


def get_per_process_memory_fraction(device: Device = None) -> float:
    """The fraction set on ``device``; 1.0 (all of it) when none is set, as in PyTorch."""
    fraction: Optional[float] = _lib.get().get_memory_fraction(_torch.device_index(device))
    return 1.0 if fraction is None else fraction


def record_stream(tensor_or_ptr: Any, stream: Any) -> None:
    """Tensor.record_stream(stream) for blockpool: the allocation is also used on ``stream``,
    so its memory is not reused until the work queued there when it is freed has finished.

    PyTorch does not forward Tensor.record_stream to a pluggable allocator, so code that
    shares tensors across streams calls this as well (or instead). ``tensor_or_ptr`` is a
    CUDA tensor (its storage's allocation is meant) or a pointer from blockpool_malloc;
    ``stream`` a torch.cuda.Stream or a cudaStream_t as an int.
    """
    _lib.get().record_stream(_torch.pointer_of(tensor_or_ptr), _torch.stream_handle(stream))


def device_count() -> int:
    """The devices blockpool manages (the GPUs the driver shows, or the simulated ones)."""
    return _lib.get().device_count()
