#!/usr/bin/env bash
# The DCNv2 benchmark in one call on a GPU machine: builds the core library (sm_90 only, to save
# time; `make core`, or nvcc over plugin_src/core/*.cu where make is missing) and the im2col +
# cuBLAS baseline (bench/baseline/build.sh), then runs bench/dcn_bench.py with the given options.
# Logs and results go to ${OUT:-build/dcn_bench}; the bench's short table is printed last.
#
#     bash bench/dcn_bench.sh [dcn_bench.py options, e.g. --tiles or --quick --shapes r50-c4]
#
# Environment: PYTHON (default python3), NVCC, CUDA_ARCHS (default sm_90), TOTAL_LIMIT (seconds
# for the whole script: the bench then gets --time-limit TOTAL_LIMIT - build time - 60, so that it
# starts no shape it cannot finish and always prints its summary). Exit status: the bench's.
set -u
START=$SECONDS
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/build/dcn_bench}"
mkdir -p "$OUT" build
export OUT PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
NVCC="${NVCC:-nvcc}"

{
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
    "$NVCC" --version | tail -2
    $PY -c "import sys, cupy; print('python', sys.version.split()[0], 'cupy', cupy.__version__)"
    $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

t0=$SECONDS
if command -v make >/dev/null 2>&1; then
    make core NVCC="$NVCC" CUDA_ARCHS="${CUDA_ARCHS:-sm_90}" PTX_ARCH=compute_90 >"$OUT/build_core.log" 2>&1
    rc=$?
else
    "$NVCC" -O3 -std=c++17 --threads 0 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
        -gencode=arch=compute_90,code=sm_90 -Iplugin_src/core -shared \
        -o build/libdcnconvert_core.so plugin_src/core/*.cu >"$OUT/build_core.log" 2>&1
    rc=$?
fi
echo "[dcn_bench.sh] core build rc=$rc ($((SECONDS - t0)) s)"
[[ $rc -ne 0 ]] && tail -30 "$OUT/build_core.log"

t0=$SECONDS
PYTHON="$PY" NVCC="$NVCC" bash bench/baseline/build.sh >"$OUT/build_baseline.log" 2>&1
rc=$?
echo "[dcn_bench.sh] baseline build rc=$rc ($((SECONDS - t0)) s)"
grep -E '^build.sh: (using|error)' "$OUT/build_baseline.log"
[[ $rc -ne 0 ]] && tail -30 "$OUT/build_baseline.log"

declare -a LIMIT=()
if [[ -n "${TOTAL_LIMIT:-}" ]]; then
    LEFT=$((TOTAL_LIMIT - (SECONDS - START) - 60))
    ((LEFT < 30)) && LEFT=30
    LIMIT=(--time-limit "$LEFT")
    echo "[dcn_bench.sh] bench time limit ${LEFT}s (TOTAL_LIMIT=$TOTAL_LIMIT)"
fi
$PY bench/dcn_bench.py --no-build --out "$OUT" ${LIMIT[@]+"${LIMIT[@]}"} "$@" 2>&1 | tee "$OUT/bench.log"
exit "${PIPESTATUS[0]}"
