#!/usr/bin/env bash
# Runs the plugin harness on a GPU machine: builds the plugin + harness against every TensorRT header
# folder in TENSORRT_INCLUDE_DIR (os.pathsep-separated), runs the CPU and GPU harness tests, the
# contract tests and the lean-runtime tier (tests/backend/plugin/test_lean_runtimes.py; runtimes from
# $DCNCONVERT_TRT_LEAN_DIRS, see tests/conftest.py) with pytest, the GPU harness once under
# compute-sanitizer, and (unless RUN_DEVICE_FAT=0) `make plugin` for the wheels' architectures.
# Logs go to ${OUT:-build/device-logs}.
#
#   TENSORRT_INCLUDE_DIR=/a/include:/b/include tests/harness/run_device.sh
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/device-logs}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
: "${TENSORRT_INCLUDE_DIR:?set TENSORRT_INCLUDE_DIR to one or more TensorRT include folders}"
export TENSORRT_INCLUDE_DIR
status=0

{
    nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
    nvcc --version | tail -2
    python3 -c "import numpy, cupy; print('numpy', numpy.__version__, 'cupy', cupy.__version__)"
} > "$OUT/environment.txt" 2>&1

# The lean-runtime tier rewrites models (onnx-graphsurgeon), which a bare GPU machine may not have.
lean=tests/backend/plugin/test_lean_runtimes.py
python3 -c "import onnx_graphsurgeon" 2> /dev/null || { echo "no onnx_graphsurgeon: $lean not run"; lean=; }
python3 -m pytest -v -rA -s -p no:cacheprovider tests/test_plugin_harness.py tests/test_plugin_contract.py $lean \
    > "$OUT/pytest.log" 2>&1 || status=1
tail -n 40 "$OUT/pytest.log"

# Full harness logs per header set, and one GPU run under compute-sanitizer (memcheck).
first=1
for tag_dir in build/test-plugin/trt*; do
    [ -x "$tag_dir/dcn_harness" ] || continue
    tag=$(basename "$tag_dir")
    "$tag_dir/dcn_harness" cpu "$PWD/$tag_dir/libdcnconvert_plugin.so" > "$OUT/harness-cpu-$tag.log" 2>&1 || status=1
    mkdir -p "$OUT/gpu-$tag"
    "$tag_dir/dcn_harness" gpu "$PWD/$tag_dir/libdcnconvert_plugin.so" "$OUT/gpu-$tag" > "$OUT/harness-gpu-$tag.log" 2>&1 || status=1
    rm -f "$OUT/gpu-$tag"/*.bin
    tail -n 1 "$OUT/harness-cpu-$tag.log" "$OUT/harness-gpu-$tag.log"
    if [ "$first" = 1 ] && command -v compute-sanitizer > /dev/null; then
        mkdir -p "$OUT/sanitize"
        timeout 420 compute-sanitizer --tool memcheck --error-exitcode 9 \
            "$tag_dir/dcn_harness" gpu "$PWD/$tag_dir/libdcnconvert_plugin.so" "$OUT/sanitize" \
            > "$OUT/memcheck-$tag.log" 2>&1 || status=1
        rm -f "$OUT/sanitize"/*.bin
        tail -n 3 "$OUT/memcheck-$tag.log"
        first=0
    fi
done

if [ "${RUN_DEVICE_FAT:-1}" = 0 ]; then
    echo "run_device.sh status $status"
    exit $status
fi
# The shipped build: the wheels' architectures (setup.py), installed into a scratch folder.
inc="${TENSORRT_INCLUDE_DIR##*:}"
archs=$(python3 -c "import ast, pathlib; t = ast.parse(pathlib.Path('setup.py').read_text()); \
print(next(n.value.value for n in t.body if isinstance(n, ast.Assign) and n.targets[0].id == 'DEFAULT_ARCHS'))")
make -C plugin_src -j"$(nproc)" plugin TENSORRT_INCLUDE_DIR="$inc" PLUGIN_INSTALL_DIR="$OUT/install" \
    CUDA_ARCHS="$archs" PTX_ARCH="compute_$(echo "$archs" | tr ' ' '\n' | sed 's/sm_//' | sort -n | tail -1)" \
    > "$OUT/make-plugin.log" 2>&1 || status=1
tail -n 2 "$OUT/make-plugin.log"
if command -v cuobjdump > /dev/null && [ -f "$OUT/install/libdcnconvert_plugin.so" ]; then
    cuobjdump --list-elf --list-ptx "$OUT/install/libdcnconvert_plugin.so" > "$OUT/cuobjdump.txt" 2>&1
    rm -f "$OUT/install/libdcnconvert_plugin.so"
fi
echo "run_device.sh status $status"
exit $status
