"""Rough timing of the core's simple kernel against torchvision.ops.deform_conv2d (context only;
the benchmark of issue 4 is the real one: no L2 rotation here, one input set per shape).

    python3 bench/core_speed.py [--lib LABEL=path.so ...]

Median of 20 CUDA-event timed runs after 3 warm-ups, per shape and dtype; random inputs
(offsets ~ N(0, 2), mask ~ U(0, 1)), 3x3, stride 1, pad 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from cuda_timing import median_us
from support import core
from support.core_cases import ensure_core_built

SHAPES = {  # name: (n, c, h, w, cout)
    "R50-c4 1x256@50x84": (1, 256, 50, 84, 256),
    "CenterNet 1x64@128x128": (1, 64, 128, 128, 64),
    "acc 1x32@512x512": (1, 32, 512, 512, 32),
    "BEVFormer-c4 6x256@58x100": (6, 256, 58, 100, 256),
}
CODES = {"float32": core.FLOAT32, "float16": core.FLOAT16, "bfloat16": core.BFLOAT16}


def main() -> int:
    import cupy

    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", action="append", default=[], help="LABEL=path to a core library")
    args = parser.parse_args()
    libs = [("core", core.load(ensure_core_built()))]
    for item in args.lib:
        label, path = item.split("=", 1)
        libs.append((label, core.load(path)))
    try:
        import torch
        import torchvision.ops
    except ImportError:
        torch = None
    print(f"{'shape':28s} {'impl':22s} {'dtype':9s} {'median us':>10s} {'TFLOP/s':>8s}")
    rs = cupy.random.RandomState(7)
    for name, (n, c, h, w, cout) in SHAPES.items():
        flop = 2.0 * n * cout * h * w * c * 9
        x32 = rs.standard_normal((n, c, h, w), dtype=cupy.float32)
        off32 = rs.standard_normal((n, 18, h, w), dtype=cupy.float32) * 2
        m32 = rs.uniform(0, 1, (n, 9, h, w), dtype=cupy.float32)
        w32 = rs.standard_normal((cout, c, 3, 3), dtype=cupy.float32) / np.sqrt(c * 9)
        b32 = rs.standard_normal((cout,), dtype=cupy.float32)
        for dtype, code in CODES.items():
            if dtype == "bfloat16":
                conv = {
                    k: cupy.asarray(core.float_to_bf16_bits(v.get()))
                    for k, v in (("x", x32), ("o", off32), ("m", m32), ("w", w32), ("b", b32))
                }
            else:
                conv = {
                    k: v.astype(dtype)
                    for k, v in (("x", x32), ("o", off32), ("m", m32), ("w", w32), ("b", b32))
                }
            p = core.make_params((n, c, h, w), (cout, c, 3, 3), padding=(1, 1), with_bias=True, dtype=code)
            out = cupy.empty((n, cout, h, w), dtype="uint16" if dtype == "bfloat16" else dtype)
            for label, lib in libs:
                us = median_us(
                    lambda lib=lib, p=p, conv=conv, out=out: core.forward(
                        p, conv["x"], conv["o"], conv["m"], conv["w"], conv["b"], out, lib=lib, check=False
                    )
                )
                print(f"{name:28s} {label:22s} {dtype:9s} {us:10.1f} {flop / us / 1e6:8.2f}")
            if torch is not None and dtype != "bfloat16":
                t = {k: torch.as_tensor(v, device="cuda") for k, v in conv.items()}
                torch.cuda.synchronize()
                us = median_us(
                    lambda t=t: torchvision.ops.deform_conv2d(
                        t["x"], t["o"], t["w"], t["b"], padding=1, mask=t["m"]
                    )
                )
                print(f"{name:28s} {'torchvision':22s} {dtype:9s} {us:10.1f} {flop / us / 1e6:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
