"""blockpool as PyTorch's CUDA allocator, keeping the tools PyTorch loses when it swaps one.

Turn it on before the first CUDA allocation::

    import torch
    import blockpool_torch
    blockpool_torch.enable()

then use ``blockpool_torch`` where you would use ``torch.cuda`` for the allocator:

=====================================  ===================================================
memory_stats, memory_allocated,        torch.cuda's names, arguments and return types
max_memory_allocated, memory_reserved, (torch.cuda's own fail with a pluggable allocator)
max_memory_reserved, memory_summary,
reset_peak_memory_stats,
reset_accumulated_memory_stats
empty_cache,                           act on blockpool (torch.cuda's do nothing with a
set_per_process_memory_fraction,       pluggable allocator)
record_stream
record_memory_history, dump_snapshot   PyTorch's snapshot pickle ("{rank}" in the path)
oom_errors, last_oom_message           torch.cuda.OutOfMemoryError with blockpool's message
annotate, leak_scope, StepDetector,    blockpool's sites, leak scopes, step detector
leak_report
=====================================  ===================================================

Only enable() needs torch; the rest works without it (on the simulated device:
BLOCKPOOL_BACKEND=sim). The library is the one `pip install ./torch-plugin` bundles, or the
one BLOCKPOOL_TORCH_LIB names.
"""

from ._errors import (
    BackendError,
    BlockpoolError,
    InvalidArgumentError,
    NoSuchDeviceError,
    OutOfMemoryError,
    PanicError,
    SnapshotWriteError,
    UnknownHandleError,
    UnknownPointerError,
)
from ._lib import LibraryNotFoundError, library_path
from .allocator import enable, is_enabled
from .history import annotate, dump_snapshot, record_memory_history
from .leaks import LeakScope, StepDetector, leak_report, leak_scope
from .oom import last_oom_message, oom_errors
from .stats import (
    device_count,
    empty_cache,
    get_per_process_memory_fraction,
    max_memory_allocated,
    max_memory_reserved,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    record_stream,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BlockpoolError",
    "InvalidArgumentError",
    "LeakScope",
    "LibraryNotFoundError",
    "NoSuchDeviceError",
    "OutOfMemoryError",
    "PanicError",
    "SnapshotWriteError",
    "StepDetector",
    "UnknownHandleError",
    "UnknownPointerError",
    "annotate",
    "device_count",
    "dump_snapshot",
    "empty_cache",
    "enable",
    "get_per_process_memory_fraction",
    "is_enabled",
    "last_oom_message",
    "leak_report",
    "leak_scope",
    "library_path",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "oom_errors",
    "record_memory_history",
    "record_stream",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
]
