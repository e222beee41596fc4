"""libblockpool_torch.so through ctypes, over the simulated device (BLOCKPOOL_BACKEND=sim).

Each test runs one program of scenarios.py in a fresh process, so its statistics are exact:
the sizes follow PyTorch's rules (512-byte rounding; a 2 MiB segment for small blocks, 20 MiB
for blocks between 1 and 10 MiB), the same numbers torch.cuda.memory_stats() gives for the
same requests. Snapshots are opened by `memtrace info`, and the log of bad frees is read
from the process's standard error.
"""

import json
import os
import pickle
import subprocess
import tempfile
import unittest

import support

KIB = 1 << 10
MIB = 1 << 20


class LibraryTest(unittest.TestCase):
    def scenario(self, name, *args, **env):
        result = support.run_scenario(
            name, env={k: str(v) for k, v in env.items()}, args=list(args)
        )
        self.assertEqual(
            result.returncode, 0, f"scenario {name} failed:\n{result.stdout}\n{result.stderr}"
        )
        return result

    def test_malloc_and_free_from_eight_threads(self):
        data = self.scenario("threads", "8", "400").data
        self.assertEqual(data["problems"], [], "no NULL and no two live blocks may overlap")
        made = data["counts"]["malloc"]
        self.assertEqual(data["counts"]["free"], made)
        self.assertGreater(made, 8 * 400 // 3, "the workers did not run their rounds")
        stats = data["stats"]
        self.assertEqual(stats["allocation.all.allocated"], made, "every malloc counted once")
        self.assertEqual(stats["allocation.all.freed"], made, "every free counted once")
        for key in (
            "allocation.all.current",
            "allocated_bytes.all.current",
            "active_bytes.all.current",
            "requested_bytes.all.current",
        ):
            self.assertEqual(stats[key], 0, f"{key} after everything was freed")
        self.assertEqual(stats["allocated_bytes.all.allocated"], stats["allocated_bytes.all.freed"])
        self.assertLessEqual(
            stats["allocation.all.peak"], 8 * 4, "at most 4 live blocks per worker"
        )

    def test_statistics_are_exact(self):
        data = self.scenario("exact_stats").data
        self.assertTrue(data["zero_size_is_null"], "size 0 gives NULL, as PyTorch expects")
        small, large = 1024, 5 * MIB  # 1000 rounds up to 1024; 5 MiB is a multiple of 512
        small_segment, large_segment = 2 * MIB, 20 * MIB
        both = data["both"]
        self.assertEqual(
            both,
            {
                "active.all.current": 2,
                "active_bytes.all.current": small + large,
                "allocated_bytes.all.allocated": small + large,
                "allocated_bytes.all.current": small + large,
                "allocated_bytes.all.freed": 0,
                "allocated_bytes.all.peak": small + large,
                "allocated_bytes.large_pool.current": large,
                "allocated_bytes.small_pool.current": small,
                "allocation.all.allocated": 2,
                "allocation.all.current": 2,
                "allocation.all.freed": 0,
                "allocation.all.peak": 2,
                "inactive_split.all.current": 2,
                "inactive_split_bytes.all.current": (small_segment - small)
                + (large_segment - large),
                "inactive_split_bytes.large_pool.current": large_segment - large,
                "inactive_split_bytes.small_pool.current": small_segment - small,
                "num_device_alloc": 2,
                "num_device_free": 0,
                "num_ooms": 0,
                "requested_bytes.all.current": 1000 + large,
                "reserved_bytes.all.current": small_segment + large_segment,
                "reserved_bytes.all.freed": 0,
                "reserved_bytes.all.peak": small_segment + large_segment,
                "reserved_bytes.large_pool.current": large_segment,
                "reserved_bytes.small_pool.current": small_segment,
                "segment.all.current": 2,
            },
        )
        self.assertEqual(
            data["functions"],
            [
                small + large,
                small + large,
                small_segment + large_segment,
                small_segment + large_segment,
            ],
            "memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved",
        )
        self.assertIn("memory summary, device ID 0", data["summary_head"])
        self.assertLess(
            data["abbreviated_lines"], data["full_lines"], "abbreviated drops the pool rows"
        )

        freed_small = data["small_freed"]
        self.assertEqual(freed_small["allocated_bytes.all.current"], large)
        self.assertEqual(
            freed_small["inactive_split_bytes.small_pool.current"],
            0,
            "the small segment merged whole",
        )
        self.assertEqual(
            freed_small["reserved_bytes.all.current"],
            small_segment + large_segment,
            "freed blocks stay cached",
        )

        emptied = data["emptied"]
        self.assertEqual(emptied["reserved_bytes.all.current"], 0)
        self.assertEqual(emptied["segment.all.current"], 0)
        self.assertEqual(emptied["num_device_free"], 2)
        self.assertEqual(emptied["reserved_bytes.all.freed"], small_segment + large_segment)
        self.assertEqual(
            emptied["allocated_bytes.all.peak"], small + large, "peaks survive until reset"
        )

        peaks = data["peaks_reset"]
        self.assertEqual(
            (
                peaks["allocated_bytes.all.peak"],
                peaks["reserved_bytes.all.peak"],
                peaks["allocation.all.peak"],
            ),
            (0, 0, 0),
        )
        self.assertEqual(
            peaks["allocated_bytes.all.allocated"], small + large, "a peak reset keeps the totals"
        )

        accumulated = data["accumulated_reset"]
        for key in (
            "allocated_bytes.all.allocated",
            "allocated_bytes.all.freed",
            "allocation.all.allocated",
            "num_device_alloc",
            "num_device_free",
            "reserved_bytes.all.freed",
        ):
            self.assertEqual(accumulated[key], 0, f"{key} after reset_accumulated_memory_stats")

        self.assertEqual(data["keys"], 122, "the keys of torch.cuda.memory_stats()")
        self.assertTrue(data["sorted"] and data["all_ints"])

    def test_bad_and_double_freed_pointers_are_logged_and_change_nothing(self):
        result = self.scenario("bad_pointers")
        data = result.data
        self.assertEqual(
            data["after_bad"], data["after_free"], "a bad free must change no statistic"
        )
        self.assertEqual(data["after_free"]["allocation.all.freed"], 1)
        self.assertEqual(data["record_stream_code"], -6, "BLOCKPOOL_ERR_UNKNOWN_POINTER")
        self.assertIn("0xdead0000", data["record_stream_error"])
        lines = [
            line
            for line in result.stderr.splitlines()
            if line.startswith("blockpool:") and "as BLOCKPOOL_BACKEND=sim asks" not in line
        ]
        ptr = f"{data['ptr']:#x}"
        self.assertEqual(
            len(lines),
            4,
            f"double free, unknown, v0 double free, record_stream; NULL is silent:\n{result.stderr}",
        )
        self.assertTrue("double free" in lines[0] and ptr in lines[0], lines[0])
        self.assertIn("0xdead0000", lines[1])
        self.assertTrue("blockpool_free_v0" in lines[2] and "double free" in lines[2], lines[2])
        self.assertIn("blockpool_record_stream", lines[3])

    def test_snapshot_opens_in_memtrace_with_exact_event_counts(self):
        memtrace = support.memtrace_path()
        with tempfile.TemporaryDirectory() as directory:
            data = self.scenario("snapshot", directory, RANK=3).data
            path = os.path.join(directory, "run-3.pickle")
            self.assertEqual(data["written"], path, "{rank} is the RANK variable without torch")
            self.assertTrue(
                os.path.isfile(os.path.join(directory, "c-3.pickle")),
                "the C function replaces {rank} too",
            )
            info = json.loads(
                subprocess.run(
                    [memtrace, "info", "--json", path], capture_output=True, text=True, check=True
                ).stdout
            )
            with open(path, "rb") as snapshot_file:
                snapshot = pickle.load(snapshot_file)  # plain dicts and lists: no torch needed
        self.assertEqual(info["format"], "pytorch")
        [device] = info["devices"]
        self.assertEqual(
            device["events_by_action"],
            {
                "alloc": 2,
                "free_requested": 2,
                "free_completed": 2,
                "segment_alloc": 2,
                "segment_free": 2,
                "annotate": 2,  # the tag "layer1" pushed and popped
                "snapshot": 1,
            },
        )
        self.assertEqual(device["events"], 13)
        self.assertEqual(
            (device["segments"], device["reserved_bytes"]), (0, 0), "empty_cache released both"
        )
        actions = [event["action"] for event in snapshot["device_traces"][0]]
        self.assertEqual(actions.count("alloc"), 2)
        allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual(
            [(e["addr"], e["size"]) for e in allocs],
            [(data["small"], 1000), (data["large"], 5 * MIB)],
            "PyTorch's alloc events carry the requested size",
        )
        self.assertEqual(snapshot["segments"], [])

    def test_out_of_memory_message_counts_and_fraction(self):
        data = self.scenario("out_of_memory", BLOCKPOOL_SIM_CAPACITY=64 * MIB).data
        self.assertEqual(data["before"], "", "no failure yet, no message")
        self.assertIsNone(data["never_fits_ptr"])
        self.assertIn("1024.00 MiB", data["never_fits"])
        self.assertTrue(data["held"])
        kind, message, cause = data["raised"]
        self.assertEqual(
            (kind, cause), ("OutOfMemoryError", "RuntimeError"), "oom_errors() without torch"
        )
        self.assertIn("tried to allocate 40.00 MiB", message)
        self.assertIn("24.00 MiB is free", message, "blockpool's numbers in the message")
        self.assertEqual(data["fraction"], 0.5)
        self.assertIsNone(data["over_fraction_ptr"], "40 MiB is over half of 64 MiB")
        self.assertIn("memory fraction", data["over_fraction"])
        self.assertTrue(data["under_fraction"], "20 MiB is under half of 64 MiB")
        self.assertEqual(data["num_ooms"], 3)
        self.assertIn("Allowed range: 0~1", data["bad_fraction"])
        self.assertEqual(data["bad_fraction_c"][0], -1, "BLOCKPOOL_ERR_INVALID_ARGUMENT")
        self.assertIn("1.5", data["bad_fraction_c"][1])

    def test_leak_scope_and_step_detector(self):
        data = self.scenario("leaks").data
        scope = data["scope"]
        self.assertEqual(scope["name"], "eval")
        [site] = scope["leaks"]["sites"]
        self.assertTrue(site["site"].startswith("eval.cache"), site["site"])
        self.assertEqual(
            (site["count"], site["bytes"], site["requested_bytes"]),
            (1, 1024, 1000),
            "the kept block only",
        )
        self.assertEqual(scope["peak_bytes"], [1024 + 3072], "both tagged blocks were live at once")

        findings = data["findings"]
        self.assertEqual(
            [f["steps_observed"] for f in findings], [1, 2, 3, 4, 5, 6], "one observation per step"
        )
        self.assertEqual(
            data["repeated"], findings[-1], "the last step asked again is not observed again"
        )
        self.assertEqual(
            [len(f["growing"]) for f in findings],
            [0, 0, 0, 1, 1, 1],
            "flagged after 3 growing steps",
        )
        [growing] = findings[-1]["growing"]
        self.assertTrue(growing["site"].startswith("history.push"), growing["site"])
        self.assertEqual(
            (growing["bytes_per_step"], growing["count_per_step"], growing["bytes"]),
            (MIB, 1, 6 * MIB),
        )
        persistent = {p["site"].split(" @ ")[0]: p["bytes"] for p in findings[-1]["persistent"]}
        self.assertEqual(persistent.get("weights"), 8 * MIB, "weights are kept, not growing")

        report = {
            s["site"].split(" @ ")[0]: (s["count"], s["bytes"]) for s in data["report"]["sites"]
        }
        self.assertEqual(report["history.push"], (6, 6 * MIB))
        self.assertEqual(report["weights"], (1, 8 * MIB))

    def test_two_devices(self):
        data = self.scenario("devices", BLOCKPOOL_SIM_DEVICES=2).data
        self.assertEqual(data["count"], 2)
        self.assertEqual((data["device0"], data["device1"], data["device1_after"]), (0, 4096, 0))
        self.assertEqual(data["device2"][0], -2, "BLOCKPOOL_ERR_NO_SUCH_DEVICE")
        self.assertIn("2 device(s)", data["device2"][1])


if __name__ == "__main__":
    unittest.main()
