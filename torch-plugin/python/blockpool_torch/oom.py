"""Out-of-memory errors as PyTorch users catch them.

What PyTorch lets a pluggable allocator decide, and what not:

- The allocator's malloc can only return a pointer or NULL (a C++ exception would be needed to
  choose the error, and blockpool is not C++). PyTorch does not check the NULL: the tensor is
  made with no memory, and the first operation that touches its data raises a plain
  RuntimeError ("The tensor has a non-zero number of elements, but its data is not allocated
  yet"), not torch.cuda.OutOfMemoryError, and without the allocator's explanation.
- So the decision is made here, in Python: inside ``oom_errors()``, a RuntimeError raised
  after blockpool has failed an allocation becomes torch.cuda.OutOfMemoryError carrying
  blockpool's message (PyTorch's wording: what was asked, what the device has, what is
  allocated and reserved, and the max_split_size_mb / expandable_segments hint), chained to
  the original. Without torch it is blockpool_torch.OutOfMemoryError.
- Outside ``oom_errors()`` the message is still there: ``last_oom_message()``, and
  memory_stats()["num_ooms"] counts the failures.
"""

import contextlib
import json
from typing import Any, Tuple

from . import _errors, _lib, _torch


def last_oom_message() -> str:
    """The message of the last out-of-memory failure in this process; "" when none."""
    return _lib.get().last_oom_message()


def _oom_state() -> Tuple[int, str]:
    # Failures so far (num_ooms over every device) and the last message: an allocation that
    # fails inside the block changes the count, and the message tells repeats apart too.
    library = _lib.get()
    failures = 0
    for device in range(library.device_count()):
        failures += int(json.loads(library.memory_stats_json(device)).get("num_ooms", 0))
    return failures, library.last_oom_message()


class oom_errors(contextlib.ContextDecorator):
    """Turns a RuntimeError caused by a failed blockpool allocation into
    torch.cuda.OutOfMemoryError with blockpool's message; a context manager or a decorator::

        with blockpool_torch.oom_errors():
            loss = model(batch).sum()
            loss.backward()

    Only errors raised after blockpool failed an allocation inside the block are translated;
    any other exception, and torch.cuda.OutOfMemoryError itself, passes through unchanged.
    """

    def _recreate_cm(self) -> "oom_errors":
        # As a decorator, each call gets its own instance (its own "before"), so recursive
        # and concurrent calls do not share one.
        return type(self)()

    def __enter__(self) -> "oom_errors":
        self._before = _oom_state()
        return self

    def __exit__(self, exc_type: Any, error: Any, traceback: Any) -> bool:
        if error is None or not isinstance(error, RuntimeError):
            return False
        torch_oom = _torch.out_of_memory_error()
        if torch_oom is not None and isinstance(error, torch_oom):
            return False
        if isinstance(error, _errors.OutOfMemoryError) and torch_oom is None:
            return False
        try:
            after = _oom_state()
        except Exception:
            # Asking blockpool failed too: the error the block raised is the one to see.
            return False
        if after == self._before or not after[1]:
            return False
        if torch_oom is not None:
            raise torch_oom(after[1]) from error
        raise _errors.OutOfMemoryError(after[1], _errors.ERR_OUT_OF_MEMORY) from error
