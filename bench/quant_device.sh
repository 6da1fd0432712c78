#!/usr/bin/env bash
# The quantized layers on a GPU machine (sm_90): builds the core, runs tests/test_core_gpu_quant.py,
# bench/dcn_bench.py on the engine path in FP16, INT8 and FP8 (results under $OUT/quant_bench, the
# INT8/FP8 table printed) and compute-sanitizer (memcheck, racecheck, synccheck) over
# bench/quant_sanitize.py; logs under ${OUT:-build/device-logs}.
OUT="${OUT:-build/device-logs}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" DCN_CORE_SUMMARY="$OUT/quant_summary.jsonl"
nvidia-smi --query-gpu=name --format=csv
make -C plugin_src core CUDA_ARCHS=sm_90 PTX_ARCH=compute_90 -j"$(nproc)" EXTRA_NVCCFLAGS="-Xptxas -warn-spills" > "$OUT/make.log" 2>&1; echo make $?
grep -c "spill" "$OUT/make.log"
timeout 240 python3 -m pytest -q -rf -p no:cacheprovider tests/test_core_gpu_quant.py > "$OUT/pytest.log" 2>&1; echo pytest $?
grep -E "^FAILED|passed|failed" "$OUT/pytest.log"
timeout 300 python3 bench/dcn_bench.py --no-build --impls fused-engine --precisions fp16,int8,fp8e4m3 \
    --time-limit 240 --out "$OUT/quant_bench" > "$OUT/bench.log" 2>&1; echo bench $?
python3 bench/dcn_bench_summary.py "$OUT/quant_bench/results.json" --quant
grep -E "^(PASS|FAIL|part|n\.a\.) +engine path: (int8|fp8)|^OVER|^SKIPPED|^peak" "$OUT/bench.log"
for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 bench/quant_sanitize.py > "$OUT/sanitize-$tool.log" 2>&1
    echo "$tool rc=$?"; tail -2 "$OUT/sanitize-$tool.log"
done
