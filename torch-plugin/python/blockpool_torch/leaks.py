"""Leak scopes, the step detector and the live-allocation report.

A leak scope brackets work that should give back what it allocates (an evaluation pass, a
request): what it allocated and still holds at its end is the report. The step detector is
told at the end of each training step what is live, and flags the sites whose live memory
grew for several steps in a row, apart from memory simply kept (weights, optimizer state).
Sites are annotate() tags; the reports are blockpool's JSON, parsed into dicts.
"""

import json
import threading
from typing import Any, Dict, Optional

from . import _lib, _torch


class LeakScope:
    """``with leak_scope("eval") as scope: ...`` then ``scope.report``: a dict of what was
    allocated inside the block and is still alive, by device and site, with the scope's peak.

    ``report`` is None until the block has ended; it is made even when the block raises.
    """

    def __init__(self, name: str):
        self.name = str(name)
        self.report: Optional[Dict[str, Any]] = None
        self._id: Optional[int] = None

    def __enter__(self) -> "LeakScope":
        if self._id is not None or self.report is not None:
            raise RuntimeError(f"leak scope {self.name!r} has already been entered once")
        self._id = _lib.get().leak_scope_begin(self.name)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        library = _lib.get()
        scope, self._id = self._id, None
        if scope is None:
            return
        try:
            self.report = json.loads(library.leak_scope_finish(scope))
        finally:
            library.leak_scope_free(scope)


def leak_scope(name: str) -> LeakScope:
    """A leak scope named ``name``, to use as a context manager (see LeakScope)."""
    return LeakScope(name)


class StepDetector:
    """Finds memory that grows step after step in a loop.

    Call ``observe(step)`` once at the end of every step (after the optimizer step, when only
    what the loop keeps is alive). It returns the findings so far as a dict: "growing" sites
    (live bytes or count up in each of the last ``growth_steps`` steps, with the growth per
    step) and "persistent" ones (the same since the first steps: weights, optimizer state).

    ``growth_steps`` is K, the steps in a row a site must grow (0: blockpool's default, 3).
    Close it with close() or a ``with`` block; it is also closed when collected.
    """

    def __init__(self, growth_steps: int = 0):
        if isinstance(growth_steps, bool) or growth_steps < 0:
            raise ValueError(f"growth_steps must be 0 (the default) or more, not {growth_steps!r}")
        self._lock = threading.Lock()
        self._library = _lib.get()
        self._id: Optional[int] = self._library.step_detector_new(int(growth_steps))

    def observe(self, step: int, device: Any = None) -> Dict[str, Any]:
        """Observes what is live on ``device`` at the end of step number ``step``. Asking
        again for the step just observed repeats its findings without observing again."""
        if isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a step number (0 or more), not {step!r}")
        device_index = _torch.device_index(device)
        with self._lock:
            if self._id is None:
                raise RuntimeError("this StepDetector is closed")
            text = self._library.step_detector_observe(self._id, int(step), device_index)
        return json.loads(text)

    def close(self) -> None:
        """Frees the detector; observe() fails afterwards. Closing twice does nothing."""
        with self._lock:
            detector, self._id = self._id, None
        if detector is not None:
            self._library.step_detector_free(detector)

    def __enter__(self) -> "StepDetector":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __del__(self) -> None:
        # At interpreter exit the library may be going away; a leaked detector is harmless.
        try:
            self.close()
        except Exception:
            pass


def leak_report() -> Dict[str, Any]:
    """Every live allocation now, grouped by site and device (e.g. at the end of a run)."""
    return json.loads(_lib.get().leak_report_json())
