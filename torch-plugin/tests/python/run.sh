#!/usr/bin/env bash
# The Python tests of the PyTorch plugin: the package's own logic (a stand-in torch) and the
# library through ctypes over the simulated device. Builds nothing: CI builds first.
#
#   torch-plugin/tests/python/run.sh [LIBRARY [MEMTRACE]]
#
# LIBRARY defaults to target/release/libblockpool_torch.so (`cargo build --release -p
# blockpool-torch`), MEMTRACE to target/release/memtrace (`cargo build --release -p
# profiler-ui`). Exits non-zero when a test fails, when either file is missing, or when no
# test ran; no torch and no GPU needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
LIBRARY="${1:-$ROOT/target/release/libblockpool_torch.so}"
MEMTRACE="${2:-$ROOT/target/release/memtrace}"

die() {
    echo "torch-plugin python tests: $*" >&2
    exit 2
}

[[ -f "$LIBRARY" ]] || die "no library at $LIBRARY: run 'cargo build --release -p blockpool-torch' first"
[[ -x "$MEMTRACE" ]] || die "no memtrace at $MEMTRACE: run 'cargo build --release -p profiler-ui' first"
command -v python3 >/dev/null 2>&1 || die "python3 is needed"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT

cd "$ROOT"
status=0
BLOCKPOOL_TORCH_LIB="$(realpath "$LIBRARY")" BLOCKPOOL_MEMTRACE="$(realpath "$MEMTRACE")" \
    BLOCKPOOL_BACKEND=sim python3 -m unittest discover -s torch-plugin/tests/python -v 2>&1 |
    tee "$log" || status=$?

# unittest closes with "Ran N tests in Xs"; zero tests is a failure, as is any skip of a test
# that needs the library (the library is given, so nothing may be skipped for want of it).
ran="$(sed -n -E 's/^Ran ([0-9]+) tests? in .*/\1/p' "$log" | tail -n 1)"
if [[ -z "$ran" || "$ran" -eq 0 ]]; then
    die "no test ran"
fi
if grep -q "skipped 'BLOCKPOOL_TORCH_LIB is not set" "$log"; then
    die "tests were skipped for want of the library although $LIBRARY was given"
fi
skipped="$(grep -c -E " \.\.\. skipped " "$log" || true)"
passed=$((ran - skipped))
if [[ $status -ne 0 ]]; then
    failed="$(sed -n -E 's/^FAILED \((failures=([0-9]+))?(, )?(errors=([0-9]+))?.*/\2 \5/p' "$log" | tail -n 1)"
    read -r failures errors <<<"${failed:-0 0}"
    echo "$((passed - ${failures:-0} - ${errors:-0})) passed, $((${failures:-0} + ${errors:-0})) failed, $skipped skipped"
    exit "$status"
fi
echo "$passed passed, 0 failed, $skipped skipped"
