"""One forward of one benchmark shape, for profilers (ncu, compute-sanitizer):

    ncu --clock-control none -k regex:dcnFused python3 bench/one_launch.py R50-c4 float16 --algo 101
    python3 bench/one_launch.py DBNet-c5 float16 --engine    # x channel-last, weights prepared once

Random inputs as in bench/fused_tiles.py; runs the forward twice (the second is the one to
profile with ``--launch-skip 1``) and synchronises.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from fused_tiles import PRECISIONS, SHAPES  # noqa: E402
from support import core  # noqa: E402


def main() -> int:
    import cupy
    import numpy as np

    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=list(SHAPES))
    ap.add_argument("precision", choices=list(PRECISIONS))
    ap.add_argument("--algo", type=int, default=core.ALGO_AUTO)
    ap.add_argument("--lib", default=None)
    ap.add_argument(
        "--engine",
        action="store_true",
        help="as a TensorRT engine runs it: x channel-last, weights prepared once",
    )
    args = ap.parse_args()
    from support.core_cases import ensure_core_built

    lib = core.load(args.lib or ensure_core_built())
    n, c, h, w, cout, s = SHAPES[args.shape]
    code, math = PRECISIONS[args.precision]
    ho, wo = (h - 1) // s + 1, (w - 1) // s + 1
    rs = cupy.random.RandomState(3)
    dt = cupy.float32 if code == core.FLOAT32 else cupy.float16  # BF16 bits: FP16 data is fine for timing
    x = rs.standard_normal((n, c, h, w), dtype=cupy.float32).astype(dt)
    o = (rs.standard_normal((n, 18, ho, wo), dtype=cupy.float32) * 2).astype(dt)
    m = rs.uniform(0, 1, (n, 9, ho, wo), dtype=cupy.float32).astype(dt)
    wt = (rs.standard_normal((cout, c, 3, 3), dtype=cupy.float32) / np.sqrt(9 * c)).astype(dt)
    b = rs.standard_normal((cout,), dtype=cupy.float32).astype(dt)
    out = cupy.empty((n, cout, ho, wo), dtype=dt)
    p = core.make_params(
        (n, c, h, w),
        (cout, c, 3, 3),
        stride=(s, s),
        padding=(1, 1),
        with_bias=True,
        dtype=code,
        algo=args.algo,
        math=math,
    )
    if args.engine:
        wt = core.prepare_weights(p, wt, lib)
        p.xLayout, p.weightLayout = core.LAYOUT_NHWC, core.WEIGHT_PREPARED
        x = cupy.ascontiguousarray(x.transpose(0, 2, 3, 1))
    for _ in range(2):
        core.forward(p, x, o, m, wt, b, out, lib=lib, check=False)
    cupy.cuda.runtime.deviceSynchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
