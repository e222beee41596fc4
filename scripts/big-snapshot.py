#!/usr/bin/env python3
"""Writes a PyTorch memory snapshot of N trace entries built from a real snapshot's
allocation stream, for memtrace's scale benchmarks (benches/README.md, "memtrace at scale").

    python3 scripts/big-snapshot.py SOURCE.pickle N OUT.pickle

The source's first device trace is repeated until there are at least N entries (whole
repetitions: a cut one would not end in the end state). Each repetition is
the same program run again in an address space of its own (addresses shifted by a multiple
of 2^44, times shifted past the repetition before), with a shifted copy of the device's
segments at the end, so every repetition is as consistent with the end state as the source
is and every command reads the result. The entries' frame lists stay the source's own
objects, so the pickle shares them (memo references) as PyTorch writes them. Allocator
settings and annotations are the source's. Plain data only: the standard pickle module
loads it, no torch needed.
"""
import pickle
import sys

SHIFT = 1 << 44


def shifted_segment(segment, offset):
    moved = dict(segment)
    moved["address"] = segment["address"] + offset
    moved["blocks"] = [dict(b, address=b["address"] + offset) for b in segment.get("blocks", [])]
    return moved


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(source, "rb") as f:
        snapshot = pickle.load(f)
    traces = snapshot.get("device_traces", [])
    device = next((d for d, t in enumerate(traces) if t), None)
    if device is None:
        sys.exit(f"{source}: no device trace to repeat")
    base = traces[device]
    times = [e.get("time_us", 0) for e in base]
    span = max(times) - min(times) + 1
    segments = [s for s in snapshot["segments"] if s.get("device", 0) == device]
    others = [s for s in snapshot["segments"] if s.get("device", 0) != device]
    entries = []
    all_segments = list(others)
    repetitions = -(-count // len(base))
    for r in range(repetitions):
        offset = r * SHIFT
        for entry in base:
            moved = dict(entry)
            moved["time_us"] = entry.get("time_us", 0) + r * span
            if moved.get("addr"):
                moved["addr"] = entry["addr"] + offset
            entries.append(moved)
        all_segments.extend(shifted_segment(s, offset) for s in segments)
    snapshot["device_traces"] = [[] for _ in traces]
    snapshot["device_traces"][device] = entries
    snapshot["segments"] = all_segments
    with open(out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


if __name__ == "__main__":
    main()
