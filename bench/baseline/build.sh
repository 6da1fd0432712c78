#!/usr/bin/env bash
# Builds the im2col + cuBLAS DCNv2 baseline (bench/baseline/im2col_cublas.cu) into
# build/libdcn_baseline.so for bench/dcn_bench.py.
#
#     bash bench/baseline/build.sh
#
# cuBLAS is looked for, in this order:
#   1. $CUBLAS_ROOT (a folder with include/cublas_v2.h and lib/ or lib64/ libcublas.so*),
#   2. the CUDA toolkit: $CUDA_HOME, the folder above nvcc's bin/, /usr/local/cuda,
#   3. the pip wheels PyTorch uses (nvidia/cublas or nvidia/cu13, nvidia/cu12 in $PYTHON's path).
# Only the cublas*.h headers of the chosen folder are put on the include path (through a folder of
# links under build/), so that a wheel's CUDA runtime headers never shadow nvcc's own. The library
# gets an rpath to the libcublas it was linked with.
#
# Environment: NVCC (default nvcc, else /usr/local/cuda/bin/nvcc), PYTHON (default python3),
# CUDA_ARCH (default 90: SASS for sm_90 plus compute_90 PTX), CUBLAS_ROOT, CUDA_HOME.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO="$PWD"
OUT_LIB="$REPO/build/libdcn_baseline.so"
SRC="$REPO/bench/baseline/im2col_cublas.cu"
ARCH="${CUDA_ARCH:-90}"
PY="${PYTHON:-python3}"

die() {
    echo "build.sh: error: $*" >&2
    exit 1
}

NVCC_BIN="$(command -v "${NVCC:-nvcc}" || true)"
if [[ -z "$NVCC_BIN" && -x /usr/local/cuda/bin/nvcc ]]; then
    NVCC_BIN=/usr/local/cuda/bin/nvcc
fi
[[ -n "$NVCC_BIN" ]] || die "nvcc not found (set NVCC=/path/to/nvcc or put the CUDA toolkit's bin/ on PATH)"
echo "build.sh: nvcc: $NVCC_BIN ($("$NVCC_BIN" --version | grep -o 'release [0-9.]*' || echo 'version ?'))"

# Candidate roots, in order of preference.
declare -a ROOTS=()
[[ -n "${CUBLAS_ROOT:-}" ]] && ROOTS+=("$CUBLAS_ROOT")
[[ -n "${CUDA_HOME:-}" ]] && ROOTS+=("$CUDA_HOME")
ROOTS+=("$(dirname "$(dirname "$(readlink -f "$NVCC_BIN")")")" /usr/local/cuda)
if command -v "$PY" >/dev/null 2>&1; then
    while IFS= read -r line; do
        [[ -n "$line" ]] && ROOTS+=("$line")
    done < <("$PY" - <<'EOF' 2>/dev/null || true
import os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for base in list(getattr(nvidia, "__path__", [])):
    for sub in ("cublas", "cu13", "cu12"):
        d = os.path.join(base, sub)
        if os.path.isdir(d):
            print(d)
EOF
    )
fi

find_header_dir() { # root -> folder holding cublas_v2.h
    local r="$1" d
    for d in "$r/include" "$r"/targets/*/include; do
        [[ -f "$d/cublas_v2.h" ]] && { echo "$d"; return 0; }
    done
    return 1
}

find_lib() { # root -> path of libcublas.so or the highest libcublas.so.N
    local r="$1" d f
    for d in "$r/lib64" "$r/lib" "$r"/targets/*/lib; do
        [[ -d "$d" ]] || continue
        if [[ -e "$d/libcublas.so" ]]; then
            echo "$d/libcublas.so"
            return 0
        fi
        f="$(ls "$d"/libcublas.so.[0-9]* 2>/dev/null | grep -E 'libcublas\.so\.[0-9]+$' | sort -V | tail -1 || true)"
        [[ -n "$f" ]] && { echo "$f"; return 0; }
    done
    return 1
}

HDR_DIR="" LIB_FILE="" FROM=""
for r in "${ROOTS[@]}"; do
    [[ -d "$r" ]] || continue
    h="$(find_header_dir "$r" || true)"
    l="$(find_lib "$r" || true)"
    echo "build.sh: looked in $r: header ${h:-none}, library ${l:-none}"
    if [[ -n "$h" && -n "$l" ]]; then
        HDR_DIR="$h" LIB_FILE="$l" FROM="$r"
        break
    fi
done
if [[ -z "$LIB_FILE" ]]; then
    die "cuBLAS (cublas_v2.h and libcublas.so*) not found in: ${ROOTS[*]}.
Install the CUDA toolkit's cuBLAS or the pip wheel (pip install nvidia-cublas), or set CUBLAS_ROOT
to a folder with include/cublas_v2.h and lib/libcublas.so*."
fi
LIB_DIR="$(dirname "$LIB_FILE")"
LIB_NAME="$(basename "$LIB_FILE")"
echo "build.sh: using cuBLAS from $FROM: headers $HDR_DIR, library $LIB_FILE"

mkdir -p "$REPO/build"
INC_LINKS="$REPO/build/baseline-include"
rm -rf "$INC_LINKS"
mkdir -p "$INC_LINKS"
for f in "$HDR_DIR"/cublas*.h; do
    ln -s "$f" "$INC_LINKS/$(basename "$f")"
done

if [[ "$LIB_NAME" == "libcublas.so" ]]; then
    LINK=(-L"$LIB_DIR" -lcublas)
else
    LINK=(-L"$LIB_DIR" "-l:$LIB_NAME")
fi

set -x
"$NVCC_BIN" -O3 -std=c++17 \
    -gencode "arch=compute_$ARCH,code=sm_$ARCH" -gencode "arch=compute_$ARCH,code=compute_$ARCH" \
    -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -shared \
    -I"$REPO/plugin_src/core" -I"$INC_LINKS" \
    -o "$OUT_LIB.tmp" "$SRC" "${LINK[@]}" -Xlinker -rpath -Xlinker "$LIB_DIR"
set +x
mv -f "$OUT_LIB.tmp" "$OUT_LIB"
echo "build.sh: built $OUT_LIB"
if command -v ldd >/dev/null 2>&1; then
    ldd "$OUT_LIB" | grep -i cublas || echo "build.sh: warning: ldd lists no libcublas for $OUT_LIB" >&2
fi
