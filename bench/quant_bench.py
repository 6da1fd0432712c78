"""INT8 and FP8 DCN layers against FP16, engine path, on the 18 benchmark layers (bench_shapes.SHAPES).

Engine path: x channel-last and the weights prepared once, as a TensorRT engine runs the plugin.
FP16: x, offset, mask and weights in FP16; INT8/FP8: x and weights 8-bit, offset, mask and the
output FP16. Timing as bench/dcn_bench.py times (dcn_bench_gpu.time_cupy): calls rotating over buffer
sets that total more than 2x the L2 (offsets ~ N(0, 2^2)), captured in one CUDA graph, median of the
replays; all three precisions of a layer in the same run, with the tensor peaks of this GPU measured
by torch matmuls (FP16 torch.matmul; INT8 torch._int_mm; FP8 E4M3 torch._scaled_mm). Prints a table
and writes JSON with --json.

    python bench/quant_bench.py [--json out.json] [--only r50-c4,bev-c4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import bench_shapes as bs  # noqa: E402
import dcn_bench_gpu  # noqa: E402
import numpy as np  # noqa: E402
from bench_shapes import SHAPES  # noqa: E402
from support import (
    core,  # noqa: E402
    core_quant,  # noqa: E402
)
from support.core_cases import Case  # noqa: E402


def case_of(s) -> Case:
    return Case(
        s.name,
        s.n,
        s.c,
        s.h,
        s.w,
        s.cout,
        (s.kernel, s.kernel),
        (s.stride, s.stride),
        (s.pad, s.pad),
        (s.dilation, s.dilation),
        s.group,
        s.dg,
        s.bias,
    )


def random_sets(s, nsets: int, x_dtype: str) -> list[dict]:
    """``nsets`` buffer sets of layer s (x channel-last, offset ~ N(0, 2^2) and mask ~ U(0, 1) in FP16,
    the FP16 output) as dcn_bench.py draws them; x FP16 ~ N(0, 1), or random INT8 values, or random
    finite E4M3 codes."""
    import cupy

    rs = cupy.random.RandomState(1)
    kk = s.kernel**2
    shape = (s.n, s.h, s.w, s.c)
    sets = []
    for _ in range(nsets):
        if x_dtype == "float16":
            x = rs.standard_normal(shape, dtype=np.float32).astype(np.float16)
        elif x_dtype == "int8":
            x = rs.randint(-127, 128, shape).astype(np.int8)
        else:  # E4M3 codes without the two NaNs (0x7F, 0xFF)
            x = (rs.randint(0, 0x7F, shape) | (rs.randint(0, 2, shape) << 7)).astype(np.uint8)
        off = (rs.standard_normal((s.n, 2 * s.dg * kk, s.ho, s.wo), dtype=np.float32) * 2).astype(np.float16)
        mask = rs.uniform(0, 1, (s.n, s.dg * kk, s.ho, s.wo), dtype=np.float32).astype(np.float16)
        out = cupy.empty((s.n, s.cout, s.ho, s.wo), dtype=np.float16)
        sets.append({"x": x, "offset": off, "mask": mask, "out": out})
    return sets


def fp16_layer(lib, s):
    """Parameters, prepared weights and bias of layer s in FP16 (engine path)."""
    import cupy

    p = core.make_params(
        (s.n, s.c, s.h, s.w),
        (s.cout, s.c // s.group, s.kernel, s.kernel),
        stride=(s.stride,) * 2,
        padding=(s.pad,) * 2,
        dilation=(s.dilation,) * 2,
        group=s.group,
        deformable_group=s.dg,
        with_bias=s.bias,
        dtype=core.FLOAT16,
    )
    rs = cupy.random.RandomState(2)
    w = (rs.standard_normal((s.cout, s.c // s.group, s.kernel, s.kernel), dtype=np.float32) * 0.05).astype(
        np.float16
    )
    bias = rs.standard_normal((s.cout,), dtype=np.float32).astype(np.float16) if s.bias else None
    prepared = core.prepare_weights(p, w, lib)
    p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    return p, prepared, bias


def quant_layer(lib, s, qtype: str):
    """Parameters, prepared weights (8-bit values and scales) and FP16 bias of layer s (engine path)."""
    import cupy

    case = case_of(s)
    inputs = core_quant.make_inputs(case, qtype, "float16")
    p = core_quant.params(case, qtype, "float16", inputs, algo=core.ALGO_AUTO, out_scale=None)
    prepared = core.prepare_weights(p, cupy.asarray(core_quant.packed_weights(p, inputs, qtype, lib)), lib)
    p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    bias = None if inputs["bias"] is None else cupy.asarray(inputs["bias"].astype(np.float16))
    return p, prepared, bias


def timed(lib, s, key: str, l2: int, budget: dict) -> tuple[float, object]:
    """Median µs per call of layer s in precision ``key``: calls rotating over buffer sets that total
    more than 2x the L2, captured in one CUDA graph and replayed (dcn_bench_gpu.time_cupy)."""
    import cupy

    p, prepared, bias = fp16_layer(lib, s) if key == "fp16" else quant_layer(lib, s, key)
    e = s.elements()
    set_bytes = (2 if key == "fp16" else 1) * e["x"] + 2 * (e["offset"] + e["mask"] + e["out"])
    nsets = bs.buffer_sets(set_bytes, l2)
    sets = random_sets(s, nsets, "float16" if key == "fp16" else "int8" if key == "int8" else "fp8")
    ws = cupy.empty((max(core.workspace_size(p, lib), 1),), dtype=cupy.uint8)

    def call(st: dict) -> None:
        x, off, mask, out = st["x"], st["offset"], st["mask"], st["out"]
        core.forward(p, x, off, mask, prepared, bias, out, workspace=ws, lib=lib, check=False)

    res = dcn_bench_gpu.time_cupy(call, sets, bs.calls_per_graph(nsets), budget)
    return res["us"], p


def peaks(size: int = 8192, reps: int = 10) -> dict:
    import torch

    def tflops(fn) -> float:
        for _ in range(3):
            fn()
        ts = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e-3)
        return 2.0 * size**3 / statistics.median(ts) / 1e12

    out = {}
    h = torch.randn(size, size, device="cuda", dtype=torch.float16)
    out["fp16"] = tflops(lambda: torch.matmul(h, h))
    i8 = torch.randint(-128, 127, (size, size), device="cuda", dtype=torch.int8)
    out["int8"] = tflops(lambda: torch._int_mm(i8, i8.t()))
    f8 = h.to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    out["fp8e4m3"] = tflops(
        lambda: torch._scaled_mm(f8, f8.t(), scale_a=one, scale_b=one, out_dtype=torch.float16)
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated layer names")
    ap.add_argument("--seconds", type=float, default=0.25, help="seconds of timed replays per measurement")
    ap.add_argument("--no-peaks", action="store_true", help="skip the matmul peaks (their columns read 0)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import cupy
    from support import core_fused

    lib = core.load()
    names = {t.index: t.name for t in core_fused.tile_infos(lib)}
    pk = {"fp16": 0.0, "int8": 0.0, "fp8e4m3": 0.0} if args.no_peaks else peaks()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    gpu, l2 = props["name"].decode(), int(props["l2CacheSize"])
    budget = {"seconds": args.seconds, "lo": 10, "hi": 200, "warmup": 2}
    print(f"GPU: {gpu}; matmul peaks (TFLOP/s or TOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in pk.items()))
    rows = []
    only = [n for n in args.only.split(",") if n]
    print(
        f"{'layer':<15}{'fp16 us':>9}{'int8 us':>9}{'fp8 us':>9}{'int8 x':>8}{'fp8 x':>8}"
        f"{'fp16 %pk':>9}{'int8 %pk':>9}{'fp8 %pk':>9}  AUTO (fp16/int8/fp8)"
    )
    for s in SHAPES:
        if only and s.name not in only:
            continue
        row = {"layer": s.name, "desc": s.desc, "flop": s.flop}
        tiles = []
        for key in ("fp16", "int8", "fp8e4m3"):
            row[key + "_us"], p = timed(lib, s, key, l2, budget)
            choice = core_fused.fused_choice(p, device=(props["multiProcessorCount"], 232448, 9), lib=lib)
            split = f"/s{choice[1]}" if choice is not None and choice[1] > 1 else ""
            tiles.append("simple" if choice is None else names[choice[0]] + split)
            tflops = s.flop / (row[key + "_us"] * 1e-6) / 1e12
            row[key + "_pct_peak"] = 100.0 * tflops / pk[key] if pk[key] > 0 else 0.0
        row["tiles"] = tiles
        rows.append(row)
        print(
            f"{s.name:<15}{row['fp16_us']:>9.1f}{row['int8_us']:>9.1f}{row['fp8e4m3_us']:>9.1f}"
            f"{row['fp16_us'] / row['int8_us']:>8.2f}{row['fp16_us'] / row['fp8e4m3_us']:>8.2f}"
            f"{row['fp16_pct_peak']:>9.1f}{row['int8_pct_peak']:>9.1f}{row['fp8e4m3_pct_peak']:>9.1f}"
            f"  {' / '.join(tiles)}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": gpu, "peaks": pk, "rows": rows}, indent=1))
    return 0


def gpu_sms() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"])


if __name__ == "__main__":
    sys.exit(main())
