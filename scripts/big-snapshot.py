#!/usr/bin/env python3
"""Writes a PyTorch memory snapshot of N trace entries built from a real snapshot's
allocation stream, for memtrace's scale benchmarks (benches/README.md, "memtrace at scale").

    python3 scripts/big-snapshot.py SOURCE.pickle N OUT.pickle

The source's first device trace is repeated until there are N entries, each repetition's
times shifted past the one before; the entries' frame lists stay the source's own objects,
so the pickle shares them (memo references) as PyTorch writes them. Segments, allocator
settings and annotations are the source's. Plain data only: loads with the standard pickle
module, no torch needed.
"""
import pickle
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(source, "rb") as f:
        snapshot = pickle.load(f)
    base = next((t for t in snapshot.get("device_traces", []) if t), None)
    if base is None:
        sys.exit(f"{source}: no device trace to repeat")
    times = [e.get("time_us", 0) for e in base]
    span = max(times) - min(times) + 1
    entries = []
    repetition = 0
    while len(entries) < count:
        for entry in base[: count - len(entries)]:
            copy = dict(entry)
            copy["time_us"] = entry.get("time_us", 0) + repetition * span
            entries.append(copy)
        repetition += 1
    snapshot["device_traces"] = [entries]
    with open(out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


if __name__ == "__main__":
    main()
