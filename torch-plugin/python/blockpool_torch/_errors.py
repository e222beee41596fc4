"""The exceptions blockpool_torch raises, one per BLOCKPOOL_ERR_* code of blockpool_torch.h.

Every one is a ``BlockpoolError`` (a ``RuntimeError``, as torch.cuda's own failures are) and
carries the C code in ``code`` and blockpool_last_error()'s text as its message. Where a code
means a bad argument, the class is also a ``ValueError``; a file that could not be written is
also an ``OSError``, so code that already catches those keeps working.

An out-of-memory failure is ``OutOfMemoryError`` here; ``oom_errors()`` (oom.py) raises
``torch.cuda.OutOfMemoryError`` instead when torch is importable, since that is what callers
of PyTorch catch.
"""

from typing import Optional

OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_NO_SUCH_DEVICE = -2
ERR_BACKEND = -3
ERR_OUT_OF_MEMORY = -4
ERR_IO = -5
ERR_UNKNOWN_POINTER = -6
ERR_UNKNOWN_HANDLE = -7
ERR_PANIC = -8


class BlockpoolError(RuntimeError):
    """A blockpool C function failed; ``code`` is its negative BLOCKPOOL_ERR_* value (None for
    a function that says failure with a 0 handle, and the reason only in words)."""

    def __init__(self, message: str, code: Optional[int]):
        super().__init__(message)
        self.code = code


class InvalidArgumentError(BlockpoolError, ValueError):
    """BLOCKPOOL_ERR_INVALID_ARGUMENT: a bad value (a fraction outside [0, 1], ...)."""


class NoSuchDeviceError(BlockpoolError, ValueError):
    """BLOCKPOOL_ERR_NO_SUCH_DEVICE: a device index outside 0 .. device_count() - 1."""


class BackendError(BlockpoolError):
    """BLOCKPOOL_ERR_BACKEND: the backend could not start (no usable driver, ...)."""


class OutOfMemoryError(BlockpoolError):
    """BLOCKPOOL_ERR_OUT_OF_MEMORY: see last_oom_message()."""


class SnapshotWriteError(BlockpoolError, OSError):
    """BLOCKPOOL_ERR_IO: a file could not be written."""


class UnknownPointerError(BlockpoolError, ValueError):
    """BLOCKPOOL_ERR_UNKNOWN_POINTER: not a live pointer of this allocator."""


class UnknownHandleError(BlockpoolError, ValueError):
    """BLOCKPOOL_ERR_UNKNOWN_HANDLE: a leak scope or step detector that is not live."""


class PanicError(BlockpoolError):
    """BLOCKPOOL_ERR_PANIC: a bug in blockpool, caught at the C boundary and logged."""


_BY_CODE = {
    ERR_INVALID_ARGUMENT: InvalidArgumentError,
    ERR_NO_SUCH_DEVICE: NoSuchDeviceError,
    ERR_BACKEND: BackendError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError,
    ERR_IO: SnapshotWriteError,
    ERR_UNKNOWN_POINTER: UnknownPointerError,
    ERR_UNKNOWN_HANDLE: UnknownHandleError,
    ERR_PANIC: PanicError,
}


def error_for(code: int, message: str) -> BlockpoolError:
    """The exception for a negative return ``code``, with ``message`` (the C side's words).

    A code this version does not know still raises, as a plain BlockpoolError naming it.
    """
    cls = _BY_CODE.get(code, BlockpoolError)
    if not message:
        message = f"blockpool call failed with code {code} and no message"
    return cls(message, code)
