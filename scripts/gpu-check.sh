#!/usr/bin/env bash
# GPU check: build the GPU tests and the GPU benchmark on a development machine (no GPU
# needed), then run them on a machine with an NVIDIA GPU and no network (no cargo needed).
#
#   scripts/gpu-check.sh build   # here: compile in release, copy the binaries into .gpu/
#   scripts/gpu-check.sh run     # there: run .gpu/*, logs and a results table into $OUT
#                                # (or .gpu/results/ when OUT is unset); where torch is
#                                # importable, also PyTorch trained with its own allocator and
#                                # with blockpool's plugin (torch-plugin/tests/gpu/)
#   scripts/gpu-check.sh selftest  # here, no GPU: `run` against the fake driver library
#                                  # (.gpu/fake/libcuda.so), to check this script end to end;
#                                  # the kernel tests are skipped and the timings are not a GPU's
#
# `run` takes under 9 minutes: the tests are capped at 150 s, the benchmark at 110 s and the
# PyTorch comparison at 240 s. It exits 0 only when every GPU test passed, the benchmark ran
# on a GPU and the PyTorch comparison passed or could not run for want of torch.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GPU_DIR="$ROOT/.gpu"
TESTS_BIN="$GPU_DIR/gpu-tests"
BENCH_BIN="$GPU_DIR/bench-cuda"
TORCH_LIB="$GPU_DIR/libblockpool_torch.so"
MEMTRACE_BIN="$GPU_DIR/memtrace"
TORCH_COMPARE="$ROOT/torch-plugin/tests/gpu/train_compare.py"

die() {
    echo "gpu-check: $*" >&2
    exit 2
}

# From cargo's JSON messages on stdin, field $1 of the messages of kind $2 whose target (or
# path package) is named $3: `executable_of NAME` and `out_dir_of PACKAGE` below.
cargo_field() {
    python3 -c '
import json, sys
field, reason, name = sys.argv[1:4]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != reason or not m.get(field):
        continue
    # A path package id ends in ".../<folder>#<version>".
    if m.get("target", {}).get("name") == name or "/" + name + "#" in m.get("package_id", ""):
        print(m[field])
' "$@"
}

# The executable of the artifact whose target is named $1.
executable_of() {
    cargo_field executable compiler-artifact "$1"
}

# The OUT_DIR of the build script of the path package in folder $1.
out_dir_of() {
    cargo_field out_dir build-script-executed "$1"
}

build() {
    cd "$ROOT"
    command -v cargo >/dev/null 2>&1 || die "cargo is needed to build"
    rm -rf "$GPU_DIR"
    mkdir -p "$GPU_DIR"

    echo "gpu-check: building the GPU tests (release)..."
    local tests
    tests="$(cargo test --release --locked -p allocator-tests --test gpu --no-run --message-format=json |
        executable_of gpu | tail -n 1)"
    [[ -n "$tests" && -x "$tests" ]] || die "cargo built no executable for the gpu test"
    cp "$tests" "$TESTS_BIN"

    echo "gpu-check: building the CUDA benchmark (bench profile)..."
    local bench
    bench="$(cargo bench --locked -p blockpool --bench cuda --no-run --message-format=json |
        executable_of cuda | tail -n 1)"
    [[ -n "$bench" && -x "$bench" ]] || die "cargo built no executable for the cuda benchmark"
    cp "$bench" "$BENCH_BIN"

    echo "gpu-check: building the fake driver library (for selftest)..."
    local out_dir
    out_dir="$(cargo build --release --locked -p fake-libcuda --message-format=json |
        out_dir_of fake-libcuda | tail -n 1)"
    [[ -n "$out_dir" && -f "$out_dir/driver/libcuda.so" ]] || die "cargo built no fake libcuda.so"
    mkdir -p "$GPU_DIR/fake"
    cp "$out_dir/driver/libcuda.so" "$GPU_DIR/fake/libcuda.so"

    echo "gpu-check: building the PyTorch plugin and memtrace (release)..."
    cargo build --release --locked -p blockpool-torch
    cargo build --release --locked -p profiler-ui --bin memtrace
    local target_dir
    target_dir="$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    [[ -f "$target_dir/release/libblockpool_torch.so" && -x "$target_dir/release/memtrace" ]] ||
        die "cargo built no libblockpool_torch.so or memtrace in $target_dir/release"
    cp "$target_dir/release/libblockpool_torch.so" "$TORCH_LIB"
    cp "$target_dir/release/memtrace" "$MEMTRACE_BIN"

    # Debug info is of no use on the GPU machine and makes the copy large.
    if command -v strip >/dev/null 2>&1; then
        strip --strip-debug "$TESTS_BIN" "$BENCH_BIN" "$TORCH_LIB" "$MEMTRACE_BIN"
    fi
    {
        echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (with local changes)')"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -sm)"
        echo "rustc: $(rustc --version 2>/dev/null || echo unknown)"
        echo "needs: $(needed_glibc "$TESTS_BIN" "$BENCH_BIN" "$TORCH_LIB" "$MEMTRACE_BIN") or newer (built against $(glibc_here))"
    } >"$GPU_DIR/BUILD"
    echo "gpu-check: ready in .gpu/:"
    ls -l "$GPU_DIR"
    echo "gpu-check: on the GPU machine run: scripts/gpu-check.sh run"
}

# The newest glibc symbol version the binaries $@ need (e.g. GLIBC_2.34), or "unknown".
needed_glibc() {
    local need
    need="$(objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sort -uV | tail -n 1 || true)"
    echo "${need:-unknown}"
}

# This machine's glibc, e.g. "glibc 2.36".
glibc_here() {
    local version
    version="$(getconf GNU_LIBC_VERSION 2>/dev/null || true)"
    echo "${version:-unknown glibc}"
}

# Whether the dynamic loader can find libcublas (as cudarc looks for it).
has_cublas() {
    local ldconfig
    ldconfig="$(command -v ldconfig || echo /sbin/ldconfig)"
    "$ldconfig" -p 2>/dev/null | grep -q 'libcublas\.so' && return 0
    local dir
    IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
    for dir in "${dirs[@]}"; do
        compgen -G "$dir/libcublas.so*" >/dev/null && return 0
    done
    return 1
}

# A folder holding libcublas from PyTorch's NVIDIA wheels (site-packages/nvidia/.../lib), for a
# machine whose system libraries have none; empty when there is none either.
wheel_cublas_dir() {
    command -v python3 >/dev/null 2>&1 || return 0
    python3 - <<'PY' 2>/dev/null || true
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcublas.so*"), recursive=True)):
        print(os.path.dirname(lib))
        raise SystemExit
PY
}

run() {
    cd "$ROOT"
    [[ -x "$TESTS_BIN" && -x "$BENCH_BIN" ]] ||
        die "no binaries in .gpu/: run 'scripts/gpu-check.sh build' first (and carry .gpu along)"
    local out="${OUT:-$GPU_DIR/results}"
    mkdir -p "$out"
    CRITERION_TMP="$(mktemp -d)"
    trap 'rm -rf "$CRITERION_TMP"' EXIT

    local gpu="no GPU found (nvidia-smi missing)"
    # Test-name substrings to skip. On a GPU: the `on_fake` tests, in every module (they need
    # the fake driver's counters and injected failures; `cargo test` runs them without a GPU),
    # and the cuBLAS test without libcublas.
    local skip=(--skip ::on_fake_)
    local cublas="run"
    if [[ -n "${GPU_CHECK_SELFTEST:-}" ]]; then
        gpu="fake driver (selftest: the kernel tests are skipped, timings are not a GPU's)"
        skip=(--skip buffers::buffers_are_kernel_arguments
            --skip buffers::a_block_used_on_another_stream_waits_for_its_event_before_reuse
            --skip ordered::a_stream_that_takes_a_block_waits_for_the_kernel_still_writing_it
            --skip cublas::buffers_go_to_cublas_gemm)
        cublas="not run (fake driver)"
    else
        if ! has_cublas; then
            local wheel_dir
            wheel_dir="$(wheel_cublas_dir)"
            if [[ -n "$wheel_dir" ]]; then
                export LD_LIBRARY_PATH="$wheel_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                cublas="run (libcublas from $wheel_dir)"
            fi
        fi
        if ! has_cublas; then
            skip+=(--skip cublas::buffers_go_to_cublas_gemm)
            cublas="NOT RUN: no libcublas on this machine"
        fi
        if command -v nvidia-smi >/dev/null 2>&1; then
            nvidia-smi >"$out/nvidia-smi.log" 2>&1 || true
            gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
                2>/dev/null | head -n 1 || true)"
            [[ -n "$gpu" ]] || gpu="nvidia-smi found no GPU"
        fi
    fi
    cp "$GPU_DIR/BUILD" "$out/BUILD" 2>/dev/null || true

    # A binary built against a newer glibc than this machine's cannot start: say so at once
    # rather than as a failed test run.
    if ! "$TESTS_BIN" --list >/dev/null 2>"$out/preflight.log"; then
        cat "$out/preflight.log" >&2
        die "the GPU test binary does not start here ($(glibc_here); it needs $(grep -o 'GLIBC_[0-9.]*' "$out/preflight.log" | head -n 1 || echo 'see preflight.log')): build it on a machine with this glibc or older"
    fi

    echo "gpu-check: GPU tests..."
    local tests_rc=0
    timeout 150 "$TESTS_BIN" --ignored --test-threads=1 --nocapture "${skip[@]}" \
        >"$out/gpu-tests.log" 2>&1 ||
        tests_rc=$?
    echo "gpu-check: CUDA benchmark..."
    local bench_rc=0
    CRITERION_HOME="$CRITERION_TMP" timeout 110 "$BENCH_BIN" --bench --noplot \
        --warm-up-time 0.3 --measurement-time 1 --sample-size 10 >"$out/bench-cuda.log" 2>&1 ||
        bench_rc=$?

    # PyTorch with its allocator and with blockpool's (where torch is importable). Not under
    # the fake driver: torch's CUDA runtime would meet a driver that runs no kernels.
    local torch_rc=0 torch_status
    if [[ -n "${GPU_CHECK_SELFTEST:-}" ]]; then
        torch_status="not run (selftest: the fake driver runs no kernels)"
    elif ! command -v python3 >/dev/null 2>&1; then
        torch_status="not run: no python3 here, so no torch"
    elif [[ ! -f "$TORCH_LIB" || ! -x "$MEMTRACE_BIN" ]]; then
        torch_status="NOT RUN: no libblockpool_torch.so or memtrace in .gpu/ (rebuild with 'scripts/gpu-check.sh build')"
        torch_rc=2
    else
        echo "gpu-check: PyTorch with and without blockpool..."
        timeout 240 python3 "$TORCH_COMPARE" --lib "$TORCH_LIB" --memtrace "$MEMTRACE_BIN" \
            --out "$out/torch" >"$out/torch-compare.log" 2>&1 || torch_rc=$?
        if [[ $torch_rc -eq 0 ]] && grep -q '^train_compare: skipped:' "$out/torch-compare.log"; then
            torch_status="not run: $(sed -n 's/^train_compare: skipped: //p' "$out/torch-compare.log" | head -n 1)"
        elif [[ $torch_rc -eq 0 ]]; then
            torch_status="ok (table below; logs in torch/)"
        elif [[ $torch_rc -eq 124 ]]; then
            torch_status="TIMED OUT after 240 s (see torch-compare.log)"
        else
            torch_status="FAILED (exit $torch_rc; see torch-compare.log and the table below)"
        fi
    fi

    local test_summary failed bench_status status=0 expected
    test_summary="$(grep -E '^test result:' "$out/gpu-tests.log" | tail -n 1 || true)"
    [[ -n "$test_summary" ]] || test_summary="no result (exit $tests_rc; see gpu-tests.log)"
    # As many passed as were meant to run (a skip pattern matching too much passes nothing).
    expected="$("$TESTS_BIN" --list --ignored "${skip[@]}" 2>/dev/null | grep -c ': test$' || true)"
    if [[ $tests_rc -eq 0 && "$test_summary" != "test result: ok. $expected passed;"* ]]; then
        test_summary="$test_summary; EXPECTED $expected to pass"
        status=1
    fi
    # A skipped test is not a pass: without libcublas the check does not succeed.
    [[ "$cublas" == NOT\ RUN* ]] && status=1
    # libtest's closing list: "failures:" then one indented test name per line.
    failed="$(awk '/^failures:$/ { list = ""; inside = 1; next }
        inside && /^    [^ ]/ { sub(/^ +/, ""); list = list (list == "" ? "" : " ") $0; next }
        inside && NF == 0 && list != "" { inside = 0 }
        END { print list }' "$out/gpu-tests.log")"
    if [[ $tests_rc -ne 0 ]]; then
        status=1
        [[ $tests_rc -eq 124 ]] && test_summary="$test_summary; TIMED OUT after 150 s"
    fi
    if [[ $bench_rc -eq 124 ]]; then
        bench_status="TIMED OUT after 110 s"
        status=1
    elif [[ $bench_rc -ne 0 ]]; then
        bench_status="FAILED (exit $bench_rc; see bench-cuda.log)"
        status=1
    elif grep -q 'skipped, no usable NVIDIA GPU' "$out/bench-cuda.log"; then
        bench_status="SKIPPED: $(grep -o 'no usable NVIDIA GPU.*' "$out/bench-cuda.log" | head -n 1)"
        status=1
    else
        bench_status="ok"
    fi
    [[ $torch_rc -eq 0 ]] || status=1

    {
        echo "# GPU check results"
        echo
        echo "| check | result |"
        echo "|---|---|"
        echo "| GPU | $gpu |"
        echo "| build | $(head -n 1 "$GPU_DIR/BUILD" 2>/dev/null || echo unknown) |"
        echo "| system | $(uname -sr), $(glibc_here) |"
        echo "| GPU tests | $test_summary |"
        [[ -z "$failed" ]] || echo "| failed tests | $failed |"
        echo "| cuBLAS gemm test | $cublas |"
        echo "| benchmark | $bench_status |"
        echo "| PyTorch comparison | $torch_status |"
        echo
        if grep -q '^ratio ' "$out/bench-cuda.log"; then
            echo "Allocate+free pair, median ns (ratio = driver time / blockpool time; targets: sync >= 100x, async >= 2x):"
            echo
            echo "| size | blockpool ns | cuMemAlloc+Free ns | cuMemAllocAsync+FreeAsync ns | sync ratio | async ratio |"
            echo "|---|---|---|---|---|---|"
            grep '^ratio ' "$out/bench-cuda.log" | sed -E -e \
                's/^ratio size=([^ ]+) blockpool_ns=([^ ]+) sync_ns=([^ ]+) async_ns=([^ ]+) sync_over_blockpool=([^ ]+) async_over_blockpool=([^ ]+).*$/| \1 | \2 | \3 | \4 | \5x | \6x |/' -e 's/ -x \|/ - |/g'
            echo
        fi
        if grep -q '^lock ' "$out/bench-cuda.log"; then
            echo "4 KiB cache-hit pair while another thread allocates and frees 64 MiB segments:"
            echo
            echo "| release_lock_on_cudamalloc | pair ns | other thread's segments/s |"
            echo "|---|---|---|"
            grep '^lock ' "$out/bench-cuda.log" | sed -E \
                's/^lock release_lock_on_cudamalloc=([^ ]+) pair_ns=([^ ]+) other_thread_segments_per_s=([^ ]+).*$/| \1 | \2 | \3 |/'
            echo
        fi
        if [[ -f "$out/torch/results.md" ]] && grep -q '^| model |' "$out/torch/results.md"; then
            # The comparison's own table, one heading level down.
            sed 's/^# /## /' "$out/torch/results.md"
            echo
        fi
        echo "Full logs: gpu-tests.log, bench-cuda.log, torch-compare.log and torch/ (where torch ran), nvidia-smi.log (when nvidia-smi exists), BUILD"
    } >"$out/results.md"
    cat "$out/results.md"
    return $status
}

selftest() {
    [[ -f "$GPU_DIR/fake/libcuda.so" ]] ||
        die "no fake driver in .gpu/fake/: run 'scripts/gpu-check.sh build' first"
    # Two fake devices, so the two-device test runs too.
    LD_LIBRARY_PATH="$GPU_DIR/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPU_CHECK_SELFTEST=1 \
        BLOCKPOOL_FAKE_CUDA_DEVICES=2 run
    local size table="${OUT:-$GPU_DIR/results}/results.md"
    for size in 4KiB 1MiB 64MiB; do
        grep -q "^| $size | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]*x | [0-9.]*x |$" "$table" ||
            die "selftest: the results table has no complete row for $size"
    done
    for flag in off on; do
        grep -q "^| $flag | [0-9.]* | [0-9]* |$" "$table" ||
            die "selftest: the results table has no release_lock_on_cudamalloc=$flag row"
    done
    echo "gpu-check: selftest passed"
}

case "${1:-}" in
build) build ;;
run) run ;;
selftest) selftest ;;
*)
    echo "usage: scripts/gpu-check.sh build|run|selftest" >&2
    exit 2
    ;;
esac
