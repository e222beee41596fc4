"""History recording, snapshots and annotation tags.

record_memory_history() takes torch.cuda.memory._record_memory_history's arguments, and
dump_snapshot() writes what torch.cuda.memory._dump_snapshot() writes: PyTorch's snapshot
pickle, which torch.cuda._memory_viz, pytorch.org/memory_viz and `memtrace` open.

blockpool records no Python frames; the context of an allocation is the stack of annotate()
tags open on its thread (blockpool's sites) and, with stacks="all", the native backtrace. So
context="state", "alloc" and "all" all record tags, and stacks picks whether backtraces are
added.

In a job of several processes (DDP: one per GPU), dump_snapshot("run-{rank}.pickle") writes
one file per rank, which `memtrace` can compare.
"""

import contextlib
from typing import Any, Iterator, Optional, Union

from . import _lib, _torch

CONTEXT_NONE = 0
CONTEXT_TAGS = 1
CONTEXT_TAGS_AND_BACKTRACES = 2

_ENABLED_VALUES = ("state", "all")
_CONTEXT_VALUES = ("state", "alloc", "all")
_STACKS_VALUES = ("python", "all")


def record_memory_history(
    enabled: Union[str, bool, None] = "all",
    context: Optional[str] = "all",
    stacks: str = "all",
    max_entries: Optional[int] = None,
    device: Any = None,
) -> None:
    """Starts (or, with enabled=None, stops) recording allocator events, on every device.

    enabled: "all" or "state" record (blockpool keeps the event ring either way); None stops,
    keeping what was recorded for the next dump_snapshot(). True and False, PyTorch's legacy
    spelling, mean "all" and None.
    context: None records no context; "state", "alloc" and "all" record annotate() tags.
    stacks: "python" keeps the tags only; "all" adds native backtraces (slower).
    max_entries: events kept per device, the newest; None is blockpool's default, 100,000
    (PyTorch's own default keeps everything, which a long job pays for in host memory).
    device: accepted for PyTorch's signature; recording covers every device, as in PyTorch.
    """
    del device  # PyTorch ignores it too.
    if enabled is True:
        enabled = "all"
    elif enabled is False:
        enabled = None
    if enabled is not None and enabled not in _ENABLED_VALUES:
        raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
    if context is not None and context not in _CONTEXT_VALUES:
        raise ValueError(f"context must be None, 'state', 'alloc' or 'all', not {context!r}")
    if stacks not in _STACKS_VALUES:
        raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")
    if max_entries is not None and (isinstance(max_entries, bool) or max_entries < 1):
        raise ValueError(f"max_entries must be a positive number of events, not {max_entries!r}")
    if context is None:
        level = CONTEXT_NONE
    elif stacks == "python":
        level = CONTEXT_TAGS
    else:
        level = CONTEXT_TAGS_AND_BACKTRACES
    _lib.get().record_memory_history(enabled is not None, max_entries or 0, level)


def snapshot_path(path: str) -> str:
    """``path`` with each "{rank}" replaced by this process's rank (torch.distributed's when
    it is initialized, else the RANK variable, else 0). Other braces are left alone."""
    if "{rank}" not in path:
        return path
    return path.replace("{rank}", str(_torch.rank()))


def dump_snapshot(path: str = "dump_snapshot.pickle") -> str:
    """Writes the allocator's state and recorded events, every device, as PyTorch's snapshot
    pickle, and returns the path written ("{rank}" in ``path`` replaced by the rank)."""
    resolved = snapshot_path(str(path))
    _lib.get().dump_snapshot(resolved)
    return resolved


@contextlib.contextmanager
def annotate(tag: str) -> Iterator[None]:
    """Tags the allocations this thread makes inside the block: ``tag`` is pushed on the
    thread's tag stack and popped on the way out, even when the block raises. The tags are
    the sites of leak reports and the context of recorded events. Also a decorator."""
    library = _lib.get()
    library.annotate_push(str(tag))
    try:
        yield
    finally:
        library.annotate_pop()
