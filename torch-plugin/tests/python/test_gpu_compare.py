"""The GPU comparison's own logic (tests/gpu/train_compare.py), without a GPU or torch.

The training itself runs only under scripts/gpu-check.sh on a GPU; what decides its verdict,
the comparisons of the workers' results, the table and the skip without torch, is checked
here on results made up to match and to differ.
"""

import copy
import os
import sys
import tempfile
import unittest
from unittest import mock

import support
from fake_torch import FakeTorch, no_torch

sys.path.insert(0, os.path.join(support.PLUGIN_DIR, "tests", "gpu"))
import train_compare  # noqa: E402

MIB = 1 << 20


def run(allocator, mean_ms, peak_reserved, allocated=40 * MIB):
    stats = {key: allocated for key in train_compare.EQUAL_KEYS}
    stats.update({"reserved_bytes.all.current": peak_reserved, "segment.all.current": 3})
    result = {
        "model": "conv",
        "allocator": allocator,
        "device": "NVIDIA H200",
        "steps": 50,
        "mean_step_ms": mean_ms,
        "peak_reserved": peak_reserved,
        "peak_allocated": allocated,
        "checkpoints": {"warmup": dict(stats), "end": dict(stats)},
        "snapshot": f"/nonexistent/{allocator}.pickle",
    }
    if allocator == "blockpool":
        result["blockpool"] = {
            "functions_agree": [True] * 4,
            "driver_used_bytes": peak_reserved + 500 * MIB,
            "reserved_bytes": peak_reserved,
            "summary_lines": 47,
            "torch_memory_stats": "RuntimeError: CUDAPluggableAllocator does not yet support getDeviceStats.",
            "torch_empty_cache_released": 0,
            "blockpool_empty_cache_released": 256 * MIB,
        }
    return result


def all_runs():
    runs = {}
    for model in train_compare.MODELS:
        runs[(model, "native")] = run("native", 10.0, 100 * MIB)
        runs[(model, "blockpool")] = run("blockpool", 10.1, 100 * MIB)
        runs[(model, "blockpool-expandable")] = run("blockpool", 10.1, 80 * MIB)
    return runs


class CompareTest(unittest.TestCase):
    def setUp(self):
        patch = mock.patch.object(train_compare, "snapshot_checks", return_value=[])
        patch.start()
        self.addCleanup(patch.stop)
        self.args = mock.Mock(memtrace="/nonexistent/memtrace")

    def test_equal_statistics_pass_every_check(self):
        checks = train_compare.compare_model(self.args, "conv", all_runs())
        self.assertTrue(checks and all(c["ok"] for c in checks), checks)

    def test_a_differing_statistic_fails_and_is_named(self):
        runs = all_runs()
        runs[("conv", "blockpool")]["checkpoints"]["end"]["requested_bytes.all.current"] += 512
        failed = [c for c in train_compare.compare_model(self.args, "conv", runs) if not c["ok"]]
        self.assertEqual(len(failed), 1)
        self.assertIn("at end", failed[0]["check"])
        self.assertIn("requested_bytes.all.current", failed[0]["detail"])

    def test_torch_empty_cache_releasing_memory_would_be_noticed(self):
        runs = all_runs()
        runs[("conv", "blockpool")]["blockpool"]["torch_empty_cache_released"] = MIB
        failed = [
            c["check"] for c in train_compare.compare_model(self.args, "conv", runs) if not c["ok"]
        ]
        self.assertEqual(len(failed), 1)
        self.assertIn("empty_cache", failed[0])

    def test_a_failed_run_is_a_failed_check(self):
        runs = all_runs()
        runs[("transformer", "native")] = {"error": "exit 1: CUDA error"}
        checks = train_compare.compare_model(self.args, "transformer", runs)
        self.assertEqual([c["ok"] for c in checks], [False])

    def test_table_reports_ratios_and_targets(self):
        runs = all_runs()
        runs[("transformer", "blockpool")] = copy.deepcopy(runs[("transformer", "blockpool")])
        runs[("transformer", "blockpool")]["mean_step_ms"] = 10.5  # 5% slower
        torch = mock.Mock(__version__="2.5.1+cu124")
        table = train_compare.render(runs, [train_compare.check("x", True, "a|b")], [], torch)
        self.assertIn("| conv | blockpool | 10.100 | 1.010x | 100.0 | 1.000x | 40.0 |", table)
        self.assertIn("| conv: step time within 2% of native | yes |", table)
        self.assertIn("| transformer: step time within 2% of native | NOT MET |", table)
        self.assertIn(
            "| conv: peak reserved lower than native (expandable segments) | yes |", table
        )
        self.assertIn("| x | ok | a/b |", table, "a pipe in a detail must not break the table")
        self.assertTrue(table.rstrip().endswith("result: ok"))

    def test_oom_check(self):
        good = {
            "is_torch_oom": True,
            "message": "out of memory: tried",
            "last_oom_message": "out of memory: tried",
        }
        self.assertTrue(train_compare.oom_check(good)["ok"])
        self.assertFalse(train_compare.oom_check(dict(good, is_torch_oom=False))["ok"])
        self.assertFalse(train_compare.oom_check({"error": "timed out"})["ok"])

    def test_without_torch_or_cuda_it_says_so_and_exits_0(self):
        with tempfile.TemporaryDirectory() as out:
            argv = ["train_compare.py", "--out", out]
            with no_torch(), mock.patch.object(sys, "argv", argv), mock.patch("sys.stdout"):
                self.assertEqual(train_compare.main(), 0)
            with open(os.path.join(out, "results.md")) as results:
                self.assertIn("skipped: torch is not importable", results.read())
            fake = FakeTorch()
            fake.torch.cuda.is_available = lambda: False
            with fake, mock.patch.object(sys, "argv", argv), mock.patch("sys.stdout"):
                self.assertEqual(train_compare.main(), 0)
            with open(os.path.join(out, "results.md")) as results:
                self.assertIn("sees no CUDA device", results.read())


if __name__ == "__main__":
    unittest.main()
