"""A stand-in for the parts of torch that blockpool_torch calls, and a stand-in library.

``FakeTorch`` builds module objects for torch, torch.cuda, torch.cuda.memory and
torch.distributed with just the attributes the package reads, records every call made to
them, and installs them in sys.modules for the length of a ``with`` block (so the package's
lazy ``import torch`` finds them, whether or not a real torch is installed).

``FakeLibrary`` has the methods of blockpool_torch._lib.Library, answering from plain Python
state, so the package's own logic is tested without the shared library.
"""

import json
import sys
import types
from typing import Any, Dict, List, Optional
from unittest import mock


class FakeTorch:
    """torch ``version`` with CUDA initialized or not, on ``current_device``, with
    torch.distributed initialized at ``rank`` or not."""

    def __init__(
        self,
        version: str = "2.3.1+cu121",
        cuda_initialized: bool = False,
        current_device: int = 0,
        distributed_rank: Optional[int] = None,
        has_out_of_memory_error: bool = True,
        swap_error: Optional[str] = None,
    ):
        self.calls: List[tuple] = []
        calls = self.calls

        torch = types.ModuleType("torch")
        torch.__version__ = version
        cuda = types.ModuleType("torch.cuda")
        memory = types.ModuleType("torch.cuda.memory")
        distributed = types.ModuleType("torch.distributed")

        def is_initialized() -> bool:
            calls.append(("cuda.is_initialized",))
            return cuda_initialized

        def current() -> int:
            calls.append(("cuda.current_device",))
            return current_device

        class CUDAPluggableAllocator:
            def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str):
                calls.append(
                    ("CUDAPluggableAllocator", path_to_so_file, alloc_fn_name, free_fn_name)
                )
                self.args = (path_to_so_file, alloc_fn_name, free_fn_name)

        def change_current_allocator(allocator: Any) -> None:
            calls.append(("change_current_allocator", allocator))
            if swap_error is not None:
                raise RuntimeError(swap_error)

        cuda.is_initialized = is_initialized
        cuda.current_device = current
        cuda.memory = memory
        memory.CUDAPluggableAllocator = CUDAPluggableAllocator
        memory.change_current_allocator = change_current_allocator
        if has_out_of_memory_error:

            class OutOfMemoryError(RuntimeError):
                pass

            cuda.OutOfMemoryError = OutOfMemoryError

        distributed.is_available = lambda: True
        distributed.is_initialized = lambda: distributed_rank is not None
        distributed.get_rank = lambda: distributed_rank

        torch.cuda = cuda
        torch.distributed = distributed
        self.torch = torch
        self.modules: Dict[str, Any] = {
            "torch": torch,
            "torch.cuda": cuda,
            "torch.cuda.memory": memory,
            "torch.distributed": distributed,
        }

    def __enter__(self) -> "FakeTorch":
        self._patch = mock.patch.dict(sys.modules, self.modules)
        self._patch.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._patch.__exit__(*exc_info)

    def names(self) -> List[str]:
        """The names of the calls made, in order."""
        return [call[0] for call in self.calls]


def no_torch() -> Any:
    """Makes ``import torch`` fail inside the ``with`` block, as without torch installed."""
    return mock.patch.dict(sys.modules, {"torch": None})


class FakeLibrary:
    """The methods of _lib.Library over plain state: per-device statistics, a tag stack,
    leak scopes and step detectors that answer canned JSON, and a log of calls."""

    path = "/opt/blockpool/libblockpool_torch.so"

    def __init__(self, devices: int = 1):
        self.calls: List[tuple] = []
        self.stats = [
            {"allocated_bytes.all.current": 0, "reserved_bytes.all.current": 0, "num_ooms": 0}
            for _ in range(devices)
        ]
        self.oom_message = ""
        self.fraction: Dict[int, float] = {}
        self.tags: List[str] = []
        self.next_handle = 1
        self.live_handles: set = set()

    def fail_allocation(self, device: int, message: str) -> None:
        """What a failed blockpool_malloc leaves behind: num_ooms + 1 and the message."""
        self.stats[device]["num_ooms"] += 1
        self.oom_message = message

    def _log(self, *call: Any) -> None:
        self.calls.append(call)

    def device_count(self) -> int:
        return len(self.stats)

    def memory_stats_json(self, device: int) -> str:
        self._log("memory_stats_json", device)
        return json.dumps(self.stats[device])

    def reset_peak_memory_stats(self, device: int) -> None:
        self._log("reset_peak_memory_stats", device)

    def reset_accumulated_memory_stats(self, device: int) -> None:
        self._log("reset_accumulated_memory_stats", device)

    def memory_summary(self, device: int, abbreviated: bool) -> str:
        self._log("memory_summary", device, abbreviated)
        return f"|  PyTorch CUDA memory summary, device ID {device}  |\n"

    def empty_cache(self) -> None:
        self._log("empty_cache")

    def set_memory_fraction(self, fraction: float, device: int) -> None:
        self._log("set_memory_fraction", fraction, device)
        self.fraction[device] = fraction

    def get_memory_fraction(self, device: int) -> Optional[float]:
        return self.fraction.get(device)

    def record_stream(self, ptr: int, stream: int) -> None:
        self._log("record_stream", ptr, stream)

    def record_memory_history(self, enabled: bool, max_entries: int, context: int) -> None:
        self._log("record_memory_history", enabled, max_entries, context)

    def dump_snapshot(self, path: str) -> None:
        self._log("dump_snapshot", path)

    def last_oom_message(self) -> str:
        return self.oom_message

    def annotate_push(self, tag: str) -> None:
        self._log("annotate_push", tag)
        self.tags.append(tag)

    def annotate_pop(self) -> None:
        self._log("annotate_pop")
        self.tags.pop()

    def _new_handle(self) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.live_handles.add(handle)
        return handle

    def leak_scope_begin(self, name: str) -> int:
        self._log("leak_scope_begin", name)
        return self._new_handle()

    def leak_scope_finish(self, scope: int) -> str:
        self._log("leak_scope_finish", scope)
        return json.dumps({"name": "scope", "leaks": {"sites": []}, "peak_bytes": [0]})

    def leak_scope_free(self, scope: int) -> None:
        self._log("leak_scope_free", scope)
        self.live_handles.remove(scope)

    def step_detector_new(self, growth_steps: int) -> int:
        self._log("step_detector_new", growth_steps)
        return self._new_handle()

    def step_detector_observe(self, detector: int, step: int, device: int) -> str:
        self._log("step_detector_observe", detector, step, device)
        return json.dumps({"steps_observed": step + 1, "growing": [], "persistent": []})

    def step_detector_free(self, detector: int) -> None:
        self._log("step_detector_free", detector)
        self.live_handles.remove(detector)

    def leak_report_json(self) -> str:
        return json.dumps({"sites": []})
