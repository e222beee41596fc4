"""Everything blockpool_torch asks of PyTorch, in one place, with torch imported lazily.

The statistics, history and leak functions work without torch (over the simulated device, in
tests, in tools that only read numbers), so nothing here imports torch at module import time,
and every question has an answer for a process without it: the current device is then 0 and
the rank comes from the RANK variable.

A device is never asked of torch in a way that initializes CUDA: torch.cuda.current_device()
initializes CUDA and with it PyTorch's allocator, after which enable() can no longer swap it.
Until CUDA is initialized no tensor lives on a GPU and the current device is 0 (what
torch.cuda.set_device() would change also initializes CUDA).
"""

import importlib
import os
import re
from typing import Any, Optional, Tuple

RANK_ENV = "RANK"


def module() -> Optional[Any]:
    """The torch module, or None when it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def require(feature: str) -> Any:
    """The torch module; ImportError naming ``feature`` when torch is not installed."""
    torch = module()
    if torch is None:
        raise ImportError(f"{feature} needs PyTorch, and `import torch` failed")
    return torch


def version(torch: Any) -> Tuple[int, int]:
    """(major, minor) of ``torch.__version__`` ("2.1.0+cu121" -> (2, 1))."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(getattr(torch, "__version__", "")))
    if match is None:
        raise RuntimeError(f"cannot read PyTorch's version from {torch.__version__!r}")
    return int(match.group(1)), int(match.group(2))


def cuda_initialized(torch: Any) -> bool:
    """Whether torch has initialized CUDA (and so its allocator) in this process."""
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def current_device() -> int:
    """torch.cuda.current_device() once torch has initialized CUDA, else 0."""
    torch = module()
    if torch is None or not cuda_initialized(torch):
        return 0
    return int(torch.cuda.current_device())


def device_index(device: Any = None) -> int:
    """The CUDA device index that ``device`` means, as torch.cuda's functions read it.

    None (and torch.device("cuda") without an index) is the current device; an int is itself;
    "cuda:1" and torch.device("cuda", 1) are 1. Anything not a CUDA device is a ValueError.
    """
    if device is None:
        return current_device()
    if isinstance(device, bool):
        raise TypeError(f"a device is an int, a string or a torch.device, not {device!r}")
    if isinstance(device, int):
        index = device
    else:
        if isinstance(device, str):
            kind, _, number = device.partition(":")
            index = int(number) if number else None
        elif hasattr(device, "type") and hasattr(device, "index"):
            kind, index = device.type, device.index
        else:
            raise TypeError(f"a device is an int, a string or a torch.device, not {device!r}")
        if kind != "cuda":
            raise ValueError(f"expected a CUDA device, got {device!r}")
        if index is None:
            return current_device()
    if index < 0:
        raise ValueError(f"device index must be 0 or more, got {index}")
    return index


def rank() -> int:
    """This process's rank: torch.distributed's when it is initialized, else the RANK
    variable (set by torchrun and most launchers), else 0."""
    torch = module()
    distributed = getattr(torch, "distributed", None) if torch is not None else None
    if distributed is not None:
        available = getattr(distributed, "is_available", lambda: True)()
        if available and distributed.is_initialized():
            return int(distributed.get_rank())
    value = os.environ.get(RANK_ENV, "").strip()
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{RANK_ENV}={value!r} is not a rank (an integer)") from None


def out_of_memory_error() -> Optional[type]:
    """torch.cuda.OutOfMemoryError when this torch has it (1.13 and later), else None."""
    torch = module()
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    error = getattr(cuda, "OutOfMemoryError", None) if cuda is not None else None
    return error if isinstance(error, type) else None


def pointer_of(tensor_or_ptr: Any) -> int:
    """The allocation a tensor lives in (its storage's base pointer), or an int as it is.

    The storage's pointer, not tensor.data_ptr(): a view's data_ptr() is inside an
    allocation, and blockpool knows allocations by their first byte.
    """
    if isinstance(tensor_or_ptr, bool):
        raise TypeError("expected a tensor or a pointer (int), got a bool")
    if isinstance(tensor_or_ptr, int):
        return tensor_or_ptr
    if hasattr(tensor_or_ptr, "untyped_storage"):
        return int(tensor_or_ptr.untyped_storage().data_ptr())
    if hasattr(tensor_or_ptr, "storage"):
        return int(tensor_or_ptr.storage().data_ptr())
    raise TypeError(f"expected a tensor or a pointer (int), got {type(tensor_or_ptr).__name__}")


def stream_handle(stream: Any) -> int:
    """A cudaStream_t as an int: a torch.cuda.Stream's ``cuda_stream``, an int as it is,
    None for the default (legacy) stream, 0."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("expected a torch.cuda.Stream or a cudaStream_t (int), got a bool")
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int):
        return handle
    raise TypeError(
        f"expected a torch.cuda.Stream or a cudaStream_t (int), got {type(stream).__name__}"
    )
