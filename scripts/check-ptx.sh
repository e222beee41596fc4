#!/usr/bin/env bash
# Assembles the GPU tests' hand-written PTX (allocator-tests/tests/gpu/kernels.rs) with NVIDIA's
# ptxas for the architectures the tests may meet, so a PTX mistake shows up without a GPU.
#
#   scripts/check-ptx.sh            # sm_52 (the PTX's target), sm_80 (A100), sm_90 (H100/H200)
#   scripts/check-ptx.sh sm_75      # other architectures
#
# ptxas comes from the `nvidia-cuda-nvcc-cu12` wheel on PyPI, pinned to CUDA 12.9's (about
# 40 MB, downloaded into a temporary folder and removed afterwards; `PTXAS=/path/to/ptxas`
# uses an installed one).
# Exits 0 when every architecture assembles.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NVCC_WHEEL="nvidia-cuda-nvcc-cu12==12.9.86"
KERNELS="$ROOT/allocator-tests/tests/gpu/kernels.rs"
ARCHS=("$@")
[[ ${#ARCHS[@]} -gt 0 ]] || ARCHS=(sm_52 sm_80 sm_90)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The PTX is the raw string between `r#"` and `"#` in kernels.rs.
python3 - "$KERNELS" "$WORK/kernels.ptx" <<'PY'
import sys
source = open(sys.argv[1]).read()
start = source.index('r#"') + 3
end = source.index('"#', start)
open(sys.argv[2], "w").write(source[start:end])
PY

ptxas="${PTXAS:-}"
if [[ -z "$ptxas" ]]; then
    echo "check-ptx: downloading ptxas ($NVCC_WHEEL from PyPI)..."
    python3 -m pip download --quiet --no-deps --dest "$WORK/wheel" "$NVCC_WHEEL"
    python3 -m zipfile -e "$WORK"/wheel/*.whl "$WORK/nvcc"
    ptxas="$(find "$WORK/nvcc" -type f -name ptxas | head -n 1)"
    [[ -n "$ptxas" ]] || { echo "check-ptx: the wheel holds no ptxas" >&2; exit 2; }
    chmod +x "$ptxas"
fi
"$ptxas" --version | tail -n 1

for arch in "${ARCHS[@]}"; do
    "$ptxas" -arch="$arch" "$WORK/kernels.ptx" -o "$WORK/kernels-$arch.cubin"
    echo "check-ptx: $arch ok"
done
