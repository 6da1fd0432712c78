"""INT8 and FP8 DCN layers against FP16, engine path, on the 18 benchmark layers (bench_shapes.SHAPES).

Engine path: x channel-last and the weights prepared once, as a TensorRT engine runs the plugin.
FP16: x, offset, mask and weights in FP16; INT8/FP8: x and weights 8-bit, offset, mask and the
output FP16. Each layer is timed in the same run (CUDA events around `--calls` back-to-back
calls, median of `--reps` repetitions after warm-up), with the tensor peaks of this GPU measured by
torch matmuls (FP16 torch.matmul; INT8 torch._int_mm; FP8 E4M3 torch._scaled_mm) in the same run.
Prints a table and writes JSON with --json.

    python bench/quant_bench.py [--json docs/quant_bench_h100.json] [--only r50-c4,bev-c4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

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


def timed(call, calls: int, reps: int) -> float:
    import cupy

    for _ in range(3):
        call()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            call()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    return statistics.median(times)


def fp16_call(lib, s):
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
    rs = cupy.random.RandomState(1)
    kk = s.kernel**2
    x = rs.standard_normal((s.n, s.h, s.w, s.c), dtype=np.float32).astype(np.float16)
    w = (rs.standard_normal((s.cout, s.c // s.group, s.kernel, s.kernel), dtype=np.float32) * 0.05).astype(
        np.float16
    )
    off = (rs.standard_normal((s.n, 2 * s.dg * kk, s.ho, s.wo), dtype=np.float32) * 2).astype(np.float16)
    mask = rs.uniform(0, 1, (s.n, s.dg * kk, s.ho, s.wo), dtype=np.float32).astype(np.float16)
    bias = rs.standard_normal((s.cout,), dtype=np.float32).astype(np.float16) if s.bias else None
    prepared = core.prepare_weights(p, w, lib)
    p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    out = cupy.empty((s.n, s.cout, s.ho, s.wo), dtype=np.float16)
    ws = cupy.empty((max(core.workspace_size(p, lib), 1),), dtype=cupy.uint8)
    return lambda: core.forward(p, x, off, mask, prepared, bias, out, workspace=ws, lib=lib, check=False), p


def quant_call(lib, s, qtype: str):
    import cupy

    case = case_of(s)
    inputs = core_quant.make_inputs(case, qtype, "float16")
    p = core_quant.params(case, qtype, "float16", inputs, algo=core.ALGO_AUTO, out_scale=None)
    x = cupy.ascontiguousarray(cupy.asarray(core_quant.to_bytes(inputs["x_q"], qtype)).transpose(0, 2, 3, 1))
    prepared = core.prepare_weights(p, cupy.asarray(core_quant.packed_weights(p, inputs, qtype, lib)), lib)
    p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
    dev = {
        k: None if inputs[k] is None else cupy.asarray(inputs[k].astype(np.float16))
        for k in ("offset", "mask", "bias")
    }
    out = cupy.empty((s.n, s.cout, s.ho, s.wo), dtype=np.float16)
    ws = cupy.empty((max(core.workspace_size(p, lib), 1),), dtype=cupy.uint8)
    return lambda: core.forward(
        p, x, dev["offset"], dev["mask"], prepared, dev["bias"], out, workspace=ws, lib=lib, check=False
    ), p


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
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    import cupy
    from support import core_fused

    lib = core.load()
    names = {t.index: t.name for t in core_fused.tile_infos(lib)}
    pk = peaks()
    gpu = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"GPU: {gpu}; matmul peaks (TFLOP/s or TOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in pk.items()))
    rows = []
    only = [n for n in args.only.split(",") if n]
    print(
        f"{'layer':<15}{'fp16 us':>9}{'int8 us':>9}{'fp8 us':>9}{'int8 x':>8}{'fp8 x':>8}"
        f"{'fp16 %pk':>9}{'int8 %pk':>9}{'fp8 %pk':>9}  tiles"
    )
    for s in SHAPES:
        if only and s.name not in only:
            continue
        row = {"layer": s.name, "desc": s.desc, "flop": s.flop}
        tiles = []
        for key, make in (
            ("fp16", lambda s=s: fp16_call(lib, s)),
            ("int8", lambda s=s: quant_call(lib, s, "int8")),
            ("fp8e4m3", lambda s=s: quant_call(lib, s, "fp8e4m3")),
        ):
            call, p = make()
            row[key + "_us"] = timed(call, args.calls, args.reps)
            choice = core_fused.fused_choice(p, device=(gpu_sms(), 232448, 9), lib=lib)
            tiles.append(names[choice[0]] if choice else "simple")
            row[key + "_pct_peak"] = 100.0 * s.flop / (row[key + "_us"] * 1e-6) / 1e12 / pk[key]
        row["tiles"] = tiles
        rows.append(row)
        print(
            f"{s.name:<15}{row['fp16_us']:>9.1f}{row['int8_us']:>9.1f}{row['fp8e4m3_us']:>9.1f}"
            f"{row['fp16_us'] / row['int8_us']:>8.2f}{row['fp16_us'] / row['fp8e4m3_us']:>8.2f}"
            f"{row['fp16_pct_peak']:>9.1f}{row['int8_pct_peak']:>9.1f}{row['fp8e4m3_pct_peak']:>9.1f}"
            f"  {'/'.join(tiles)}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": gpu, "peaks": pk, "rows": rows}, indent=1))
    return 0


def gpu_sms() -> int:
    import cupy

    return int(cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"])


if __name__ == "__main__":
    sys.exit(main())
