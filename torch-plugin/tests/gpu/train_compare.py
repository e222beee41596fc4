"""PyTorch training with its native allocator and with blockpool, compared on a GPU.

    python3 torch-plugin/tests/gpu/train_compare.py --lib LIB --memtrace MEMTRACE --out DIR

For a small convolutional network and a small torch.nn.Transformer, train_worker.py trains
on random data for a fixed number of steps in a process of its own, once per allocator:
PyTorch's native one, blockpool with the compatible policy (PyTorch's rules), and blockpool
with expandable segments. Then:

- step time (mean over the timed steps) and peak reserved bytes, each against native;
- blockpool's memory_stats() against native's torch.cuda.memory_stats() at the same points
  of the same deterministic run: allocated, requested, active bytes and live allocations
  must be equal (the same requests, rounded by the same rules);
- blockpool's functions agree with each other, and the driver sees at least what blockpool
  reserves (torch.cuda.mem_get_info);
- each blockpool snapshot loads in torch.cuda._memory_viz (segsum, trace, trace_plot, and the
  `python -m torch.cuda._memory_viz stats` command) and in `memtrace info`, and records as
  many alloc events as PyTorch's own snapshot of the same steps;
- an impossible allocation inside oom_errors() is torch.cuda.OutOfMemoryError.

It writes DIR/results.md (the table, also printed), DIR/results.json and the workers' files,
and exits 1 when a check fails or a run fails. The targets (step time within 2% of native;
peak reserved no higher than native with the compatible policy, lower with expandable
segments) are reported as met or not; they do not decide the exit status, since one short
run's timing is noise-prone. Without an importable torch, or without a CUDA device, it says
so and exits 0.
"""

import argparse
import json
import os
import pickle
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
WORKER = os.path.join(HERE, "train_worker.py")
WORKER_TIMEOUT_S = 120

MODELS = ("conv", "transformer")
# (name, allocator, its configuration)
VARIANTS = (
    ("native", "native", ""),
    ("blockpool", "blockpool", ""),
    ("blockpool-expandable", "blockpool", "expandable_segments:True"),
)
# Keys whose values must be equal between native and blockpool (compatible policy).
EQUAL_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "requested_bytes.all.current",
    "allocation.all.current",
    "active_bytes.all.current",
)
STEP_TIME_TOLERANCE = 0.02
MIB = 1 << 20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lib",
        default=os.environ.get(
            "BLOCKPOOL_TORCH_LIB", os.path.join(REPO, "target", "release", "libblockpool_torch.so")
        ),
    )
    parser.add_argument("--memtrace", default=os.path.join(REPO, "target", "release", "memtrace"))
    parser.add_argument("--out", default="train-compare")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    try:
        import torch
    except ImportError as error:
        return skip(args.out, f"torch is not importable here ({error})")
    if not torch.cuda.is_available():
        return skip(args.out, f"torch {torch.__version__} sees no CUDA device")
    for path, what in ((args.lib, "libblockpool_torch.so"), (args.memtrace, "memtrace")):
        if not os.path.isfile(path):
            print(f"train_compare: no {what} at {path}", file=sys.stderr)
            return 1

    runs, failures = {}, []
    for model in MODELS:
        for name, allocator, conf in VARIANTS:
            run = run_worker(args, model, name, allocator, conf)
            if "error" in run:
                failures.append(f"{model}/{name}: {run['error']}")
            runs[(model, name)] = run
    oom = run_worker(args, "oom", "blockpool", "blockpool", "")

    checks = []
    for model in MODELS:
        checks += compare_model(args, model, runs)
    checks.append(oom_check(oom))
    failures += [f"{c['check']}: {c['detail']}" for c in checks if not c["ok"]]

    table = render(runs, checks, failures, torch)
    with open(os.path.join(args.out, "results.md"), "w") as out:
        out.write(table)
    with open(os.path.join(args.out, "results.json"), "w") as out:
        json.dump(
            {"runs": {f"{m}/{n}": r for (m, n), r in runs.items()}, "oom": oom, "checks": checks},
            out,
            indent=1,
        )
    print(table)
    return 1 if failures else 0


def skip(out_dir, reason):
    line = f"train_compare: skipped: {reason}; nothing compared"
    print(line)
    with open(os.path.join(out_dir, "results.md"), "w") as out:
        out.write(line + "\n")
    return 0


def run_worker(args, model, name, allocator, conf):
    """Runs train_worker.py; its result dict, or {"error": ...} with the log's tail."""
    result_path = os.path.join(args.out, f"{model}-{name}.json")
    log_path = os.path.join(args.out, f"{model}-{name}.log")
    env = dict(os.environ)
    for variable in (
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "BLOCKPOOL_ALLOC_CONF",
        "RANK",
    ):
        env.pop(variable, None)
    env["BLOCKPOOL_TORCH_LIB"] = os.path.abspath(args.lib)
    env["BLOCKPOOL_BACKEND"] = "cuda"
    if conf:
        env["BLOCKPOOL_ALLOC_CONF"] = conf
    command = [sys.executable, WORKER, model, allocator, "--result", result_path]
    if model != "oom":
        # "{rank}": the worker is rank 0 (no RANK, no torch.distributed), so "-rank0".
        snapshot = os.path.join(args.out, f"{model}-{name}-rank{{rank}}.pickle")
        command += [
            "--snapshot",
            snapshot,
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
        ]
    with open(log_path, "w") as log:
        try:
            completed = subprocess.run(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=WORKER_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {WORKER_TIMEOUT_S} s (see {log_path})"}
    if completed.returncode != 0 or not os.path.isfile(result_path):
        with open(log_path) as log:
            tail = log.read().strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {completed.returncode}: {tail[0]} (see {log_path})"}
    with open(result_path) as result:
        return json.load(result)


def check(name, ok, detail):
    return {"check": name, "ok": bool(ok), "detail": detail}


def compare_model(args, model, runs):
    native, compatible = runs[(model, "native")], runs[(model, "blockpool")]
    checks = []
    if "error" in native or "error" in compatible:
        return [check(f"{model}: runs", False, "a run failed; nothing compared")]
    for point in ("warmup", "end"):
        ours, theirs = compatible["checkpoints"][point], native["checkpoints"][point]
        differing = [f"{k} {ours[k]} vs {theirs[k]}" for k in EQUAL_KEYS if ours[k] != theirs[k]]
        checks.append(
            check(
                f"{model}: memory_stats() equal to native's at {point}",
                not differing,
                "; ".join(differing) or ", ".join(f"{k}={ours[k]}" for k in EQUAL_KEYS[:2]),
            )
        )
    own = compatible["blockpool"]
    checks.append(
        check(
            f"{model}: blockpool's functions agree with memory_stats()",
            all(own["functions_agree"]),
            str(own["functions_agree"]),
        )
    )
    checks.append(
        check(
            f"{model}: the driver sees blockpool's reserved memory",
            own["driver_used_bytes"] >= own["reserved_bytes"],
            f"used {own['driver_used_bytes'] / MIB:.1f} MiB >= reserved {own['reserved_bytes'] / MIB:.1f} MiB",
        )
    )
    checks.append(
        check(
            f"{model}: blockpool_torch.empty_cache() releases, torch.cuda.empty_cache() cannot",
            own["blockpool_empty_cache_released"] >= 256 * MIB
            and own["torch_empty_cache_released"] == 0,
            f"blockpool released {own['blockpool_empty_cache_released']} bytes, torch's {own['torch_empty_cache_released']}; "
            f"torch.cuda.memory_stats(): {own['torch_memory_stats']}",
        )
    )
    for name in ("blockpool", "blockpool-expandable"):
        if "error" not in runs[(model, name)]:
            checks += snapshot_checks(args, model, name, runs[(model, name)], native)
    return checks


def snapshot_checks(args, model, name, run, native):
    from torch.cuda import _memory_viz

    path = run["snapshot"]
    checks = []
    try:
        with open(path, "rb") as snapshot_file:
            data = pickle.load(snapshot_file)
        _memory_viz.segsum(data)
        _memory_viz.trace(data)
        html = _memory_viz.trace_plot(data)
        loaded, detail = (
            len(html) > 0,
            f"segsum, trace, trace_plot ({len(data['device_traces'][0])} events on device 0)",
        )
    except Exception as error:  # any failure of PyTorch's reader is the finding
        loaded, detail = False, f"{type(error).__name__}: {error}"
    checks.append(
        check(f"{model}/{name}: snapshot loads in torch.cuda._memory_viz", loaded, detail)
    )
    cli = subprocess.run(
        [sys.executable, "-m", "torch.cuda._memory_viz", "stats", path],
        capture_output=True,
        text=True,
        timeout=120,
    )
    checks.append(
        check(
            f"{model}/{name}: python -m torch.cuda._memory_viz stats",
            cli.returncode == 0,
            (cli.stdout or cli.stderr).strip().splitlines()[-1:] or "no output",
        )
    )
    ours, native_info = memtrace_info(args, path), memtrace_info(args, native["snapshot"])
    if isinstance(ours, str):
        checks.append(check(f"{model}/{name}: memtrace info", False, ours))
        return checks
    allocs = ours["devices"][0]["events_by_action"].get("alloc", 0)
    checks.append(
        check(
            f"{model}/{name}: memtrace info",
            True,
            f"{ours['devices'][0]['events']} events, {allocs} allocs",
        )
    )
    if not isinstance(native_info, str):
        native_allocs = native_info["devices"][0]["events_by_action"].get("alloc", 0)
        checks.append(
            check(
                f"{model}/{name}: alloc events equal to PyTorch's snapshot of the same steps",
                allocs == native_allocs,
                f"{allocs} vs native {native_allocs}",
            )
        )
    return checks


def memtrace_info(args, path):
    completed = subprocess.run(
        [args.memtrace, "info", "--json", path], capture_output=True, text=True, timeout=120
    )
    if completed.returncode != 0:
        return f"exit {completed.returncode}: {completed.stderr.strip()}"
    return json.loads(completed.stdout)


def oom_check(oom):
    name = "an impossible allocation inside oom_errors() is torch.cuda.OutOfMemoryError"
    if "error" in oom:
        return check(name, False, oom["error"])
    return check(
        name,
        oom.get("is_torch_oom") and oom.get("message") == oom.get("last_oom_message"),
        json.dumps(oom),
    )


def ratio(value, base):
    return f"{value / base:.3f}x" if base else "-"


def render(runs, checks, failures, torch):
    lines = ["# PyTorch with blockpool against its native allocator", ""]
    any_run = next((r for r in runs.values() if "error" not in r), {})
    lines.append(
        f"torch {torch.__version__} on {any_run.get('device', 'unknown GPU')}, {any_run.get('steps', '?')} timed steps after warmup."
    )
    lines += [
        "",
        "| model | allocator | mean step ms | vs native | peak reserved MiB | vs native | peak allocated MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    targets = []
    for model in MODELS:
        native = runs[(model, "native")]
        for name, _, _ in VARIANTS:
            run = runs[(model, name)]
            if "error" in run:
                lines.append(f"| {model} | {name} | FAILED: {run['error']} | | | | |")
                continue
            base_ms = native.get("mean_step_ms", 0)
            base_reserved = native.get("peak_reserved", 0)
            lines.append(
                f"| {model} | {name} | {run['mean_step_ms']:.3f} | {ratio(run['mean_step_ms'], base_ms)} | "
                f"{run['peak_reserved'] / MIB:.1f} | {ratio(run['peak_reserved'], base_reserved)} | {run['peak_allocated'] / MIB:.1f} |"
            )
            if name == "blockpool" and "error" not in native:
                targets.append(
                    (
                        f"{model}: step time within 2% of native",
                        run["mean_step_ms"] <= base_ms * (1 + STEP_TIME_TOLERANCE),
                    )
                )
                targets.append(
                    (
                        f"{model}: peak reserved no higher than native (compatible)",
                        run["peak_reserved"] <= base_reserved,
                    )
                )
            if name == "blockpool-expandable" and "error" not in native:
                targets.append(
                    (
                        f"{model}: peak reserved lower than native (expandable segments)",
                        run["peak_reserved"] < base_reserved,
                    )
                )
    lines += ["", "| target | met |", "|---|---|"]
    lines += [f"| {name} | {'yes' if met else 'NOT MET'} |" for name, met in targets]
    lines += ["", "| check | result | detail |", "|---|---|---|"]
    for c in checks:
        detail = str(c["detail"]).replace("|", "/").replace("\n", " ")
        lines.append(f"| {c['check']} | {'ok' if c['ok'] else 'FAILED'} | {detail} |")
    lines += ["", f"result: {'FAILED: ' + '; '.join(failures) if failures else 'ok'}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
