#!/usr/bin/env bash
# The Parquet dataset read by a real engine: converts a rank series made of the project's
# PyTorch snapshots (real ones and made ones, two with several devices) with `memtrace convert`,
# runs the README's SQL queries (the ```sql blocks of its "SQL over thousands of ranks"
# section, verbatim but for the dataset's path) in DuckDB, and checks every answer against
# memtrace's own: per-rank and per-device peaks against `memtrace summary FILE --json`, the
# imbalance and outliers against `memtrace summary 'rank-{rank}.pickle' --json`, and the top
# sites across ranks against `memtrace top FILE --peak --device D --json` added up.
#
#   scripts/check-parquet.sh [MEMTRACE]
#
# MEMTRACE defaults to target/release/memtrace (`cargo build --release -p profiler-ui`).
# DuckDB comes from PyPI (pinned, installed into a temporary folder and removed afterwards)
# unless `import duckdb` already works. Exits 0 when every answer agrees.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MEMTRACE="$(realpath "${1:-$ROOT/target/release/memtrace}")"
DUCKDB_WHEEL="duckdb==2.0.1"

die() {
    echo "check-parquet: $*" >&2
    exit 2
}
[[ -x "$MEMTRACE" ]] || die "no memtrace at $MEMTRACE: run 'cargo build --release -p profiler-ui' first"
command -v python3 >/dev/null 2>&1 || die "python3 is needed"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if ! python3 -c 'import duckdb' 2>/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$WORK/python" "$DUCKDB_WHEEL" \
        || die "cannot install $DUCKDB_WHEEL from PyPI"
    export PYTHONPATH="$WORK/python${PYTHONPATH:+:$PYTHONPATH}"
fi

# Seven ranks: the three real snapshots, two of them twice, and two made files with two and
# four devices, so the peaks differ and the busiest device is not always device 0.
FIXTURES="$ROOT/allocator-tests/fixtures"
mkdir -p "$WORK/ranks"
rank=0
for file in \
    pytorch-snapshots/notHanmin_assignment2-systems_memory_snapshot.pickle \
    pytorch-snapshots/bcrafton_assignment2-systems_memory_snapshot.pickle \
    pytorch-snapshots/Yiyi_LLM-inference_oom_snapshot.pickle \
    made/made_expandable_two_devices.pickle \
    pytorch-snapshots/bcrafton_assignment2-systems_memory_snapshot.pickle \
    made/made_four_device_traces_without_times.pickle \
    pytorch-snapshots/notHanmin_assignment2-systems_memory_snapshot.pickle; do
    cp "$FIXTURES/$file" "$WORK/ranks/rank-$rank.pickle"
    rank=$((rank + 1))
done

"$MEMTRACE" convert "$WORK/ranks/rank-{rank}.pickle" "$WORK/ranks.parquet"

python3 - "$ROOT/README.md" "$WORK" "$MEMTRACE" <<'PY'
import json
import subprocess
import sys
from collections import defaultdict

import duckdb

readme, work, memtrace = sys.argv[1:]
ranks = sorted(
    int(name.split("-")[1].split(".")[0])
    for name in __import__("os").listdir(f"{work}/ranks")
)
failures = []


def check(what, got, expected):
    if got != expected:
        failures.append(f"{what}: DuckDB says {got!r}, memtrace {expected!r}")


def memtrace_json(*args):
    out = subprocess.run([memtrace, *args, "--json"], check=True, capture_output=True)
    return json.loads(out.stdout)


# The README's queries, as written.
text = open(readme).read()
section = text[text.index("### SQL over thousands of ranks") :]
section = section[: section.index("\n## ")]
blocks = [b.split("```", 1)[0] for b in section.split("```sql\n")[1:]]
if len(blocks) != 3:
    sys.exit(f"check-parquet: the README's section has {len(blocks)} sql blocks, 3 expected")
blocks = [b.replace("'ranks.parquet/", f"'{work}/ranks.parquet/") for b in blocks]
db = duckdb.connect()


def run(block):
    statements = [s.strip() for s in block.split(";\n") if s.strip()]
    for statement in statements[:-1]:
        db.execute(statement)
    cursor = db.execute(statements[-1])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


# 1. Peaks per rank and device.
peaks = run(blocks[0])
expected = []
for rank in ranks:
    report = memtrace_json("summary", f"{work}/ranks/rank-{rank}.pickle")
    for device in report["devices"]:
        expected.append(
            (rank, device["device"], device["peak_allocated"]["bytes"], device["peak_reserved"]["bytes"])
        )
got = [(p["rank"], p["device"], p["peak_allocated"], p["peak_reserved"]) for p in peaks]
check("peaks per rank and device", got, expected)

# 2. Imbalance and outliers.
[imbalance] = run(blocks[1])
summary = memtrace_json("summary", f"{work}/ranks/rank-{{rank}}.pickle")
for name in ("allocated", "reserved"):
    got, want = imbalance[f"{name}_max_over_min"], summary[name]["max_over_min"]
    if abs(got - want) > 1e-9 * want:
        failures.append(f"{name} max / min: DuckDB says {got}, memtrace {want}")
check(
    "outliers",
    imbalance["outliers"] or [],
    [summary["files"][i]["rank"] for i in summary["outliers"]],
)

# 3. Top sites at each rank's allocated peak, across ranks.
sites = defaultdict(lambda: [0, 0, set()])
for rank in ranks:
    path = f"{work}/ranks/rank-{rank}.pickle"
    for device in memtrace_json("summary", path)["devices"]:
        top = memtrace_json("top", path, "--peak", "--limit", "100000", "--device", str(device["device"]))
        for site in top["sites"]:
            entry = sites[site["label"]]
            entry[0] += site["bytes"]
            entry[1] += site["blocks"]
            entry[2].add(rank)
want = sorted(((-b, label, n, len(r)) for label, (b, n, r) in sites.items()))[:10]
want = [(label, -b, n, r) for (b, label, n, r) in want]
got = [(s["site"], s["bytes"], s["blocks"], s["ranks"]) for s in run(blocks[2])]
check("top sites across ranks", got, want)

if failures:
    print("\n".join(f"check-parquet: {f}" for f in failures), file=sys.stderr)
    sys.exit(1)
print(
    f"check-parquet: ok: {len(ranks)} ranks, {len(peaks)} devices, "
    f"{len(got)} top sites; every answer agrees with memtrace's"
)
PY
