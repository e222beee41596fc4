"""enable(): blockpool as PyTorch's CUDA allocator.

PyTorch swaps its allocator only before it has used it: torch.cuda.memory.change_current_
allocator refuses once CUDA is initialized ("Can't swap an already initialized allocator").
enable() checks first and says what to do, since PyTorch's own message does not.

The allocator PyTorch then calls is libblockpool_torch.so's blockpool_malloc and
blockpool_free (PyTorch 2.1 and later pass the device to free; 2.0's free had no device
argument, so there it is blockpool_free_v0). The same library answers memory_stats() and the
rest of this package: it keeps one allocator per process, which both reach.
"""

import os
import threading
from typing import Any, Optional

from . import _lib, _torch

BACKEND_ENV = "BLOCKPOOL_BACKEND"

MALLOC_SYMBOL = "blockpool_malloc"
FREE_SYMBOL = "blockpool_free"
FREE_SYMBOL_TORCH_2_0 = "blockpool_free_v0"

_lock = threading.Lock()
# The torch.cuda.memory.CUDAPluggableAllocator once enable() has installed it. PyTorch holds
# its own reference to the C++ allocator; this one keeps the Python wrapper (and through it
# the ctypes handle of the library) alive for the life of the process.
_installed: Optional[Any] = None


def free_symbol(torch_version: tuple) -> str:
    """The free function PyTorch ``torch_version`` ((major, minor)) calls with its signature."""
    return FREE_SYMBOL if torch_version >= (2, 1) else FREE_SYMBOL_TORCH_2_0


def enable() -> None:
    """Makes blockpool PyTorch's CUDA allocator for this process.

    Call it right after ``import torch``, before anything touches CUDA: creating a CUDA tensor,
    moving a model with ``.cuda()`` / ``.to("cuda")``, or calling ``torch.cuda.set_device``,
    ``torch.cuda.current_device`` or ``torch.cuda.init``. Calling it again once it is enabled
    does nothing.

    Raises RuntimeError when CUDA is already initialized (PyTorch's own allocator is then in
    use and cannot be swapped), when BLOCKPOOL_BACKEND=sim (simulated addresses cannot back
    tensors), or when this PyTorch has no pluggable allocators (before 2.0); ImportError
    without torch; LibraryNotFoundError without the library.
    """
    global _installed
    torch = _torch.require("blockpool_torch.enable()")
    with _lock:
        if _installed is not None:
            return
        if _torch.cuda_initialized(torch):
            raise RuntimeError(
                "blockpool_torch.enable() must run before the first CUDA allocation, and CUDA "
                "is already initialized in this process, so PyTorch's own allocator is in use "
                "and cannot be swapped. Call blockpool_torch.enable() right after `import "
                "torch`, before creating CUDA tensors, moving a model to the GPU, or calling "
                "torch.cuda.set_device()/current_device()/init(); in a script that cannot do "
                "that, restart the process (or the notebook kernel) and call it first."
            )
        version = _torch.version(torch)
        if version < (2, 0):
            raise RuntimeError(
                f"PyTorch {torch.__version__} has no pluggable CUDA allocators; "
                "blockpool_torch.enable() needs PyTorch 2.0 or later"
            )
        _choose_backend()
        library = _lib.get()
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            library.path, MALLOC_SYMBOL, free_symbol(version)
        )
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as error:
            if "already initialized" in str(error):
                raise RuntimeError(
                    "blockpool_torch.enable() came too late: PyTorch has already used its own "
                    f"CUDA allocator in this process ({error}). Call it right after `import "
                    "torch`, before anything touches CUDA."
                ) from error
            raise
        _installed = allocator


def is_enabled() -> bool:
    """Whether enable() has installed blockpool as PyTorch's allocator in this process."""
    return _installed is not None


def _choose_backend() -> None:
    # Behind PyTorch it must be the GPU or a loud failure. The library's "auto" already is
    # (it never falls back to the simulated device); enable() names "cuda" as well unless the
    # library is already running (its backend was chosen at its first call) or one was named,
    # so the choice shows in the environment of any process it starts.
    backend = os.environ.get(BACKEND_ENV, "").strip().lower()
    if backend == "sim":
        raise RuntimeError(
            f"{BACKEND_ENV}=sim: the simulated device's addresses cannot back PyTorch tensors; "
            f"unset {BACKEND_ENV} (or set it to cuda) to enable blockpool in PyTorch"
        )
    if backend in ("", "auto") and not _lib.is_loaded():
        os.environ[BACKEND_ENV] = "cuda"
