"""Loading libblockpool_torch.so with ctypes, and the typed calls into it.

The library is found in this order: the BLOCKPOOL_TORCH_LIB environment variable (a path,
for development and tests: target/release/libblockpool_torch.so), then the copy that
`pip install ./torch-plugin` puts next to this file. It is loaded once per process, by its
absolute path: PyTorch's CUDAPluggableAllocator dlopens the same path, so both reach the one
allocator the library keeps per process.

Every function of blockpool_torch.h is declared here with its argument and return types (a
wrong width is silent memory corruption in ctypes, so nothing is called undeclared), and
``Library`` turns the C conventions into Python ones:

- a negative return code becomes the exception of ``_errors`` for that code, with
  blockpool_last_error()'s text as its message;
- text outputs follow snprintf: a call with (NULL, 0) gives the length, then a buffer of that
  length plus the NUL is filled. The text can grow between the two calls (statistics change
  while other threads allocate), so a longer second answer is retried with the new length.
"""

import ctypes
import os
import threading
from typing import Callable, Optional

from . import _errors

LIBRARY_ENV = "BLOCKPOOL_TORCH_LIB"
LIBRARY_NAME = "libblockpool_torch.so"

_c_char_buf = ctypes.POINTER(ctypes.c_char)

# name: (restype, argtypes), exactly as blockpool_torch.h declares them.
SIGNATURES = {
    "blockpool_malloc": (ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "blockpool_free": (None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "blockpool_free_v0": (None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p]),
    "blockpool_memory_stats_json": (ctypes.c_ssize_t, [ctypes.c_int, _c_char_buf, ctypes.c_size_t]),
    "blockpool_reset_peak_memory_stats": (ctypes.c_int, [ctypes.c_int]),
    "blockpool_reset_accumulated_memory_stats": (ctypes.c_int, [ctypes.c_int]),
    "blockpool_memory_summary": (
        ctypes.c_ssize_t,
        [ctypes.c_int, ctypes.c_int, _c_char_buf, ctypes.c_size_t],
    ),
    "blockpool_empty_cache": (ctypes.c_int, []),
    "blockpool_set_memory_fraction": (ctypes.c_int, [ctypes.c_double, ctypes.c_int]),
    "blockpool_get_memory_fraction": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.POINTER(ctypes.c_double)],
    ),
    "blockpool_record_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p]),
    "blockpool_device_count": (ctypes.c_int, []),
    "blockpool_record_memory_history": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.c_size_t, ctypes.c_int],
    ),
    "blockpool_dump_snapshot": (ctypes.c_int, [ctypes.c_char_p]),
    "blockpool_last_oom_message": (ctypes.c_ssize_t, [_c_char_buf, ctypes.c_size_t]),
    "blockpool_last_error": (ctypes.c_ssize_t, [_c_char_buf, ctypes.c_size_t]),
    "blockpool_annotate_push": (ctypes.c_int, [ctypes.c_char_p]),
    "blockpool_annotate_pop": (ctypes.c_int, []),
    "blockpool_leak_scope_begin": (ctypes.c_uint64, [ctypes.c_char_p]),
    "blockpool_leak_scope_finish": (
        ctypes.c_ssize_t,
        [ctypes.c_uint64, _c_char_buf, ctypes.c_size_t],
    ),
    "blockpool_leak_scope_free": (ctypes.c_int, [ctypes.c_uint64]),
    "blockpool_step_detector_new": (ctypes.c_uint64, [ctypes.c_size_t]),
    "blockpool_step_detector_observe": (
        ctypes.c_ssize_t,
        [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, _c_char_buf, ctypes.c_size_t],
    ),
    "blockpool_step_detector_free": (ctypes.c_int, [ctypes.c_uint64]),
    "blockpool_leak_report_json": (ctypes.c_ssize_t, [_c_char_buf, ctypes.c_size_t]),
}

# A text that keeps growing between the length query and the fill (another thread allocating
# all the while) is asked for again this many times before giving up.
_TEXT_ATTEMPTS = 8


class LibraryNotFoundError(FileNotFoundError):
    """libblockpool_torch.so is neither where BLOCKPOOL_TORCH_LIB says nor in the package."""


def library_path() -> str:
    """The absolute path of the library this process uses (or would load).

    Raises LibraryNotFoundError, saying where it looked and how to get the library, when it is
    in neither place.
    """
    configured = os.environ.get(LIBRARY_ENV)
    if configured:
        path = os.path.abspath(configured)
        if not os.path.isfile(path):
            raise LibraryNotFoundError(
                f"{LIBRARY_ENV}={configured!r} names no file; build it with "
                "`cargo build --release -p blockpool-torch` (it is "
                f"target/release/{LIBRARY_NAME}) or unset {LIBRARY_ENV} to use the bundled copy"
            )
        return path
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)
    if os.path.isfile(bundled):
        return bundled
    raise LibraryNotFoundError(
        f"{LIBRARY_NAME} is not in {os.path.dirname(bundled)} (install the package with "
        f"`pip install ./torch-plugin`, which builds it) and {LIBRARY_ENV} is not set"
    )


class Library:
    """libblockpool_torch.so loaded from ``path``, with every function declared.

    Methods return Python values (str, int, float) and raise ``_errors.BlockpoolError``
    subclasses on failure. ``cdll`` is the raw ctypes handle for callers that need it (the
    ctypes tests call blockpool_malloc and blockpool_free through it).
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.cdll = ctypes.CDLL(self.path)
        for name, (restype, argtypes) in SIGNATURES.items():
            function = getattr(self.cdll, name)
            function.restype = restype
            function.argtypes = argtypes

    # ---- conventions ------------------------------------------------------------------

    def last_error(self) -> str:
        """blockpool_last_error(): why the last failing call on this thread failed."""
        return self._text_unchecked(self.cdll.blockpool_last_error)

    def check(self, code: int) -> int:
        """``code`` when it is 0 or more, else the exception for it (raised)."""
        if code < 0:
            raise _errors.error_for(code, self.last_error())
        return code

    def text(self, function: Callable, *args) -> str:
        """The text that snprintf-style ``function(*args, buf, buf_len)`` writes."""
        length = self.check(function(*args, None, 0))
        for _ in range(_TEXT_ATTEMPTS):
            buffer = ctypes.create_string_buffer(length + 1)
            written = self.check(function(*args, buffer, length + 1))
            if written <= length:
                return buffer.raw[:written].decode("utf-8")
            length = written
        name = getattr(function, "__name__", "a text function")
        raise _errors.BlockpoolError(
            f"{name} kept growing between calls ({length} bytes last)", _errors.ERR_PANIC
        )

    def _text_unchecked(self, function: Callable) -> str:
        # For the error text itself: a negative length here cannot be explained further.
        length = function(None, 0)
        if length <= 0:
            return ""
        buffer = ctypes.create_string_buffer(length + 1)
        written = function(buffer, length + 1)
        return buffer.raw[: max(0, min(written, length))].decode("utf-8", "replace")

    # ---- statistics ---------------------------------------------------------------------

    def memory_stats_json(self, device: int) -> str:
        return self.text(self.cdll.blockpool_memory_stats_json, device)

    def reset_peak_memory_stats(self, device: int) -> None:
        self.check(self.cdll.blockpool_reset_peak_memory_stats(device))

    def reset_accumulated_memory_stats(self, device: int) -> None:
        self.check(self.cdll.blockpool_reset_accumulated_memory_stats(device))

    def memory_summary(self, device: int, abbreviated: bool) -> str:
        return self.text(self.cdll.blockpool_memory_summary, device, 1 if abbreviated else 0)

    def empty_cache(self) -> None:
        self.check(self.cdll.blockpool_empty_cache())

    def set_memory_fraction(self, fraction: float, device: int) -> None:
        self.check(self.cdll.blockpool_set_memory_fraction(fraction, device))

    def get_memory_fraction(self, device: int) -> Optional[float]:
        """The fraction in force on ``device``, or None when none is set."""
        fraction = ctypes.c_double(0.0)
        self.check(self.cdll.blockpool_get_memory_fraction(device, ctypes.byref(fraction)))
        return None if fraction.value < 0 else fraction.value

    def record_stream(self, ptr: int, stream: int) -> None:
        self.check(self.cdll.blockpool_record_stream(ptr, stream))

    def device_count(self) -> int:
        return self.check(self.cdll.blockpool_device_count())

    # ---- history, snapshots, out of memory ----------------------------------------------

    def record_memory_history(self, enabled: bool, max_entries: int, context: int) -> None:
        self.check(
            self.cdll.blockpool_record_memory_history(1 if enabled else 0, max_entries, context)
        )

    def dump_snapshot(self, path: str) -> None:
        self.check(self.cdll.blockpool_dump_snapshot(os.fsencode(path)))

    def last_oom_message(self) -> str:
        return self.text(self.cdll.blockpool_last_oom_message)

    def annotate_push(self, tag: str) -> None:
        self.check(self.cdll.blockpool_annotate_push(tag.encode("utf-8")))

    def annotate_pop(self) -> None:
        self.check(self.cdll.blockpool_annotate_pop())

    # ---- leaks --------------------------------------------------------------------------

    def leak_scope_begin(self, name: str) -> int:
        return self._handle(self.cdll.blockpool_leak_scope_begin(name.encode("utf-8")))

    def leak_scope_finish(self, scope: int) -> str:
        # Idempotent in C: the first call ends the scope, later ones repeat its report.
        return self.text(self.cdll.blockpool_leak_scope_finish, scope)

    def leak_scope_free(self, scope: int) -> None:
        self.check(self.cdll.blockpool_leak_scope_free(scope))

    def step_detector_new(self, growth_steps: int) -> int:
        return self._handle(self.cdll.blockpool_step_detector_new(growth_steps))

    def step_detector_observe(self, detector: int, step: int, device: int) -> str:
        # The C side observes a step once: the fill after the length query repeats the
        # findings of the step it just observed.
        return self.text(self.cdll.blockpool_step_detector_observe, detector, step, device)

    def step_detector_free(self, detector: int) -> None:
        self.check(self.cdll.blockpool_step_detector_free(detector))

    def leak_report_json(self) -> str:
        return self.text(self.cdll.blockpool_leak_report_json)

    def _handle(self, handle: int) -> int:
        # Handle-returning functions say failure with 0 and leave the reason in last_error.
        if handle == 0:
            message = self.last_error() or "blockpool returned no handle and no reason"
            raise _errors.BlockpoolError(message, None)
        return handle


_lock = threading.Lock()
_loaded: Optional[Library] = None


def get() -> Library:
    """The process's Library, loaded on first use (thread-safe)."""
    global _loaded
    library = _loaded
    if library is not None:
        return library
    with _lock:
        if _loaded is None:
            _loaded = Library(library_path())
        return _loaded


def is_loaded() -> bool:
    """Whether this process has loaded the library through ``get()`` yet."""
    return _loaded is not None
