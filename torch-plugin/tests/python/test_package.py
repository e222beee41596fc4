"""The package's own logic, with a stand-in torch and a stand-in library (no .so, no GPU).

What is checked: enable() hands PyTorch the library's path and the right symbol names (the
v0 free for PyTorch 2.0) and refuses, saying what to do, once CUDA is initialized; device
arguments read as torch.cuda reads them, without initializing CUDA; "{rank}" in snapshot
paths; the translation of out-of-memory errors; torch.cuda's return types; the arguments of
record_memory_history as the C call receives them; leak scopes, the step detector and
annotate() pairing their C calls.
"""

import collections
import os
import unittest
from unittest import mock

import support  # noqa: F401  (puts the package on sys.path)
from fake_torch import FakeLibrary, FakeTorch, no_torch

import blockpool_torch
from blockpool_torch import _lib, allocator


class WithFakeLibrary(unittest.TestCase):
    """Each test gets a FakeLibrary as the process's library, a fresh enable() state, and its
    environment variables restored afterwards."""

    devices = 1

    def setUp(self):
        self.library = FakeLibrary(self.devices)
        patches = [
            mock.patch.object(_lib, "get", return_value=self.library),
            mock.patch.object(_lib, "is_loaded", return_value=False),
            mock.patch.object(allocator, "_installed", None),
            mock.patch.dict(os.environ),
        ]
        for patch in patches:
            patch.start()
            self.addCleanup(patch.stop)
        for name in ("BLOCKPOOL_BACKEND", "RANK"):
            os.environ.pop(name, None)


class EnableTest(WithFakeLibrary):
    def test_enable_installs_the_library_with_the_2_1_symbols(self):
        with FakeTorch(version="2.3.1+cu121") as torch:
            blockpool_torch.enable()
        constructed = [c for c in torch.calls if c[0] == "CUDAPluggableAllocator"]
        self.assertEqual(
            constructed,
            [("CUDAPluggableAllocator", FakeLibrary.path, "blockpool_malloc", "blockpool_free")],
            "PyTorch >= 2.1 must load blockpool_malloc and blockpool_free from the library's path",
        )
        swapped = [c for c in torch.calls if c[0] == "change_current_allocator"]
        self.assertEqual(len(swapped), 1, "the allocator must be installed exactly once")
        self.assertEqual(
            swapped[0][1].args, constructed[0][1:], "the constructed allocator is the one installed"
        )
        self.assertTrue(blockpool_torch.is_enabled())

    def test_enable_loads_the_v0_free_on_torch_2_0(self):
        with FakeTorch(version="2.0.1") as torch:
            blockpool_torch.enable()
        constructed = [c for c in torch.calls if c[0] == "CUDAPluggableAllocator"]
        self.assertEqual(
            constructed[0][3], "blockpool_free_v0", "PyTorch 2.0's free has no device argument"
        )

    def test_enable_twice_installs_once(self):
        with FakeTorch() as torch:
            blockpool_torch.enable()
            blockpool_torch.enable()
        self.assertEqual(torch.names().count("change_current_allocator"), 1)

    def test_enable_after_cuda_initialized_says_what_to_do(self):
        with FakeTorch(cuda_initialized=True) as torch:
            with self.assertRaises(RuntimeError) as caught:
                blockpool_torch.enable()
        message = str(caught.exception)
        self.assertIn("must run before the first CUDA allocation", message)
        self.assertIn("right after `import torch`", message, "the error must say how to fix it")
        self.assertNotIn("CUDAPluggableAllocator", torch.names(), "nothing may be installed")
        self.assertNotIn("cuda.current_device", torch.names())
        self.assertFalse(blockpool_torch.is_enabled())

    def test_swap_refused_by_torch_is_explained(self):
        with FakeTorch(swap_error="Can't swap an already initialized allocator"):
            with self.assertRaises(RuntimeError) as caught:
                blockpool_torch.enable()
        self.assertIn("came too late", str(caught.exception))
        self.assertIn("already initialized", str(caught.exception.__cause__))
        self.assertFalse(blockpool_torch.is_enabled())

    def test_enable_refuses_torch_before_2_0(self):
        with FakeTorch(version="1.13.1"):
            with self.assertRaisesRegex(RuntimeError, "PyTorch 2.0 or later"):
                blockpool_torch.enable()

    def test_enable_without_torch_is_an_import_error(self):
        with no_torch():
            with self.assertRaisesRegex(ImportError, "needs PyTorch"):
                blockpool_torch.enable()

    def test_enable_asks_for_the_gpu_backend_when_none_is_named(self):
        with FakeTorch():
            blockpool_torch.enable()
        self.assertEqual(
            os.environ.get("BLOCKPOOL_BACKEND"),
            "cuda",
            "auto could fall back to simulated addresses",
        )

    def test_enable_keeps_a_named_backend(self):
        os.environ["BLOCKPOOL_BACKEND"] = "cuda"
        with FakeTorch():
            blockpool_torch.enable()
        self.assertEqual(os.environ["BLOCKPOOL_BACKEND"], "cuda")

    def test_enable_refuses_the_simulated_backend(self):
        os.environ["BLOCKPOOL_BACKEND"] = "sim"
        with FakeTorch() as torch:
            with self.assertRaisesRegex(RuntimeError, "simulated device"):
                blockpool_torch.enable()
        self.assertNotIn("change_current_allocator", torch.names())


class DeviceTest(WithFakeLibrary):
    devices = 4

    def test_default_device_without_torch_is_0(self):
        with no_torch():
            blockpool_torch.memory_stats()
        self.assertEqual(self.library.calls, [("memory_stats_json", 0)])

    def test_default_device_does_not_initialize_cuda(self):
        with FakeTorch(cuda_initialized=False, current_device=3) as torch:
            blockpool_torch.memory_allocated()
        self.assertNotIn(
            "cuda.current_device", torch.names(), "current_device() would initialize CUDA"
        )
        self.assertEqual(self.library.calls, [("memory_stats_json", 0)])

    def test_default_device_is_torchs_current_device_once_initialized(self):
        with FakeTorch(cuda_initialized=True, current_device=3):
            blockpool_torch.memory_reserved()
            blockpool_torch.memory_stats("cuda")
        self.assertEqual(self.library.calls, [("memory_stats_json", 3), ("memory_stats_json", 3)])

    def test_device_spellings(self):
        device = type("device", (), {"type": "cuda", "index": 2})()
        with no_torch():
            blockpool_torch.memory_stats(1)
            blockpool_torch.memory_stats("cuda:2")
            blockpool_torch.memory_stats(device)
        self.assertEqual([c[1] for c in self.library.calls], [1, 2, 2])

    def test_bad_devices_are_refused(self):
        cpu = type("device", (), {"type": "cpu", "index": None})()
        with no_torch():
            for device, error in (
                (cpu, ValueError),
                ("cpu", ValueError),
                (-1, ValueError),
                (True, TypeError),
                (1.5, TypeError),
            ):
                with self.subTest(device=device), self.assertRaises(error):
                    blockpool_torch.memory_stats(device)
        self.assertEqual(self.library.calls, [], "no bad index may reach the library")


class RankTest(WithFakeLibrary):
    def dumped(self):
        return [c[1] for c in self.library.calls if c[0] == "dump_snapshot"]

    def test_rank_from_torch_distributed(self):
        os.environ["RANK"] = "5"
        with FakeTorch(distributed_rank=3):
            written = blockpool_torch.dump_snapshot("run-{rank}.pickle")
        self.assertEqual(written, "run-3.pickle", "torch.distributed's rank wins over RANK")
        self.assertEqual(self.dumped(), ["run-3.pickle"])

    def test_rank_from_environment_when_distributed_is_not_initialized(self):
        os.environ["RANK"] = "5"
        with FakeTorch(distributed_rank=None):
            blockpool_torch.dump_snapshot("out/{rank}/run-{rank}.pickle")
        self.assertEqual(self.dumped(), ["out/5/run-5.pickle"])

    def test_rank_from_environment_without_torch(self):
        os.environ["RANK"] = "2"
        with no_torch():
            blockpool_torch.dump_snapshot("run-{rank}.pickle")
        self.assertEqual(self.dumped(), ["run-2.pickle"])

    def test_rank_0_when_nothing_says(self):
        with no_torch():
            blockpool_torch.dump_snapshot("run-{rank}.pickle")
        self.assertEqual(self.dumped(), ["run-0.pickle"])

    def test_other_braces_and_plain_paths_are_left_alone(self):
        with no_torch():
            blockpool_torch.dump_snapshot("{name}-{rank}.pickle")
            blockpool_torch.dump_snapshot("plain.pickle")
            blockpool_torch.dump_snapshot()
        self.assertEqual(self.dumped(), ["{name}-0.pickle", "plain.pickle", "dump_snapshot.pickle"])

    def test_a_rank_that_is_not_a_number_is_refused(self):
        os.environ["RANK"] = "worker-a"
        with no_torch(), self.assertRaisesRegex(ValueError, "RANK"):
            blockpool_torch.dump_snapshot("run-{rank}.pickle")
        self.assertEqual(self.dumped(), [])


class OutOfMemoryTest(WithFakeLibrary):
    devices = 2
    message = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 8.00 GiB"
    )
    null_data = "The tensor has a non-zero number of elements, but its data is not allocated yet."

    def test_error_after_a_failed_allocation_becomes_torchs_out_of_memory_error(self):
        with FakeTorch() as torch:
            with self.assertRaises(torch.torch.cuda.OutOfMemoryError) as caught:
                with blockpool_torch.oom_errors():
                    self.library.fail_allocation(1, self.message)
                    raise RuntimeError(self.null_data)
        self.assertEqual(str(caught.exception), self.message, "blockpool's message, not PyTorch's")
        self.assertEqual(str(caught.exception.__cause__), self.null_data, "the original is chained")

    def test_a_repeated_identical_failure_is_still_seen(self):
        self.library.fail_allocation(0, self.message)
        with FakeTorch() as torch:
            with self.assertRaises(torch.torch.cuda.OutOfMemoryError):
                with blockpool_torch.oom_errors():
                    self.library.fail_allocation(0, self.message)
                    raise RuntimeError(self.null_data)

    def test_runtime_error_without_a_failed_allocation_passes_unchanged(self):
        self.library.fail_allocation(0, self.message)  # before the block: not its cause
        with FakeTorch():
            with self.assertRaises(RuntimeError) as caught:
                with blockpool_torch.oom_errors():
                    raise RuntimeError("shape mismatch")
        self.assertIs(type(caught.exception), RuntimeError)
        self.assertEqual(str(caught.exception), "shape mismatch")

    def test_other_exceptions_and_torchs_own_oom_pass_unchanged(self):
        with FakeTorch() as torch:
            torch_oom = torch.torch.cuda.OutOfMemoryError
            for error in (KeyError("k"), torch_oom("native message")):
                with self.subTest(error=error):
                    with self.assertRaises(type(error)) as caught:
                        with blockpool_torch.oom_errors():
                            self.library.fail_allocation(0, self.message)
                            raise error
                    self.assertIs(caught.exception, error)

    def test_without_torch_it_is_blockpools_out_of_memory_error(self):
        with no_torch():
            with self.assertRaises(blockpool_torch.OutOfMemoryError) as caught:
                with blockpool_torch.oom_errors():
                    self.library.fail_allocation(0, self.message)
                    raise RuntimeError(self.null_data)
        self.assertEqual(str(caught.exception), self.message)
        self.assertIsInstance(
            caught.exception, RuntimeError, "callers catching RuntimeError still do"
        )

    def test_torch_without_the_class_gets_blockpools(self):
        with FakeTorch(has_out_of_memory_error=False):
            with self.assertRaises(blockpool_torch.OutOfMemoryError):
                with blockpool_torch.oom_errors():
                    self.library.fail_allocation(0, self.message)
                    raise RuntimeError(self.null_data)

    def test_as_a_decorator_each_call_has_its_own_baseline(self):
        @blockpool_torch.oom_errors()
        def step(fail):
            if fail:
                self.library.fail_allocation(0, self.message)
            raise RuntimeError(self.null_data)

        with FakeTorch() as torch:
            with self.assertRaises(torch.torch.cuda.OutOfMemoryError):
                step(True)
            with self.assertRaises(RuntimeError) as caught:
                step(False)
        self.assertIs(
            type(caught.exception), RuntimeError, "the earlier failure is not this call's"
        )

    def test_a_library_failing_while_translating_leaves_the_original_error(self):
        with FakeTorch():
            with self.assertRaises(RuntimeError) as caught:
                with blockpool_torch.oom_errors():
                    self.library.fail_allocation(0, self.message)
                    self.library.memory_stats_json = mock.Mock(
                        side_effect=blockpool_torch.PanicError("bug", -8)
                    )
                    raise RuntimeError(self.null_data)
        self.assertEqual(str(caught.exception), self.null_data)

    def test_last_oom_message(self):
        self.assertEqual(blockpool_torch.last_oom_message(), "")
        self.library.fail_allocation(0, self.message)
        self.assertEqual(blockpool_torch.last_oom_message(), self.message)


class ReturnTypesTest(WithFakeLibrary):
    def setUp(self):
        super().setUp()
        self.library.stats[0] = {
            "reserved_bytes.all.peak": 4194304,
            "allocated_bytes.all.current": 1024,
            "allocated_bytes.all.peak": 2048,
            "reserved_bytes.all.current": 2097152,
            "num_ooms": 0,
        }

    def test_memory_stats_is_an_ordered_dict_sorted_by_key(self):
        with no_torch():
            stats = blockpool_torch.memory_stats()
        self.assertIs(type(stats), collections.OrderedDict)
        self.assertEqual(list(stats), sorted(stats), "torch.cuda.memory_stats sorts its keys")
        self.assertEqual(stats["allocated_bytes.all.current"], 1024)

    def test_the_single_numbers(self):
        with no_torch():
            numbers = (
                blockpool_torch.memory_allocated(),
                blockpool_torch.max_memory_allocated(),
                blockpool_torch.memory_reserved(),
                blockpool_torch.max_memory_reserved(),
            )
        self.assertEqual(numbers, (1024, 2048, 2097152, 4194304))
        self.assertTrue(all(type(n) is int for n in numbers))

    def test_summary_resets_and_empty_cache(self):
        with no_torch():
            summary = blockpool_torch.memory_summary(abbreviated=True)
            results = (
                blockpool_torch.reset_peak_memory_stats(),
                blockpool_torch.reset_accumulated_memory_stats(0),
                blockpool_torch.empty_cache(),
            )
        self.assertIsInstance(summary, str)
        self.assertEqual(results, (None, None, None))
        self.assertEqual(
            self.library.calls[1:],
            [
                ("reset_peak_memory_stats", 0),
                ("reset_accumulated_memory_stats", 0),
                ("empty_cache",),
            ],
        )
        self.assertEqual(self.library.calls[0], ("memory_summary", 0, True))

    def test_memory_fraction(self):
        with no_torch():
            self.assertEqual(
                blockpool_torch.get_per_process_memory_fraction(), 1.0, "unset is all of it"
            )
            self.assertIsNone(blockpool_torch.set_per_process_memory_fraction(0.25))
            self.assertEqual(blockpool_torch.get_per_process_memory_fraction(0), 0.25)
            with self.assertRaises(TypeError):
                blockpool_torch.set_per_process_memory_fraction(1)
            with self.assertRaises(ValueError):
                blockpool_torch.set_per_process_memory_fraction(1.5)
        self.assertEqual(
            [c for c in self.library.calls if c[0] == "set_memory_fraction"],
            [("set_memory_fraction", 0.25, 0)],
        )

    def test_record_stream_takes_a_tensors_storage_and_a_streams_handle(self):
        class Storage:
            def data_ptr(self):
                return 0x7F0000200000

        class Tensor:
            def untyped_storage(self):
                return Storage()

            def data_ptr(self):
                return 0x7F0000200400  # a view: inside the allocation

        stream = type("Stream", (), {"cuda_stream": 0x5555})()
        with no_torch():
            blockpool_torch.record_stream(Tensor(), stream)
            blockpool_torch.record_stream(0x7F0000300000, 0x6666)
            blockpool_torch.record_stream(0x7F0000300000, None)
            with self.assertRaises(TypeError):
                blockpool_torch.record_stream(object(), stream)
        self.assertEqual(
            [c for c in self.library.calls if c[0] == "record_stream"],
            [
                ("record_stream", 0x7F0000200000, 0x5555),
                ("record_stream", 0x7F0000300000, 0x6666),
                ("record_stream", 0x7F0000300000, 0),
            ],
        )


class HistoryTest(WithFakeLibrary):
    def recorded(self):
        return [c[1:] for c in self.library.calls if c[0] == "record_memory_history"]

    def test_arguments_reach_c_as_documented(self):
        blockpool_torch.record_memory_history()
        blockpool_torch.record_memory_history("all", context=None)
        blockpool_torch.record_memory_history("state", stacks="python", max_entries=5000)
        blockpool_torch.record_memory_history(None)
        blockpool_torch.record_memory_history(True)
        blockpool_torch.record_memory_history(False)
        self.assertEqual(
            self.recorded(),
            [
                (True, 0, 2),
                (True, 0, 0),
                (True, 5000, 1),
                (False, 0, 2),
                (True, 0, 2),
                (False, 0, 2),
            ],
        )

    def test_bad_arguments_are_refused_before_c(self):
        for kwargs in (
            {"enabled": "some"},
            {"context": "python"},
            {"stacks": "cpp"},
            {"max_entries": 0},
        ):
            with self.subTest(**kwargs), self.assertRaises(ValueError):
                blockpool_torch.record_memory_history(**kwargs)
        self.assertEqual(self.recorded(), [])

    def test_annotate_pops_even_when_the_block_raises(self):
        with self.assertRaises(KeyError):
            with blockpool_torch.annotate("layer1"):
                with blockpool_torch.annotate("attn"):
                    self.assertEqual(self.library.tags, ["layer1", "attn"])
                    raise KeyError("x")
        self.assertEqual(self.library.tags, [])

        @blockpool_torch.annotate("decorated")
        def step():
            return list(self.library.tags)

        self.assertEqual(step(), ["decorated"])
        self.assertEqual(self.library.tags, [])


class LeaksTest(WithFakeLibrary):
    def test_leak_scope_reports_after_the_block_and_frees_its_handle(self):
        with blockpool_torch.leak_scope("eval") as scope:
            self.assertIsNone(scope.report, "no report before the end")
        self.assertIsInstance(scope.report, dict)
        self.assertEqual(self.library.live_handles, set(), "the scope's handle must be freed")
        self.assertEqual(
            [c[0] for c in self.library.calls],
            ["leak_scope_begin", "leak_scope_finish", "leak_scope_free"],
        )

    def test_leak_scope_reports_when_the_block_raises(self):
        scope = blockpool_torch.leak_scope("eval")
        with self.assertRaises(ValueError):
            with scope:
                raise ValueError("x")
        self.assertIsInstance(scope.report, dict)
        self.assertEqual(self.library.live_handles, set())
        with self.assertRaises(RuntimeError):
            scope.__enter__()

    def test_step_detector(self):
        with no_torch():
            with blockpool_torch.StepDetector(growth_steps=2) as detector:
                findings = detector.observe(0)
                detector.observe(1, device="cuda:0")
            with self.assertRaisesRegex(RuntimeError, "closed"):
                detector.observe(2)
            detector.close()
        self.assertIsInstance(findings, dict)
        self.assertEqual(
            self.library.calls,
            [
                ("step_detector_new", 2),
                ("step_detector_observe", 1, 0, 0),
                ("step_detector_observe", 1, 1, 0),
                ("step_detector_free", 1),
            ],
        )
        for bad in (-1, True):
            with self.subTest(step=bad), self.assertRaises(ValueError):
                blockpool_torch.StepDetector().observe(bad)


if __name__ == "__main__":
    unittest.main()
