"""One training run under one allocator, in its own process: what train_compare.py compares.

    python3 train_worker.py MODEL ALLOCATOR --result FILE --snapshot FILE [--steps N] [--warmup N]
    python3 train_worker.py oom blockpool --result FILE

MODEL is "conv" (a small convolutional network) or "transformer" (a small torch.nn.
Transformer), trained with Adam on fixed random data; ALLOCATOR is "native" (PyTorch's own)
or "blockpool" (blockpool_torch.enable() first; BLOCKPOOL_ALLOC_CONF picks its policy). The
run is deterministic (seeded, cuDNN heuristics rather than benchmarking), so both allocators
see the same requests in the same order, and their statistics can be compared number for
number.

It writes FILE (JSON): the step times, the statistics at the end of warmup and at the end,
the peaks, and, for blockpool, what torch.cuda's own functions do with a pluggable allocator,
and the device's used memory as the driver reports it. Then it records a few more steps with
history on and dumps a snapshot to the --snapshot path (PyTorch's _dump_snapshot for native,
blockpool_torch.dump_snapshot for blockpool, "{rank}" in the path replaced).

"oom" checks, in a process of its own (the tensor PyTorch makes from a failed pluggable
allocation has no memory, so nothing else should run after it), that an allocation no GPU
can hold surfaces inside oom_errors() as torch.cuda.OutOfMemoryError with blockpool's message.
"""

import argparse
import contextlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

# The statistics compared between the two allocators, at the end of warmup and at the end.
COMPARED_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "requested_bytes.all.current",
    "allocation.all.current",
    "active_bytes.all.current",
    "reserved_bytes.all.current",
    "segment.all.current",
)

RECORDED_STEPS = 3


def build(torch, model_name):
    """(model, forward, loss) for ``model_name`` on the GPU with its data: forward() runs the
    model on its fixed inputs, loss(output) compares with its fixed targets."""
    nn = torch.nn
    if model_name == "conv":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1),
            nn.BatchNorm2d(128),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(128, 10),
        ).cuda()
        images = torch.randn(64, 3, 64, 64, device="cuda")
        labels = torch.randint(0, 10, (64,), device="cuda")
        cross_entropy = nn.CrossEntropyLoss()
        return model, lambda: model(images), lambda output: cross_entropy(output, labels)
    if model_name == "transformer":
        model = nn.Transformer(
            d_model=256,
            nhead=8,
            num_encoder_layers=3,
            num_decoder_layers=3,
            dim_feedforward=1024,
            dropout=0.1,
            batch_first=True,
        ).cuda()
        source = torch.randn(32, 64, 256, device="cuda")
        target = torch.randn(32, 64, 256, device="cuda")
        wanted = torch.randn(32, 64, 256, device="cuda")
        mse = nn.MSELoss()
        return model, lambda: model(source, target), lambda output: mse(output, wanted)
    raise SystemExit(f"unknown model {model_name!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=("conv", "transformer", "oom"))
    parser.add_argument("allocator", choices=("native", "blockpool"))
    parser.add_argument("--result", required=True)
    parser.add_argument("--snapshot")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()

    import torch

    blockpool = None
    if args.allocator == "blockpool":
        import blockpool_torch as blockpool

        blockpool.enable()  # before anything touches CUDA

    if args.model == "oom":
        if blockpool is None:
            raise SystemExit("the oom check is blockpool's")
        with open(args.result, "w") as out:
            json.dump(out_of_memory_check(torch, blockpool), out, indent=1)
        return

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    module, forward, loss_of = build(torch, args.model)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)

    def memory_stats():
        if blockpool is not None:
            return blockpool.memory_stats()
        return torch.cuda.memory_stats()

    def step(tags):
        with tags("forward"):
            loss = loss_of(forward())
        with tags("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with tags("optimizer"):
            optimizer.step()

    def no_tags(_):
        return contextlib.nullcontext()

    times_ms = []
    checkpoints = {}
    for index in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(no_tags)
        torch.cuda.synchronize()
        if index >= args.warmup:
            times_ms.append((time.perf_counter() - start) * 1e3)
        if index == args.warmup - 1:
            stats = memory_stats()
            checkpoints["warmup"] = {key: stats.get(key) for key in COMPARED_KEYS}
    stats = memory_stats()
    checkpoints["end"] = {key: stats.get(key) for key in COMPARED_KEYS}

    result = {
        "model": args.model,
        "allocator": args.allocator,
        "alloc_conf": os.environ.get(
            "BLOCKPOOL_ALLOC_CONF" if blockpool else "PYTORCH_CUDA_ALLOC_CONF", ""
        ),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "steps": args.steps,
        "mean_step_ms": sum(times_ms) / len(times_ms),
        "min_step_ms": min(times_ms),
        "peak_reserved": stats.get("reserved_bytes.all.peak"),
        "peak_allocated": stats.get("allocated_bytes.all.peak"),
        "checkpoints": checkpoints,
        "parameter_bytes": sum(p.numel() * p.element_size() for p in module.parameters()),
    }
    if blockpool is not None:
        result["blockpool"] = blockpool_checks(torch, blockpool)

    # History: a few more steps, recorded and tagged, then the snapshot.
    if blockpool is not None:
        blockpool.record_memory_history("all", context="all", stacks="python", max_entries=100_000)
        for _ in range(RECORDED_STEPS):
            step(blockpool.annotate)
        torch.cuda.synchronize()
        result["snapshot"] = blockpool.dump_snapshot(args.snapshot)
        blockpool.record_memory_history(None)
    else:
        torch.cuda.memory._record_memory_history(max_entries=100_000)
        for _ in range(RECORDED_STEPS):
            step(no_tags)
        torch.cuda.synchronize()
        # PyTorch's own dump has no "{rank}": this single process is rank 0.
        result["snapshot"] = args.snapshot.replace("{rank}", "0")
        torch.cuda.memory._dump_snapshot(result["snapshot"])
        torch.cuda.memory._record_memory_history(enabled=None)

    with open(args.result, "w") as out:
        json.dump(result, out, indent=1)


def blockpool_checks(torch, blockpool):
    """blockpool's counters against each other and against the driver, and what torch.cuda's
    own allocator functions do with a pluggable allocator (the table in the README's PyTorch section)."""
    stats = blockpool.memory_stats()
    free, total = torch.cuda.mem_get_info()
    checks = {
        "functions_agree": [
            blockpool.memory_allocated() == stats["allocated_bytes.all.current"],
            blockpool.max_memory_allocated() == stats["allocated_bytes.all.peak"],
            blockpool.memory_reserved() == stats["reserved_bytes.all.current"],
            blockpool.max_memory_reserved() == stats["reserved_bytes.all.peak"],
        ],
        "driver_used_bytes": total - free,
        "reserved_bytes": stats["reserved_bytes.all.current"],
        "summary_lines": len(blockpool.memory_summary().splitlines()),
    }
    try:
        torch.cuda.memory_stats()
        checks["torch_memory_stats"] = "works"
    except Exception as error:
        checks["torch_memory_stats"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    # A 256 MiB block freed (larger than any block these small models cache, so it gets a
    # segment of its own): that segment is wholly free and cached, so empty_cache() has
    # something to give back whatever the model left in the other segments.
    probe = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del probe
    reserved_before = blockpool.memory_reserved()
    torch.cuda.empty_cache()
    checks["torch_empty_cache_released"] = reserved_before - blockpool.memory_reserved()
    blockpool.empty_cache()
    checks["blockpool_empty_cache_released"] = reserved_before - blockpool.memory_reserved()
    return checks


def out_of_memory_check(torch, blockpool):
    """An allocation no GPU has (a pebibyte): inside oom_errors() it must surface as
    torch.cuda.OutOfMemoryError with blockpool's message, chained to PyTorch's error."""
    try:
        with blockpool.oom_errors():
            huge = torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
            huge.fill_(0)
        return {"raised": None}
    except Exception as error:
        return {
            "raised": type(error).__name__,
            "is_torch_oom": isinstance(error, torch.cuda.OutOfMemoryError),
            "message": str(error).splitlines()[0] if str(error) else "",
            "cause": type(error.__cause__).__name__ if error.__cause__ else None,
            "last_oom_message": blockpool.last_oom_message().splitlines()[0],
        }


if __name__ == "__main__":
    main()
