"""Paths and helpers the Python tests share.

The package is imported from the checkout (torch-plugin/python), not from an installed copy,
so the tests check the code beside them. The real library and memtrace come from
BLOCKPOOL_TORCH_LIB and BLOCKPOOL_MEMTRACE (run.sh sets both); when BLOCKPOOL_TORCH_LIB is
unset the tests that need the library are skipped, saying so, and when it is set to a
missing file they fail: run.sh, which CI calls, always sets it.
"""

import json
import os
import subprocess
import sys
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PLUGIN_DIR = os.path.dirname(os.path.dirname(TESTS_DIR))
PACKAGE_PARENT = os.path.join(PLUGIN_DIR, "python")
REPO_DIR = os.path.dirname(PLUGIN_DIR)

if PACKAGE_PARENT not in sys.path:
    sys.path.insert(0, PACKAGE_PARENT)

LIBRARY_ENV = "BLOCKPOOL_TORCH_LIB"
MEMTRACE_ENV = "BLOCKPOOL_MEMTRACE"


def library_path() -> str:
    """The real library's path; skips the test when BLOCKPOOL_TORCH_LIB is unset."""
    path = os.environ.get(LIBRARY_ENV)
    if not path:
        raise unittest.SkipTest(
            f"{LIBRARY_ENV} is not set (run torch-plugin/tests/python/run.sh, or set it to "
            "target/release/libblockpool_torch.so)"
        )
    if not os.path.isfile(path):
        raise AssertionError(f"{LIBRARY_ENV}={path} names no file: build blockpool-torch first")
    return os.path.abspath(path)


def memtrace_path() -> str:
    """memtrace's path (BLOCKPOOL_MEMTRACE, else target/release/memtrace); must exist."""
    path = os.environ.get(MEMTRACE_ENV) or os.path.join(REPO_DIR, "target", "release", "memtrace")
    if not os.path.isfile(path):
        raise AssertionError(
            f"memtrace is not at {path}: build it with `cargo build --release -p profiler-ui` "
            f"or set {MEMTRACE_ENV}"
        )
    return os.path.abspath(path)


class ScenarioResult:
    """What a scenario subprocess printed: its JSON result, its standard error, its status."""

    def __init__(self, completed: subprocess.CompletedProcess):
        self.returncode = completed.returncode
        self.stderr = completed.stderr
        self.stdout = completed.stdout
        self.data = None
        if completed.returncode == 0:
            last = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else ""
            self.data = json.loads(last) if last else None


def run_scenario(
    name: str, env: dict = None, args: list = (), timeout: float = 120
) -> ScenarioResult:
    """Runs scenarios.py's ``name`` in a fresh process over the simulated device.

    A fresh process per scenario: the library keeps one allocator per process, so exact
    statistics need a process no other test has allocated in. ``env`` adds variables
    (BLOCKPOOL_SIM_DEVICES, RANK, ...).
    """
    environment = dict(os.environ)
    environment[LIBRARY_ENV] = library_path()
    environment["BLOCKPOOL_BACKEND"] = "sim"
    environment.pop("BLOCKPOOL_ALLOC_CONF", None)
    environment.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    environment.pop("RANK", None)
    environment.update(env or {})
    completed = subprocess.run(
        [sys.executable, os.path.join(TESTS_DIR, "scenarios.py"), name, *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return ScenarioResult(completed)
